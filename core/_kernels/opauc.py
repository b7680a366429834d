"""OPAUC / AdaOAM kernels (Gao et al., ICML 2013; Ding et al., AAAI 2015; Natole thesis §2.2,
Algorithms 8-9; equations and errata in ``papers/notes/001_spam_thesis.md`` §3.2-3.3, §11).

Arrays and scalars in, arrays mutated in place; the caller (``core.learners.opauc``) validates.

Per event ``(x_t, y_t)``:

1. pre-update score ``w · x_t``;
2. the statistics of the event's own class: count ``T``, mean (eq. 2.13) and covariance, either
   the full d×d matrix or a frequent-directions sketch of it;
3. once both classes have been seen, a step on the gradient (2.11)/(2.12), which uses the
   *opposite* class's statistics: plain (OPAUC, Alg. 8) or diagonal Adagrad with the
   H-weighted projection onto ``||w|| <= 1/sqrt(lambda)`` (AdaOAM, Alg. 9).

Two batch kernels: :func:`opauc_learn` (full covariances, and AdaOAM with sketches: explicit
``w``, ``B w`` and ``Bᵀ(B w)`` per event) and :func:`opauc_sketch_learn` (plain OPAUC with
sketches: ``w`` split into a direct part and sketch coefficients for dense rows, and for CSR
rows every vector kept as coefficients on a small basis of materialised rows, means and
buffered raw events; see the comments above :func:`_blas_dot` and :func:`_block_slots`).
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.oam import dot


# ---------------------------------------------------------------------- class statistics
@kernel
def _update_mean(x, mean, count, delta):
    """``T += 1``; ``delta = x - c_{T-1}``; ``c_T = c_{T-1} + (x - c_{T-1}) / T`` (eq. 2.13).

    [CHOICE] ``/ T`` is applied as ``· (1/T)`` (one division per event, not per feature; the
    results differ in the last bit at most).
    """
    count[0] += 1
    inverse = 1.0 / count[0]
    for i in range(x.shape[0]):
        delta[i] = x[i] - mean[i]
        mean[i] += delta[i] * inverse


@kernel
def _update_covariance(cov, count, delta, q):
    """The corrected covariance recursion (notes §3.2, erratum 3), in its rank-one form.

    The notes' recursion ``Γ_T = Γ + (x xᵀ - Γ - c_{T-1}c_{T-1}ᵀ)/T + c_{T-1}c_{T-1}ᵀ - c_T c_Tᵀ``
    with ``δ = x - c_{T-1}`` and ``c_T = c_{T-1} + δ/T`` expands to exactly
    ``Γ_T = (1 - 1/T) Γ_{T-1} + ((T-1)/T²) δ δᵀ`` (the Welford update): 3 flops per entry instead
    of 8, no cancellation between ``x xᵀ`` and ``c cᵀ``, and symmetric to the last bit
    (``q_i q_j = q_j q_i``).
    """
    n = count[0]
    factor = (n - 1.0) / n
    scale = np.sqrt(n - 1.0) / n
    d = delta.shape[0]
    for i in range(d):
        q[i] = scale * delta[i]
    for i in range(d):
        row = cov[i]
        qi = q[i]
        for j in range(d):
            row[j] = factor * row[j] + qi * q[j]


@kernel
def _row_dots(matrix, start, stop, v, out):
    """``out[r] = matrix[r] · v`` for ``start <= r < stop``, four rows at a time with two
    accumulators each (eight independent add chains; every entry of ``v`` is loaded once per
    four rows).  The summation order is fixed, so results are deterministic."""
    d = v.shape[0]
    r = start
    while r + 4 <= stop:
        row0 = matrix[r]
        row1 = matrix[r + 1]
        row2 = matrix[r + 2]
        row3 = matrix[r + 3]
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
        out[r] = dot(matrix[r], v)
        r += 1


@kernel
def _combine_rows(matrix, stop, coefficients, target):
    """``target += sum_{r < stop} coefficients[r] · matrix[r]``, four rows per pass over
    ``target`` (a quarter of its loads and stores; the inner loop still vectorises)."""
    d = target.shape[0]
    r = 0
    while r + 4 <= stop:
        c0 = coefficients[r]
        c1 = coefficients[r + 1]
        c2 = coefficients[r + 2]
        c3 = coefficients[r + 3]
        row0 = matrix[r]
        row1 = matrix[r + 1]
        row2 = matrix[r + 2]
        row3 = matrix[r + 3]
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
def _sketch_insert(sketch, rows, count, delta, rank):
    """Frequent directions (Liberty 2013; Ghashami et al. 2016) on the centred rows
    ``sqrt((T-1)/T) δ``, whose Gram sum is ``T Γ_T`` (the Welford identity above).

    The sketch has ``2·rank`` rows; when they are all used it is shrunk to at most ``rank``
    rows (below), so each event costs O(d) plus an amortised O(rank · d) for the shrink.
    """
    n = count[0]
    if n < 2:
        return  # the first event of a class has delta = x and weight 0
    scale = np.sqrt((n - 1.0) / n)
    r = rows[0]
    target = sketch[r]
    for i in range(delta.shape[0]):
        target[i] = scale * delta[i]
    rows[0] = r + 1
    if rows[0] == sketch.shape[0]:
        _sketch_shrink(sketch, rows, rank)


@kernel
def _sketch_shrink(sketch, rows, rank):
    """Shrink the full ``2k × d`` sketch ``B`` to its top ``k`` directions.

    ``B Bᵀ = U Λ Uᵀ`` (a 2k×2k eigenproblem); with ``θ`` the (k+1)-th largest eigenvalue the
    new rows are ``sqrt(λ_e - θ) v_eᵀ`` (``v_e = Bᵀ u_e / sqrt(λ_e)``) for the top ``k``
    eigenvalues ``λ_e > θ``, so ``0 ≼ BᵀB_old - BᵀB_new ≼ θ I`` per shrink.  If the class's
    centred data span at most ``k`` dimensions, ``θ = 0`` (up to rounding) and the sketch is
    exact.
    """
    m = rows[0]
    d = sketch.shape[1]
    gram = np.empty((m, m))
    column = np.empty(m)
    for a in range(m):
        _row_dots(sketch, a, m, sketch[a], column)
        for b in range(a, m):
            gram[a, b] = column[b]
            gram[b, a] = column[b]
    values, vectors = np.linalg.eigh(gram)  # ascending
    threshold = max(values[m - 1 - rank], 0.0)
    shrunk = np.zeros((rank, d))
    coefficients = np.empty(m)
    kept = 0
    for e in range(m - 1, m - 1 - rank, -1):
        eigenvalue = values[e]
        if eigenvalue <= threshold:
            break
        factor = np.sqrt((eigenvalue - threshold) / eigenvalue)
        target = shrunk[kept]
        for r in range(m):
            coefficients[r] = factor * vectors[r, e]
        _combine_rows(sketch, m, coefficients, target)
        kept += 1
    sketch[:kept] = shrunk[:kept]
    sketch[kept:] = 0.0
    rows[0] = kept


# ---------------------------------------------------------------------- the step
@kernel
def _project_weighted(u, h, radius, out):
    """AdaOAM's projection ``argmin_{||w|| <= r} (w - u)ᵀ diag(h) (w - u)`` (Alg. 9; notes §3.3).

    Outside the ball the solution is ``w_i = h_i u_i / (h_i + μ)`` with ``μ > 0`` solving
    ``||w(μ)|| = r``; ``||w(μ)||`` decreases in ``μ`` and ``μ_hi = max(h) ||u|| / r`` is
    feasible, so bisection down to adjacent doubles finds it; the feasible end is returned.
    """
    d = u.shape[0]
    norm2 = dot(u, u)
    radius2 = radius * radius
    if norm2 <= radius2:
        out[:] = u
        return
    h_max = 0.0
    for i in range(d):
        h_max = max(h_max, h[i])
    low = 0.0
    high = h_max * np.sqrt(norm2) / radius
    for _ in range(2100):
        middle = 0.5 * (low + high)
        if middle <= low or middle >= high:
            break
        total = 0.0
        for i in range(d):
            value = h[i] * u[i] / (h[i] + middle)
            total += value * value
        if total > radius2:
            low = middle
        else:
            high = middle
    for i in range(d):
        out[i] = h[i] * u[i] / (h[i] + high)


@kernel
def _step(w, g, eta, adaptive, grad_sq, delta, radius, u, h):
    """``w <- w - η g`` (OPAUC, Alg. 8), or AdaOAM (Alg. 9):
    ``G += g²; H = δ + sqrt(G); w <- Π^H_{||w|| <= r}(w - η g / H)``."""
    d = w.shape[0]
    if not adaptive:
        for i in range(d):
            w[i] -= eta * g[i]
        return
    for i in range(d):
        grad_sq[i] += g[i] * g[i]
        h[i] = delta + np.sqrt(grad_sq[i])
        u[i] = w[i] - eta * g[i] / h[i] if h[i] > 0.0 else w[i]
    if np.isfinite(radius):
        _project_weighted(u, h, radius, w)
    else:
        w[:] = u


@kernel
def _gradient_finish(x, label, w, mean_opp, lam, sw, g):
    """Eq. (2.11)/(2.12): ``g = λw - y z + z (zᵀw) + S_opp w`` with ``z = x - c_opp``;
    ``sw`` holds ``S_opp w`` on entry."""
    d = x.shape[0]
    zw = 0.0
    z0 = 0.0
    z1 = 0.0
    z2 = 0.0
    i = 0
    while i + 4 <= d:
        zw += (x[i] - mean_opp[i]) * w[i]
        z0 += (x[i + 1] - mean_opp[i + 1]) * w[i + 1]
        z1 += (x[i + 2] - mean_opp[i + 2]) * w[i + 2]
        z2 += (x[i + 3] - mean_opp[i + 3]) * w[i + 3]
        i += 4
    while i < d:
        zw += (x[i] - mean_opp[i]) * w[i]
        i += 1
    zw = (zw + z0) + (z1 + z2)
    for i in range(d):
        z = x[i] - mean_opp[i]
        g[i] = lam * w[i] - label * z + z * zw + sw[i]


@kernel
def _step_size(eta, auto_eta, squared_norm, sq_norm_mean, n_seen):
    """``η``, or with ``auto_eta`` ``η / ν_t`` where ``ν_t`` is the running mean of ``||x||²``
    over the events seen so far (this one included); the running mean is updated here."""
    if not auto_eta:
        return eta
    sq_norm_mean[0] += (squared_norm - sq_norm_mean[0]) / n_seen
    if sq_norm_mean[0] > 0.0:
        return eta / sq_norm_mean[0]
    return eta


@kernel
def _curvature_capped(step, x, mean_opp, cov_opp, lam):
    """``min(step, 1 / L)`` with ``L = ||z||^2 + trace(S_opp) + lam`` (``z = x - c_opp``), an
    upper bound of the largest eigenvalue of the event's Hessian ``z zᵀ + S_opp + lam I``.

    [CHOICE] The automatic step ``0.1 / nu`` is sized for rows of average norm.  Early in a
    stream a class holds a few events, and one heavy-tailed row among them (25 standard
    deviations on pc1) makes ``S_opp`` and ``z`` so large that ``step * L`` exceeds 2: plain
    gradient descent then diverges (``||w||`` reached 1e10 and held-out AUC 0.33 instead of
    0.82 on one shuffle of pc1).  With the cap no step overshoots the event's quadratic; on
    ordinary rows ``L`` is about ``2 nu`` and the cap is idle.  Full rank only (the sketched
    paths keep the plain step).
    """
    bound = lam
    for i in range(x.shape[0]):
        z = x[i] - mean_opp[i]
        bound += z * z + cov_opp[i, i]
    if step * bound > 1.0:
        return 1.0 / bound
    return step


@kernel
def _event(
    x,
    squared_norm,
    label,
    w,
    mean_pos,
    mean_neg,
    matrix_pos,
    matrix_neg,
    rows_pos,
    rows_neg,
    count_pos,
    count_neg,
    grad_sq,
    sq_norm_mean,
    lam,
    eta,
    auto_eta,
    adaptive,
    delta,
    radius,
    rank,
    work,
    projections,
):
    """One event.  ``rank == 0``: ``matrix_*`` are the full covariances; otherwise they are
    the ``2·rank × d`` frequent-directions sketches with ``rows_*`` rows in use."""
    delta_row = work[0]
    sw = work[1]
    g = work[2]
    u = work[3]
    h = work[4]
    if label > 0:
        mean_own, matrix_own, rows_own, count_own = mean_pos, matrix_pos, rows_pos, count_pos
        mean_opp, matrix_opp, rows_opp, count_opp = mean_neg, matrix_neg, rows_neg, count_neg
    else:
        mean_own, matrix_own, rows_own, count_own = mean_neg, matrix_neg, rows_neg, count_neg
        mean_opp, matrix_opp, rows_opp, count_opp = mean_pos, matrix_pos, rows_pos, count_pos
    _update_mean(x, mean_own, count_own, delta_row)
    if rank == 0:
        _update_covariance(matrix_own, count_own, delta_row, u)
    else:
        _sketch_insert(matrix_own, rows_own, count_own, delta_row, rank)
    step = _step_size(eta, auto_eta, squared_norm, sq_norm_mean, count_pos[0] + count_neg[0])
    if count_opp[0] == 0:
        return  # no update until both classes were seen (official OPAUC code; notes §3.2)
    d = x.shape[0]
    sw[:] = 0.0
    if rank == 0:
        # S_opp w, row by row: S is symmetric, so sw += w_j S[j, :] gives (S w)_i =
        # sum_j S_ij w_j in the order j = 0..d-1, with vectorisable row updates instead of
        # serial dot products.
        for j in range(d):
            wj = w[j]
            row = matrix_opp[j]
            for i in range(d):
                sw[i] += row[i] * wj
    else:
        # S_opp w ~ Bᵀ (B w) / T_opp
        m = rows_opp[0]
        _row_dots(matrix_opp, 0, m, w, projections)
        for r in range(m):
            projections[r] /= count_opp[0]
        _combine_rows(matrix_opp, m, projections, sw)
    _gradient_finish(x, float(label), w, mean_opp, lam, sw, g)
    if auto_eta and rank == 0:
        step = _curvature_capped(step, x, mean_opp, matrix_opp, lam)
    _step(w, g, step, adaptive, grad_sq, delta, radius, u, h)


@kernel
def _score_and_squared_norm(w, x):
    """``(w · x, ||x||²)`` in one pass (two accumulators each)."""
    d = x.shape[0]
    s0 = 0.0
    s1 = 0.0
    q0 = 0.0
    q1 = 0.0
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


# ---------------------------------------------------------------------- batch kernel
@kernel
def opauc_learn(
    X,
    indptr,
    indices,
    data,
    sparse,
    y,
    scores,
    w,
    mean_pos,
    mean_neg,
    matrix_pos,
    matrix_neg,
    rows_pos,
    rows_neg,
    count_pos,
    count_neg,
    grad_sq,
    sq_norm_mean,
    lam,
    eta,
    auto_eta,
    adaptive,
    delta,
    radius,
    rank,
):
    """Learn a batch in order; ``scores`` (length 0 or n) gets each pre-update score.

    Dense input in ``X``; with ``sparse`` the CSR arrays are used instead (each row scattered
    into a dense work row: the statistics are dense anyway).  ``rank == 0`` selects the full
    covariances in ``matrix_*``, ``rank > 0`` the sketches (one kernel, so one compilation).
    """
    d = w.shape[0]
    work = np.zeros((6, d))
    x = work[5]
    projections = np.zeros(matrix_pos.shape[0])
    n_samples = indptr.shape[0] - 1 if sparse else X.shape[0]
    want_scores = scores.shape[0] > 0
    for t in range(n_samples):
        if sparse:
            for k in range(indptr[t], indptr[t + 1]):
                x[indices[k]] = data[k]
            row = x
        else:
            row = X[t]
        score, squared_norm = _score_and_squared_norm(w, row)
        if want_scores:
            scores[t] = score
        _event(
            row,
            squared_norm,
            y[t],
            w,
            mean_pos,
            mean_neg,
            matrix_pos,
            matrix_neg,
            rows_pos,
            rows_neg,
            count_pos,
            count_neg,
            grad_sq,
            sq_norm_mean,
            lam,
            eta,
            auto_eta,
            adaptive,
            delta,
            radius,
            rank,
            work,
            projections,
        )
        if sparse:
            for k in range(indptr[t], indptr[t + 1]):
                x[indices[k]] = 0.0


# ---------------------------------------------------------------------- plain OPAUC, rank k
# [CHOICE] Plain OPAUC with a sketch keeps ``w`` in two parts,
#
#     w = w_direct + B_posᵀ a_pos + B_negᵀ a_neg,
#
# so the ``- η Bᵀ(B w)/T`` part of every step is an O(k) change of the coefficients ``a``
# instead of two passes over the ``2k × d`` sketch.  The products the step needs are kept up to
# date in O(k²) per event: the joint Gram ``J`` of the rows of both sketches, ``B w_direct``,
# ``B c`` for both class means, ``c · w_direct`` and ``c · c``.  Per event the kernel touches
# the sketches only through ``B x`` (a gather of ``m × nnz`` entries for sparse input, a BLAS
# ``gemv`` for dense input); the rest is two O(d) passes (mean and new sketch row;
# ``w_direct``) and ``b · b`` for the new row.  When a sketch shrinks, ``B_sᵀ a_s`` is flushed
# into ``w_direct`` (one BLAS ``gemm`` computes the new rows and the flush together).  The
# served ``w`` is written at the end of each call from the parts, so it is a function of the
# state alone.  The frequent-directions algorithm is unchanged (same rows as
# :func:`_sketch_shrink` up to rounding; the shrink's Gram is the kept one, not recomputed).
#
# Joint index: rows ``0 .. 2k-1`` are the positive sketch, ``2k .. 4k-1`` the negative one.
# Every entry of ``a``, ``J``, ``B w_direct``, ``B c`` and the work vectors that belongs to an
# unused sketch row is exactly 0, so sums may run over all ``4k`` entries.
#
# Numerics: the kept products are updated by differences such as ``B δ = B x - B c``,
# ``δ · c = x · c - c · c`` and ``zᵀw = x · w - c · w``; with features far from zero relative
# to their spread these lose digits, as any uncentred formula does.  Measured against the
# naive reference (300 events, d = 10, k = 2, unit spread): relative error of ``w`` 6e-15
# with means near 0, 1e-11 with every feature offset by 1,000, 6e-7 offset by 100,000 (the
# explicit kernel: 2e-16, 2e-16, 9e-13).  Scale such features (``scaling="standard"``).  The
# Gram diagonal ``b · b`` is computed directly because the shrink's eigenvalues rest on it.
# The factored CSR form computes its products directly (``x · R_r``) but forms the sketch
# rows' Gram as ``M (R Rᵀ) Mᵀ`` from raw rows and means, so it loses digits the same way:
# same test, CSR input, 7e-15, 5e-11 and 3e-7.
#
# BLAS (``np.dot``) is used for the long products because numba keeps ``fastmath`` off and
# its own reductions do not vectorise (a 10,000-long dot: 1.4 µs by BLAS, 3.3 µs by a numba
# loop).  Each product's summation order is fixed by the sizes and the machine's OpenBLAS
# kernel, so results are reproducible on one machine (as before, not across machines), and
# independent of ``OPENBLAS_NUM_THREADS`` (see :func:`_blas_dot`).  Run with
# ``OPENBLAS_NUM_THREADS=1``: OpenBLAS threads these ``gemv``/``gemm`` sizes, and on a busy
# machine the threaded calls wait for a second core (the bench sets it).
#
# This is the dense path (``_lazy_event``).  CSR input uses the factored form further down
# (``_factored_event``), which holds this layout as its special case of empty buffers; the
# products above (``J``, ``B w_direct``, ``B c``, ``c · w_direct``, ``c · c``) are blocks of
# its basis Gram ``basis_gram``.
#
# Cost (``bench/kernels.py`` cases, k = 8, d = 10,000, one core of the 2-vCPU AMD EPYC (Zen 4,
# 1 MB L2 per core, 32 MB L3), OPENBLAS_NUM_THREADS=1, another agent's load tests running on
# the other core (load average 1.5-2); CPU time, best of 9 batches of 4,000 events, median in
# brackets):
#   CSR, 50 non-zeros:  about 89,000 events/s (88,000) with the factored form, 11.3 µs per
#                       event; before it 39,700/s (38,700) with this split form, ~8,000/s
#                       with the explicit kernel.  Per event about 8 µs do not depend on d
#                       (gathers of the row against the ~19 materialised rows and the ~24
#                       buffered rows, O(|R|²) small-matrix work, the 16×16 ``eigh`` every
#                       k inserts ~2 µs) and about 3 µs are the amortised rebuild (a k×k×d
#                       ``gemm`` every third shrink): 122,000/s at d = 1,000, 13,000/s at
#                       d = 100,000 (the sketches then live in DRAM).
#   dense:              about 16,500-17,000 events/s (15,800-16,200), unchanged, ~60 µs per
#                       event, bounded by memory traffic.  Measured separately: ``B x`` for
#                       both sketches (two BLAS ``gemv`` over ~12 rows each, ~1.9 MB read from
#                       L3 per event) 29 µs; the four d-long dots (``x · w_direct``, ``x · x``,
#                       ``x · c_pos``, ``x · c_neg``; the row's first touch from DRAM) 8 µs;
#                       the shrink ``gemm`` (9×16×10,000 multiply-adds, ~100 µs, already
#                       ~14 GFMA/s, half the core's peak) 12.5 µs per event; the mean/new-row
#                       and ``w_direct`` passes and ``b · b`` ~10 µs.
# Not reached for dense rows: the 50,000 events/s.  Every exact per-event method must
# read the opposite sketch once per event (``w`` moves along a dense ``z`` every step), so
# only several events per pass over the sketches would cut the 29 µs, and batch =
# one-at-a-time bit for bit then needs a product whose summation order does not depend on
# the grouping: not BLAS (OpenBLAS forwards a one-column ``gemm`` to ``gemv``), but a numba
# kernel.  Measured: a numba kernel with per-output sums in a fixed order (fastmath off, so no
# FMA contraction or reassociation), 8 events per pass, 4 rows × 8 events of accumulators,
# takes 43 µs per event for those products (48 µs with the transposed copy of the block),
# and a version vectorised across 16 sketch rows 90 µs: slower than the memory-bound
# ``gemv``.  The factored form does not help dense rows either: buffered dense rows add a dot
# per row per event and make the rebuild (k+1+L)·k·d, more work than the shrink ``gemm``.
@kernel
def _blas_dot(a, b):
    """``a · b`` by BLAS ``gemv`` on a one-row view, not ``ddot``: OpenBLAS splits a ``ddot``
    over more than 10,000 entries between its threads, so its result depends on
    ``OPENBLAS_NUM_THREADS``; ``gemv`` and ``gemm`` split over their outputs (each output's
    sum is computed the same way; checked equal bit for bit with 1 and 2 threads)."""
    out = np.empty(1)
    np.dot(a.reshape((1, a.shape[0])), b, out)
    return out[0]


@kernel
def _sketch_times_row(sketch, m, x, sparse, start, stop, indices, data, out):
    """``out[r] = sketch[r] · x`` for ``r < m``: a gather over the row's non-zeros for sparse
    input, one BLAS ``gemv`` for dense input."""
    if m == 0:
        return
    if sparse:
        for r in range(m):
            row = sketch[r]
            total = 0.0
            for k in range(start, stop):
                total += row[indices[k]] * data[k]
            out[r] = total
    else:
        np.dot(sketch[:m], x, out[:m])


@kernel
def _row_dot_event(row, x, sparse, start, stop, indices, data):
    """``row · x`` over the event's non-zeros (sparse) or by BLAS ``ddot`` (dense)."""
    if sparse:
        total = 0.0
        for k in range(start, stop):
            total += row[indices[k]] * data[k]
        return total
    return _blas_dot(row, x)


@kernel
def _lazy_shrink(sketch, rows, offset, rank, w_direct, coef, gram, direct_products,
                 mean_products, mean_direct, products, combination, new_rows):  # fmt: skip
    """Frequent-directions shrink of one full sketch (``2k`` rows, joint rows ``offset ..``),
    with the Gram taken from ``gram`` instead of recomputed.

    As in :func:`_sketch_shrink`: ``B Bᵀ = U Λ Uᵀ``, ``θ`` the (k+1)-th largest eigenvalue,
    new rows ``M B`` with ``M_e = sqrt((λ_e - θ)/λ_e) u_eᵀ`` for the top ``k`` eigenvalues
    ``λ_e > θ``.  Before the rows change, ``Bᵀ a`` is added to ``w_direct`` (it could not be
    expressed in the new rows), which changes ``B' w_direct`` by ``B' Bᵀ a`` for every row
    ``B'`` of both sketches.  The maintained products are mapped by ``M``; the new rows are
    orthogonal, so their Gram block is ``diag(λ_e - θ)``.
    """
    m = rows[0]
    total = gram.shape[0]
    block = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            block[i, j] = gram[offset + i, offset + j]
    values, vectors = np.linalg.eigh(block)  # ascending
    threshold = max(values[m - 1 - rank], 0.0)
    combination[:] = 0.0
    kept = 0
    for e in range(m - 1, m - 1 - rank, -1):
        if values[e] <= threshold:
            break
        factor = np.sqrt((values[e] - threshold) / values[e])
        for r in range(m):
            combination[kept, r] = factor * vectors[r, e]
        kept += 1
    a = coef[offset : offset + m].copy()
    for r in range(m):
        combination[rank, r] = a[r]
    # w_direct += Bᵀ a changes every B' w_direct by (B' Bᵀ) a
    for i in range(total):
        change = 0.0
        for r in range(m):
            change += gram[i, offset + r] * a[r]
        direct_products[i] += change
    for column in range(2):  # and c · w_direct by (B c) · a
        change = 0.0
        for r in range(m):
            change += mean_products[offset + r, column] * a[r]
        mean_direct[column] += change
    np.dot(combination, sketch, new_rows)  # m == 2k == sketch.shape[0] here
    for i in range(w_direct.shape[0]):
        w_direct[i] += new_rows[rank, i]
    sketch[:kept] = new_rows[:kept]
    # [CHOICE] rows kept.. are not zeroed (2-3 µs per event at k = 8, d = 10,000): every row
    # at or beyond ``rows`` is scratch, read by nothing until an insert overwrites it.
    # map the maintained products of this block by M (rows of gram and its columns)
    mapped = np.zeros((rank, total))
    for e in range(kept):
        for i in range(total):
            value = 0.0
            for r in range(m):
                value += combination[e, r] * gram[offset + r, i]
            mapped[e, i] = value
    for e in range(rank):
        for i in range(total):
            gram[offset + e, i] = mapped[e, i]
            gram[i, offset + e] = mapped[e, i]
    for e in range(rank, m):
        for i in range(total):
            gram[offset + e, i] = 0.0
            gram[i, offset + e] = 0.0
    for e in range(rank):
        for f in range(rank):
            gram[offset + e, offset + f] = 0.0
        if e < kept:
            gram[offset + e, offset + e] = values[m - 1 - e] - threshold
    for vector in (direct_products, products):
        old = vector[offset : offset + m].copy()
        for e in range(m):
            value = 0.0
            if e < kept:
                for r in range(m):
                    value += combination[e, r] * old[r]
            vector[offset + e] = value
    for column in range(2):
        old = mean_products[offset : offset + m, column].copy()
        for e in range(m):
            value = 0.0
            if e < kept:
                for r in range(m):
                    value += combination[e, r] * old[r]
            mean_products[offset + e, column] = value
    coef[offset : offset + m] = 0.0
    rows[0] = kept


@kernel
def _lazy_event(x, sparse, start, stop, indices, data, label, w_direct, coef, gram,
                direct_products, mean_products, mean_direct, mean_gram, mean_pos, mean_neg,
                sketch_pos, sketch_neg, rows_pos, rows_neg, count_pos, count_neg,
                sq_norm_mean, lam, eta, auto_eta, rank, products, centred, combination,
                new_rows):  # fmt: skip
    """One plain OPAUC event on the split ``w`` (see the comment above); returns the
    pre-update score ``w · x``.

    Besides the sketch products, ``mean_direct[a] = c_a · w_direct`` and
    ``mean_gram[a, b] = c_a · c_b`` (index 0 positive, 1 negative) are kept up to date, so
    the products of the new sketch row ``b = sqrt((T-1)/T) δ`` and of ``z = x - c_opp`` with
    the dense vectors follow from ``x``'s own products (over its non-zeros when sparse)
    instead of O(d) dot products; only ``b · b`` (the Gram diagonal, which the shrink's
    eigenvalues rest on) and ``b · x`` are computed directly.
    """
    size = 2 * rank
    # 1. B x for both sketches; x · w_direct, x · x, x · c_pos, x · c_neg; the score
    products[:] = 0.0
    _sketch_times_row(
        sketch_pos, rows_pos[0], x, sparse, start, stop, indices, data, products[:size]
    )
    _sketch_times_row(
        sketch_neg, rows_neg[0], x, sparse, start, stop, indices, data, products[size:]
    )
    if sparse:
        direct_score = 0.0
        squared_norm = 0.0
        x_mean_pos = 0.0
        x_mean_neg = 0.0
        for k in range(start, stop):
            i = indices[k]
            value = data[k]
            direct_score += w_direct[i] * value
            squared_norm += value * value
            x_mean_pos += mean_pos[i] * value
            x_mean_neg += mean_neg[i] * value
    else:
        direct_score = _blas_dot(w_direct, x)
        squared_norm = _blas_dot(x, x)
        x_mean_pos = _blas_dot(mean_pos, x)
        x_mean_neg = _blas_dot(mean_neg, x)
    score = direct_score
    for j in range(2 * size):
        score += coef[j] * products[j]
    if label > 0:
        mean_own, sketch_own, rows_own, count_own, own, offset = (
            mean_pos, sketch_pos, rows_pos, count_pos, 0, 0
        )  # fmt: skip
        mean_opp, rows_opp, count_opp, opp, offset_opp = mean_neg, rows_neg, count_neg, 1, size
        x_mean_own, x_mean_opp = x_mean_pos, x_mean_neg
    else:
        mean_own, sketch_own, rows_own, count_own, own, offset = (
            mean_neg, sketch_neg, rows_neg, count_neg, 1, size
        )  # fmt: skip
        mean_opp, rows_opp, count_opp, opp, offset_opp = mean_pos, rows_pos, count_pos, 0, 0
        x_mean_own, x_mean_opp = x_mean_neg, x_mean_pos
    # 2. own class: mean (eq. 2.13) and the new sketch row sqrt((T-1)/T) (x - c_{T-1})
    count_own[0] += 1
    n = count_own[0]
    inverse = 1.0 / n
    for j in range(2 * size):  # B δ = B x - B c_{T-1};  B c_T = B c_{T-1} + B δ / T
        centred[j] = products[j] - mean_products[j, own]
        mean_products[j, own] += centred[j] * inverse
    delta_direct = direct_score - mean_direct[own]  # δ · w_direct
    delta_own = x_mean_own - mean_gram[own, own]  # δ · c_own (before the update)
    delta_opp = x_mean_opp - mean_gram[own, opp]  # δ · c_opp
    d = x.shape[0]
    if n >= 2:
        scale = np.sqrt((n - 1.0) / n)
        new_row = sketch_own[rows_own[0]]
        for i in range(d):
            delta = x[i] - mean_own[i]
            mean_own[i] += delta * inverse
            new_row[i] = scale * delta
        row_square = _blas_dot(new_row, new_row)
        delta_square = row_square / (scale * scale)
    else:
        for i in range(d):
            mean_own[i] += (x[i] - mean_own[i]) * inverse
        new_row = mean_own  # unused
        row_square = 0.0
        delta_square = squared_norm  # c_0 = 0, so δ = x
    # c_T = c_{T-1} + δ / T in the kept products
    mean_direct[own] += delta_direct * inverse
    mean_gram[own, own] += (2.0 * delta_own + delta_square * inverse) * inverse
    mean_gram[own, opp] += delta_opp * inverse
    mean_gram[opp, own] = mean_gram[own, opp]
    if n >= 2:
        j = offset + rows_own[0]
        for i in range(2 * size):
            gram[j, i] = scale * centred[i]
            gram[i, j] = scale * centred[i]
        gram[j, j] = row_square
        direct_products[j] = scale * delta_direct
        mean_products[j, own] = scale * (delta_own + delta_square * inverse)  # b · c_T
        mean_products[j, opp] = scale * delta_opp
        products[j] = _row_dot_event(new_row, x, sparse, start, stop, indices, data)
        rows_own[0] += 1
        if rows_own[0] == size:
            _lazy_shrink(sketch_own, rows_own, offset, rank, w_direct, coef, gram,
                         direct_products, mean_products, mean_direct, products,
                         combination, new_rows)  # fmt: skip
    step = _step_size(eta, auto_eta, squared_norm, sq_norm_mean, count_pos[0] + count_neg[0])
    if count_opp[0] == 0:
        return score  # no update until both classes were seen (notes §3.2)
    # 3. the step  w <- (1 - ηλ) w + η (y - zᵀw) z - (η / T_opp) B_oppᵀ (B_opp w)
    mean_w = mean_direct[opp]
    for j in range(2 * size):
        mean_w += coef[j] * mean_products[j, opp]
    zw = score - mean_w
    gain = step * (label - zw)
    shrink = 1.0 - step * lam
    inverse_opp = step / count_opp[0]
    for r in range(rows_opp[0]):  # p = B_opp w = B_opp w_direct + J a
        i = offset_opp + r
        value = direct_products[i]
        for j in range(2 * size):
            value += gram[i, j] * coef[j]
        centred[i] = value  # (reused as p; centred of the opposite block is not needed)
    for j in range(2 * size):
        coef[j] *= shrink
    for r in range(rows_opp[0]):
        coef[offset_opp + r] -= inverse_opp * centred[offset_opp + r]
    for j in range(2 * size):  # B w_direct after the step: B z = B x - B c_opp
        direct_products[j] = shrink * direct_products[j] + gain * (
            products[j] - mean_products[j, opp]
        )
    # c_a · w_direct after the step: c_a · z = c_a · x - c_a · c_opp (c_own is the new mean)
    x_mean_own_new = x_mean_own + (squared_norm - x_mean_own) * inverse
    mean_direct[own] = shrink * mean_direct[own] + gain * (x_mean_own_new - mean_gram[own, opp])
    mean_direct[opp] = shrink * mean_direct[opp] + gain * (x_mean_opp - mean_gram[opp, opp])
    for i in range(d):
        w_direct[i] = shrink * w_direct[i] + gain * (x[i] - mean_opp[i])
    return score


# ---------------------------------------------------------------------- factored sketches (CSR)
# [CHOICE] For CSR input the sketches are kept factored: every vector the algorithm uses is a
# combination of the *basis* ``R``, whose slots (joint index) are
#
#     0 .. 2k-1      Q_pos: positive sketch rows materialised at the class's last rebuild
#     2k .. 4k-1     Q_neg: the same for the negatives
#     4k             v (``w_direct``)
#     4k+1, 4k+2     c_pos, c_neg: the class means at the class's last rebuild
#     4k+3 ..        X_pos: the raw positive events since the rebuild (``length`` slots,
#                    stored sparse in ``buffer_*``), then X_neg likewise
#
# with ``w = Σ coef_r R_r``, a class's current mean ``c = (T_base c_base + Σ_j x_j) / T`` and
# its sketch ``B_s = M_s R`` (``sketch_map[s]``, at most ``2k × |R|``).  The Gram ``R Rᵀ``
# (``basis_gram``) is kept up to date: a new event adds one buffered slot whose products are
# ``R x`` (gathers over its non-zeros).  An insert appends a row to ``M_s``; the shrink is the
# same frequent-directions step as :func:`_sketch_shrink`, done on ``M_s R Rᵀ M_sᵀ`` (the
# sketch's Gram) and applied to ``M_s`` only; the step changes ``coef``.  No d-long vector is
# touched per event: an event costs O(nnz · |R|) gathers plus O(|R|²) small-matrix work.
# A class is *rebuilt* (its ``B_s``, its mean and ``w``'s part on its slots are formed as d-long
# rows, one BLAS ``gemm`` over the ``q`` materialised rows plus the sparse buffer, and the Gram
# is mapped to the new slots) at a shrink once ``length - k`` rows are buffered (every third
# shrink: the ``gemm`` then forms k rows from k), or before an event that would not fit
# (``length`` rows, or ``n_features`` buffered non-zeros).  Every boundary is a function of the
# state and the event, never of how events were grouped into calls.
#
# Dense input uses :func:`_lazy_event` (every vector materialised; a dense step moves ``w``
# along a dense ``z`` anyway) on the same state: that layout is the factored one with empty
# buffers, ``M_s = I`` and no coefficient on the means, so a dense call first *materialises*
# (rebuilds the classes with buffered rows, folds the means' coefficients into ``v``).
@kernel
def _block_slots(s, size, length, base_rows, buffer_rows, block):
    """Slots of class ``s``'s block (its materialised rows, its mean, its buffered rows)."""
    n = 0
    for e in range(base_rows[s]):
        block[n] = s * size + e
        n += 1
    block[n] = 2 * size + 1 + s
    n += 1
    first = 2 * size + 3 + s * length
    for j in range(buffer_rows[s]):
        block[n] = first + j
        n += 1
    return n


@kernel
def _used_slots(size, length, base_rows, buffer_rows, used):
    """Every slot in use, in a fixed order (sums over slots follow it)."""
    n = 0
    for s in range(2):
        for e in range(base_rows[s]):
            used[n] = s * size + e
            n += 1
    for r in range(3):
        used[n] = 2 * size + r
        n += 1
    for s in range(2):
        first = 2 * size + 3 + s * length
        for j in range(buffer_rows[s]):
            used[n] = first + j
            n += 1
    return n


@kernel
def _factored_shrink(s, rank, gram, sketch_map, rows, block, n_block):
    """Frequent-directions shrink of class ``s``'s full sketch ``B = M R`` (as
    :func:`_sketch_shrink`): ``B Bᵀ = M (R Rᵀ) Mᵀ = U Λ Uᵀ``, ``M <- E M`` with
    ``E_e = sqrt((λ_e - θ)/λ_e) u_eᵀ`` for the top ``k`` eigenvalues above ``θ``."""
    m = rows[0]
    sub_map = np.empty((m, n_block))
    sub_map_t = np.empty((n_block, m))
    sub_gram = np.empty((n_block, n_block))
    for e in range(m):
        for b in range(n_block):
            value = sketch_map[s, e, block[b]]
            sub_map[e, b] = value
            sub_map_t[b, e] = value
    for a in range(n_block):
        for b in range(n_block):
            sub_gram[a, b] = gram[block[a], block[b]]
    sketch_gram = np.dot(np.dot(sub_map, sub_gram), sub_map_t)
    values, vectors = np.linalg.eigh(sketch_gram)  # ascending; reads the lower triangle
    threshold = max(values[m - 1 - rank], 0.0)
    combination = np.zeros((rank, m))
    kept = 0
    for e in range(m - 1, m - 1 - rank, -1):
        if values[e] <= threshold:
            break
        factor = np.sqrt((values[e] - threshold) / values[e])
        for r in range(m):
            combination[kept, r] = factor * vectors[r, e]
        kept += 1
    new_map = np.dot(combination, sub_map)
    for e in range(m):
        for b in range(n_block):
            sketch_map[s, e, block[b]] = new_map[e, b] if e < kept else 0.0
    rows[0] = kept


@kernel
def _rebuild(s, rank, coef, gram, sketch_map, base_rows, base_count, buffer_rows,
             buffer_indptr, buffer_indices, buffer_data, w_direct, mean, sketch, rows, count,
             new_rows, block, used):  # fmt: skip
    """Materialise class ``s``: its sketch rows ``M_s R`` become its new ``Q_s``, its current
    mean its new ``c_s``, and ``w``'s part on the class's slots is folded into ``v``; the
    Gram is mapped to the new slots (new = K · old, so the products are ``K G`` and
    ``K G Kᵀ``); the class's buffer is emptied and ``M_s = I``."""
    total = count[0]
    if total == 0:
        return
    size = 2 * rank
    length = buffer_indptr.shape[1] - 1
    direct = 2 * size
    mean_slot = direct + 1 + s
    q = base_rows[s]
    n = buffer_rows[s]
    m = rows[0]
    n_block = _block_slots(s, size, length, base_rows, buffer_rows, block)
    # K: rows 0..m-1 the sketch rows, m the mean, m+1 the new v; columns the block, then v
    n_new = m + 2
    comb = np.zeros((n_new, n_block + 1))
    for e in range(m):
        for b in range(n_block):
            comb[e, b] = sketch_map[s, e, block[b]]
    inverse = 1.0 / total
    comb[m, q] = base_count[s] * inverse
    for j in range(n):
        comb[m, q + 1 + j] = inverse
    for b in range(n_block):
        comb[m + 1, b] = coef[block[b]]
    comb[m + 1, n_block] = coef[direct]
    # the d-long rows: K over the materialised rows (BLAS gemm), the old mean, the buffer
    d = w_direct.shape[0]
    out = new_rows[:n_new]
    if q > 0:
        left = np.empty((n_new, q))
        for e in range(n_new):
            for r in range(q):
                left[e, r] = comb[e, r]
        np.dot(left, sketch[:q], out)
    else:
        out[:] = 0.0
    for e in range(n_new):
        factor = comb[e, q]
        if factor != 0.0:
            row = out[e]
            for i in range(d):
                row[i] += factor * mean[i]
    for j in range(n):
        column = q + 1 + j
        for k in range(buffer_indptr[s, j], buffer_indptr[s, j + 1]):
            i = buffer_indices[s, k]
            value = buffer_data[s, k]
            for e in range(n_new):
                out[e, i] += comb[e, column] * value
    scale = coef[direct]
    fold = out[m + 1]
    for i in range(d):
        w_direct[i] = scale * w_direct[i] + fold[i]
    sketch[:m] = out[:m]
    mean[:] = out[m]
    # the Gram: sources = block + v; the rest = every other slot in use
    n_used = _used_slots(size, length, base_rows, buffer_rows, used)
    sources = np.empty(n_block + 1, dtype=np.int64)
    sources[:n_block] = block[:n_block]
    sources[n_block] = direct
    rest = np.empty(n_used, dtype=np.int64)
    n_rest = 0
    for u in range(n_used):
        r = used[u]
        inside = r == direct
        for b in range(n_block):
            inside = inside or block[b] == r
        if not inside:
            rest[n_rest] = r
            n_rest += 1
    source_gram = np.empty((n_block + 1, n_block + 1))
    for a in range(n_block + 1):
        for b in range(n_block + 1):
            source_gram[a, b] = gram[sources[a], sources[b]]
    source_gram[n_block, n_block] = 0.0  # v · v is not kept (nothing reads it)
    source_rest = np.empty((n_block + 1, n_rest))
    for a in range(n_block + 1):
        for b in range(n_rest):
            source_rest[a, b] = gram[sources[a], rest[b]]
    comb_t = np.ascontiguousarray(comb.T)
    new_rest = np.dot(comb, source_rest)
    new_new = np.dot(np.dot(comb, source_gram), comb_t)
    for a in range(n_block + 1):  # clear the old slots (v included)
        for r in range(gram.shape[0]):
            gram[sources[a], r] = 0.0
            gram[r, sources[a]] = 0.0
    targets = np.empty(n_new, dtype=np.int64)
    for e in range(m):
        targets[e] = s * size + e
    targets[m] = mean_slot
    targets[m + 1] = direct
    for a in range(n_new):
        for b in range(n_rest):
            gram[targets[a], rest[b]] = new_rest[a, b]
            gram[rest[b], targets[a]] = new_rest[a, b]
        for b in range(a + 1):
            gram[targets[a], targets[b]] = new_new[a, b]
            gram[targets[b], targets[a]] = new_new[a, b]
    gram[direct, direct] = 0.0
    for a in range(n_block):
        coef[block[a]] = 0.0
    coef[direct] = 1.0
    sketch_map[s] = 0.0
    for e in range(m):
        sketch_map[s, e, s * size + e] = 1.0
    base_rows[s] = m
    buffer_rows[s] = 0
    base_count[s] = total


@kernel
def _fold_means(coef, gram, w_direct, mean_pos, mean_neg, size):
    """``v <- coef_v v + coef_cpos c_pos + coef_cneg c_neg`` (and the Gram row of ``v``)."""
    direct = 2 * size
    a = coef[direct]
    b = coef[direct + 1]
    c = coef[direct + 2]
    if a == 1.0 and b == 0.0 and c == 0.0:
        return
    for i in range(w_direct.shape[0]):
        w_direct[i] = a * w_direct[i] + b * mean_pos[i] + c * mean_neg[i]
    for r in range(gram.shape[0]):
        if r != direct:
            value = a * gram[direct, r] + b * gram[direct + 1, r] + c * gram[direct + 2, r]
            gram[direct, r] = value
            gram[r, direct] = value
    gram[direct, direct] = 0.0
    coef[direct] = 1.0
    coef[direct + 1] = 0.0
    coef[direct + 2] = 0.0


@kernel
def _factored_event(x, start, stop, indices, data, label, w_direct, coef, gram, sketch_map,
                    base_rows, base_count, buffer_rows, buffer_indptr, buffer_indices,
                    buffer_data, means, sketches, rows, counts, sq_norm_mean, lam, eta,
                    auto_eta, rank, products, used, block, gw, p, new_rows):  # fmt: skip
    """One plain OPAUC event on the factored state (comment above), CSR row ``start:stop``
    (also scattered into the zero work row ``x``); returns the pre-update score."""
    size = 2 * rank
    length = buffer_indptr.shape[1] - 1
    direct = 2 * size
    own = 0 if label > 0 else 1
    opp = 1 - own
    nnz = stop - start
    # room for the row in the own buffer
    if (
        buffer_rows[own] == length
        or buffer_indptr[own, buffer_rows[own]] + nnz > buffer_data.shape[1]
    ):
        _rebuild(own, rank, coef, gram, sketch_map, base_rows, base_count, buffer_rows,
                 buffer_indptr, buffer_indices, buffer_data, w_direct, means[own],
                 sketches[own], rows[own], counts[own], new_rows, block, used)  # fmt: skip
    # 1. R x (gathers over the row's non-zeros) and the score
    direct_score = 0.0
    squared_norm = 0.0
    for k in range(start, stop):
        value = data[k]
        direct_score += w_direct[indices[k]] * value
        squared_norm += value * value
    products[direct] = direct_score
    for s in range(2):
        sketch = sketches[s]
        for e in range(base_rows[s]):
            row = sketch[e]
            total = 0.0
            for k in range(start, stop):
                total += row[indices[k]] * data[k]
            products[s * size + e] = total
        mean = means[s]
        total = 0.0
        for k in range(start, stop):
            total += mean[indices[k]] * data[k]
        products[direct + 1 + s] = total
        first = direct + 3 + s * length
        for j in range(buffer_rows[s]):
            total = 0.0
            for k in range(buffer_indptr[s, j], buffer_indptr[s, j + 1]):
                total += x[buffer_indices[s, k]] * buffer_data[s, k]
            products[first + j] = total
    n_used = _used_slots(size, length, base_rows, buffer_rows, used)
    score = 0.0
    for u in range(n_used):
        score += coef[used[u]] * products[used[u]]
    # 2. buffer the row (a new slot; its products are R x and x · x)
    j = buffer_rows[own]
    slot = direct + 3 + own * length + j
    begin = buffer_indptr[own, j]
    for k in range(nnz):
        buffer_indices[own, begin + k] = indices[start + k]
        buffer_data[own, begin + k] = data[start + k]
    buffer_indptr[own, j + 1] = begin + nnz
    for u in range(n_used):
        r = used[u]
        gram[slot, r] = products[r]
        gram[r, slot] = products[r]
    gram[slot, slot] = squared_norm
    buffer_rows[own] = j + 1
    # 3. own class: T += 1 (eq. 2.13, kept as coefficients) and the sketch row
    #    sqrt((T-1)/T) (x - c_{T-1}),  c_{T-1} = (T_base c_base + Σ_{i<j} x_i) / (T-1)
    count = counts[own]
    count[0] += 1
    n = count[0]
    shrunk = False
    if n >= 2:
        scale = np.sqrt((n - 1.0) / n)
        old = 1.0 / (n - 1.0)
        row_map = sketch_map[own, rows[own][0]]
        row_map[slot] = scale
        row_map[direct + 1 + own] = -scale * (base_count[own] * old)
        first = direct + 3 + own * length
        for i in range(j):
            row_map[first + i] = -scale * old
        rows[own][0] += 1
        if rows[own][0] == size:
            n_block = _block_slots(own, size, length, base_rows, buffer_rows, block)
            _factored_shrink(own, rank, gram, sketch_map, rows[own], block, n_block)
            shrunk = True
    count_opp = counts[opp][0]
    step = _step_size(eta, auto_eta, squared_norm, sq_norm_mean, counts[0][0] + counts[1][0])
    if count_opp > 0:
        # 4. the step  w <- (1 - ηλ) w + η (y - zᵀw) z - (η / T_opp) B_oppᵀ (B_opp w)
        n_used = _used_slots(size, length, base_rows, buffer_rows, used)
        n_block = _block_slots(opp, size, length, base_rows, buffer_rows, block)
        for b in range(n_block):  # G w on the opposite block
            r = block[b]
            total = 0.0
            for u in range(n_used):
                total += gram[r, used[u]] * coef[used[u]]
            gw[b] = total
        inverse = 1.0 / count_opp
        q = base_rows[opp]
        base_weight = base_count[opp] * inverse
        mean_w = base_weight * gw[q]  # c_opp · w
        for b in range(q + 1, n_block):
            mean_w += inverse * gw[b]
        zw = score - mean_w
        gain = step * (label - zw)
        shrink = 1.0 - step * lam
        m = rows[opp][0]
        for e in range(m):  # p = B_opp w = M_opp (R w)
            total = 0.0
            for b in range(n_block):
                total += sketch_map[opp, e, block[b]] * gw[b]
            p[e] = total
        for u in range(n_used):
            coef[used[u]] *= shrink
        coef[slot] += gain
        rate = step * inverse
        for b in range(n_block):
            r = block[b]
            weight = base_weight if b == q else (inverse if b > q else 0.0)
            total = 0.0
            for e in range(m):
                total += sketch_map[opp, e, r] * p[e]
            coef[r] -= gain * weight + rate * total
    if shrunk and buffer_rows[own] + rank + 1 > length:
        _rebuild(own, rank, coef, gram, sketch_map, base_rows, base_count, buffer_rows,
                 buffer_indptr, buffer_indices, buffer_data, w_direct, means[own],
                 sketches[own], rows[own], counts[own], new_rows, block, used)  # fmt: skip
    return score


@kernel
def _materialise(rank, coef, gram, sketch_map, base_rows, base_count, buffer_rows,
                 buffer_indptr, buffer_indices, buffer_data, w_direct, means, sketches, rows,
                 counts):  # fmt: skip
    """Bring the factored state to the layout :func:`_lazy_event` works on (empty buffers,
    ``M = I``, no coefficient on the means): rebuild each class with buffered rows, then fold
    the means' coefficients into ``v``.  Nothing to do after dense events."""
    size = 2 * rank
    n_slots = coef.shape[0]
    for s in range(2):
        if buffer_rows[s] > 0:
            new_rows = np.empty((size + 2, w_direct.shape[0]))
            block = np.empty(n_slots, dtype=np.int64)
            used = np.empty(n_slots, dtype=np.int64)
            _rebuild(s, rank, coef, gram, sketch_map, base_rows, base_count, buffer_rows,
                     buffer_indptr, buffer_indices, buffer_data, w_direct, means[s],
                     sketches[s], rows[s], counts[s], new_rows, block, used)  # fmt: skip
    _fold_means(coef, gram, w_direct, means[0], means[1], size)


@kernel
def _dense_sketch_batch(X, y, scores, want_scores, coef, basis_gram, w_direct, mean_pos,
                        mean_neg, sketch_pos, sketch_neg, rows_pos, rows_neg, count_pos,
                        count_neg, sq_norm_mean, lam, eta, auto_eta, rank):  # fmt: skip
    """Dense rows through :func:`_lazy_event`, on the basis Gram's blocks (copied out and back:
    ``gram`` = the sketch rows' block, ``direct_products`` = ``B v``, ``mean_products`` =
    ``B c``, ``mean_direct`` = ``c · v``, ``mean_gram`` = ``c · c``)."""
    size = 2 * rank
    joint = 2 * size
    direct = joint
    d = w_direct.shape[0]
    gram = np.empty((joint, joint))
    direct_products = np.empty(joint)
    mean_products = np.empty((joint, 2))
    mean_direct = np.empty(2)
    mean_gram = np.empty((2, 2))
    sketch_coef = np.empty(joint)
    for i in range(joint):
        sketch_coef[i] = coef[i]
        direct_products[i] = basis_gram[i, direct]
        for a in range(2):
            mean_products[i, a] = basis_gram[i, direct + 1 + a]
        for j in range(joint):
            gram[i, j] = basis_gram[i, j]
    for a in range(2):
        mean_direct[a] = basis_gram[direct + 1 + a, direct]
        for b in range(2):
            mean_gram[a, b] = basis_gram[direct + 1 + a, direct + 1 + b]
    products = np.zeros(joint)
    centred = np.zeros(joint)
    combination = np.zeros((rank + 1, size))
    new_rows = np.zeros((rank + 1, d))
    indices = np.zeros(0, dtype=np.int64)
    data = np.zeros(0)
    for t in range(X.shape[0]):
        score = _lazy_event(X[t], False, 0, 0, indices, data, y[t], w_direct, sketch_coef,
                            gram, direct_products, mean_products, mean_direct, mean_gram,
                            mean_pos, mean_neg, sketch_pos, sketch_neg, rows_pos, rows_neg,
                            count_pos, count_neg, sq_norm_mean, lam, eta, auto_eta, rank,
                            products, centred, combination, new_rows)  # fmt: skip
        if want_scores:
            scores[t] = score
    for i in range(joint):
        coef[i] = sketch_coef[i]
        basis_gram[i, direct] = direct_products[i]
        basis_gram[direct, i] = direct_products[i]
        for a in range(2):
            basis_gram[i, direct + 1 + a] = mean_products[i, a]
            basis_gram[direct + 1 + a, i] = mean_products[i, a]
        for j in range(joint):
            basis_gram[i, j] = gram[i, j]
    for a in range(2):
        basis_gram[direct + 1 + a, direct] = mean_direct[a]
        basis_gram[direct, direct + 1 + a] = mean_direct[a]
        for b in range(2):
            basis_gram[direct + 1 + a, direct + 1 + b] = mean_gram[a, b]


@kernel
def opauc_sketch_learn(X, indptr, indices, data, sparse, y, scores, w, w_direct, coef,
                       basis_gram, sketch_map, base_rows, base_count, buffer_rows,
                       buffer_indptr, buffer_indices, buffer_data, mean_pos, mean_neg,
                       sketch_pos, sketch_neg, rows_pos, rows_neg, count_pos, count_neg,
                       sq_norm_mean, lam, eta, auto_eta, rank):  # fmt: skip
    """Plain OPAUC with rank-``k`` frequent-directions sketches: learn a batch in order
    (CSR rows on the factored state, dense rows on the materialised one, see the comments
    above), ``scores`` (length 0 or n) gets each pre-update score, and ``w`` is written from
    the parts at the end."""
    d = w.shape[0]
    size = 2 * rank
    direct = 2 * size
    length = buffer_indptr.shape[1] - 1
    means = (mean_pos, mean_neg)
    sketches = (sketch_pos, sketch_neg)
    rows = (rows_pos, rows_neg)
    counts = (count_pos, count_neg)
    want_scores = scores.shape[0] > 0
    if sparse:
        n_slots = coef.shape[0]
        x = np.zeros(d)
        products = np.zeros(n_slots)
        used = np.empty(n_slots, dtype=np.int64)
        block = np.empty(n_slots, dtype=np.int64)
        gw = np.zeros(n_slots)
        p = np.zeros(size)
        new_rows = np.empty((size + 2, d))
        for t in range(indptr.shape[0] - 1):
            start = indptr[t]
            stop = indptr[t + 1]
            for k in range(start, stop):
                x[indices[k]] = data[k]
            products[:] = 0.0
            score = _factored_event(x, start, stop, indices, data, y[t], w_direct, coef,
                                    basis_gram, sketch_map, base_rows, base_count, buffer_rows,
                                    buffer_indptr, buffer_indices, buffer_data, means,
                                    sketches, rows, counts, sq_norm_mean, lam, eta, auto_eta,
                                    rank, products, used, block, gw, p, new_rows)  # fmt: skip
            if want_scores:
                scores[t] = score
            for k in range(start, stop):
                x[indices[k]] = 0.0
    elif X.shape[0] > 0:
        _materialise(rank, coef, basis_gram, sketch_map, base_rows, base_count, buffer_rows,
                     buffer_indptr, buffer_indices, buffer_data, w_direct, means, sketches,
                     rows, counts)  # fmt: skip
        _dense_sketch_batch(X, y, scores, want_scores, coef, basis_gram, w_direct, mean_pos,
                            mean_neg, sketch_pos, sketch_neg, rows_pos, rows_neg, count_pos,
                            count_neg, sq_norm_mean, lam, eta, auto_eta, rank)  # fmt: skip
        for s in range(2):  # the materialised layout, in factored terms
            m = rows[s][0]
            base_rows[s] = m
            base_count[s] = counts[s][0]
            sketch_map[s] = 0.0
            for e in range(m):
                sketch_map[s, e, s * size + e] = 1.0
    # w = Σ coef_r R_r
    scale = coef[direct]
    for i in range(d):
        w[i] = scale * w_direct[i]
    for s in range(2):
        q = base_rows[s]
        if q > 0:
            w += np.dot(coef[s * size : s * size + q], sketches[s][:q])
        weight = coef[direct + 1 + s]
        if weight != 0.0:
            mean = means[s]
            for i in range(d):
                w[i] += weight * mean[i]
        first = direct + 3 + s * length
        for j in range(buffer_rows[s]):
            weight = coef[first + j]
            for k in range(buffer_indptr[s, j], buffer_indptr[s, j + 1]):
                w[buffer_indices[s, k]] += weight * buffer_data[s, k]
