"""Exact ROC metrics of a whole batch of scores: AUC, partial AUC, the ROC curve, and the
count-based pAUCs of the papers (conventions: :mod:`core.metrics`)."""

from __future__ import annotations

import math
import warnings

import numpy as np

from core._kernels import metrics as _kernels
from core.validation import check_fpr_range, check_labelled_scores

__all__ = [
    "UndefinedMetricWarning",
    "auc",
    "pauc",
    "pauc_kar_top_negatives",
    "pauc_narasimhan_agarwal",
    "roc_curve",
]


class UndefinedMetricWarning(UserWarning):
    """A metric was asked of data that cannot define it (one class only); NaN was returned."""


# Phrases for "why undefined", one "{}" for the missing kind of event.
_INPUT = "input holds no {}event"
_WINDOW = "window holds no {}event"
_SINCE_START = "no {}event since the start"


# ---------------------------------------------------------------------------------------------
# Validation and shared helpers (once per call, never per event)


def _split_sorted(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positive and the negative scores, each sorted ascending (the kernels' input)."""
    is_positive = labels > 0
    return np.sort(scores[is_positive]), np.sort(scores[~is_positive])


def _undefined_reason(n_positive: int, n_negative: int, template: str) -> str | None:
    """Why a two-class metric is undefined (None when it is defined).

    ``template`` has one ``{}`` for the missing kind of event: "window holds no {}event".
    """
    if n_positive == 0 and n_negative == 0:
        return template.format("")
    if n_negative == 0:
        return template.format("negative ")
    if n_positive == 0:
        return template.format("positive ")
    return None


def _sorted_input(y_true, scores) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Checked labels and scores as sorted positive and negative scores, and why a two-class
    metric of them is undefined (None when it is defined)."""
    labels, score_array = check_labelled_scores(y_true, scores)
    positive_sorted, negative_sorted = _split_sorted(labels, score_array)
    reason = _undefined_reason(positive_sorted.size, negative_sorted.size, _INPUT)
    return positive_sorted, negative_sorted, reason


def _warn_undefined(metric: str, reason: str, stacklevel: int = 3) -> float:
    warnings.warn(
        f"{metric} is undefined: {reason}; returning NaN", UndefinedMetricWarning, stacklevel
    )
    return math.nan


def _auc_sorted(positive_sorted: np.ndarray, negative_sorted: np.ndarray) -> float:
    n_negative = negative_sorted.size
    twice_area, _ = _kernels.roc_area_between(
        positive_sorted, negative_sorted, 0.0, float(n_negative)
    )
    return float(twice_area) / (2.0 * positive_sorted.size * n_negative)


def _pauc_sorted(
    positive_sorted: np.ndarray,
    negative_sorted: np.ndarray,
    alpha: float,
    beta: float,
) -> tuple[float, float]:
    """``(pAUC, McClish-standardised pAUC)`` over [alpha, beta]: one sweep gives both."""
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    twice_whole_area, clipped_area = _kernels.roc_area_between(
        positive_sorted, negative_sorted, alpha * n_negative, beta * n_negative
    )
    # Back from count units (false positives x true positives) to a mean height in [0, 1].
    # Dividing by the range's width in count units, not by beta - alpha after converting the
    # area to ROC units, keeps a tiny range (beta = 1e-300) from underflowing to 0 / 0.
    area = 0.5 * float(twice_whole_area) + clipped_area
    mean_height = area / (float(n_positive) * (beta * n_negative - alpha * n_negative))
    # McClish (1989): 0.5 for the diagonal, 1 for a perfect ranking.  sklearn's max_fpr version
    # is the alpha = 0 case; for alpha > 0 the diagonal's area over [alpha, beta] is
    # (beta^2 - alpha^2) / 2 and the largest possible area is beta - alpha.  Divided by
    # beta - alpha, the diagonal's mean height is (alpha + beta) / 2 and the largest is 1.
    # The headroom above the diagonal, 1 - (alpha + beta) / 2, is computed from 1 - alpha and
    # 1 - beta: near beta = 1, alpha + beta rounds to 2 (alpha = 1 - 2**-53 divided by zero)
    # and 1 - (alpha + beta) / 2 loses the digits that the division then magnifies.
    headroom = 0.5 * ((1.0 - alpha) + (1.0 - beta))
    standardized = 0.5 * (1.0 + ((mean_height - 1.0) + headroom) / headroom)
    # Rounding may step a hair above 1; never report 1.0000000000000002.
    return min(1.0, max(0.0, mean_height)), min(1.0, standardized)


def _roc_counts(
    positive_sorted: np.ndarray, negative_sorted: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ROC curve's vertices as counts: (false positives, true positives, thresholds), one
    merge of the two sorted classes."""
    size = positive_sorted.size + negative_sorted.size + 1
    false_positives = np.empty(size, dtype=np.int64)
    true_positives = np.empty(size, dtype=np.int64)
    thresholds = np.empty(size, dtype=np.float64)
    n_points = _kernels.roc_points(
        positive_sorted, negative_sorted, false_positives, true_positives, thresholds
    )
    return false_positives[:n_points], true_positives[:n_points], thresholds[:n_points]


def _roc_sorted(
    positive_sorted: np.ndarray, negative_sorted: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    false_positives, true_positives, thresholds = _roc_counts(positive_sorted, negative_sorted)
    n_points = thresholds.size
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    # As sklearn: a rate with an empty denominator is NaN (the caller has warned).
    fpr = false_positives / n_negative if n_negative else np.full(n_points, np.nan)
    tpr = true_positives / n_positive if n_positive else np.full(n_points, np.nan)
    return fpr, tpr, thresholds.copy()


def _snap_to_integer(value: float) -> float:
    """``value`` rounded to the nearest integer if it is one up to float rounding.

    ``10 * 0.3`` is 3.0000000000000004 in binary floating point, and its ceiling would take a
    fourth negative where the papers' n * beta = 3 takes three.
    """
    nearest = round(value)
    if abs(value - nearest) <= 8.0 * np.finfo(np.float64).eps * max(1.0, abs(value)):
        return float(nearest)
    return value


# ---------------------------------------------------------------------------------------------
# Public metrics


def auc(y_true, scores) -> float:
    """Area under the ROC curve, exact, ties counted one half.

    Equal to :func:`sklearn.metrics.roc_auc_score`.  O(n log n): two sorts and one merge.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Labels in {0, 1}, {-1, +1} or bool; 1 / +1 / True is positive.
    scores : array-like of shape (n_samples,)
        Finite scores, higher meaning more positive.

    Returns
    -------
    float
        The fraction of (positive, negative) pairs ranked correctly, a tie counting 1/2.  NaN with
        an :class:`UndefinedMetricWarning` if only one class is present.

    Raises
    ------
    ValueError
        Scores NaN or infinite, lengths differ, empty input, or labels not binary.

    Examples
    --------
    >>> auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.75
    >>> auc([0, 1, 0, 1], [1, 1, 2, 2])  # two tied pairs count 1/2 each
    0.5
    """
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        return _warn_undefined("AUC", reason)
    return _auc_sorted(positive_sorted, negative_sorted)


def pauc(
    y_true, scores, alpha: float = 0.0, beta: float = 0.1, standardized: bool = False
) -> float:
    """Partial AUC: the area under the ROC curve between false-positive rates alpha and beta.

    The curve is the tie-aware (trapezoid) ROC curve of :func:`auc`; where alpha or beta falls
    inside a segment, the curve is interpolated linearly there.  The area is divided by
    ``beta - alpha`` so that the result lies in [0, 1]; ``pauc(y, s, 0, 1) == auc(y, s)``.

    Parameters
    ----------
    y_true, scores : array-like of shape (n_samples,)
        As for :func:`auc`.
    alpha, beta : float
        The FPR range, ``0 <= alpha < beta <= 1``.
    standardized : bool
        Apply McClish's standardisation instead of dividing by ``beta - alpha``: 0.5 for the
        diagonal (random) curve, 1 for a perfect ranking, ``0.5 * (1 + (A - A_min) / (A_max -
        A_min))`` with A the raw area.  For alpha = 0 this is
        ``sklearn.metrics.roc_auc_score(y, s, max_fpr=beta)``.  For alpha > 0 we use the natural
        generalisation: A_min = (beta^2 - alpha^2) / 2, the diagonal's area over [alpha, beta],
        and A_max = beta - alpha.  A curve under the diagonal scores below 0.5, down to
        ``(1 - 2c) / (2 (1 - c))`` with ``c = (alpha + beta) / 2`` for the worst ranking: that
        is >= 0 when alpha = 0 but negative when alpha + beta > 1.

    Returns
    -------
    float
        In [0, 1] (standardized: see above); NaN with an :class:`UndefinedMetricWarning` if only
        one class is present.

    Raises
    ------
    ValueError
        As :func:`auc`, and "Expected beta in (alpha, 1], got: ..." for a bad range.

    Examples
    --------
    The worked example of Narasimhan & Agarwal (docs/algorithms/metrics.md, after (metrics.6)),
    f2:

    >>> y = [1, 1, 1, 1, 0, 0, 0, 0, 0]
    >>> f2 = [9.9, 8.7, 3.3, 2.1, 7.6, 5.3, 4.9, 4.4, 0.8]
    >>> pauc(y, f2, alpha=0.1, beta=0.2)
    0.5
    >>> pauc(y, f2, alpha=0.0, beta=1.0) == auc(y, f2)
    True
    >>> round(pauc(y, f2, beta=0.5, standardized=True), 6)
    0.666667
    """
    alpha, beta = check_fpr_range(alpha, beta)
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        return _warn_undefined("pAUC", reason)
    normalised, mcclish = _pauc_sorted(positive_sorted, negative_sorted, alpha, beta)
    return mcclish if standardized else normalised


def roc_curve(y_true, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ROC curve with one vertex per distinct score (no vertex dropped).

    Like ``sklearn.metrics.roc_curve(y, s, drop_intermediate=False)``: vertex 0 is (0, 0) with
    threshold +inf, then vertex k is the (FPR, TPR) of the rule "score >= thresholds[k]", for
    every distinct score in decreasing order.  Tied scores give one vertex, so the curve crosses a
    tie group diagonally.  Collinear vertices are kept, so the vertices of two windows can be
    compared point by point.

    Parameters
    ----------
    y_true, scores : array-like of shape (n_samples,)
        As for :func:`auc`.

    Returns
    -------
    fpr, tpr : ndarray of float64
        Non-decreasing, from 0 to 1.  The rate whose class is absent is all NaN (with an
        :class:`UndefinedMetricWarning`), as in scikit-learn.
    thresholds : ndarray of float64
        Decreasing; ``thresholds[0] = inf``.

    Examples
    --------
    >>> fpr, tpr, thresholds = roc_curve([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    >>> fpr.tolist(), tpr.tolist()
    ([0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0])
    >>> thresholds.tolist()
    [inf, 0.8, 0.4, 0.35, 0.1]
    """
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        _warn_undefined("the ROC curve", reason)
    return _roc_sorted(positive_sorted, negative_sorted)


def pauc_narasimhan_agarwal(y_true, scores, alpha: float = 0.0, beta: float = 0.1) -> float:
    """Count-based pAUC of Narasimhan & Agarwal, journal version ([J] eq. 2).

    With m positives and n negatives ranked by decreasing score (t_(1) >= ... >= t_(n)),
    ``j_alpha = floor(n alpha)``, ``j_beta = ceil(n beta)`` and

        pAUC = 1 / (m (j_beta - j_alpha)) * sum_i sum_{j = j_alpha+1}^{j_beta} 1(s_i > t_(j)).

    The FPR range is rounded *outwards* to whole negatives; a tie between a positive and a
    negative counts as an error (strict ">", as eq. 2).  Ties among negatives at a rank boundary
    need no tie-break: the value depends only on the sorted sequence of negative scores, which is
    the same whichever tied negative is placed first.  ``n alpha`` and ``n beta`` that are integers
    up to float rounding (``10 * 0.3``) are treated as integers.  Use :func:`pauc` for the exact
    area; this one reproduces the paper's tables (docs/algorithms/metrics.md (metrics.5)).

    Parameters
    ----------
    y_true, scores : array-like of shape (n_samples,)
        As for :func:`auc`.
    alpha, beta : float
        ``0 <= alpha < beta <= 1``.

    Returns
    -------
    float
        In [0, 1]; NaN with an :class:`UndefinedMetricWarning` if only one class is present.

    Examples
    --------
    The worked example ([J] Fig. 2): f1 has the higher AUC, f2 the higher pAUC(0.1, 0.2).

    >>> y = [1, 1, 1, 1, 0, 0, 0, 0, 0]
    >>> f1 = [9.1, 6.8, 6.1, 5.7, 8.5, 8.1, 4.2, 3.6, 2.3]
    >>> f2 = [9.9, 8.7, 3.3, 2.1, 7.6, 5.3, 4.9, 4.4, 0.8]
    >>> auc(y, f1), auc(y, f2)
    (0.7, 0.6)
    >>> pauc_narasimhan_agarwal(y, f1, 0.1, 0.2), pauc_narasimhan_agarwal(y, f2, 0.1, 0.2)
    (0.25, 0.5)
    """
    alpha, beta = check_fpr_range(alpha, beta)
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        return _warn_undefined("pAUC", reason)
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    # j_alpha; below n_negative even where alpha is 1 - 1e-16, whose n * alpha snaps to n
    # (the range then holds the last negative, as the decimal alpha's floor reads it)
    first_rank = min(math.floor(_snap_to_integer(n_negative * alpha)), n_negative - 1)
    last_rank = math.ceil(_snap_to_integer(n_negative * beta))  # j_beta
    last_rank = min(n_negative, max(last_rank, first_rank + 1))
    ranked_negatives = negative_sorted[::-1][first_rank:last_rank]
    # Positives strictly above each counted negative.
    above = n_positive - np.searchsorted(positive_sorted, ranked_negatives, side="right")
    return float(int(above.sum())) / (n_positive * (last_rank - first_rank))


def pauc_kar_top_negatives(y_true, scores, beta: float = 0.1) -> float:
    """Count-based pAUC over [0, beta] of Kar, Narasimhan, Jain (2014), eq. (4), normalised.

    The fraction of (positive, negative) pairs ranked correctly, among all positives and the
    top ``K = ceil(beta n_-)`` negatives by score:

        pAUC = 1 / (n_+ K) * sum_i sum_{j in top K} 1(s_i >= t_j).

    A tie counts as *correct* (">=", as eq. 4 prints it), unlike :func:`pauc_narasimhan_agarwal`.
    The choice of the top K among tied negatives cannot change the value (only their scores
    enter).  ``beta n_-`` that is an integer up to float rounding is treated as one.  See
    docs/algorithms/metrics.md (metrics.6); use :func:`pauc` for the exact area.

    Parameters
    ----------
    y_true, scores, beta
        As for :func:`pauc_narasimhan_agarwal` (here ``0 < beta <= 1``); so is the result.

    Examples
    --------
    >>> y = [1, 1, 1, 1, 0, 0, 0, 0, 0]
    >>> f2 = [9.9, 8.7, 3.3, 2.1, 7.6, 5.3, 4.9, 4.4, 0.8]
    >>> pauc_kar_top_negatives(y, f2, beta=0.2)  # K = 1: two positives above 7.6
    0.5
    >>> pauc_kar_top_negatives([1, 0, 0], [1.0, 1.0, 0.0], beta=0.5)  # tie counts as correct
    1.0
    """
    _, beta = check_fpr_range(0.0, beta)
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        return _warn_undefined("pAUC", reason)
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    n_top = min(n_negative, max(1, math.ceil(_snap_to_integer(n_negative * beta))))
    top_negatives = negative_sorted[::-1][:n_top]
    at_or_above = n_positive - np.searchsorted(positive_sorted, top_negatives, side="left")
    return float(int(at_or_above.sum())) / (n_positive * n_top)
