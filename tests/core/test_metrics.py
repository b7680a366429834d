"""Tests of the metric functions of core/metrics/ (auc, pauc, roc_curve and the papers'
count-based definitions) against scikit-learn and naive references; the window:
test_metrics_window.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
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
from tests.core.metrics_helpers import TOLERANCE, fpr_range
from tests.core.naive.metrics import (
    naive_auc,
    naive_pauc,
    naive_pauc_kar_top_negatives,
    naive_pauc_narasimhan_agarwal,
    naive_roc_points,
)

#: the metric kernels are compiled (or loaded from the cache) before any property test runs
pytestmark = pytest.mark.usefixtures("compiled_window_kernels")


# The worked example of Narasimhan & Agarwal ([J] Fig. 2; docs/algorithms/metrics.md, worked
# example).
WORKED_LABELS = [1, 1, 1, 1, 0, 0, 0, 0, 0]
WORKED_F1 = [9.1, 6.8, 6.1, 5.7, 8.5, 8.1, 4.2, 3.6, 2.3]
WORKED_F2 = [9.9, 8.7, 3.3, 2.1, 7.6, 5.3, 4.9, 4.4, 0.8]


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
