"""Tests of core/metrics/ against scikit-learn, naive references and a deque window."""

from __future__ import annotations

import collections
import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sklearn_roc_curve

from core.metrics import (
    PrequentialWindow,
    UndefinedMetricWarning,
    auc,
    pauc,
    pauc_kar_top_negatives,
    pauc_narasimhan_agarwal,
    roc_curve,
)
from tests.core.naive.metrics import (
    naive_auc,
    naive_pauc,
    naive_pauc_kar_top_negatives,
    naive_pauc_narasimhan_agarwal,
    naive_roc_points,
)

TOLERANCE = 1e-12

# The worked example of Narasimhan & Agarwal ([J] Fig. 2; docs/algorithms/metrics.md, worked
# example).
WORKED_LABELS = [1, 1, 1, 1, 0, 0, 0, 0, 0]
WORKED_F1 = [9.1, 6.8, 6.1, 5.7, 8.5, 8.1, 4.2, 3.6, 2.3]
WORKED_F2 = [9.9, 8.7, 3.3, 2.1, 7.6, 5.3, 4.9, 4.4, 0.8]


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """Pay the JIT (or cache load) once, outside any timed or property test."""
    window = PrequentialWindow(4, reservoir_capacity=2)
    window.update([0.1, 0.5, 0.2, 0.9, 0.3], [0, 1, 0, 1, 1])
    window.summary()
    window.roc_curve()


# ---------------------------------------------------------------------------------------------
# Strategies: integer-valued scores in a small range, so ties are frequent


@st.composite
def labelled_scores(draw, max_size=40, max_score=6):
    """(labels in {0, 1} with both classes present, integer-valued float scores)."""
    n_events = draw(st.integers(2, max_size))
    n_positive = draw(st.integers(1, n_events - 1))
    labels = draw(st.permutations([1] * n_positive + [0] * (n_events - n_positive)))
    scores = draw(st.lists(st.integers(0, max_score), min_size=n_events, max_size=n_events))
    return np.array(labels, dtype=np.int64), np.array(scores, dtype=np.float64)


fpr_value = st.one_of(
    st.integers(0, 20).map(lambda k: k / 20),  # often on an ROC vertex
    st.floats(0.0, 1.0, allow_nan=False),
)


@st.composite
def fpr_range(draw):
    alpha, beta = sorted((draw(fpr_value), draw(fpr_value)))
    if alpha == beta:
        alpha, beta = (0.0, beta) if beta > 0 else (0.0, 1.0)
    return alpha, beta


# Decimal FPR bounds for the count-based definitions, whose floor/ceil read n * alpha as the
# decimal the user wrote (see _snap_to_integer in core/metrics/ranking.py).
decimal_fpr_range = (
    st.tuples(st.integers(0, 99), st.integers(1, 100))
    .filter(lambda pair: pair[0] < pair[1])
    .map(lambda pair: (pair[0] / 100, pair[1] / 100))
)


# ---------------------------------------------------------------------------------------------
# auc, pauc, roc_curve against scikit-learn and brute force


@given(labelled_scores())
def test_auc_matches_sklearn_and_pair_count(data):
    labels, scores = data
    value = auc(labels, scores)
    assert value == pytest.approx(roc_auc_score(labels, scores), abs=TOLERANCE)
    assert value == pytest.approx(float(naive_auc(labels, scores)), abs=TOLERANCE)


# Below ~1e-300, sklearn's trapezoid of width beta underflows into subnormals and loses the
# answer (see test_tiny_fpr_range_does_not_underflow); ours divides in count units.
@given(labelled_scores(), st.floats(1e-300, 1.0))
def test_standardized_pauc_matches_sklearn_max_fpr(data, beta):
    labels, scores = data
    expected = roc_auc_score(labels, scores, max_fpr=beta)
    assert pauc(labels, scores, 0.0, beta, standardized=True) == pytest.approx(
        expected, abs=TOLERANCE
    )


@given(labelled_scores(), fpr_range())
def test_pauc_matches_polygon_area(data, bounds):
    labels, scores = data
    alpha, beta = bounds
    # McClish's standardisation divides by the headroom 1 - (alpha + beta) / 2: the rounding
    # of the area grows by its inverse (1e5 over [0.99999, 1]), in both implementations
    headroom = 0.5 * ((1.0 - alpha) + (1.0 - beta))
    for standardized in (False, True):
        expected = float(naive_pauc(labels, scores, alpha, beta, standardized))
        value = pauc(labels, scores, alpha, beta, standardized=standardized)
        tolerance = TOLERANCE / headroom if standardized else TOLERANCE
        assert value == pytest.approx(expected, abs=tolerance)
    assert 0.0 <= pauc(labels, scores, alpha, beta) <= 1.0


def test_standardized_pauc_near_the_top_right_corner_is_defined():
    # alpha + beta rounds to 2 here (it divided by zero): the headroom comes from 1 - alpha and
    # 1 - beta.  Over a range 2**-53 wide the tied scores' value is ill-conditioned (the area's
    # last bit moves it between 0.5 and 1), so only its being a number at most 1 is asserted.
    alpha = 1.0 - 2.0**-53
    tied = pauc([1, 0], [0.0, 0.0], alpha, 1.0, standardized=True)
    assert np.isfinite(tied) and tied <= 1.0
    assert pauc([1, 0], [1.0, 0.0], alpha, 1.0, standardized=True) == 1.0
    assert pauc([1, 0], [0.0, 1.0], 0.99999, 1.0, standardized=True) == pytest.approx(-99999.0)


@given(labelled_scores())
def test_roc_curve_matches_sklearn_and_fawcett(data):
    labels, scores = data
    fpr, tpr, thresholds = roc_curve(labels, scores)
    expected_fpr, expected_tpr, expected_thresholds = sklearn_roc_curve(
        labels, scores, drop_intermediate=False
    )
    np.testing.assert_array_equal(fpr, expected_fpr)
    np.testing.assert_array_equal(tpr, expected_tpr)
    np.testing.assert_array_equal(thresholds, expected_thresholds)
    naive_points = naive_roc_points(labels.tolist(), scores.tolist())
    assert [(float(x), float(y)) for x, y in naive_points] == list(zip(fpr, tpr, strict=True))


def test_large_input_with_ties_matches_sklearn():
    rng = np.random.default_rng(7)
    labels = (rng.random(20_000) < 0.05).astype(int)
    scores = np.round(rng.normal(size=20_000) + labels, 2)
    assert auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=TOLERANCE)
    for beta in (0.001, 0.01, 0.1, 0.37):
        assert pauc(labels, scores, 0.0, beta, standardized=True) == pytest.approx(
            roc_auc_score(labels, scores, max_fpr=beta), abs=TOLERANCE
        )


@pytest.mark.parametrize("beta", [5e-324, 1e-310, 1e-300])
def test_tiny_fpr_range_does_not_underflow(beta):
    # The curve rises to TPR 1/2 at FPR 0, then crosses the tie diagonally to (1, 1): its mean
    # height over [0, beta] is 1/2 + beta/4.
    labels, scores = [1, 0, 1], [0.0, 0.0, 1.0]
    assert pauc(labels, scores, 0.0, beta) == 0.5
    assert pauc(labels, scores, 0.0, beta, standardized=True) == 0.75


@given(labelled_scores())
def test_full_range_pauc_is_auc(data):
    labels, scores = data
    assert pauc(labels, scores, 0.0, 1.0) == auc(labels, scores)
    assert pauc(labels, scores, 0.0, 1.0, standardized=True) == pytest.approx(
        auc(labels, scores), abs=TOLERANCE
    )


def test_label_encodings_agree():
    scores = [0.3, 0.1, 0.7, 0.7, 0.2]
    as_01 = auc([0, 1, 1, 0, 0], scores)
    assert auc([-1, 1, 1, -1, -1], scores) == as_01
    assert auc([False, True, True, False, False], scores) == as_01
    assert auc(np.array([[0], [1], [1], [0], [0]]), np.array(scores).reshape(-1, 1)) == as_01


# ---------------------------------------------------------------------------------------------
# Invariants


@given(labelled_scores(), fpr_range())
def test_invariant_under_monotone_transforms(data, bounds):
    labels, scores = data
    alpha, beta = bounds
    # Strictly increasing and exact in float64 on small integers.
    for transformed in (scores**3 + 2 * scores - 5, np.exp(scores), 1e6 * scores + 0.5):
        assert auc(labels, transformed) == auc(labels, scores)
        assert pauc(labels, transformed, alpha, beta) == pauc(labels, scores, alpha, beta)
        assert pauc_narasimhan_agarwal(labels, transformed, alpha, beta) == (
            pauc_narasimhan_agarwal(labels, scores, alpha, beta)
        )
        assert pauc_kar_top_negatives(labels, transformed, beta) == (
            pauc_kar_top_negatives(labels, scores, beta)
        )


@given(labelled_scores())
def test_label_flip_and_score_negation_give_one_minus_auc(data):
    labels, scores = data
    value = auc(labels, scores)
    assert auc(1 - labels, scores) == pytest.approx(1.0 - value, abs=TOLERANCE)
    assert auc(labels, -scores) == pytest.approx(1.0 - value, abs=TOLERANCE)


def test_constant_scores_give_one_half_and_diagonal():
    labels = [0, 1, 0, 1, 1]
    scores = [2.0] * 5
    assert auc(labels, scores) == 0.5
    assert pauc(labels, scores, 0.0, 0.1) == pytest.approx(0.05)  # mean height of y = x
    assert pauc(labels, scores, 0.2, 0.6, standardized=True) == pytest.approx(0.5)


def test_perfect_and_reversed_rankings():
    labels = [1, 1, 0, 0, 0]
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    assert auc(labels, scores) == 1.0
    assert pauc(labels, scores, 0.3, 0.9) == 1.0
    assert pauc(labels, scores, 0.3, 0.9, standardized=True) == 1.0
    assert auc(labels, scores[::-1]) == 0.0
    assert pauc(labels, scores[::-1], 0.0, 0.5) == 0.0
    # The standardised value of the worst ranking: (1 - 2c) / (2 (1 - c)), c = (alpha + beta)/2.
    assert pauc(labels, scores[::-1], 0.5, 1.0, standardized=True) == pytest.approx(-1.0)
    assert pauc(labels, scores[::-1], 0.0, 0.2, standardized=True) == pytest.approx(0.8 / 1.8)


# ---------------------------------------------------------------------------------------------
# Count-based definitions of the papers


def test_worked_example_of_narasimhan_agarwal():
    assert auc(WORKED_LABELS, WORKED_F1) == pytest.approx(0.70, abs=TOLERANCE)
    assert auc(WORKED_LABELS, WORKED_F2) == pytest.approx(0.60, abs=TOLERANCE)
    assert pauc_narasimhan_agarwal(WORKED_LABELS, WORKED_F1, 0.1, 0.2) == 0.25
    assert pauc_narasimhan_agarwal(WORKED_LABELS, WORKED_F2, 0.1, 0.2) == 0.50
    # The exact area agrees here: the range lies inside the first negative's FPR step.
    assert pauc(WORKED_LABELS, WORKED_F1, 0.1, 0.2) == pytest.approx(0.25, abs=TOLERANCE)
    assert pauc(WORKED_LABELS, WORKED_F2, 0.1, 0.2) == pytest.approx(0.50, abs=TOLERANCE)


def test_count_based_definitions_round_outwards():
    labels = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # 10 negatives
    scores = [5.5] + list(range(10, 0, -1))  # the positive beats the 5 lowest negatives
    # 10 * 0.3 is 3.0000000000000004 in floating point; j_beta must still be 3.
    assert pauc_narasimhan_agarwal(labels, scores, 0.0, 0.3) == 0.0
    assert pauc_narasimhan_agarwal(labels, scores, 0.5, 0.7) == 1.0
    assert pauc_narasimhan_agarwal(labels, scores, 0.45, 0.55) == 0.5  # ranks 5 and 6
    assert pauc_kar_top_negatives(labels, scores, 0.6) == pytest.approx(1 / 6)
    assert pauc_kar_top_negatives(labels, scores, 0.51) == pytest.approx(1 / 6)  # ceil(5.1)
    # n * alpha for alpha = 1 - 2^-53 rounds to n: the range still holds the last negative
    # (the decimal alpha's floor), not none (a division by zero that hypothesis found)
    just_below_one = 1.0 - 2.0**-53
    expected = float(naive_pauc_narasimhan_agarwal(labels, scores, just_below_one, 1.0))
    assert pauc_narasimhan_agarwal(labels, scores, just_below_one, 1.0) == expected


@given(labelled_scores(), decimal_fpr_range)
def test_narasimhan_agarwal_matches_naive_loop(data, bounds):
    labels, scores = data
    alpha, beta = bounds
    expected = float(naive_pauc_narasimhan_agarwal(labels.tolist(), scores.tolist(), alpha, beta))
    assert pauc_narasimhan_agarwal(labels, scores, alpha, beta) == pytest.approx(
        expected, abs=TOLERANCE
    )


@given(labelled_scores(), st.integers(1, 100).map(lambda k: k / 100))
def test_kar_top_negatives_matches_naive_loop(data, beta):
    labels, scores = data
    expected = float(naive_pauc_kar_top_negatives(labels.tolist(), scores.tolist(), beta))
    assert pauc_kar_top_negatives(labels, scores, beta) == pytest.approx(expected, abs=TOLERANCE)


# ---------------------------------------------------------------------------------------------
# Undefined metrics and invalid input


@pytest.mark.parametrize("labels", [[1, 1, 1], [0, 0, 0], [-1, -1, -1]])
def test_one_class_gives_nan_and_a_warning(labels):
    scores = [0.2, 0.5, 0.1]
    for metric in (
        lambda: auc(labels, scores),
        lambda: pauc(labels, scores, 0.1, 0.3),
        lambda: pauc(labels, scores, standardized=True),
        lambda: pauc_narasimhan_agarwal(labels, scores, 0.0, 0.5),
        lambda: pauc_kar_top_negatives(labels, scores, 0.5),
    ):
        with pytest.warns(UndefinedMetricWarning, match="holds no (positive|negative) event"):
            assert math.isnan(metric())
    with pytest.warns(UndefinedMetricWarning):
        fpr, tpr, _ = roc_curve(labels, scores)
    missing_rate = fpr if labels[0] == 1 else tpr
    assert np.isnan(missing_rate).all()


@pytest.mark.parametrize(
    ("labels", "scores", "message"),
    [
        ([0, 1, 1], [0.1, np.nan, 0.3], "NaN or infinity .*position 1"),
        ([0, 1, 1], [0.1, np.inf, 0.3], "NaN or infinity"),
        ([0, 1], [0.1, 0.2, 0.3], "differ in length: 2 labels, 3 scores"),
        ([], [], "empty"),
        ([0, 2], [0.1, 0.2], "labels must be 0/1, -1/\\+1 or bool; got 2"),
        ([0, 1], ["a", "b"], "scores must be numeric"),
        ([0, 1], [[0.1, 0.2], [0.3, 0.4]], "scores must be 1-d"),
    ],
)
def test_invalid_input_raises_naming_it(labels, scores, message):
    with pytest.raises(ValueError, match=message):
        auc(labels, scores)


@pytest.mark.parametrize(
    ("alpha", "beta", "message"),
    [
        (0.0, 1.1, r"Expected beta in \(alpha, 1\], got: 1.1"),
        (0.0, 0.0, r"Expected beta in \(alpha, 1\], got: 0.0"),
        (0.3, 0.2, r"Expected beta in \(alpha, 1\], got: 0.2"),
        (-0.1, 0.2, r"Expected alpha in \[0, beta\), got: -0.1"),
        (float("nan"), 0.2, r"Expected alpha in \[0, beta\), got: nan"),
        (0.0, float("nan"), r"Expected beta in \(alpha, 1\], got: nan"),
        (0.0, "0.1", "beta must be a real number"),
    ],
)
def test_invalid_fpr_range_raises_sklearn_style(alpha, beta, message):
    labels, scores = [0, 1, 0, 1], [0.1, 0.2, 0.3, 0.4]
    with pytest.raises(ValueError, match=message):
        pauc(labels, scores, alpha, beta)
    with pytest.raises(ValueError, match=message):
        pauc_narasimhan_agarwal(labels, scores, alpha, beta)
    with pytest.raises(ValueError, match=message):
        PrequentialWindow(4).pauc(alpha, beta)


# ---------------------------------------------------------------------------------------------
# PrequentialWindow


def _assert_same_metric(actual, expected):
    if math.isnan(expected):
        assert math.isnan(actual)
    else:
        assert actual == pytest.approx(expected, abs=TOLERANCE)


@st.composite
def stream_in_batches(draw):
    """(capacity, list of (scores, labels) batches), batch sizes from 0 to beyond capacity."""
    capacity = draw(st.integers(1, 25))
    batches = []
    for _ in range(draw(st.integers(1, 12))):
        size = draw(st.integers(0, 2 * capacity + 3))
        scores = draw(st.lists(st.integers(0, 8), min_size=size, max_size=size))
        labels = draw(st.lists(st.sampled_from([0, 1]), min_size=size, max_size=size))
        batches.append((np.array(scores, dtype=np.float64), np.array(labels)))
    return capacity, batches


@settings(max_examples=40)
@given(stream_in_batches(), fpr_range())
def test_window_matches_a_deque_after_every_batch(stream, bounds):
    capacity, batches = stream
    alpha, beta = bounds
    window = PrequentialWindow(capacity)
    reference = collections.deque(maxlen=capacity)
    seen_scores, seen_labels = [], []
    for scores, labels in batches:
        window.update(scores, labels)
        reference.extend(zip(scores.tolist(), labels.tolist(), strict=True))
        seen_scores += scores.tolist()
        seen_labels += labels.tolist()

        content_scores, content_labels = window.contents()
        assert content_scores.tolist() == [score for score, _ in reference]
        assert ((content_labels + 1) // 2).tolist() == [label for _, label in reference]
        assert len(window) == len(reference)
        assert window.counts_since_start == {
            "events": len(seen_labels),
            "positives": sum(seen_labels),
            "negatives": len(seen_labels) - sum(seen_labels),
        }

        reference_labels = [label for _, label in reference]
        reference_scores = [score for score, _ in reference]
        summary = window.summary(alpha, beta)
        json.dumps(summary, allow_nan=False)  # JSON-able, no NaN
        assert summary["window"]["events"] == len(reference)
        assert summary["window"]["positives"] == sum(reference_labels)
        if 0 < sum(reference_labels) < len(reference_labels):
            expected_auc = auc(reference_labels, reference_scores)
            expected_pauc = pauc(reference_labels, reference_scores, alpha, beta)
            assert window.auc() == pytest.approx(expected_auc, abs=TOLERANCE)
            assert window.pauc(alpha, beta) == pytest.approx(expected_pauc, abs=TOLERANCE)
            assert summary["window"]["auc"] == pytest.approx(expected_auc, abs=TOLERANCE)
            assert summary["window"]["pauc"] == pytest.approx(expected_pauc, abs=TOLERANCE)
            expected_standardized = pauc(reference_labels, reference_scores, alpha, beta, True)
            assert summary["window"]["pauc_standardized"] == pytest.approx(
                expected_standardized, abs=TOLERANCE
            )
            assert window.pauc(alpha, beta, standardized=True) == pytest.approx(
                expected_standardized, abs=TOLERANCE
            )
            assert summary["window"]["reason"] is None
            for actual, expected in zip(
                window.roc_curve(), roc_curve(reference_labels, reference_scores), strict=True
            ):
                np.testing.assert_array_equal(actual, expected)
        else:
            with pytest.warns(UndefinedMetricWarning):
                assert math.isnan(window.auc())
            assert summary["window"]["auc"] is None
            assert summary["window"]["pauc"] is None
            assert summary["window"]["reason"].startswith("window holds no ")

        # The reservoirs (default 100,000 per class) still hold everything: exact.
        assert summary["since_start"]["cumulative_exact"] is True
        if 0 < sum(seen_labels) < len(seen_labels):
            _assert_same_metric(window.cumulative_auc(), auc(seen_labels, seen_scores))
            _assert_same_metric(
                window.cumulative_pauc(alpha, beta), pauc(seen_labels, seen_scores, alpha, beta)
            )
        else:
            assert summary["since_start"]["reason"].endswith("event since the start")


def test_window_batch_longer_than_capacity_keeps_its_last_pairs():
    window = PrequentialWindow(3)
    window.update([1.0, 2.0], [0, 1])
    window.update([3.0, 4.0, 5.0, 6.0, 7.0], [1, 0, 0, 1, 0])
    scores, labels = window.contents()
    assert scores.tolist() == [5.0, 6.0, 7.0]
    assert labels.tolist() == [-1, 1, -1]
    assert window.counts_since_start == {"events": 7, "positives": 3, "negatives": 4}


def _held_bytes(window: PrequentialWindow) -> int:
    """The bytes of the arrays the window holds, alone or in tuples."""
    held = [v if isinstance(v, tuple) else (v,) for v in vars(window).values()]
    return sum(value.nbytes for group in held for value in group if isinstance(value, np.ndarray))


def test_window_keeps_no_sorted_copy_between_metric_calls():
    # a cached model's window holds its rings and reservoirs only: the sorted class scores a
    # summary needs are sorted by each call (issue 36), and an update between two calls shows
    rng = np.random.default_rng(5)
    window = PrequentialWindow(50, reservoir_capacity=30, random_state=2)
    scores, labels = np.round(rng.normal(size=120), 1), rng.integers(0, 2, size=120)
    window.update(scores[:80], labels[:80])
    held = _held_bytes(window)
    first = window.summary(0.0, 0.3)
    assert _held_bytes(window) == held
    assert window.summary(0.0, 0.3) == first
    window_scores, window_labels = scores[30:80], labels[30:80]
    assert math.isclose(window.auc(), float(naive_auc(window_labels, window_scores)))
    assert first["window"]["auc"] == window.auc()
    window.update(scores[80:], labels[80:])
    assert math.isclose(window.auc(), float(naive_auc(labels[70:], scores[70:])))
    assert window.summary(0.0, 0.3)["window"]["auc"] == window.auc()


def test_summary_of_one_class_window_reports_none_and_reason_without_warning():
    window = PrequentialWindow(2)
    window.update([0.1, 0.9, 0.4], [0, 1, 1])  # the window keeps the two positives
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = window.summary(0.0, 0.5)
    undefined_point = {"threshold": None, "tpr": None, "fpr": None, "precision": None,
                       "alert_rate": None}  # fmt: skip
    assert summary["window"] == {
        "auc": None,
        "pauc": None,
        "pauc_standardized": None,
        "average_precision": None,
        "operating_points": {  # the default targets, every value undefined
            "at_fpr": [{"target": t, **undefined_point} for t in (0.001, 0.01, 0.05)],
            "at_alert_rate": [{"target": t, **undefined_point} for t in (0.005, 0.01)],
            "at_k": [
                {"k": k, "reviewed": None, "precision": None, "recall": None} for k in (100, 1000)
            ],
        },  # fmt: skip
        "reason": "window holds no negative event",
        "events": 2,
        "positives": 2,
        "negatives": 0,
    }
    assert summary["since_start"]["auc"] == 1.0
    assert summary["since_start"]["reason"] is None
    assert summary["window_capacity"] == 2
    assert PrequentialWindow(2).summary()["since_start"]["reason"] == "no event since the start"


def test_window_rejects_bad_batch_and_keeps_its_state():
    window = PrequentialWindow(5, random_state=3)
    window.update([0.1, 0.7, 0.3], [0, 1, 0])
    before = window.get_state()
    for scores, labels in (
        ([0.2, np.nan], [0, 1]),
        ([0.2, 0.3], [0, 1, 1]),
        ([0.2, 0.3], [0, 5]),
    ):
        with pytest.raises(ValueError):
            window.update(scores, labels)
        _assert_states_identical(window.get_state(), before)
    window.update([], [])  # an empty batch is a no-op
    _assert_states_identical(window.get_state(), before)


def test_window_rejects_bad_parameters():
    with pytest.raises(ValueError, match="capacity must be a positive integer, got: 0"):
        PrequentialWindow(0)
    with pytest.raises(ValueError, match="reservoir_capacity must be a positive integer"):
        PrequentialWindow(10, reservoir_capacity=2.5)


def _assert_states_identical(actual, expected):
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key].dtype == expected[key].dtype, key
        assert actual[key].flags.c_contiguous, key
        assert actual[key].tobytes() == expected[key].tobytes(), key


def _random_stream(seed, n_events):
    rng = np.random.default_rng(seed)
    labels = (rng.random(n_events) < 0.3).astype(np.int64)
    return np.round(rng.normal(size=n_events) + labels, 1), labels


@pytest.mark.parametrize("n_events", [0, 3, 40, 500])
def test_state_round_trips_bit_for_bit_and_continues_identically(n_events):
    scores, labels = _random_stream(n_events, n_events + 100)
    window = PrequentialWindow(37, reservoir_capacity=16, random_state=11)
    window.update(scores[:n_events], labels[:n_events])
    state = window.get_state()
    assert set(state) == {
        "window_parameters",
        "window_scores",
        "window_labels",
        "window_cursor",
        "counts_since_start",
        "reservoir_positive_scores",
        "reservoir_negative_scores",
        "rng_state",
    }
    for array in state.values():
        assert array.dtype in (np.float64, np.int64, np.uint64, np.int8)  # int8: the labels
        assert array.flags.c_contiguous
    assert state["window_labels"].dtype == np.int8
    restored = PrequentialWindow.from_state(state)
    _assert_states_identical(restored.get_state(), state)
    # Same state + same events = same result, RNG included.
    window.update(scores[n_events:], labels[n_events:])
    restored.update(scores[n_events:], labels[n_events:])
    _assert_states_identical(restored.get_state(), window.get_state())
    assert restored.summary(0.0, 0.2) == window.summary(0.0, 0.2)


def test_from_state_accepts_read_only_buffers_as_read_back_from_redis():
    window = PrequentialWindow(8, reservoir_capacity=5, random_state=1)
    window.update(*_random_stream(3, 20))
    state = window.get_state()
    from_bytes = {
        key: np.frombuffer(array.tobytes(), dtype=array.dtype) for key, array in state.items()
    }
    restored = PrequentialWindow.from_state(from_bytes)
    restored.update([0.5, 0.1], [1, 0])  # its arrays are its own, and writable
    window.update([0.5, 0.1], [1, 0])
    _assert_states_identical(restored.get_state(), window.get_state())


def test_metrics_do_not_mutate_their_inputs():
    labels = np.array([1, 0, 1, 0, 0])
    scores = np.array([0.3, 0.9, 0.1, 0.2, 0.2])
    labels_before, scores_before = labels.copy(), scores.copy()
    auc(labels, scores)
    pauc(labels, scores, 0.1, 0.6, standardized=True)
    roc_curve(labels, scores)
    pauc_narasimhan_agarwal(labels, scores, 0.1, 0.6)
    pauc_kar_top_negatives(labels, scores, 0.6)
    PrequentialWindow(3).update(scores, labels)
    np.testing.assert_array_equal(labels, labels_before)
    np.testing.assert_array_equal(scores, scores_before)


def test_batches_give_the_same_state_as_events_one_at_a_time():
    scores, labels = _random_stream(5, 300)
    whole = PrequentialWindow(50, reservoir_capacity=20, random_state=2)
    whole.update(scores, labels)
    one_by_one = PrequentialWindow(50, reservoir_capacity=20, random_state=2)
    for score, label in zip(scores, labels, strict=True):
        one_by_one.update([score], [label])
    in_chunks = PrequentialWindow(50, reservoir_capacity=20, random_state=2)
    for start in range(0, 300, 70):  # chunks longer than the capacity
        in_chunks.update(scores[start : start + 70], labels[start : start + 70])
    _assert_states_identical(one_by_one.get_state(), whole.get_state())
    _assert_states_identical(in_chunks.get_state(), whole.get_state())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda state: state.pop("rng_state"), "lacks the array 'rng_state'"),
        (
            lambda state: state.update(window_scores=state["window_scores"].astype(np.float32)),
            "'window_scores' must be 1-d float64",
        ),
        (
            lambda state: state.update(counts_since_start=np.array([9, 1, 1], dtype=np.int64)),
            "counts_since_start",
        ),
        (
            lambda state: state.update(window_cursor=np.array([99], dtype=np.int64)),
            "window_cursor 99",
        ),
        (
            lambda state: state.update(window_labels=np.zeros(10, dtype=np.int8)),
            "window_labels must be -1 or \\+1",
        ),
    ],
)
def test_from_state_rejects_inconsistent_state(change, message):
    window = PrequentialWindow(10, reservoir_capacity=4)
    window.update(*_random_stream(0, 30))
    state = window.get_state()
    change(state)
    with pytest.raises(ValueError, match=message):
        PrequentialWindow.from_state(state)


def test_reservoirs_beyond_capacity_are_samples_of_their_class():
    scores, labels = _random_stream(1, 400)
    window = PrequentialWindow(10, reservoir_capacity=25, random_state=4)
    window.update(scores, labels)
    state = window.get_state()
    assert state["reservoir_positive_scores"].size == 25
    assert state["reservoir_negative_scores"].size == 25
    assert set(state["reservoir_positive_scores"]) <= set(scores[labels == 1])
    assert set(state["reservoir_negative_scores"]) <= set(scores[labels == 0])
    assert window.cumulative_exact is False
    assert window.summary()["since_start"]["cumulative_exact"] is False
    assert 0.0 <= window.cumulative_auc() <= 1.0


def test_reservoir_sample_is_uniform():
    """Algorithm R keeps each of N events with probability k / N."""
    n_events, reservoir_capacity, n_runs = 40, 8, 1500
    kept = np.zeros(n_events)
    scores = np.arange(n_events, dtype=np.float64)
    labels = np.zeros(n_events, dtype=np.int64)
    for seed in range(n_runs):
        window = PrequentialWindow(4, reservoir_capacity=reservoir_capacity, random_state=seed)
        window.update(scores[:13], labels[:13])
        window.update(scores[13:], labels[13:])
        kept[window.get_state()["reservoir_negative_scores"].astype(np.int64)] += 1
    expected = n_runs * reservoir_capacity / n_events
    standard_deviation = math.sqrt(expected * (1 - reservoir_capacity / n_events))
    assert np.abs(kept - expected).max() < 5 * standard_deviation
    chi_square = float(((kept - expected) ** 2 / expected).sum())
    assert chi_square < 90  # 39 degrees of freedom (weakly dependent); p < 1e-5 above 90


def test_cumulative_auc_estimate_is_close_beyond_reservoir_capacity():
    rng = np.random.default_rng(12)
    labels = (rng.random(60_000) < 0.5).astype(np.int64)
    scores = rng.normal(size=60_000) + 0.8 * labels
    window = PrequentialWindow(1000, reservoir_capacity=5000)
    window.update(scores, labels)
    assert not window.cumulative_exact
    assert window.cumulative_auc() == pytest.approx(auc(labels, scores), abs=0.01)
