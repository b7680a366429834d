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
