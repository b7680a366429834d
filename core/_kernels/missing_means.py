"""The running means that fill missing values (sequential: a missing value of event i is
filled with the mean of the values present in events 0..i-1, exactly as if the events had
arrived one at a time)."""

from core._kernels._config import kernel


@kernel
def fill_and_learn_means(X, means, counts, bound):
    """In place: each NaN of ``X`` becomes its feature's running mean; each present value
    moves that mean (``means[j] += (value - means[j]) / counts[j]``, clamped to
    ``[-bound, bound]``).

    The mean of values within the bound lies within it; only rounding can step past it, by
    an ulp, and the clamp takes that back, so a filled value always passes the feature check
    and a stored mean always passes the state check."""
    n_samples, n_features = X.shape
    for i in range(n_samples):
        for j in range(n_features):
            value = X[i, j]
            if value != value:  # NaN: missing
                X[i, j] = means[j]
            else:
                counts[j] += 1
                mean = means[j] + (value - means[j]) / counts[j]
                means[j] = min(max(mean, -bound), bound)
