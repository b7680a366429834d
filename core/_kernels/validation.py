"""Structure checks of CSR batches, one pass over the non-zeros; the value checks of feature
batches (finite and within :data:`FEATURE_BOUND`), one pass over the values."""

import numpy as np

from core._kernels._config import kernel

#: [CHOICE] the largest magnitude a feature value may have.  Learning squares features and sums
#: the squares over events (the scalers' second moments, ``||x||^2`` in every kernel, Gram
#: products): with ``|x| <= 1e100`` a square is at most 1e200 and a sum of squares over 2**53
#: events (``core.learners._state.MAX_COUNT``) of a million features at most ~1e222, far from
#: the float64 overflow at 1.8e308; a product with a state value (at most
#: ``core.learners._state.STATE_BOUND``) stays finite too.  Real features are far below it
#: (epoch nanoseconds are ~1.7e18).
FEATURE_BOUND = 1e100

#: a row whose ``||x||^2`` is at most this has every value within :data:`FEATURE_BOUND`; the
#: kernels that compute ``||x||^2`` anyway prove their rows sound with it (a row above it may
#: still be sound: it is then checked value by value)
ROW_SQUARED_NORM_BOUND = FEATURE_BOUND * FEATURE_BOUND


@kernel
def first_bad_csr_entry(indptr, indices, n_features):
    """Check every row's column indices: all in ``[0, n_features)`` and none repeated.

    Returns ``(-1, 0, 0)`` when the batch is well formed, else ``(row, column, reason)`` for the
    first offence, with reason 1 = out of range and 2 = repeated in the row.

    A batch whose rows' indices increase (scipy's canonical CSR, what most writers produce) is
    proved well formed by :func:`increasing_in_range`.  Otherwise each row is checked on a
    sorted copy of its indices -- insertion sort for the short rows of event streams,
    ``np.sort`` for long ones -- which is O(nnz log row_length) and needs no
    (row * width + column) key array for the whole batch.
    """
    if increasing_in_range(indptr, indices, n_features):
        return -1, 0, 0
    scratch = np.empty(64, dtype=np.int64)
    for row in range(len(indptr) - 1):
        start, stop = indptr[row], indptr[row + 1]
        for k in range(start, stop):
            if indices[k] < 0 or indices[k] >= n_features:
                return row, indices[k], 1
        length = stop - start
        if length > 64:
            ordered = np.sort(indices[start:stop])
        else:
            for k in range(length):
                column = indices[start + k]
                position = k
                while position > 0 and scratch[position - 1] > column:
                    scratch[position] = scratch[position - 1]
                    position -= 1
                scratch[position] = column
            ordered = scratch[:length]
        for k in range(1, length):
            if ordered[k] == ordered[k - 1]:
                return row, ordered[k], 2
    return -1, 0, 0


@kernel
def increasing_in_range(indptr, indices, n_features):
    """Whether every row's indices strictly increase and all lie in ``[0, n_features)`` (so
    none repeats in a row): sufficient, not necessary, for a well-formed batch.  One pass
    over all the indices with no branch per entry, which vectorises (the descents between two
    rows, which are allowed, are then taken back one per row): 10**6 rows of 20 in 13 ms, where
    sorting each row took 69 (bench/versus_c.py, the CSR cases).  ``indptr`` is valid."""
    n = indices.shape[0]
    if n == 0:
        return True
    descents = 0
    low = indices[0]
    high = indices[0]
    for k in range(1, n):
        descents += indices[k] <= indices[k - 1]
        low = min(low, indices[k])
        high = max(high, indices[k])
    for row in range(indptr.shape[0] - 1):
        start = indptr[row]
        if 0 < start < indptr[row + 1]:  # a row's first entry after another row's last
            descents -= indices[start] <= indices[start - 1]
    return descents == 0 and low >= 0 and high < n_features


@kernel
def count_nonfinite(values):
    """How many of the float64 ``values`` (1-d) are NaN or infinite: ``v - v`` is 0 for a
    finite ``v`` and NaN otherwise (fastmath is off, so LLVM does not fold it to 0).  The
    count is an integer sum, which LLVM may reorder and so vectorises: one read of the batch
    at memory speed, faster than ``np.sum`` (bench/README.md, "versus_c.py"), most of all on one
    row, where numpy's call overhead dominates."""
    bad = 0
    for k in range(values.shape[0]):
        v = values[k]
        bad += (v - v) != 0.0
    return bad


@kernel
def count_out_of_range(values, bound):
    """How many of the float64 ``values`` (1-d) are NaN or of magnitude above ``bound`` (an
    infinity is, for any finite ``bound``).  ``abs(v) <= bound`` is False for NaN, so one
    comparison checks both, and the count is an integer sum that vectorises, as in
    :func:`count_nonfinite`: the bound costs nothing over the finiteness check."""
    bad = 0
    for k in range(values.shape[0]):
        bad += not (abs(values[k]) <= bound)
    return bad


@kernel
def count_out_of_range_in(arrays, bounds):
    """:func:`count_out_of_range` over each of a tuple of 1-d float64 arrays, array ``i``
    against ``bounds[i]`` (a learner's :class:`~core.learners._state.Grown` state, checked
    after each batch): one call for them all, since a call costs more than checking a few
    hundred values."""
    bad = 0
    i = 0
    for values in arrays:
        bound = bounds[i]
        for k in range(values.shape[0]):
            bad += not (abs(values[k]) <= bound)
        i += 1
    return bad


@kernel
def labels_to_pm1(labels, out):
    """``out[k]`` = +1 where ``labels[k]`` is 1, else -1, in one pass over int64 ``labels``;
    True when every label is in {0, 1} or every label in {-1, +1} (else ``out`` is not to be
    used: the caller finds the offending label).  0 and -1 both mean the negative class, so
    the mapping does not depend on the convention; only a batch mixing them is refused.  No
    early exit, so that the loop vectorises."""
    out_of_range = False
    has_zero = False
    has_minus_one = False
    for k in range(labels.shape[0]):
        value = labels[k]
        out_of_range |= (value < -1) | (value > 1)
        has_zero |= value == 0
        has_minus_one |= value == -1
        out[k] = 1 if value == 1 else -1
    return not (out_of_range or (has_zero and has_minus_one))
