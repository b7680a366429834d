"""Online feature scaling kernels (sequential: event i is scaled with statistics that include
events 0..i, exactly as if the events had arrived one at a time)."""

import numpy as np

from core._kernels._config import kernel


@kernel
def _standard_divisor(n, mean, m2, present, magnitude, floor):
    """A feature's standard deviation over the ``n`` events so far; for a feature whose
    non-zero values have had two magnitudes (a number, ``magnitude`` < 0), at least ``floor``
    times the root mean square distance of its ``present`` non-zero values from the mean (1
    while it is 0).  Scalars, not the arrays: a helper taking arrays costs ~40 ns a call."""
    std = np.sqrt(m2 / n)
    if magnitude < 0.0 and present > 0:
        # m2 sums the squared distances of every value, the zeros' (n - c) mean^2 included;
        # the floor is compared squared, so the common case takes no second root or division
        distances = m2 - (n - present) * mean * mean
        if floor * floor * distances * n > m2 * present:
            std = floor * np.sqrt(distances / present)
    return std if std > 0.0 else 1.0


@kernel
def standard_learn_dense(X, out, count, mean, m2, present, magnitude, floor):
    """Welford update with each row, then centre and scale it with the updated statistics.

    ``present`` counts each feature's non-zero values; ``magnitude`` holds the one magnitude
    they have had (0 before the first, negative once a second one came).  A feature whose
    divisor is 0 is only centred (divided by 1).
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
            if value != 0.0:
                present[j] += 1
                size = abs(value)
                if magnitude[j] == 0.0:
                    magnitude[j] = size
                elif magnitude[j] != size:
                    magnitude[j] = -1.0
            divisor = _standard_divisor(n, mean[j], m2[j], present[j], magnitude[j], floor)
            out[i, j] = (value - mean[j]) / divisor


@kernel
def standard_transform_dense(X, out, count, mean, m2, present, magnitude, floor):
    n_samples, n_features = X.shape
    n = count[0]
    for j in range(n_features):
        divisor = 1.0
        if n > 0:
            divisor = _standard_divisor(n, mean[j], m2[j], present[j], magnitude[j], floor)
        for i in range(n_samples):
            out[i, j] = (X[i, j] - mean[j]) / divisor


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
def scale_learn_dense(X, out, nonzero, total, total_sq, floor):
    n_samples, n_features = X.shape
    for i in range(n_samples):
        for j in range(n_features):
            if X[i, j] != 0.0:
                nonzero[j] += 1
                total[j] += X[i, j]
                total_sq[j] += X[i, j] * X[i, j]
        for j in range(n_features):
            out[i, j] = X[i, j] / _scale_of(j, nonzero, total, total_sq, floor)


@kernel
def scale_transform_dense(X, out, nonzero, total, total_sq, floor):
    n_samples, n_features = X.shape
    for j in range(n_features):
        scale = _scale_of(j, nonzero, total, total_sq, floor)
        for i in range(n_samples):
            out[i, j] = X[i, j] / scale


@kernel
def scale_learn_csr(indptr, indices, data, out_data, nonzero, total, total_sq, floor):
    """Scale-only (no centring, so sparsity is kept); O(nnz) per event.  A stored 0 counts as
    absent."""
    for i in range(len(indptr) - 1):
        for k in range(indptr[i], indptr[i + 1]):
            if data[k] != 0.0:
                j = indices[k]
                nonzero[j] += 1
                total[j] += data[k]
                total_sq[j] += data[k] * data[k]
        for k in range(indptr[i], indptr[i + 1]):
            out_data[k] = data[k] / _scale_of(indices[k], nonzero, total, total_sq, floor)


@kernel
def scale_transform_csr(indptr, indices, data, out_data, nonzero, total, total_sq, floor):
    for k in range(len(data)):
        out_data[k] = data[k] / _scale_of(indices[k], nonzero, total, total_sq, floor)
