"""auto's served mix falls back to its best candidate when it does not beat it on the window
(core/learners/_mix_fallback.py, docs/algorithms/auto.md "The served mix")."""

from __future__ import annotations

import numpy as np


def _mix_state(weights, m2, n_seen=100):
    return {"served_weights": np.array(weights), "score_m2": np.array(m2),
            "n_seen": np.array([n_seen]), "window_pauc": np.zeros(len(weights)),
            "window_auc": np.zeros(len(weights))}  # fmt: skip


def _naive_pauc_auc(scores, labels, alpha=0.0, beta=0.1):
    from core.metrics import auc, pauc

    return pauc(labels, scores, alpha, beta), auc(labels, scores)


def test_the_mix_falls_back_to_its_best_candidate_unless_it_beats_it():
    """auto's served mix (core.learners._mix_fallback): weight 1 on the window's best candidate
    when the mix of the current weights ranks the window no better, as a naive computation of
    the mix's scores and metrics says."""
    from core.learners._mix_fallback import fall_back_to_best
    from core.metrics import pauc

    rng = np.random.default_rng(4)
    labels = np.where(rng.random(400) < 0.2, 1, -1)
    good = labels + rng.normal(size=400)  # ranks well
    noise = rng.normal(size=(2, 400))  # rank nothing
    for window_scores, expect_fallback in (
        (np.vstack([good, noise]), True),  # the noise drags the mix below ``good``
        (np.vstack([good, labels + rng.normal(size=400), labels + rng.normal(size=400)]), False),
    ):
        own = _mix_state([0.5, 0.3, 0.2], [100.0, 400.0, 25.0])
        for k, scores in enumerate(window_scores):
            own["window_pauc"][k], own["window_auc"][k] = _naive_pauc_auc(scores, labels > 0)
        best = int(np.argmax(own["window_pauc"]))
        spreads = np.sqrt(own["score_m2"] / 100)
        mix = sum(
            w / s * scores
            for w, s, scores in zip([0.5, 0.3, 0.2], spreads, window_scores, strict=True)
        )
        beats = pauc(labels > 0, mix, 0.0, 0.1) > own["window_pauc"][best]
        assert beats != expect_fallback
        fall_back_to_best(own, window_scores, labels, 0.0, 0.1)
        expected = np.eye(3)[best] if expect_fallback else [0.5, 0.3, 0.2]
        np.testing.assert_array_equal(own["served_weights"], expected)
