"""The tournament's evaluation: every candidate's exact pAUC and AUC over the window, in one
call, from each candidate's positive and negative window scores sorted ascending (the caller
sorts them with numpy, row by row: numpy's sort is about 6x faster than numba's on 5,000
floats).  Each candidate then costs two sweeps of
:func:`core._kernels.metrics.roc_area_between`.

The arithmetic is that of :func:`core.metrics.auc` and :func:`core.metrics.pauc`, operation for
operation, so the leaderboard shows the same numbers as those functions (a test checks ``==``).

And each segment's served scores and records (:func:`serve_and_record`), with the drift
detector's step in the same call when it watches them (:func:`serve_record_and_watch`).
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.drift import page_hinkley
from core._kernels.metrics import roc_area_between


@kernel
def window_metrics(positive_sorted, negative_sorted, alpha, beta, paucs, aucs):
    """pAUC over [alpha, beta] and AUC of candidate k from row k of ``positive_sorted`` (K, P)
    and ``negative_sorted`` (K, N), both classes present (the caller checks)."""
    n_positive = positive_sorted.shape[1]
    n_negative = negative_sorted.shape[1]
    for k in range(positive_sorted.shape[0]):
        positives = positive_sorted[k]
        negatives = negative_sorted[k]
        twice_area, _ = roc_area_between(positives, negatives, 0.0, float(n_negative))
        aucs[k] = float(twice_area) / (2.0 * n_positive * n_negative)
        twice_whole_area, clipped_area = roc_area_between(
            positives, negatives, alpha * n_negative, beta * n_negative
        )
        area = 0.5 * float(twice_whole_area) + clipped_area
        mean_height = area / (float(n_positive) * (beta * n_negative - alpha * n_negative))
        paucs[k] = min(1.0, max(0.0, mean_height))


@kernel
def serve_and_record(
    candidate_scores, labels, weights, score_mean, score_m2, seen, shrink_events, window_scores,
    window_labels, served,
):  # fmt: skip
    """The served score of each event of a segment, docs/algorithms/auto.md (auto.9)-(auto.10):
    ``n / (n + shrink_events) * sum_k weights[k] * z_k`` after ``n`` events, with
    ``z_k = (s_k - mean_k) / std_k`` standardised by the mean and (population) standard
    deviation of candidate k's prequential scores *before* the event (0 while fewer than two
    events or a zero spread), then those statistics take the event's scores (Welford's update:
    ``score_mean`` and ``score_m2`` are updated in place; ``seen`` is the events learned before
    the segment), and the window's ring buffers take the event (slot ``(seen + i) % window``).
    One event after the other, so the result does not depend on how the events were batched."""
    n_candidates, n_events = candidate_scores.shape
    window = window_labels.shape[0]
    for i in range(n_events):
        count = seen + i
        slot = count % window
        total = 0.0
        for k in range(n_candidates):
            score = candidate_scores[k, i]
            mean = score_mean[k]
            if weights[k] > 0.0 and count > 1:
                spread = np.sqrt(score_m2[k] / count)
                if spread > 0.0:
                    total += weights[k] * ((score - mean) / spread)
            delta = score - mean
            mean += delta / (count + 1)
            score_mean[k] = mean
            score_m2[k] += delta * (score - mean)
            window_scores[k, slot] = score
        window_labels[slot] = labels[i]
        served[i] = total * (count / (count + shrink_events))


@kernel
def serve_record_and_watch(
    candidate_scores, labels, weights, score_mean, score_m2, seen, shrink_events, window_scores,
    window_labels, served, recent, recent_fill, recent_next, statistics, counters, delta,
    threshold, min_losses, detected_at,
):  # fmt: skip
    """:func:`serve_and_record` of a segment, then the drift detector fed its served scores
    (:func:`core._kernels.drift.page_hinkley`, its arrays and parameters after ``served``): the
    two calls of a segment served as the mix in one (numba's dispatch costs ~2 us a call, and
    ``auto`` makes them at every event).  Returns the detections, as ``page_hinkley``."""
    serve_and_record(
        candidate_scores, labels, weights, score_mean, score_m2, seen, shrink_events,
        window_scores, window_labels, served,
    )  # fmt: skip
    return page_hinkley(
        served, labels, recent, recent_fill, recent_next, statistics, counters, delta, threshold,
        min_losses, detected_at,
    )  # fmt: skip
