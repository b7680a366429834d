"""Online feature scaling kernels (sequential: event i is scaled with statistics that include
events 0..i, exactly as if the events had arrived one at a time)."""

import numpy as np

from core._kernels._config import kernel

#: a feature whose non-zero values spread less than this share of their root mean square does
#: not vary (a category, or a constant up to the rounding of its sums): it is never centred
VARYING = 1e-6


@kernel
def standard_learn_dense(X, out, count, mean, m2):
    """Welford update with each row, then centre and scale it with the updated statistics.

    A feature whose running variance is 0 is only centred (divided by 1).
    """
    n_samples, n_features = X.shape
    for i in range(n_samples):
        count[0] += 1
        n = count[0]
        for j in range(n_features):
            value = X[i, j]
            delta = value - mean[j]
            mean[j] += delta / n
            m2[j] += delta * (value - mean[j])
            std = np.sqrt(m2[j] / n)
            out[i, j] = (value - mean[j]) / std if std > 0.0 else value - mean[j]


@kernel
def standard_transform_dense(X, out, count, mean, m2):
    n_samples, n_features = X.shape
    n = count[0]
    for j in range(n_features):
        std = np.sqrt(m2[j] / n) if n > 0 else 0.0
        for i in range(n_samples):
            out[i, j] = (X[i, j] - mean[j]) / std if std > 0.0 else X[i, j] - mean[j]


@kernel
def _scale_of(j, nonzero, total, total_sq, floor):
    """The spread of feature j's non-zero values so far, at least ``floor`` times their root
    mean square (1 before any value)."""
    if nonzero[j] == 0:
        return 1.0
    mean = total[j] / nonzero[j]
    mean_square = total_sq[j] / nonzero[j]
    spread = np.sqrt(max(mean_square - mean * mean, 0.0))
    scale = max(spread, floor * np.sqrt(mean_square))
    # squares of values below ~1e-154 underflow to 0: such a feature is left as it is
    return scale if scale > 0.0 else 1.0


@kernel
def _affine_of(j, events, nonzero, total, total_sq, floor, share):
    """``(centre, divisor)`` of feature j's non-zero values (scaling.6): a number present in
    at least ``share`` of the ``events`` so far, whose values vary, is centred on their mean
    and divided by their spread; any other feature is divided by ``_scale_of`` (scaling.3)."""
    count = nonzero[j]
    if count > 0 and count >= share * events:
        mean = total[j] / count
        mean_square = total_sq[j] / count
        spread = np.sqrt(max(mean_square - mean * mean, 0.0))
        if spread > VARYING * np.sqrt(mean_square):
            return mean, spread
    return 0.0, _scale_of(j, nonzero, total, total_sq, floor)


@kernel
def scale_learn_dense(X, out, events, nonzero, total, total_sq, floor, share):
    n_samples, n_features = X.shape
    for i in range(n_samples):
        events[0] += 1
        for j in range(n_features):
            if X[i, j] != 0.0:
                nonzero[j] += 1
                total[j] += X[i, j]
                total_sq[j] += X[i, j] * X[i, j]
        for j in range(n_features):
            if X[i, j] != 0.0:
                centre, divisor = _affine_of(j, events[0], nonzero, total, total_sq, floor, share)
                out[i, j] = (X[i, j] - centre) / divisor
            else:
                out[i, j] = 0.0


@kernel
def scale_transform_dense(X, out, events, nonzero, total, total_sq, floor, share):
    n_samples, n_features = X.shape
    for j in range(n_features):
        centre, divisor = _affine_of(j, events[0], nonzero, total, total_sq, floor, share)
        for i in range(n_samples):
            out[i, j] = (X[i, j] - centre) / divisor if X[i, j] != 0.0 else 0.0


@kernel
def scale_learn_csr(indptr, indices, data, out_data, events, nonzero, total, total_sq, floor,
                    share):  # fmt: skip
    """Centring and scaling of the non-zero values only (an absent value stays 0, so sparsity
    is kept); O(nnz) per event.  A stored 0 counts as absent."""
    for i in range(len(indptr) - 1):
        events[0] += 1
        for k in range(indptr[i], indptr[i + 1]):
            if data[k] != 0.0:
                j = indices[k]
                nonzero[j] += 1
                total[j] += data[k]
                total_sq[j] += data[k] * data[k]
        for k in range(indptr[i], indptr[i + 1]):
            if data[k] != 0.0:
                centre, divisor = _affine_of(
                    indices[k], events[0], nonzero, total, total_sq, floor, share
                )
                out_data[k] = (data[k] - centre) / divisor
            else:
                out_data[k] = 0.0


@kernel
def scale_transform_csr(indptr, indices, data, out_data, events, nonzero, total, total_sq, floor,
                        share):  # fmt: skip
    for k in range(len(data)):
        if data[k] != 0.0:
            centre, divisor = _affine_of(
                indices[k], events[0], nonzero, total, total_sq, floor, share
            )
            out_data[k] = (data[k] - centre) / divisor
        else:
            out_data[k] = 0.0
