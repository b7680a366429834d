"""Dot products and row combinations shared by the kernels, each with a fixed summation order.

A kernel's results must not depend on how events are grouped into calls, nor change when this
module changes: each helper documents its order (number of accumulators and how they are
combined), and a kernel that needs another order gets another helper, never an edit of one of
these.  ``fastmath`` is off (``core._kernels._config``), so numba neither reassociates nor
contracts these sums.
"""

import numpy as np

from core._kernels._config import inlined_kernel, kernel


@inlined_kernel  # four loads (or row views) in place: nothing to call per pass
def four(values, start):
    """``values[start]`` to ``values[start + 3]``: what a loop unrolled four ways reads per
    pass (entries of a vector, or rows of a matrix)."""
    return values[start], values[start + 1], values[start + 2], values[start + 3]


@kernel
def dot_dense4(a, b):
    """``a · b`` with four accumulators (OAM, AdaOAM) (fixed order, so deterministic)."""
    n = a.shape[0]
    s0 = s1 = s2 = s3 = 0.0
    i = 0
    while i + 4 <= n:
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
        i += 4
    while i < n:
        s0 += a[i] * b[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


@kernel
def dot_and_squared_norm(w, x):
    """``(w · x, ||x||²)`` in one pass (two accumulators each)."""
    d = x.shape[0]
    s0 = s1 = q0 = q1 = 0.0
    i = 0
    while i + 2 <= d:
        s0 += w[i] * x[i]
        s1 += w[i + 1] * x[i + 1]
        q0 += x[i] * x[i]
        q1 += x[i + 1] * x[i + 1]
        i += 2
    if i < d:
        s0 += w[i] * x[i]
        q0 += x[i] * x[i]
    return s0 + s1, q0 + q1


@kernel
def csr_decision(indptr, indices, data, w, out):
    """``out[i] = w · X[i]`` for a CSR batch."""
    for row in range(indptr.shape[0] - 1):
        out[row] = dot_sparse(w, indices, data, indptr[row], indptr[row + 1])


@kernel
def row_dots(matrix, start, stop, v, out):
    """``out[r] = matrix[r] · v`` for ``start <= r < stop``, four rows at a time with two
    accumulators each (eight independent add chains; every entry of ``v`` is loaded once per
    four rows).  The summation order is fixed, so results are deterministic."""
    d = v.shape[0]
    r = start
    while r + 4 <= stop:
        row0, row1, row2, row3 = four(matrix, r)
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        b0 = 0.0
        b1 = 0.0
        b2 = 0.0
        b3 = 0.0
        i = 0
        while i + 2 <= d:
            v0 = v[i]
            v1 = v[i + 1]
            a0 += row0[i] * v0
            a1 += row1[i] * v0
            a2 += row2[i] * v0
            a3 += row3[i] * v0
            b0 += row0[i + 1] * v1
            b1 += row1[i + 1] * v1
            b2 += row2[i + 1] * v1
            b3 += row3[i + 1] * v1
            i += 2
        if i < d:
            a0 += row0[i] * v[i]
            a1 += row1[i] * v[i]
            a2 += row2[i] * v[i]
            a3 += row3[i] * v[i]
        out[r] = a0 + b0
        out[r + 1] = a1 + b1
        out[r + 2] = a2 + b2
        out[r + 3] = a3 + b3
        r += 4
    while r < stop:
        out[r] = dot_dense4(matrix[r], v)
        r += 1


@kernel
def combine_rows(matrix, stop, coefficients, target):
    """``target += sum_{r < stop} coefficients[r] · matrix[r]``, four rows per pass over
    ``target`` (a quarter of its loads and stores; the inner loop still vectorises)."""
    d = target.shape[0]
    r = 0
    while r + 4 <= stop:
        c0, c1, c2, c3 = four(coefficients, r)
        row0, row1, row2, row3 = four(matrix, r)
        for i in range(d):
            target[i] += ((c0 * row0[i] + c1 * row1[i]) + c2 * row2[i]) + c3 * row3[i]
        r += 4
    while r < stop:
        coefficient = coefficients[r]
        row = matrix[r]
        for i in range(d):
            target[i] += coefficient * row[i]
        r += 1


@kernel
def blas_dot(a, b):
    """``a · b`` by BLAS ``gemv`` on a one-row view, not ``ddot``: OpenBLAS splits a ``ddot``
    over more than 10,000 entries between its threads, so its result depends on
    ``OPENBLAS_NUM_THREADS``; ``gemv`` and ``gemm`` split over their outputs (each output's
    sum is computed the same way; checked equal bit for bit with 1 and 2 threads)."""
    out = np.empty(1)
    np.dot(a.reshape((1, a.shape[0])), b, out)
    return out[0]


@kernel
def dot_dense(a, x):
    """``a . x`` with two accumulators (even and odd columns): without fastmath numba keeps one
    add chain per accumulator, and two chains halve the latency.  The order is fixed, hence
    deterministic, and the same as the ``a . x`` of the dense SPAM and SOLAM kernels' one-pass
    loops, so a prequential score and ``decision_function`` agree bit for bit."""
    n = x.shape[0]
    s0 = 0.0
    s1 = 0.0
    j = 0
    while j + 2 <= n:
        s0 += a[j] * x[j]
        s1 += a[j + 1] * x[j + 1]
        j += 2
    if j < n:
        s0 += a[j] * x[j]
    return s0 + s1


@kernel
def dot_sparse(a, indices, data, start, end):
    """``a . x`` for the CSR row ``start:end``, in the order of its stored entries."""
    total = 0.0
    for k in range(start, end):
        total += a[indices[k]] * data[k]
    return total


@kernel
def sq_norm_sparse(data, start, end):
    """``||x||^2`` of the CSR row ``start:end``, in the order of its stored entries."""
    total = 0.0
    for k in range(start, end):
        total += data[k] * data[k]
    return total
