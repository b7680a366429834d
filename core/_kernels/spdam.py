"""SPDAM kernels: Natole thesis ch. 5, Alg. 21 (docs/algorithms/spdam.md (spdam.1)-(spdam.9)).

The data transform is never materialised (it would densify sparse rows):
``<w, xbar_i> = (<w, x_i> - <w, m_{y_i}>) / s_{y_i}`` and ``sum_i c_i xbar_i`` is kept as
``sum_i (c_i / s_{y_i}) x_i`` minus scalar multiples of the two class means (spdam.2).
"""

from collections import namedtuple

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import dot_dense, dot_sparse
from core._kernels.random import random_below

#: The problem's hyper-parameters, bundled (``sigma = 0`` / ``tau = 0``: Theorem 5.1's values).
SpdamOptions = namedtuple(
    "SpdamOptions",
    ["lam", "batch_fraction", "sigma", "tau", "double_prior", "tol", "max_epochs", "printed_sigma"],
)
#: What a solve reports: epochs run, the last duality gap, whether it fell below ``tol``.
SpdamReport = namedtuple("SpdamReport", ["n_epochs", "gap", "converged"])


@kernel
def row_dot(batch, i, w):
    X, indptr, indices, data, sparse = batch
    if sparse:
        return dot_sparse(w, indices, data, indptr[i], indptr[i + 1])
    return dot_dense(w, X[i])


@kernel
def row_add(batch, i, coef, target):
    """``target += coef * x_i``."""
    X, indptr, indices, data, sparse = batch
    if sparse:
        for k in range(indptr[i], indptr[i + 1]):
            target[indices[k]] += coef * data[k]
    else:
        x = X[i]
        for j in range(x.shape[0]):
            target[j] += coef * x[j]


@kernel
def class_statistics(batch, y, n, mean_pos, mean_neg):
    """Class means of the first ``n`` rows into ``mean_pos`` / ``mean_neg``; returns
    ``(n_pos, n_neg)`` (spdam.2)."""
    mean_pos[:] = 0.0
    mean_neg[:] = 0.0
    n_pos = 0
    for i in range(n):
        if y[i] > 0:
            n_pos += 1
            row_add(batch, i, 1.0, mean_pos)
        else:
            row_add(batch, i, 1.0, mean_neg)
    n_neg = n - n_pos
    if n_pos > 0:
        mean_pos /= n_pos
    if n_neg > 0:
        mean_neg /= n_neg
    return n_pos, n_neg


@kernel
def transformed_dot(batch, y, i, w, w_dot_pos, w_dot_neg, scale_pos, scale_neg):
    """``<w, xbar_i>`` given ``<w, m+>`` and ``<w, m->`` (spdam.2)."""
    if y[i] > 0:
        return (row_dot(batch, i, w) - w_dot_pos) / scale_pos
    return (row_dot(batch, i, w) - w_dot_neg) / scale_neg


@kernel
def add_transformed(batch, y, i, coef, scale_pos, scale_neg, target, mean_coefs):
    """``target += coef * xbar_i`` without the class-mean part, which is accumulated in
    ``mean_coefs`` (``[coef of m+, coef of m-]``) to subtract once (spdam.2)."""
    if y[i] > 0:
        row_add(batch, i, coef / scale_pos, target)
        mean_coefs[0] += coef / scale_pos
    else:
        row_add(batch, i, coef / scale_neg, target)
        mean_coefs[1] += coef / scale_neg


@kernel
def dual_average(batch, y, n, beta, scale_pos, scale_neg, mean_pos, mean_neg, u):
    """``u = (1/n) sum_i beta_i xbar_i`` (spdam.5)."""
    u[:] = 0.0
    mean_coefs = np.zeros(2)
    for i in range(n):
        add_transformed(batch, y, i, beta[i], scale_pos, scale_neg, u, mean_coefs)
    for j in range(u.shape[0]):
        u[j] = (u[j] - mean_coefs[0] * mean_pos[j] - mean_coefs[1] * mean_neg[j]) / n


@kernel
def primal_objective(batch, y, n, w, mean_pos, mean_neg, scale_pos, scale_neg, b, mu):
    """``P(w) = (1/(2n)) sum_i <w, xbar_i>^2 + g(w)`` (spdam.4), (spdam.3)."""
    w_dot_pos = dot_dense(w, mean_pos)
    w_dot_neg = dot_dense(w, mean_neg)
    total = 0.0
    for i in range(n):
        z = transformed_dot(batch, y, i, w, w_dot_pos, w_dot_neg, scale_pos, scale_neg)
        total += z * z
    bw = dot_dense(b, w)
    return total / (2.0 * n) + 0.5 * bw * bw + bw + 0.5 * mu * dot_dense(w, w)


@kernel
def dual_objective(beta, n, u, b, mu):
    """``D(beta) = -||beta||^2 / (2n) - g*(-u)``, ``g*(v) = (1/(2 mu)) (||v - b||^2 -
    (b.(v - b))^2 / (mu + ||b||^2))`` (Sherman-Morrison; spdam.6)."""
    bb = dot_dense(b, b)
    qq = 0.0
    bq = 0.0
    for j in range(u.shape[0]):
        q = -u[j] - b[j]
        qq += q * q
        bq += b[j] * q
    conjugate = (qq - bq * bq / (mu + bb)) / (2.0 * mu)
    return -dot_dense(beta[:n], beta[:n]) / (2.0 * n) - conjugate


@kernel
def theorem_sigma(n, m, kappa_sq, mu, printed):
    """Theorem 5.1's dual step ``sigma`` (spdam.8); ``tau`` and ``theta`` follow from it.

    ``printed=False``: as the proof's (5.18) gives it once the ``1/m`` that (5.18) drops is
    kept, ``2 mu`` times the printed value, which balances the primal and dual contractions
    (docs/algorithms/spdam.md, Errata).  ``printed=True``: the thesis' value, also valid (the
    dual contraction is then faster than needed) but with a primal step ``1 / (2 mu)`` times
    smaller; the stream's warm starts use it (docs, Choices)."""
    if printed:
        gap = float(n - m)
        return (gap + np.sqrt(gap * gap + 4.0 * n * kappa_sq * m / mu)) / (8.0 * m * kappa_sq)
    gap = mu * (n - m)
    return (gap + np.sqrt(gap * gap + 4.0 * n * m * kappa_sq * mu)) / (4.0 * m * kappa_sq)


@kernel
def primal_step(w, u_bar, b, mu, tau, out):
    """``argmin_w <u_bar, w> + g(w) + ||w - w_t||^2 / (2 tau)`` in closed form (spdam.7)."""
    c = mu + 1.0 / tau
    r = w / tau - u_bar - b
    br = dot_dense(b, r)
    bb = dot_dense(b, b)
    for j in range(w.shape[0]):
        out[j] = (r[j] - b[j] * br / (c + bb)) / c


@kernel
def _centred_sq_norm(batch, y, i, mean_pos, mean_neg, pos_sq, neg_sq):
    """``||x_i - m_{y_i}||^2 = ||x_i||^2 - 2 x_i.m + ||m||^2`` in O(nnz)."""
    X, indptr, indices, data, sparse = batch
    if sparse:
        start, end = indptr[i], indptr[i + 1]
        xx = 0.0
        for k in range(start, end):
            xx += data[k] * data[k]
    else:
        xx = dot_dense(X[i], X[i])
    if y[i] > 0:
        return max(xx - 2.0 * row_dot(batch, i, mean_pos) + pos_sq, 0.0)
    return max(xx - 2.0 * row_dot(batch, i, mean_neg) + neg_sq, 0.0)


@kernel
def spdam_solve(batch, y, n, w, beta, fresh, rng_state, options):
    """Alg. 21 on the first ``n`` rows from ``(w, beta)``, in place; returns a SpdamReport.

    ``fresh`` lists the rows whose dual is (re)started at its optimum for ``w``,
    ``beta_i = <w, xbar_i>`` (new rows of the stream's window).  Epochs of ``ceil(n / m)``
    mini-batch steps run until the duality gap is at most ``tol`` or ``max_epochs`` ran.
    """
    lam, batch_fraction, sigma, tau, double_prior, tol, max_epochs, printed_sigma = options
    d = w.shape[0]
    mean_pos = np.empty(d)
    mean_neg = np.empty(d)
    n_pos, n_neg = class_statistics(batch, y, n, mean_pos, mean_neg)
    if n_pos == 0 or n_neg == 0:
        return SpdamReport(0, 0.0, False)
    factor = 2.0 if double_prior else 1.0  # (spdam.2): sqrt(2p) (thesis) or sqrt(p)
    scale_pos = np.sqrt(factor * n_pos / n)
    scale_neg = np.sqrt(factor * n_neg / n)
    b = mean_neg - mean_pos
    mu = 0.5 * lam  # g's L2 weight: (spdam.4) is half of (5.1) with lam (spdam.3)
    w_dot_pos = dot_dense(w, mean_pos)
    w_dot_neg = dot_dense(w, mean_neg)
    for k in range(fresh.shape[0]):
        i = fresh[k]
        beta[i] = transformed_dot(batch, y, i, w, w_dot_pos, w_dot_neg, scale_pos, scale_neg)
    # kappa^2 = max ||xbar_i||^2 (the notes' reading of Theorem 5.1: the data Alg. 21 runs on)
    pos_sq = dot_dense(mean_pos, mean_pos)
    neg_sq = dot_dense(mean_neg, mean_neg)
    kappa_sq = 0.0
    for i in range(n):
        centred = _centred_sq_norm(batch, y, i, mean_pos, mean_neg, pos_sq, neg_sq)
        scale = scale_pos if y[i] > 0 else scale_neg
        kappa_sq = max(kappa_sq, centred / (scale * scale))
    u = np.empty(d)
    if kappa_sq <= 0.0:
        # every row is its class mean: only g is left, minimised at -b / (mu + ||b||^2)
        w[:] = -b / (mu + dot_dense(b, b))
        beta[:n] = 0.0
        return SpdamReport(0, 0.0, True)
    m = min(n, max(1, int(np.ceil(batch_fraction * n))))
    if sigma <= 0.0:
        sigma = theorem_sigma(n, m, kappa_sq, mu, printed_sigma)
    if tau <= 0.0:
        tau = 1.0 / (4.0 * sigma * kappa_sq)  # (spdam.8) with the sigma in use
    theta = 1.0 - mu / (mu + 2.0 * sigma * kappa_sq)
    order = np.arange(n)
    w_bar = w.copy()
    w_new = np.empty(d)
    delta_u = np.empty(d)
    mean_coefs = np.zeros(2)
    dual_average(batch, y, n, beta, scale_pos, scale_neg, mean_pos, mean_neg, u)
    steps_per_epoch = (n + m - 1) // m
    gap = np.inf
    bound = 0.0
    epochs = 0
    while epochs < max_epochs:
        for _ in range(steps_per_epoch):
            bar_pos = dot_dense(w_bar, mean_pos)
            bar_neg = dot_dense(w_bar, mean_neg)
            delta_u[:] = 0.0
            mean_coefs[:] = 0.0
            for k in range(m):  # I: the first m of a partial Fisher-Yates shuffle (spdam.5)
                swap = k + random_below(rng_state, n - k)
                i = order[swap]
                order[swap] = order[k]
                order[k] = i
                z = transformed_dot(batch, y, i, w_bar, bar_pos, bar_neg, scale_pos, scale_neg)
                updated = (beta[i] + sigma * z) / (1.0 + sigma)
                add_transformed(
                    batch, y, i, updated - beta[i], scale_pos, scale_neg, delta_u, mean_coefs
                )
                beta[i] = updated
            for j in range(d):
                delta_u[j] -= mean_coefs[0] * mean_pos[j] + mean_coefs[1] * mean_neg[j]
            # u_bar = u + (n/m)(u' - u) = u + delta_u / m;  u' = u + delta_u / n  (spdam.6)
            primal_step(w, u + delta_u / m, b, mu, tau, w_new)
            for j in range(d):
                u[j] += delta_u[j] / n
                w_bar[j] = w_new[j] + theta * (w_new[j] - w[j])
                w[j] = w_new[j]
        epochs += 1
        # exact u again (no drift of the incremental sums), then the certified gap (spdam.9)
        dual_average(batch, y, n, beta, scale_pos, scale_neg, mean_pos, mean_neg, u)
        primal = primal_objective(batch, y, n, w, mean_pos, mean_neg, scale_pos, scale_neg, b, mu)
        gap = primal - dual_objective(beta, n, u, b, mu)
        # relative to the objective's distance from P(0) = 0 (spdam.9)
        bound = tol * abs(primal)
        if gap <= bound:
            break
    return SpdamReport(epochs, max(gap, 0.0), gap <= bound)
