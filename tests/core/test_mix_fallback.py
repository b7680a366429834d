"""auto's served mix falls back to its best candidate when it does not beat it on the window
(core/learners/_mix_fallback.py, docs/algorithms/auto.md "The served mix")."""

from __future__ import annotations

import numpy as np

from tests.core.naive.metrics import naive_auc_difference_se


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


def test_auc_difference_se_matches_a_naive_delong_with_ties():
    """The standard error of the paired AUC difference equals DeLong's pair-by-pair
    computation, on scores with many ties; the placements' means are scikit-learn's AUCs."""
    from sklearn.metrics import roc_auc_score

    from core.learners._mix_fallback import auc_difference_se

    for seed in range(6):
        rng = np.random.default_rng(seed)
        n = 60 + 20 * seed
        labels = np.where(rng.random(n) < 0.25, 1, -1)
        labels[:2], labels[2:4] = 1, -1  # two of each class at least
        first = np.round(labels * 0.7 + rng.normal(size=n), 1)  # ties within and across classes
        second = np.round(first + rng.normal(size=n), 0) if seed % 2 else rng.integers(0, 3, n)
        expected, a10, b10 = naive_auc_difference_se(labels, first, second)
        got = auc_difference_se(labels, first, second)
        assert got > 0.0
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        np.testing.assert_allclose(np.mean(a10), roc_auc_score(labels > 0, first), rtol=1e-12)
        np.testing.assert_allclose(np.mean(b10), roc_auc_score(labels > 0, second), rtol=1e-12)
        assert auc_difference_se(labels, first, first) == 0.0  # the same ranking: no noise


def test_auc_difference_se_without_two_events_of_a_class_is_infinite():
    """One positive (or one negative) leaves the variance undefined: no estimate, so the mix is
    kept rather than replaced on the evidence of one event."""
    from core.learners._mix_fallback import auc_difference_se

    labels = np.array([1, -1, -1, -1, -1])
    scores = np.arange(5.0)
    assert auc_difference_se(labels, scores, -scores) == np.inf
    assert auc_difference_se(-labels, scores, -scores) == np.inf


def test_the_mix_is_kept_unless_its_best_candidate_leads_beyond_the_noise():
    """The best candidate alone replaces the mix only when it is at least as good on the
    window's pAUC and ahead on its AUC by more than ``UNCERTAINTY`` standard errors of the
    difference (naive metrics of the naive mix, naive DeLong): over seeded windows of few
    positives both outcomes occur, and so do mixes kept behind their best candidate on both
    measures, within the noise."""
    from core.learners._mix_fallback import UNCERTAINTY, fall_back_to_best

    outcomes = {"kept ahead": 0, "kept within the noise": 0, "replaced": 0}
    for seed in range(60):
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
        se, _, _ = naive_auc_difference_se(labels, window_scores[best], mix)
        replaced = (
            mix_pauc <= own["window_pauc"][best]
            and mix_auc <= own["window_auc"][best] - UNCERTAINTY * se
        )
        if replaced:
            outcomes["replaced"] += 1
        elif mix_pauc <= own["window_pauc"][best] and mix_auc <= own["window_auc"][best]:
            outcomes["kept within the noise"] += 1
        else:
            outcomes["kept ahead"] += 1
        fall_back_to_best(own, window_scores, labels, 0.0, 0.1)
        expected = np.eye(3)[best] if replaced else weights
        np.testing.assert_array_equal(own["served_weights"], expected)
    assert min(outcomes.values()) > 0, outcomes


def test_candidates_clearly_behind_the_best_lose_their_share_pair_by_pair():
    """A candidate keeps its share of the mix unless its windowed AUC is below the best
    candidate's (highest pAUC, then AUC) by more than ``DROP_UNCERTAINTY`` standard errors of
    their paired difference, each pair's error computed naively (DeLong pair by pair) and the
    metrics by scikit-learn; the kept shares are renormalised.  Over seeded windows candidates
    are both kept within the noise and dropped, and the best always keeps its share."""
    from sklearn.metrics import roc_auc_score

    from core.learners._mix_fallback import DROP_UNCERTAINTY, drop_clearly_behind

    outcomes = {"kept behind": 0, "dropped": 0}
    for seed in range(40):
        rng = np.random.default_rng(seed)
        labels = np.where(rng.random(150) < 0.15, 1, -1)
        labels[:2], labels[2:4] = 1, -1
        quality = (1.0, 0.5, 0.2, 0.0)  # falling signal; the last ranks nothing
        window_scores = np.vstack([q * labels + rng.normal(size=150) for q in quality])
        weights = np.array([0.3, 0.3, 0.25, 0.15])
        own = _mix_state(weights.copy(), [1.0, 1.0, 1.0, 1.0])
        for k, scores in enumerate(window_scores):
            own["window_pauc"][k], own["window_auc"][k] = _naive_pauc_auc(scores, labels > 0)
            np.testing.assert_allclose(own["window_auc"][k], roc_auc_score(labels > 0, scores))
        best = int(np.lexsort((np.arange(4), -own["window_auc"], -own["window_pauc"]))[0])
        expected = weights.copy()
        for k in range(4):
            gap = own["window_auc"][best] - own["window_auc"][k]
            if k == best or gap <= 0.0:
                continue
            se, _, _ = naive_auc_difference_se(labels, window_scores[best], window_scores[k])
            if gap > DROP_UNCERTAINTY * se:
                expected[k] = 0.0
                outcomes["dropped"] += 1
            else:
                outcomes["kept behind"] += 1
        expected /= expected.sum()
        drop_clearly_behind(
            own["served_weights"], own["window_pauc"], own["window_auc"], window_scores, labels
        )
        np.testing.assert_allclose(own["served_weights"], expected, rtol=1e-12)
        assert own["served_weights"][best] > 0.0
    assert min(outcomes.values()) > 0, outcomes


def test_the_best_with_a_share_is_the_reference_and_one_event_of_a_class_drops_none():
    """Only candidates with a share are compared, against the best of them (a candidate
    without a share stays without one, however good), and with one positive the difference's
    error is infinite: nothing is dropped on the evidence of one event."""
    from core.learners._mix_fallback import drop_clearly_behind, shed_undecided

    rng = np.random.default_rng(7)
    labels = np.where(np.arange(200) % 5 == 0, 1, -1)
    window_scores = np.vstack([labels + 0.3 * rng.normal(size=200), rng.normal(size=200),
                               3 * labels + 0.1 * rng.normal(size=200)])  # fmt: skip
    paucs, aucs = np.array([0.9, 0.1, 1.0]), np.array([0.99, 0.5, 1.0])
    weights = np.array([0.5, 0.5, 0.0])
    drop_clearly_behind(weights, paucs, aucs, window_scores, labels)
    np.testing.assert_array_equal(weights, [1.0, 0.0, 0.0])  # 0 the reference, not 2
    weights = np.array([0.5, 0.5, 0.0])
    shed_undecided(weights, window_scores, labels, 0.0, 0.1)  # its own metrics: the same
    np.testing.assert_array_equal(weights, [1.0, 0.0, 0.0])
    one = np.array([1, -1, -1, -1, -1, -1])
    weights = np.array([0.5, 0.5, 0.0])
    shed_undecided(weights, window_scores[:, :6], one, 0.0, 0.1)
    np.testing.assert_array_equal(weights, [0.5, 0.5, 0.0])


def test_extended_columns_reach_back_to_the_guards_positives_as_a_naive_scan_does():
    """auto's undecided evaluations compare the later half extended back until it holds the
    guard's positives (core.learners._mix_fallback.extended_columns): the same events as a
    naive scan backwards over the events in time order, in a ring buffer that wrapped and one
    that did not."""
    from core.learners._mix_fallback import extended_columns

    rng = np.random.default_rng(3)
    for capacity, seen in ((50, 40), (50, 137), (64, 64), (30, 300)):
        events = np.where(rng.random(seen) < 0.1, 1, -1)
        ring = np.zeros(capacity, dtype=np.int64)
        for count, label in enumerate(events):
            ring[count % capacity] = label
        own = {"n_seen": np.array([seen]), "window_labels": ring}
        earliest = max(0, seen - capacity)
        for first in (earliest, seen // 2, seen - 3):
            for needed in (-1, 0, 1, 3, 50):
                start = max(first, earliest)
                found = 0
                while found < needed and start > earliest:
                    start -= 1
                    found += int(events[start] > 0)
                if found < needed:
                    start = earliest
                columns = extended_columns(own, earliest, first, needed)
                np.testing.assert_array_equal(ring[columns], events[start:seen])


def test_placements_equal_a_pair_by_pair_count_with_ties():
    """DeLong's placements, each class looked up in the other in sorted order and put back in
    the events' order, are bit for bit the pair-by-pair counts (a tie counting one half) in the
    events' order, on scores with many ties."""
    from core.learners._mix_fallback import placements

    for seed in range(4):
        rng = np.random.default_rng(seed)
        n = 50 + 30 * seed
        labels = np.where(rng.random(n) < 0.3, 1, -1)
        labels[:2], labels[2:4] = 1, -1
        scores = np.round(labels * 0.5 + rng.normal(size=n), seed % 2)  # ties within and across
        positives, negatives = scores[labels > 0], scores[labels <= 0]
        # twice the pairs ranked right plus the ties, over twice the pairs: exact in float64
        below = [2 * np.sum(negatives < p) + np.sum(negatives == p) for p in positives]
        above = [2 * np.sum(positives < q) + np.sum(positives == q) for q in negatives]
        of_positives, of_negatives = placements(labels, scores)
        assert of_positives.tolist() == (np.array(below) / (2.0 * negatives.size)).tolist()
        assert of_negatives.tolist() == (1.0 - np.array(above) / (2.0 * positives.size)).tolist()


def test_a_window_sorted_once_gives_the_placements_and_metrics_of_sorting_at_each_use():
    """An evaluation sorts each candidate's window once (SortedWindow): its placements and
    metrics are bit for bit those of sorting at each use (placements, window_metrics), on
    scores with ties (-0.0 and 0.0 among them), and its metrics those of the naive ones."""
    from core.learners._mix_fallback import SortedWindow, placements, window_metrics
    from tests.core.naive.metrics import naive_auc, naive_pauc

    for seed in range(4):
        rng = np.random.default_rng(seed)
        n = 60 + 40 * seed
        labels = np.where(rng.random(n) < 0.3, 1, -1)
        labels[:2], labels[2:4] = 1, -1
        scores = np.round(labels * 0.4 + rng.normal(size=(3, n)), seed % 2)
        scores[0, ::7] = -0.0
        window = SortedWindow(scores, labels)
        paucs, aucs = window.metrics(0.0, 0.1)
        stepwise = window_metrics(scores, labels, 0.0, 0.1)
        assert paucs.tolist() == stepwise[0].tolist() and aucs.tolist() == stepwise[1].tolist()
        for k in range(3):
            assert float(aucs[k]) == float(naive_auc(labels, scores[k]))
            assert abs(paucs[k] - float(naive_pauc(labels, scores[k], 0.0, 0.1))) < 1e-12
            for once, each in zip(window.placements(k), placements(labels, scores[k]), strict=True):
                assert once.tolist() == each.tolist()


def test_a_steady_best_replaces_the_mix_only_if_the_whole_window_agrees_with_its_later_half():
    """Where the weights are set on the window's later half, a steady best candidate replaces
    the mix only if the mix is behind it on all of the window's events too, by the same test
    (naive metrics of the naive mix, naive DeLong, on each); a best that is not steady (trees,
    forgetting) on the later half alone.  Over seeded windows whose earlier events favour
    another candidate, the later half's verdict is both confirmed and overruled."""
    from core.learners._mix_fallback import UNCERTAINTY, fall_back_to_best

    def behind(mix, best_scores, labels):
        mix_pauc, mix_auc = _naive_pauc_auc(mix, labels > 0)
        best_pauc, best_auc = _naive_pauc_auc(best_scores, labels > 0)
        se, _, _ = naive_auc_difference_se(labels, best_scores, mix)
        return mix_pauc <= best_pauc and mix_auc <= best_auc - UNCERTAINTY * se

    outcomes = {"kept by the later half": 0, "kept by the whole window": 0, "replaced": 0}
    weights, m2 = [0.5, 0.3, 0.2], [100.0, 144.0, 81.0]
    factors = np.array(weights) / np.sqrt(np.array(m2) / 100)
    for seed in range(60):
        rng = np.random.default_rng(seed)
        labels = np.where(rng.random(240) < 0.2, 1, -1)
        labels[:2], labels[2:4], labels[120:122], labels[122:124] = 1, -1, 1, -1
        # the earlier half favours candidate 1, the later half candidate 0, by seeded amounts
        early, late = rng.uniform(0.2, 1.2, size=2)
        first = np.r_[np.full(120, 0.3), np.full(120, late)]
        second = np.r_[np.full(120, early), np.full(120, 0.3)]
        whole_scores = np.vstack([first, second, np.full(240, 0.1)]) * labels
        whole_scores += rng.normal(size=(3, 240))
        later, later_labels = whole_scores[:, 120:], labels[120:]
        own = _mix_state(weights, m2)
        for k, scores in enumerate(later):
            own["window_pauc"][k], own["window_auc"][k] = _naive_pauc_auc(scores, later_labels > 0)
        best = int(np.lexsort((np.arange(3), -own["window_auc"], -own["window_pauc"]))[0])
        on_later = behind(factors @ later, later[best], later_labels)
        on_whole = behind(factors @ whole_scores, whole_scores[best], labels)
        if not on_later:
            outcomes["kept by the later half"] += 1
        elif not on_whole:
            outcomes["kept by the whole window"] += 1
        else:
            outcomes["replaced"] += 1
        for steady in ([True] * 3, [False] * 3):
            own["served_weights"] = np.array(weights)
            fall_back_to_best(own, later, later_labels, 0.0, 0.1,
                              whole_window=(whole_scores, labels), steady=steady)  # fmt: skip
            replaced = on_later and (on_whole or not steady[best])
            expected = np.eye(3)[best] if replaced else weights
            np.testing.assert_array_equal(own["served_weights"], expected)
    assert min(outcomes.values()) > 0, outcomes


def test_steady_candidates_neither_grow_trees_nor_forget():
    """The fallback's whole-window check and the mix's start take the same candidates:
    ``logistic`` and ``ftrl_pauc`` of the default tournament, not the boosted ones nor the
    forgetting ``logistic``."""
    from core.learners import make_learner
    from core.learners._tournament import initial_weights, steady_candidates

    candidates = [
        make_learner("logistic"),
        make_learner("ftrl_pauc"),
        make_learner("boosted_embedded"),
        make_learner("logistic", half_life=2000),
    ]
    assert steady_candidates(candidates) == [True, True, False, False]
    np.testing.assert_array_equal(initial_weights(candidates), [0.5, 0.5, 0.0, 0.0])
