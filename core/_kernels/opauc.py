"""OPAUC / AdaOAM kernels (Gao et al., ICML 2013; Ding et al., AAAI 2015; Natole thesis §2.2,
Algorithms 8-9; equations and errata in docs/algorithms/opauc.md (opauc.1)-(opauc.11)).

Arrays and scalars in, arrays mutated in place; the caller (``core.learners.opauc``) validates.

Per event ``(x_t, y_t)``:

1. pre-update score ``w · x_t``;
2. the statistics of the event's own class: count ``T``, mean (eq. 2.13) and covariance, either
   the full d×d matrix or a frequent-directions sketch of it;
3. once both classes have been seen, a step on the gradient (2.11)/(2.12), which uses the
   *opposite* class's statistics: plain (OPAUC, Alg. 8) or diagonal Adagrad with the
   H-weighted projection onto ``||w|| <= 1/sqrt(lambda)`` (AdaOAM, Alg. 9).

Modules, one per algorithm: this one holds :func:`opauc_learn` (full covariances, and AdaOAM
with sketches: explicit ``w``, ``B w`` and ``Bᵀ(B w)`` per event); the class statistics are in
:mod:`core._kernels.covariance`, AdaOAM's step in :mod:`core._kernels.adaoam`; plain OPAUC with
sketches is :func:`core._kernels.opauc_sketch.opauc_sketch_learn` (``w`` split into a direct
part and sketch coefficients for dense rows) over :mod:`core._kernels.opauc_factored` (CSR rows:
every vector kept as coefficients on a small basis of materialised rows, means and buffered raw
events).
"""

from collections import namedtuple

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import combine_rows, dot_and_squared_norm, row_dots
from core._kernels.adaoam import gradient_step
from core._kernels.covariance import sketch_insert, update_covariance, update_mean
from core._kernels.forgetting import class_half_life

#: The learned arrays :func:`opauc_learn` updates (``matrix_*``: covariances or sketches).
OPAUCState = namedtuple("OPAUCState", ["w", "mean_pos", "mean_neg", "matrix_pos", "matrix_neg",
                                       "rows_pos", "rows_neg", "count_pos", "count_neg",
                                       "grad_sq", "sq_norm_mean"])  # fmt: skip
#: Its hyper-parameters (``rank == 0``: full covariances).
#: ``half_life`` 0.0: no forgetting (docs/algorithms/opauc.md (opauc.12)-(opauc.13)).
OPAUCOptions = namedtuple("OPAUCOptions", ["lam", "eta", "auto_eta", "adaptive", "delta",
                                           "radius", "rank", "half_life"])  # fmt: skip


@kernel
def gradient_finish(x, label, w, mean_opp, lam, sw, g):
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
def step_size(eta, auto_eta, squared_norm, sq_norm_mean, n_seen):
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
    upper bound of the largest eigenvalue of the event's Hessian ``z zᵀ + S_opp + lam I``:
    docs/algorithms/opauc.md (opauc.11).

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
def _event(x, squared_norm, label, state, options, work, projections):
    """One event.  ``rank == 0``: ``matrix_*`` are the full covariances; otherwise they are
    the ``2·rank × d`` frequent-directions sketches with ``rows_*`` rows in use."""
    (w, mean_pos, mean_neg, matrix_pos, matrix_neg, rows_pos, rows_neg, count_pos, count_neg,
     grad_sq, sq_norm_mean) = state  # fmt: skip
    lam, eta, auto_eta, adaptive, delta, radius, rank, half_life = options
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
    rate_floor = 0.0
    grad_decay = 1.0
    if half_life > 0.0:
        # (opauc.12): the class's statistics forget over its share of the half-life
        n_events = count_pos[0] + count_neg[0] + 1
        rate_floor = 1.0 - np.exp2(-1.0 / class_half_life(half_life, count_own[0] + 1, n_events))
        grad_decay = np.exp2(-1.0 / half_life)
    update_mean(x, mean_own, count_own, delta_row, rate_floor)
    if rank == 0:
        update_covariance(matrix_own, count_own, delta_row, u, rate_floor)
    else:
        sketch_insert(matrix_own, rows_own, count_own, delta_row, rank)
    step = step_size(eta, auto_eta, squared_norm, sq_norm_mean, count_pos[0] + count_neg[0])
    if count_opp[0] == 0:
        # no update until both classes were seen (official OPAUC code; docs/algorithms/opauc.md,
        # Choices)
        return
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
        row_dots(matrix_opp, 0, m, w, projections)
        for r in range(m):
            projections[r] /= count_opp[0]
        combine_rows(matrix_opp, m, projections, sw)
    gradient_finish(x, float(label), w, mean_opp, lam, sw, g)
    if auto_eta and rank == 0:
        step = _curvature_capped(step, x, mean_opp, matrix_opp, lam)
    gradient_step(w, g, step, adaptive, grad_sq, delta, radius, u, h, grad_decay)


@kernel
def opauc_learn(batch, y, scores, state, options):
    """Learn a batch in order; ``scores`` (length 0 or n) gets each pre-update score.

    Dense input in ``X``; with ``sparse`` the CSR arrays are used instead (each row scattered
    into a dense work row: the statistics are dense anyway).  ``rank == 0`` selects the full
    covariances in ``matrix_*``, ``rank > 0`` the sketches (one kernel, so one compilation).
    ``batch`` is an :class:`~core._kernels._bundles.EventBatch`, ``state`` an
    :data:`OPAUCState`, ``options`` :data:`OPAUCOptions`.
    """
    X, indptr, indices, data, sparse = batch
    w = state.w
    matrix_pos = state.matrix_pos
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
        score, squared_norm = dot_and_squared_norm(w, row)
        if want_scores:
            scores[t] = score
        _event(row, squared_norm, y[t], state, options, work, projections)
        if sparse:
            for k in range(indptr[t], indptr[t + 1]):
                x[indices[k]] = 0.0
