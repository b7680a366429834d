"""Kernels for the exact ROC metrics and the prequential window's reservoirs.

Every ROC kernel takes the positive and the negative scores as two arrays sorted in *ascending*
order (``np.sort``) and sweeps them together from the top, one distinct threshold at a time.
Sorting the two classes apart with numpy and merging them here costs one O(n log n) sort and one
O(n) pass, and needs no argsort of (score, label) pairs.

Counts stay integers as long as possible: the ROC curve moves from (fp, tp) to (fp + n_v, tp + p_v)
at a threshold v held by n_v negatives and p_v positives, and twice the area of that trapezoid,
``n_v * (2 tp + p_v)``, is an integer.  Only the two segments cut by the ends of an FPR range
[alpha, beta] need floating point.  AUC is therefore exact up to its final division.

The wrappers in ``core/metrics/`` validate and allocate; nothing here checks its inputs.
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.random import random_below


@kernel
def roc_area_between(positive_sorted, negative_sorted, alpha_fp, beta_fp):
    """Area under the tie-aware ROC curve for false-positive counts in [alpha_fp, beta_fp].

    The curve lives in count units (x = false positives, y = true positives), so the area of the
    whole curve is n_positive * n_negative when AUC = 1.  Returns ``(twice_whole_area,
    clipped_area)``: twice the area of the segments lying wholly inside the range (an exact
    integer) and the area of the segments cut by an end of the range (float).  The area is
    ``0.5 * twice_whole_area + clipped_area``.
    """
    next_positive = positive_sorted.shape[0] - 1
    next_negative = negative_sorted.shape[0] - 1
    true_positives = 0
    false_positives = 0
    twice_whole_area = 0
    clipped_area = 0.0
    while next_negative >= 0:
        # The next threshold is the largest score not yet passed, of either class.
        threshold = negative_sorted[next_negative]
        if next_positive >= 0 and positive_sorted[next_positive] > threshold:
            threshold = positive_sorted[next_positive]
        positives_at_threshold = 0
        while next_positive >= 0 and positive_sorted[next_positive] == threshold:
            positives_at_threshold += 1
            next_positive -= 1
        negatives_at_threshold = 0
        while next_negative >= 0 and negative_sorted[next_negative] == threshold:
            negatives_at_threshold += 1
            next_negative -= 1
        start_fp = false_positives
        end_fp = false_positives + negatives_at_threshold
        start_tp = true_positives
        end_tp = true_positives + positives_at_threshold
        if negatives_at_threshold > 0 and end_fp > alpha_fp:
            if start_fp >= alpha_fp and end_fp <= beta_fp:
                twice_whole_area += negatives_at_threshold * (start_tp + end_tp)
            else:
                # Linear interpolation along the segment at the cut ends.
                left = max(float(start_fp), alpha_fp)
                right = min(float(end_fp), beta_fp)
                if right > left:
                    slope = positives_at_threshold / negatives_at_threshold
                    left_tp = start_tp + slope * (left - start_fp)
                    right_tp = start_tp + slope * (right - start_fp)
                    clipped_area += (right - left) * (0.5 * (left_tp + right_tp))
        true_positives = end_tp
        false_positives = end_fp
        if false_positives >= beta_fp:
            # Everything further right lies beyond beta; the remaining positives only add
            # vertical segments, which have no area.
            break
    return twice_whole_area, clipped_area


@kernel
def roc_points(positive_sorted, negative_sorted, false_positives, true_positives, thresholds):
    """Fill the ROC curve's vertices, one per distinct score, highest score first.

    ``false_positives``, ``true_positives`` (int64) and ``thresholds`` (float64) need room for
    ``len(positive_sorted) + len(negative_sorted) + 1`` entries; entry 0 is the origin with
    threshold +inf.  Returns the number of entries written.
    """
    next_positive = positive_sorted.shape[0] - 1
    next_negative = negative_sorted.shape[0] - 1
    false_positives[0] = 0
    true_positives[0] = 0
    thresholds[0] = np.inf
    n_points = 1
    while next_positive >= 0 or next_negative >= 0:
        if next_negative < 0:
            threshold = positive_sorted[next_positive]
        elif next_positive < 0:
            threshold = negative_sorted[next_negative]
        else:
            threshold = max(positive_sorted[next_positive], negative_sorted[next_negative])
        true_positives[n_points] = true_positives[n_points - 1]
        false_positives[n_points] = false_positives[n_points - 1]
        while next_positive >= 0 and positive_sorted[next_positive] == threshold:
            true_positives[n_points] += 1
            next_positive -= 1
        while next_negative >= 0 and negative_sorted[next_negative] == threshold:
            false_positives[n_points] += 1
            next_negative -= 1
        thresholds[n_points] = threshold
        n_points += 1
    return n_points


@kernel
def reservoir_update(
    scores,
    labels,
    positive_reservoir,
    negative_reservoir,
    reservoir_capacity,
    counts_since_start,
    rng_state,
):
    """Offer each (score, label) event, in order, to its class's uniform reservoir.

    Vitter's Algorithm R: the k-th event of a class is stored while k <= capacity, and later
    replaces a uniformly chosen slot with probability capacity / k, so each reservoir is a uniform
    sample without replacement of its class's events so far.  ``counts_since_start`` is
    ``[events, positives, negatives]`` and is advanced here.  A reservoir array may be shorter than
    ``reservoir_capacity`` while it fills; it must have room for ``min(reservoir_capacity, count)``
    entries after the batch.
    """
    for index in range(scores.shape[0]):
        counts_since_start[0] += 1
        if labels[index] > 0:
            reservoir = positive_reservoir
            class_slot = 1
        else:
            reservoir = negative_reservoir
            class_slot = 2
        seen_before = counts_since_start[class_slot]
        counts_since_start[class_slot] = seen_before + 1
        if seen_before < reservoir_capacity:
            reservoir[seen_before] = scores[index]
        else:
            slot = random_below(rng_state, seen_before + 1)
            if slot < reservoir_capacity:
                reservoir[slot] = scores[index]
