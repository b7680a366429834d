"""Exact ROC metrics: AUC, partial AUC, the ROC curve, and a prequential window.

Conventions shared by every function here:

* Labels are {0, 1}, {-1, +1} or bool (:func:`core.validation.as_labels`); 1 / +1 / True is the
  positive class.  Scores are finite real numbers; a higher score means "more positive".
* Ties count one half: the ROC curve goes *diagonally* across a group of tied scores (the
  trapezoid rule), exactly as :func:`sklearn.metrics.roc_auc_score` does.
* A metric that needs both classes returns NaN and emits :class:`UndefinedMetricWarning` when one
  class is missing; it never raises, so a stream keeps flowing.  Invalid input (NaN or infinite
  scores, lengths that differ, a bad FPR range) raises ValueError naming the problem.

The count-based pAUC definitions of the papers (:func:`pauc_narasimhan_agarwal`,
:func:`pauc_kar_top_negatives`) round the FPR range outwards to whole negatives and are there to
reproduce the papers' tables; :func:`pauc` is the exact area.  See
``papers/notes/000_svmpauc.md`` §1.2-1.5 and ``papers/notes/002_kar_nondecomposable.md`` §1.3.

Decisions ([CHOICE]) a user may want to know:

* ``pauc(standardized=True)`` with alpha > 0 generalises McClish with the diagonal's area over
  [alpha, beta] as the minimum and beta - alpha as the maximum (sklearn has no alpha).
* ``roc_curve`` keeps every distinct threshold (sklearn's ``drop_intermediate=False``).
* Count-based pAUCs follow each paper literally: Narasimhan & Agarwal count a tie as an error
  (">"), Kar et al. as correct (">=").  ``n * beta`` within a few ulps of an integer is taken as
  that integer before floor / ceil, so ``beta = 0.3`` with 10 negatives takes 3, not 4.
* :class:`PrequentialWindow` places a batch's pairs in the ring slots they would have had one
  event at a time, so its state never depends on how the stream was cut into batches.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from core._kernels import metrics as _kernels
from core._kernels.random import seed_state
from core.validation import as_scores, check_fpr_range, check_labelled_scores

__all__ = [
    "PrequentialWindow",
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
    diagonal_height = 0.5 * (alpha + beta)
    standardized = 0.5 * (1.0 + (mean_height - diagonal_height) / (1.0 - diagonal_height))
    # Rounding may step a hair above 1; never report 1.0000000000000002.
    return min(1.0, max(0.0, mean_height)), min(1.0, standardized)


def _roc_sorted(
    positive_sorted: np.ndarray, negative_sorted: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    size = positive_sorted.size + negative_sorted.size + 1
    false_positives = np.empty(size, dtype=np.int64)
    true_positives = np.empty(size, dtype=np.int64)
    thresholds = np.empty(size, dtype=np.float64)
    n_points = _kernels.roc_points(
        positive_sorted, negative_sorted, false_positives, true_positives, thresholds
    )
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    # As sklearn: a rate with an empty denominator is NaN (the caller has warned).
    fpr = false_positives[:n_points] / n_negative if n_negative else np.full(n_points, np.nan)
    tpr = true_positives[:n_points] / n_positive if n_positive else np.full(n_points, np.nan)
    return fpr, tpr, thresholds[:n_points].copy()


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
    labels, score_array = check_labelled_scores(y_true, scores)
    positive_sorted, negative_sorted = _split_sorted(labels, score_array)
    reason = _undefined_reason(positive_sorted.size, negative_sorted.size, _INPUT)
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
    The worked example of Narasimhan & Agarwal (papers/notes/000_svmpauc.md §1.5), f2:

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
    labels, score_array = check_labelled_scores(y_true, scores)
    positive_sorted, negative_sorted = _split_sorted(labels, score_array)
    reason = _undefined_reason(positive_sorted.size, negative_sorted.size, _INPUT)
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
    labels, score_array = check_labelled_scores(y_true, scores)
    positive_sorted, negative_sorted = _split_sorted(labels, score_array)
    reason = _undefined_reason(positive_sorted.size, negative_sorted.size, _INPUT)
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
    area; this one reproduces the paper's tables (papers/notes/000_svmpauc.md §1.2).

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
    labels, score_array = check_labelled_scores(y_true, scores)
    positive_sorted, negative_sorted = _split_sorted(labels, score_array)
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    reason = _undefined_reason(n_positive, n_negative, _INPUT)
    if reason is not None:
        return _warn_undefined("pAUC", reason)
    first_rank = math.floor(_snap_to_integer(n_negative * alpha))  # j_alpha
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
    papers/notes/002_kar_nondecomposable.md §1.3; use :func:`pauc` for the exact area.

    Parameters
    ----------
    y_true, scores : array-like of shape (n_samples,)
        As for :func:`auc`.
    beta : float
        ``0 < beta <= 1``.

    Returns
    -------
    float
        In [0, 1]; NaN with an :class:`UndefinedMetricWarning` if only one class is present.

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
    labels, score_array = check_labelled_scores(y_true, scores)
    positive_sorted, negative_sorted = _split_sorted(labels, score_array)
    n_positive, n_negative = positive_sorted.size, negative_sorted.size
    reason = _undefined_reason(n_positive, n_negative, _INPUT)
    if reason is not None:
        return _warn_undefined("pAUC", reason)
    n_top = min(n_negative, max(1, math.ceil(_snap_to_integer(n_negative * beta))))
    top_negatives = negative_sorted[::-1][:n_top]
    at_or_above = n_positive - np.searchsorted(positive_sorted, top_negatives, side="left")
    return float(int(at_or_above.sum())) / (n_positive * n_top)


# ---------------------------------------------------------------------------------------------
# Prequential window


_STATE_DTYPES = {
    "window_parameters": np.int64,  # [capacity, reservoir_capacity]
    "window_scores": np.float64,  # ring buffer, filled part only, in ring (not time) order
    "window_labels": np.int64,  # -1 / +1, aligned with window_scores
    "window_cursor": np.int64,  # [next slot to write]; once full, also the oldest pair's slot
    "counts_since_start": np.int64,  # [events, positives, negatives]
    "reservoir_positive_scores": np.float64,  # filled part only
    "reservoir_negative_scores": np.float64,
    "rng_state": np.uint64,  # SplitMix64 state of the reservoir sampling
}


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got: {value!r}")
    return int(value)


def _grown(array: np.ndarray, needed: int, capacity: int) -> np.ndarray:
    """``array`` with room for ``needed`` entries, grown geometrically up to ``capacity``.

    Buffers start small and grow like a list, so a window of capacity 100,000 that has seen ten
    events holds ten slots, in memory and in its stored state.
    """
    if needed <= array.size:
        return array
    grown = np.zeros(min(capacity, max(needed, 2 * array.size)), dtype=array.dtype)
    grown[: array.size] = array
    return grown


def _metric_or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


class PrequentialWindow:
    """The last ``capacity`` (score, label) pairs of a stream, with exact AUC / pAUC over them.

    Prequential ("test then train") evaluation: feed each event's score from *before* the model
    learned it.  The window is a ring buffer; a batch is appended at once, and a batch longer than
    the capacity keeps its last ``capacity`` pairs.  Metrics over the window are exact (two sorts
    and one O(n) sweep: 4-9 ms for 100,000 pairs on the project's 2-core machines, see
    ``bench/metrics.py``; the sorted scores are cached until the next update).

    Since the start, the window counts events, positives and negatives, and keeps one uniform
    reservoir sample of scores per class (Algorithm R, ``reservoir_capacity`` per class), from
    which :meth:`cumulative_auc` and :meth:`cumulative_pauc` are computed.  While each class has
    had at most ``reservoir_capacity`` events the reservoirs hold every score and these metrics are
    exact (``cumulative_exact``).  Beyond that, :meth:`cumulative_auc` is an unbiased estimate
    of the since-start AUC (every positive-negative pair is equally likely to be in the sample);
    the pAUC estimate is the plug-in value on the samples, consistent but not exactly unbiased,
    because the top-beta negatives are themselves estimated.

    The whole state is a flat dict of C-contiguous numpy arrays (:meth:`get_state`,
    :meth:`from_state`), round-tripping bit for bit; the RNG state is part of it, so a restored
    window samples exactly as the original would have.

    Parameters
    ----------
    capacity : int
        Number of most recent pairs kept.
    reservoir_capacity : int
        Scores kept per class for the since-start metrics.
    random_state : int or None
        Seed of the reservoir sampling (None means 0: deterministic by default).

    Examples
    --------
    >>> window = PrequentialWindow(capacity=4)
    >>> window.update([0.9, 0.2, 0.4], [1, 0, 0])
    >>> window.auc()
    1.0
    >>> window.update([0.1, 0.8], [1, 0])     # 0.9 (the oldest) leaves the window
    >>> len(window), window.auc()
    (4, 0.0)
    >>> window.cumulative_auc()               # all five events: 3 of 6 pairs correct
    0.5
    >>> summary = window.summary(alpha=0.0, beta=0.5)
    >>> summary["window"]["positives"], summary["since_start"]["events"]
    (1, 5)
    >>> PrequentialWindow(3).summary()["window"]["reason"]
    'window holds no event'
    """

    def __init__(self, capacity: int, reservoir_capacity: int = 100_000, random_state=None):
        self.capacity = capacity
        self.reservoir_capacity = reservoir_capacity
        self.random_state = random_state
        _positive_int("capacity", capacity)
        _positive_int("reservoir_capacity", reservoir_capacity)
        self._window_scores = np.zeros(0, dtype=np.float64)
        self._window_labels = np.zeros(0, dtype=np.int64)
        self._size = 0
        self._cursor = 0
        self._counts_since_start = np.zeros(3, dtype=np.int64)
        self._positive_reservoir = np.zeros(0, dtype=np.float64)
        self._negative_reservoir = np.zeros(0, dtype=np.float64)
        self._rng_state = seed_state(random_state)
        self._invalidate()

    # -- learning

    def update(self, scores, labels) -> None:
        """Append a batch of (score, label) pairs, in order.

        Validated whole before anything changes: a rejected batch leaves the window as it was.
        One kernel call per batch, not per event (a numba call from Python costs ~1 µs).

        Parameters
        ----------
        scores : array-like of shape (n_events,)
            Finite pre-update scores.
        labels : array-like of shape (n_events,)
            {0, 1}, {-1, +1} or bool.  An empty batch is a no-op.
        """
        score_array = as_scores(scores)
        if score_array.size == 0 and np.asarray(labels).size == 0:
            return
        labels_pm1, score_array = check_labelled_scores(labels, score_array)
        capacity = int(self.capacity)
        reservoir_capacity = int(self.reservoir_capacity)

        n_batch_positive = int(np.count_nonzero(labels_pm1 > 0))
        counts = self._counts_since_start
        self._positive_reservoir = _grown(
            self._positive_reservoir,
            min(reservoir_capacity, int(counts[1]) + n_batch_positive),
            reservoir_capacity,
        )
        self._negative_reservoir = _grown(
            self._negative_reservoir,
            min(reservoir_capacity, int(counts[2]) + score_array.size - n_batch_positive),
            reservoir_capacity,
        )
        _kernels.reservoir_update(
            score_array,
            labels_pm1,
            self._positive_reservoir,
            self._negative_reservoir,
            reservoir_capacity,
            counts,
            self._rng_state,
        )

        # Only the last `capacity` pairs of the batch can survive.  They go to the slots they
        # would occupy had the batch arrived one event at a time, so the state does not depend
        # on how a stream was cut into batches.
        n_events = score_array.size
        n_kept = min(n_events, capacity)
        needed = min(capacity, self._size + n_events)
        # Before the first wrap the cursor equals the size, so growing never moves a pair.
        self._window_scores = _grown(self._window_scores, needed, capacity)
        self._window_labels = _grown(self._window_labels, needed, capacity)
        first_slot = (self._cursor + n_events - n_kept) % capacity
        slots = (first_slot + np.arange(n_kept)) % capacity
        self._window_scores[slots] = score_array[n_events - n_kept :]
        self._window_labels[slots] = labels_pm1[n_events - n_kept :]
        self._cursor = (self._cursor + n_events) % capacity
        self._size = needed
        self._invalidate()

    def _invalidate(self) -> None:
        # Sorted class scores are cached between updates: summary() needs AUC and pAUC of the
        # same content and should sort once.
        self._window_sorted: tuple[np.ndarray, np.ndarray] | None = None
        self._reservoir_sorted: tuple[np.ndarray, np.ndarray] | None = None

    # -- content

    def __len__(self) -> int:
        return self._size

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, labels)`` in the window, oldest first; labels in {-1, +1}."""
        if self._size < int(self.capacity):
            order = np.arange(self._size)
        else:
            order = (self._cursor + np.arange(self._size)) % self._size
        return self._window_scores[order], self._window_labels[order]

    @property
    def counts_since_start(self) -> dict[str, int]:
        """``{"events", "positives", "negatives"}`` seen since the start."""
        events, positives, negatives = (int(count) for count in self._counts_since_start)
        return {"events": events, "positives": positives, "negatives": negatives}

    @property
    def cumulative_exact(self) -> bool:
        """True while both reservoirs hold every score seen, so since-start metrics are exact."""
        return bool(self._counts_since_start[1:].max() <= int(self.reservoir_capacity))

    def _sorted_window(self) -> tuple[np.ndarray, np.ndarray]:
        if self._window_sorted is None:
            self._window_sorted = _split_sorted(
                self._window_labels[: self._size], self._window_scores[: self._size]
            )
        return self._window_sorted

    def _sorted_reservoirs(self) -> tuple[np.ndarray, np.ndarray]:
        if self._reservoir_sorted is None:
            reservoir_capacity = int(self.reservoir_capacity)
            n_positive = min(reservoir_capacity, int(self._counts_since_start[1]))
            n_negative = min(reservoir_capacity, int(self._counts_since_start[2]))
            self._reservoir_sorted = (
                np.sort(self._positive_reservoir[:n_positive]),
                np.sort(self._negative_reservoir[:n_negative]),
            )
        return self._reservoir_sorted

    # -- metrics

    @staticmethod
    def _measure(sorted_classes, reason_template, alpha=None, beta=None) -> tuple[Any, str | None]:
        """``(values, reason)``: ``values`` is the AUC, or ``(pAUC, standardised pAUC)`` when
        alpha and beta are given; NaN and why when undefined (no warning: summary() reports)."""
        positive_sorted, negative_sorted = sorted_classes
        reason = _undefined_reason(positive_sorted.size, negative_sorted.size, reason_template)
        if reason is not None:
            return (math.nan if alpha is None else (math.nan, math.nan)), reason
        if alpha is None:
            return _auc_sorted(positive_sorted, negative_sorted), None
        return _pauc_sorted(positive_sorted, negative_sorted, alpha, beta), None

    @staticmethod
    def _warned(value: Any, reason: str | None, metric: str) -> Any:
        if reason is not None:
            return _warn_undefined(metric, reason, stacklevel=4)
        return value

    def auc(self) -> float:
        """Exact AUC of the pairs in the window (NaN + warning if a class is missing)."""
        return self._warned(*self._measure(self._sorted_window(), _WINDOW), "AUC")

    def pauc(self, alpha: float = 0.0, beta: float = 0.1, standardized: bool = False) -> float:
        """Exact pAUC of the window over FPR [alpha, beta], as :func:`pauc`."""
        alpha, beta = check_fpr_range(alpha, beta)
        values, reason = self._measure(self._sorted_window(), _WINDOW, alpha, beta)
        return self._warned(values[1 if standardized else 0], reason, "pAUC")

    def roc_curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ROC curve of the window, as :func:`roc_curve`."""
        positive_sorted, negative_sorted = self._sorted_window()
        reason = _undefined_reason(positive_sorted.size, negative_sorted.size, _WINDOW)
        if reason is not None:
            _warn_undefined("the ROC curve", reason, stacklevel=3)
        return _roc_sorted(positive_sorted, negative_sorted)

    def cumulative_auc(self) -> float:
        """AUC since the start: exact while ``cumulative_exact``, else an unbiased estimate."""
        return self._warned(*self._measure(self._sorted_reservoirs(), _SINCE_START), "AUC")

    def cumulative_pauc(
        self, alpha: float = 0.0, beta: float = 0.1, standardized: bool = False
    ) -> float:
        """pAUC since the start: exact while ``cumulative_exact``, else a reservoir estimate."""
        alpha, beta = check_fpr_range(alpha, beta)
        values, reason = self._measure(self._sorted_reservoirs(), _SINCE_START, alpha, beta)
        return self._warned(values[1 if standardized else 0], reason, "pAUC")

    def summary(self, alpha: float = 0.0, beta: float = 0.1) -> dict:
        """Everything the metrics endpoint reports, JSON-able (no NaN: an undefined metric is
        None, and ``reason`` says why).

        Returns
        -------
        dict
            ``window_capacity``, ``alpha``, ``beta``, and two sections, ``window`` and
            ``since_start``, each with ``events``, ``positives``, ``negatives``, ``auc``,
            ``pauc``, ``pauc_standardized`` and ``reason`` (None when the metrics are defined,
            else e.g. "window holds no negative event").  ``since_start`` adds
            ``cumulative_exact`` and ``reservoir_capacity``.  ``window["events"]`` is the
            window's current size.
        """
        alpha, beta = check_fpr_range(alpha, beta)
        sections = {}
        for name, sorted_classes, reason_template in (
            ("window", self._sorted_window(), _WINDOW),
            ("since_start", self._sorted_reservoirs(), _SINCE_START),
        ):
            auc_value, reason = self._measure(sorted_classes, reason_template)
            (pauc_value, standardized_value), _ = self._measure(
                sorted_classes, reason_template, alpha, beta
            )
            sections[name] = {
                "auc": _metric_or_none(auc_value),
                "pauc": _metric_or_none(pauc_value),
                "pauc_standardized": _metric_or_none(standardized_value),
                "reason": reason,
            }
        window_labels = self._window_labels[: self._size]
        window_positives = int(np.count_nonzero(window_labels > 0))
        sections["window"].update(
            events=self._size, positives=window_positives, negatives=self._size - window_positives
        )
        sections["since_start"].update(
            **self.counts_since_start,
            cumulative_exact=self.cumulative_exact,
            reservoir_capacity=int(self.reservoir_capacity),
        )
        return {
            "window_capacity": int(self.capacity),
            "alpha": alpha,
            "beta": beta,
            "window": sections["window"],
            "since_start": sections["since_start"],
        }

    # -- state

    def get_state(self) -> dict[str, np.ndarray]:
        """The whole window as a flat dict of C-contiguous float64 / int64 / uint64 arrays.

        Only filled slots are stored, so a young window is small.  Keys: ``window_parameters``
        ([capacity, reservoir_capacity]), ``window_scores``, ``window_labels`` (ring order),
        ``window_cursor``, ``counts_since_start`` ([events, positives, negatives]),
        ``reservoir_positive_scores``, ``reservoir_negative_scores``, ``rng_state``.
        """
        reservoir_capacity = int(self.reservoir_capacity)
        n_positive = min(reservoir_capacity, int(self._counts_since_start[1]))
        n_negative = min(reservoir_capacity, int(self._counts_since_start[2]))
        state = {
            "window_parameters": np.array([self.capacity, reservoir_capacity], dtype=np.int64),
            "window_scores": self._window_scores[: self._size].copy(),
            "window_labels": self._window_labels[: self._size].copy(),
            "window_cursor": np.array([self._cursor], dtype=np.int64),
            "counts_since_start": self._counts_since_start.copy(),
            "reservoir_positive_scores": self._positive_reservoir[:n_positive].copy(),
            "reservoir_negative_scores": self._negative_reservoir[:n_negative].copy(),
            "rng_state": self._rng_state.copy(),
        }
        return state

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> PrequentialWindow:
        """Rebuild a window from :meth:`get_state`'s dict; checks it is consistent.

        Raises
        ------
        ValueError
            A key is missing, has another dtype or shape, or the arrays disagree with each
            other (naming the key).
        """
        arrays: dict[str, np.ndarray] = {}
        for key, dtype in _STATE_DTYPES.items():
            if key not in state:
                raise ValueError(f"window state lacks the array {key!r}")
            array = np.asarray(state[key])
            if array.dtype != dtype or array.ndim != 1:
                raise ValueError(
                    f"window state array {key!r} must be 1-d {np.dtype(dtype).name}, "
                    f"got {array.ndim}-d {array.dtype.name}"
                )
            arrays[key] = np.array(array, dtype=dtype, order="C", copy=True)
        for key, length in (
            ("window_parameters", 2),
            ("window_cursor", 1),
            ("counts_since_start", 3),
            ("rng_state", 1),
        ):
            if arrays[key].size != length:
                raise ValueError(
                    f"window state array {key!r} must hold {length} values, got {arrays[key].size}"
                )
        capacity, reservoir_capacity = (int(value) for value in arrays["window_parameters"])
        window = cls(capacity, reservoir_capacity)
        size = arrays["window_scores"].size
        cursor = int(arrays["window_cursor"][0])
        events, positives, negatives = (int(count) for count in arrays["counts_since_start"])
        problems = []
        if arrays["window_labels"].size != size:
            problems.append("window_labels and window_scores differ in length")
        if size > capacity:
            problems.append(f"window_scores holds {size} pairs, more than capacity {capacity}")
        if not (0 <= cursor < capacity) or (size < capacity and cursor != size):
            problems.append(f"window_cursor {cursor} is inconsistent with {size} pairs")
        if not np.isin(arrays["window_labels"], (-1, 1)).all():
            problems.append("window_labels must be -1 or +1")
        if min(events, positives, negatives) < 0 or events != positives + negatives:
            problems.append("counts_since_start must be [events, positives, negatives] >= 0")
        if size > events:
            problems.append("the window holds more pairs than events seen since the start")
        for key, count in (
            ("reservoir_positive_scores", positives),
            ("reservoir_negative_scores", negatives),
        ):
            if arrays[key].size != min(reservoir_capacity, count):
                problems.append(f"{key} must hold min(reservoir_capacity, count) scores")
        for key in ("window_scores", "reservoir_positive_scores", "reservoir_negative_scores"):
            if not np.isfinite(arrays[key]).all():
                problems.append(f"{key} holds NaN or infinity")
        if problems:
            raise ValueError("inconsistent window state: " + "; ".join(problems))
        window._window_scores = arrays["window_scores"]
        window._window_labels = arrays["window_labels"]
        window._size = size
        window._cursor = cursor
        window._counts_since_start = arrays["counts_since_start"]
        window._positive_reservoir = arrays["reservoir_positive_scores"]
        window._negative_reservoir = arrays["reservoir_negative_scores"]
        window._rng_state = arrays["rng_state"]
        return window
