"""Online feature scaling kernels (sequential: event i is scaled with statistics that include
events 0..i, exactly as if the events had arrived one at a time)."""

import numpy as np

from core._kernels._config import kernel


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
def _scale_of(j, n, total, total_sq):
    if n == 0:
        return 1.0
    mean = total[j] / n
    mean_square = total_sq[j] / n
    variance = mean_square - mean * mean
    # E[x^2] - E[x]^2 cancels catastrophically for a (nearly) constant feature: rounding
    # leaves ~1e-17 instead of 0, and dividing by its square root would blow the feature up.
    # Below a relative 1e-10 of E[x^2] the spread is indistinguishable from rounding noise.
    if variance <= 1e-10 * mean_square:
        return 1.0
    return np.sqrt(variance)


@kernel
def scale_learn_dense(X, out, count, total, total_sq):
    n_samples, n_features = X.shape
    for i in range(n_samples):
        count[0] += 1
        for j in range(n_features):
            total[j] += X[i, j]
            total_sq[j] += X[i, j] * X[i, j]
        for j in range(n_features):
            out[i, j] = X[i, j] / _scale_of(j, count[0], total, total_sq)


@kernel
def scale_transform_dense(X, out, count, total, total_sq):
    n_samples, n_features = X.shape
    for j in range(n_features):
        scale = _scale_of(j, count[0], total, total_sq)
        for i in range(n_samples):
            out[i, j] = X[i, j] / scale


@kernel
def scale_learn_csr(indptr, indices, data, out_data, count, total, total_sq):
    """Scale-only (no centring, so sparsity is kept); O(nnz) per event.

    Statistics count the implicit zeros: the mean of feature j is total[j] / count.
    """
    for i in range(len(indptr) - 1):
        count[0] += 1
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            total[j] += data[k]
            total_sq[j] += data[k] * data[k]
        for k in range(indptr[i], indptr[i + 1]):
            out_data[k] = data[k] / _scale_of(indices[k], count[0], total, total_sq)


@kernel
def scale_transform_csr(indptr, indices, data, out_data, count, total, total_sq):
    for k in range(len(data)):
        out_data[k] = data[k] / _scale_of(indices[k], count[0], total, total_sq)
