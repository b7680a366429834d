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
        mix_pauc, mix_auc = _naive_pauc_auc(mix, labels > 0)
        beats = mix_pauc > own["window_pauc"][best] or mix_auc > own["window_auc"][best]
        assert beats != expect_fallback
        fall_back_to_best(own, window_scores, labels, 0.0, 0.1)
        expected = np.eye(3)[best] if expect_fallback else [0.5, 0.3, 0.2]
        np.testing.assert_array_equal(own["served_weights"], expected)


def test_the_mix_is_kept_when_it_beats_its_best_candidate_on_either_measure():
    """The best candidate alone replaces the mix only when it is at least as good on both the
    window's pAUC and its AUC (naive metrics of the naive mix): over seeded windows of few
    positives, where the two measures disagree, the mix ahead on the AUC alone is kept."""
    from core.learners._mix_fallback import fall_back_to_best

    kept_on_auc_alone = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        labels = np.where(rng.random(120) < 0.15, 1, -1)
        noise = (1.0, 1.5, 2.0)  # three candidates of falling quality
        window_scores = np.vstack([labels * 0.8 + rng.normal(size=120) * sd for sd in noise])
        weights, m2 = [0.4, 0.35, 0.25], [100.0, 144.0, 81.0]
        own = _mix_state(weights, m2)
        for k, scores in enumerate(window_scores):
            own["window_pauc"][k], own["window_auc"][k] = _naive_pauc_auc(scores, labels > 0)
        order = np.lexsort((np.arange(3), -own["window_auc"], -own["window_pauc"]))
        best = int(order[0])
        mix = sum(
            w / np.sqrt(v / 100) * s for w, v, s in zip(weights, m2, window_scores, strict=True)
        )
        mix_pauc, mix_auc = _naive_pauc_auc(mix, labels > 0)
        ahead = (mix_pauc > own["window_pauc"][best], mix_auc > own["window_auc"][best])
        kept_on_auc_alone += ahead == (False, True)
        fall_back_to_best(own, window_scores, labels, 0.0, 0.1)
        expected = weights if any(ahead) else np.eye(3)[best]
        np.testing.assert_array_equal(own["served_weights"], expected)
    assert kept_on_auc_alone > 0
