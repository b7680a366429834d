"""Operating points and average precision (core/metrics/operating.py) against a naive loop
reference (tests/core/naive/operating.py) and scikit-learn, on random inputs with ties."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, precision_recall_curve
from sklearn.metrics import roc_curve as sklearn_roc_curve

from core.metrics import (
    PrequentialWindow,
    UndefinedMetricWarning,
    average_precision,
    operating_points,
)
from tests.core.naive.operating import (
    naive_at_k,
    naive_average_precision,
    naive_operating_point,
)

TOLERANCE = 1e-12
FPRS = (0.001, 0.05, 0.1, 0.25, 0.3, 0.5, 0.9)
ALERT_RATES = (0.005, 0.1, 0.2, 0.5, 0.75)


def _tied_input(rng, n_events, n_levels):
    """Labels with both classes and scores on a few levels, so that ties are everywhere."""
    labels = rng.integers(0, 2, n_events)
    labels[:2] = (0, 1)
    scores = rng.integers(0, n_levels, n_events).astype(np.float64) / 4.0
    return labels, scores


def _close(value, expected):
    if expected is None:
        return value is None
    return value is not None and abs(value - float(expected)) <= TOLERANCE


@pytest.mark.parametrize("seed", range(30))
def test_operating_points_equal_the_naive_reference(seed):
    rng = np.random.default_rng(seed)
    labels, scores = _tied_input(rng, int(rng.integers(2, 60)), int(rng.integers(1, 8)))
    points = operating_points(labels, scores, FPRS, ALERT_RATES, top_k=())
    for by, targets, key in (("fpr", FPRS, "at_fpr"), ("alert_rate", ALERT_RATES, "at_alert_rate")):
        for target, point in zip(targets, points[key], strict=True):
            expected = naive_operating_point(labels.tolist(), scores.tolist(), target, by)
            assert point["target"] == target
            assert point["threshold"] == expected["threshold"], (by, target)
            for field in ("tpr", "fpr", "precision", "alert_rate"):
                assert _close(point[field], expected[field]), (by, target, field)
            # a tie group is wholly in or out: exactly the events at or above the threshold
            flagged = scores >= (np.inf if point["threshold"] is None else point["threshold"])
            assert point["alert_rate"] == flagged.mean()


@pytest.mark.parametrize("seed", range(12))
def test_precision_and_recall_at_k_average_over_tie_orders(seed):
    rng = np.random.default_rng(100 + seed)
    labels, scores = _tied_input(rng, int(rng.integers(2, 8)), 3)
    ks = (1, 2, 3, 5, 10)
    points = operating_points(labels, scores, (), (), ks)
    for k, row in zip(ks, points["at_k"], strict=True):
        precision, recall = naive_at_k(labels.tolist(), scores.tolist(), k)
        assert row["k"] == k and row["reviewed"] == min(k, labels.size)
        assert _close(row["precision"], precision) and _close(row["recall"], recall), k


@pytest.mark.parametrize("seed", range(30))
def test_average_precision_equals_sklearn_and_the_naive_sum(seed):
    rng = np.random.default_rng(200 + seed)
    labels, scores = _tied_input(rng, int(rng.integers(2, 80)), int(rng.integers(1, 10)))
    value = average_precision(labels, scores)
    assert abs(value - average_precision_score(labels, scores)) <= TOLERANCE
    assert abs(value - float(naive_average_precision(labels.tolist(), scores.tolist()))) <= (
        TOLERANCE
    )


def test_points_lie_on_sklearns_curves():
    """Each point at a target FPR is a vertex of sklearn's ROC curve (the last within the
    target), and its precision is sklearn's precision at that threshold."""
    rng = np.random.default_rng(7)
    labels, scores = _tied_input(rng, 5_000, 200)
    points = operating_points(labels, scores, FPRS, (), ())
    fpr, tpr, thresholds = sklearn_roc_curve(labels, scores, drop_intermediate=False)
    precision, _, pr_thresholds = precision_recall_curve(labels, scores)
    for target, point in zip(FPRS, points["at_fpr"], strict=True):
        vertex = np.flatnonzero(fpr <= target)[-1]
        if vertex == 0:  # sklearn's threshold inf: nothing flagged
            assert point["threshold"] is None and point["tpr"] == 0.0
            continue
        assert point["threshold"] == thresholds[vertex]
        assert point["tpr"] == tpr[vertex] and point["fpr"] == fpr[vertex]
        at = np.flatnonzero(pr_thresholds == point["threshold"])[0]
        assert abs(point["precision"] - precision[at]) <= TOLERANCE


def test_nothing_flagged_when_the_top_tie_group_exceeds_the_target():
    # the top score is held by one positive and one negative: FPR 1/2 at the first vertex
    points = operating_points([1, 0, 0, 1], [5.0, 5.0, 1.0, 0.0], (0.4,), (0.25,), (1,))
    for point in (points["at_fpr"][0], points["at_alert_rate"][0]):
        assert point["threshold"] is None and point["precision"] is None
        assert point["tpr"] == point["fpr"] == point["alert_rate"] == 0.0
    assert points["at_k"][0]["precision"] == 0.5  # one of the two tied, either equally likely


def test_one_class_gives_nulls_and_a_warning():
    with pytest.warns(UndefinedMetricWarning, match="no negative event"):
        points = operating_points([1, 1], [0.2, 0.3], (0.01,), (0.5,), (1,))
    assert points["at_fpr"] == [
        {"target": 0.01, "threshold": None, "tpr": None, "fpr": None, "precision": None,
         "alert_rate": None}
    ]  # fmt: skip
    assert points["at_k"] == [{"k": 1, "reviewed": None, "precision": None, "recall": None}]
    with pytest.warns(UndefinedMetricWarning, match="no positive event"):
        assert np.isnan(average_precision([0, 0], [0.2, 0.3]))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"target_fprs": (0.0,)}, "target_fprs must lie in"),
        ({"target_fprs": (1.0,)}, "target_fprs must lie in"),
        ({"target_alert_rates": (float("nan"),)}, "target_alert_rates must lie in"),
        ({"top_k": (0,)}, "top_k must hold integers"),
        ({"top_k": (2.5,)}, "top_k must hold integers"),
    ],
)
def test_bad_targets_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        operating_points([0, 1], [0.0, 1.0], **arguments)


def test_window_summary_reports_both_sections():
    rng = np.random.default_rng(3)
    labels, scores = _tied_input(rng, 400, 30)
    window = PrequentialWindow(capacity=300, reservoir_capacity=1_000)
    window.update(scores, labels)
    summary = window.summary(target_fprs=(0.05,), target_alert_rates=(0.1,), top_k=(20,))
    recent = operating_points(labels[-300:], scores[-300:], (0.05,), (0.1,), (20,))
    everything = operating_points(labels, scores, (0.05,), (0.1,), (20,))
    assert summary["window"]["operating_points"] == recent
    assert summary["since_start"]["operating_points"] == everything
    assert summary["window"]["average_precision"] == average_precision(labels[-300:], scores[-300:])
    assert summary["since_start"]["average_precision"] == average_precision(labels, scores)


def test_since_start_weights_each_reservoir_by_its_class():
    """Past the reservoirs' capacity, the class mix is the stream's: 100 positives and 10,000
    negatives, reservoirs of 50 each.  All positives outscore all negatives, so the top 1 % of
    alerts holds the 100 positives and nothing else, and precision at 100 is 1."""
    scores = np.concatenate([np.linspace(2.0, 3.0, 100), np.linspace(0.0, 1.0, 10_000)])
    labels = np.concatenate([np.ones(100, dtype=int), np.zeros(10_000, dtype=int)])
    window = PrequentialWindow(capacity=10, reservoir_capacity=50)
    window.update(scores, labels)
    section = window.summary(target_alert_rates=(100 / 10_100,), top_k=(100, 200))["since_start"]
    point = section["operating_points"]["at_alert_rate"][0]
    assert point["tpr"] == 1.0 and point["fpr"] == 0.0 and point["precision"] == 1.0
    assert abs(point["alert_rate"] - 100 / 10_100) <= TOLERANCE
    at_100, at_200 = section["operating_points"]["at_k"]
    assert at_100["precision"] == 1.0 and at_100["recall"] == 1.0
    assert abs(at_200["precision"] - 0.5) <= TOLERANCE
    assert section["average_precision"] == 1.0


def test_window_with_one_class_has_null_points_and_the_reason():
    window = PrequentialWindow(capacity=5)
    window.update([0.1, 0.2], [1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the summary reports, it does not warn
        section = window.summary()["window"]
    assert section["reason"] == "window holds no negative event"
    assert section["average_precision"] is None
    assert all(point["threshold"] is None for point in section["operating_points"]["at_fpr"])
