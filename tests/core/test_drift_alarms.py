"""auto after a drift alarm on a stream of rare positives (bench/README.md, "Drift alarms on
rare positives (branch h-T)"): no shedding on evidence one positive makes, the detector's rings
rescored when the served function changes, and a detection confirmed on the served ranking
before the trees restart; each against a naive reference."""

from __future__ import annotations

import numpy as np

from core.learners._served_scale import SHRINK_EVENTS
from tests.core.naive.metrics import naive_auc_difference_se


def _naive_auc_and_variance(labels, scores):
    """DeLong's AUC and its variance pair by pair (Python loops, a tie one half)."""
    positives = [s for s, y in zip(scores, labels, strict=True) if y > 0]
    negatives = [s for s, y in zip(scores, labels, strict=True) if y <= 0]

    def kernel(p, n):
        return 1.0 if p > n else 0.5 if p == n else 0.0

    of_positives = [sum(kernel(p, n) for n in negatives) / len(negatives) for p in positives]
    of_negatives = [sum(kernel(p, n) for p in positives) / len(positives) for n in negatives]

    def variance(values):
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values) / (len(values) - 1)

    auc = sum(of_positives) / len(of_positives)
    return auc, variance(of_positives) / len(positives) + variance(of_negatives) / len(negatives)


def test_a_drop_must_hold_without_each_positive_as_a_naive_leave_one_out_says():
    """``behind_without_each_positive`` against a naive leave-one-out (scikit-learn's AUC and a
    pair-by-pair DeLong error): over seeded windows of few positives both outcomes occur (the
    case where one positive alone makes the gap: the next test), and
    ``shed_undecided`` drops a candidate only when the gap holds on the whole window and
    without each positive."""
    from sklearn.metrics import roc_auc_score

    from core.learners._mix_fallback import (
        DROP_UNCERTAINTY,
        behind_without_each_positive,
        shed_undecided,
        window_metrics,
    )

    outcomes = {"dropped": 0, "kept": 0}
    for seed in range(30):
        rng = np.random.default_rng(seed)
        labels = -np.ones(300, dtype=np.int64)
        labels[rng.choice(300, size=3 + seed % 4, replace=False)] = 1
        best = 2.5 * labels + rng.normal(size=300)
        other = (0.3 + seed % 3) * labels + rng.normal(size=300)
        expected = True
        for left_out in np.flatnonzero(labels > 0):
            kept = np.arange(300) != left_out
            gap = roc_auc_score(labels[kept] > 0, best[kept]) - roc_auc_score(
                labels[kept] > 0, other[kept]
            )
            se, _, _ = naive_auc_difference_se(labels[kept], best[kept], other[kept])
            expected &= bool(gap > DROP_UNCERTAINTY * se)
        assert behind_without_each_positive(labels, best, other) == expected
        window = np.vstack([best, other])
        paucs, aucs = window_metrics(window, labels, 0.0, 0.1)
        se, _, _ = naive_auc_difference_se(labels, best, other)
        whole = bool(aucs[0] - aucs[1] > DROP_UNCERTAINTY * se) and paucs[0] >= paucs[1]
        weights = np.array([0.5, 0.5])
        shed_undecided(weights, window, labels, 0.0, 0.1)
        dropped = whole and expected
        np.testing.assert_array_equal(weights, [1.0, 0.0] if dropped else [0.5, 0.5])
        outcomes["dropped" if dropped else "kept"] += 1
    assert min(outcomes.values()) > 0, outcomes


def test_two_positives_alike_do_not_shed_a_candidate():
    """Two positives, both first under the best candidate and both at the same place among
    the negatives under the other: the placements' differences have no spread, and on the whole
    window the other is behind by more than 3 errors; without either positive there is no
    error estimate, so the drop rests on one positive and the shares are kept."""
    from core.learners._mix_fallback import (
        DROP_UNCERTAINTY,
        auc_difference_se,
        shed_undecided,
        window_metrics,
    )

    rng = np.random.default_rng(1)
    labels = -np.ones(400, dtype=np.int64)
    labels[[10, 390]] = 1
    best = rng.normal(size=400)
    other = best.copy()
    best[[10, 390]] = 5.0
    other[[10, 390]] = np.quantile(other[labels < 0], 0.4)
    window = np.vstack([best, other])
    paucs, aucs = window_metrics(window, labels, 0.0, 0.1)
    assert aucs[0] - aucs[1] > DROP_UNCERTAINTY * auc_difference_se(labels, best, other)
    weights = np.array([0.5, 0.5])
    shed_undecided(weights, window, labels, 0.0, 0.1)
    np.testing.assert_array_equal(weights, [0.5, 0.5])


def _own(scores, labels, weights, seen=None, capacity=None):
    """auto's tournament arrays around a window of ``scores`` (K, W) and ``labels`` (W,) in a
    ring of ``capacity`` slots after ``seen`` events, with a drift detector's rings."""
    from core.learners._auto_drift import DriftTracking

    k, w = scores.shape
    seen = w if seen is None else seen
    capacity = w if capacity is None else capacity
    ring_scores, ring_labels = np.zeros((k, capacity)), np.zeros(capacity, dtype=np.int64)
    for count in range(seen - w, seen):
        ring_scores[:, count % capacity] = scores[:, count - (seen - w)]
        ring_labels[count % capacity] = labels[count - (seen - w)]
    own = {
        "n_seen": np.array([seen]),
        "window_scores": ring_scores,
        "window_labels": ring_labels,
        "served_weights": np.array(weights, dtype=float),
        "score_mean": scores.mean(axis=1),
        "score_m2": scores.var(axis=1) * seen,
        "leader": np.array([0]),
        "leader_since": np.array([0]),
        "served_scale": np.array([2.0]),
        "served_offset": np.array([-1.0]),
    }
    own.update(DriftTracking.state())
    return own


def _naive_served(own, scores, temperature):
    """The served scores of the window's events as the current function scores them: a loop."""
    seen = int(own["n_seen"][0])
    served = []
    for i in range(scores.shape[1]):
        if temperature == 0.0:
            served.append(2.0 * scores[0, i] - 1.0)
            continue
        total = 0.0
        for k in range(scores.shape[0]):
            spread = (own["score_m2"][k] / seen) ** 0.5
            if own["served_weights"][k] > 0 and spread > 0:
                weight = own["served_weights"][k] / spread
                total += weight * (scores[k, i] - own["score_mean"][k])
        served.append(total * seen / (seen + SHRINK_EVENTS))
    return np.array(served)


def test_the_rings_take_the_windows_latest_served_scores_of_each_class():
    """``rescore_rings``: each class's ring holds the served scores (the current mix, or the
    leader mapped) of the window's latest events of that class, oldest first, as a naive loop
    over a wrapped ring buffer computes them; the walk's statistics are kept."""
    from core.learners._auto_drift import DRIFT, rescore_rings

    rng = np.random.default_rng(4)
    labels = np.where(rng.random(300) < 0.1, 1, -1)
    scores = rng.normal(size=(3, 300)) + labels
    for temperature in (0.0, 0.1):
        own = _own(scores, labels, [0.2, 0.0, 0.8], seen=1234, capacity=300)
        own[DRIFT + "statistics"][:] = [0.1, 2.0, -1.0]
        rescore_rings(own, temperature)
        served = _naive_served(own, scores, temperature)
        capacity = own[DRIFT + "recent"].shape[1]
        for row, label in ((0, -1), (1, 1)):
            expected = [s for s, y in zip(served, labels, strict=True) if y == label][-capacity:]
            fill = int(own[DRIFT + "recent_fill"][row])
            assert fill == len(expected)
            np.testing.assert_allclose(own[DRIFT + "recent"][row, :fill], expected, rtol=1e-12)
            assert own[DRIFT + "recent_next"][row] == fill % capacity
        np.testing.assert_array_equal(own[DRIFT + "statistics"], [0.1, 2.0, -1.0])


def test_a_detection_is_confirmed_on_the_served_ranking_as_a_naive_delong_says():
    """``confirmed`` at the first multiple of the fast period with ``min_positives`` positives
    since the detection, whether or not that is the first multiple after it: True when the
    served AUC since it is below the AUC before it (but for the fast period just before it)
    by more than ``CONFIRMATION`` errors (naive DeLong variances of the two parts), False
    otherwise; None before or after that multiple; out of the window, None when the window's
    events showed the positives before, False when they never can."""
    from core.learners._auto_drift import CONFIRMATION, confirmed

    outcomes = {True: 0, False: 0}
    lagged = {True: 0, False: 0}
    for seed in range(16):
        rng = np.random.default_rng(seed)
        labels = np.where(rng.random(2000) < 0.2, 1, -1)
        after = (0.0, 1.0, 1.5, 2.0)[seed % 4]  # the signal since the detection
        signal = np.where(np.arange(2000) < 1300, 1.5, after)
        scores = (signal * labels + rng.normal(size=2000))[None, :]
        own = _own(scores, labels, [1.0], seen=12_000, capacity=2000)
        detected = 12_000 - 700
        served = _naive_served(own, scores, 0.1)
        # the part before the detection leaves out the fast period (500) just before it
        before = _naive_auc_and_variance(labels[:800], served[:800])
        since = _naive_auc_and_variance(labels[1300:], served[1300:])
        expected = before[0] - since[0] > CONFIRMATION * (before[1] + since[1]) ** 0.5
        # the positives since the detection were counted at the previous multiple: None
        assert confirmed(own, detected, 500, 10, 0.1) is None
        # 700 events since it, 200 before the previous multiple of 500: reached at this one
        count = int(np.sum(labels[1300 + 200 :] > 0))
        assert confirmed(own, detected, 500, count + int(np.sum(labels[1300:1500] > 0)), 0.1) is (
            bool(expected)
        )
        outcomes[bool(expected)] += 1
        # the positives reached within the first multiple after the detection: the same
        # check (a common class's detection, with the detector's lag in the part before it)
        before = _naive_auc_and_variance(labels[:1200], served[:1200])
        since = _naive_auc_and_variance(labels[1700:], served[1700:])
        expected = before[0] - since[0] > CONFIRMATION * (before[1] + since[1]) ** 0.5
        assert confirmed(own, 12_000 - 300, 500, 10, 0.1) is bool(expected)
        lagged[bool(expected)] += 1
        # out of the window: decided before when the window's events before this multiple
        # hold the positives, otherwise never confirmed
        assert confirmed(own, 12_000 - 2001, 500, 10, 0.1) is None
        assert confirmed(own, 12_000 - 2001, 500, 2000, 0.1) is False
    assert min(outcomes.values()) > 0, outcomes
    assert min(lagged.values()) > 0, lagged


def test_after_a_detection_too_few_positives_since_it_keep_the_mix():
    """An evaluation after a detection whose events since it hold fewer than the guard's
    positives sheds nothing, where the same window without the detection sheds the candidate
    clearly behind (on the whole window's positives)."""
    from core.learners._tournament import evaluate, tournament_state

    rng = np.random.default_rng(2)
    labels = np.where(rng.random(4000) < 0.01, 1, -1)
    labels[3990] = 1  # one positive since the detection
    scores = np.vstack([3.0 * labels + rng.normal(size=4000), rng.normal(size=4000)])
    own = tournament_state([object(), object()])
    own.update(_own(scores, labels, [0.5, 0.5]))
    options = dict(min_positives=100, min_negatives=5, margin=0.0, patience=1, temperature=0.1)
    evaluate(own, (0.0, 0.1), since=3900, **options)
    np.testing.assert_array_equal(own["served_weights"], [0.5, 0.5])
    evaluate(own, (0.0, 0.1), since=0, **options)
    np.testing.assert_array_equal(own["served_weights"], [1.0, 0.0])
