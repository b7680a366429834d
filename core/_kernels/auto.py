"""The tournament's evaluation: every candidate's exact pAUC and AUC over the window, in one
call, from each candidate's positive and negative window scores sorted ascending (the caller
sorts them with numpy, row by row: numpy's sort is about 6x faster than numba's on 5,000
floats).  Each candidate then costs two sweeps of
:func:`core._kernels.metrics.roc_area_between`.

The arithmetic is that of :func:`core.metrics.auc` and :func:`core.metrics.pauc`, operation for
operation, so the leaderboard shows the same numbers as those functions (a test checks ``==``).
"""

from core._kernels._config import kernel
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
