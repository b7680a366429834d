"""OPAUC's class statistics (Gao et al. 2013; docs/algorithms/opauc.md): per class the count, the
mean (eq. 2.13) and the covariance, either the full d×d matrix or a rank-k frequent-directions
sketch of it (Liberty 2013), shared by the full-rank and the sketched OPAUC / AdaOAM kernels."""

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import combine_rows, row_dots


@kernel
def update_mean(x, mean, count, delta, rate_floor):
    """``T += 1``; ``delta = x - c_{T-1}``; ``c_T = c_{T-1} + (x - c_{T-1}) / T`` (eq. 2.13).

    [CHOICE] ``/ T`` is applied as ``· (1/T)`` (one division per event, not per feature; the
    results differ in the last bit at most).  With forgetting the rate is ``max(1/T,
    rate_floor)``: an exponentially weighted mean (docs/algorithms/opauc.md (opauc.12)).
    """
    count[0] += 1
    inverse = 1.0 / count[0]
    if inverse < rate_floor:
        inverse = rate_floor
    for i in range(x.shape[0]):
        delta[i] = x[i] - mean[i]
        mean[i] += delta[i] * inverse


@kernel
def update_covariance(cov, count, delta, q, rate_floor):
    """The corrected covariance recursion, in its rank-one form.

    docs/algorithms/opauc.md (opauc.4) and its Errata.

    The notes' recursion ``Γ_T = Γ + (x xᵀ - Γ - c_{T-1}c_{T-1}ᵀ)/T + c_{T-1}c_{T-1}ᵀ - c_T c_Tᵀ``
    with ``δ = x - c_{T-1}`` and ``c_T = c_{T-1} + δ/T`` expands to exactly
    ``Γ_T = (1 - 1/T) Γ_{T-1} + ((T-1)/T²) δ δᵀ`` (the Welford update): 3 flops per entry instead
    of 8, no cancellation between ``x xᵀ`` and ``c cᵀ``, and symmetric to the last bit
    (``q_i q_j = q_j q_i``).  With forgetting and ``a = rate_floor > 1/T`` it is the
    exponentially weighted covariance ``Γ = (1 - a) Γ + a (1 - a) δ δᵀ`` (the same update with
    ``a`` for ``1/T``; docs/algorithms/opauc.md (opauc.12)).
    """
    n = count[0]
    factor = (n - 1.0) / n
    scale = np.sqrt(n - 1.0) / n
    if rate_floor * n > 1.0:
        factor = 1.0 - rate_floor
        scale = np.sqrt(rate_floor * factor)
    d = delta.shape[0]
    for i in range(d):
        q[i] = scale * delta[i]
    for i in range(d):
        row = cov[i]
        qi = q[i]
        for j in range(d):
            row[j] = factor * row[j] + qi * q[j]


@kernel
def sketch_insert(sketch, rows, count, delta, rank):
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
        sketch_shrink(sketch, rows, rank)


@kernel
def sketch_shrink(sketch, rows, rank):
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
        row_dots(sketch, a, m, sketch[a], column)
        for b in range(a, m):
            gram[a, b] = column[b]
            gram[b, a] = column[b]
    combination = np.zeros((rank, m))
    kept, _, _ = shrink_combination(gram, rank, combination)
    shrunk = np.zeros((rank, d))
    for e in range(kept):
        combine_rows(sketch, m, combination[e], shrunk[e])
    sketch[:kept] = shrunk[:kept]
    sketch[kept:] = 0.0
    rows[0] = kept


@kernel
def shrink_combination(gram, rank, combination):
    """The frequent-directions shrink of a sketch ``B`` (``m`` rows) from its Gram ``B Bᵀ``:
    ``B Bᵀ = U Λ Uᵀ`` (ascending ``Λ``; reads the lower triangle), ``θ`` the (k+1)-th largest
    eigenvalue; row ``e`` of ``combination`` becomes ``sqrt((λ_e - θ) / λ_e) u_eᵀ`` for the top
    ``k = rank`` eigenvalues ``λ_e > θ`` (so the new rows are ``combination @ B``).  Returns
    ``(kept, Λ, θ)``, ``kept`` the rows written; the caller zeroes ``combination`` beforehand."""
    m = gram.shape[0]
    values, vectors = np.linalg.eigh(gram)
    threshold = max(values[m - 1 - rank], 0.0)
    kept = 0
    for e in range(m - 1, m - 1 - rank, -1):
        if values[e] <= threshold:
            break
        factor = np.sqrt((values[e] - threshold) / values[e])
        for r in range(m):
            combination[kept, r] = factor * vectors[r, e]
        kept += 1
    return kept, values, threshold
