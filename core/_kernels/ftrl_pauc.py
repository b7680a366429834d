"""FTRL-pAUC on reservoir samples of the prefix (Kar et al. §3; streaming interpretation:
docs/algorithms/ftrl_pauc.md (ftrl_pauc.2)-(ftrl_pauc.7)); see
:class:`core.learners.ftrl_pauc.FTRLpAUC` for the approximation."""

import numpy as np

from core._kernels._config import kernel
from core._kernels.forgetting import recent_steps
from core._kernels.pauc_buffers import decision as decision  # the learner scores with it
from core._kernels.pauc_buffers import (
    event_dot,
    pauc_gradient_counts,
    reservoir_offer_forgetting,
)


@kernel
def track_quantile(quantile, score, level):
    """One stochastic-approximation step towards the score exceeded with probability ``level``.

    ``quantile = [q, scale]``: ``q <- q + 0.02 scale (1[score > q] - level)`` (Robbins-Monro
    quantile recursion) with ``scale`` an exponentially weighted mean of ``|score - q|`` (rate
    0.01) so that the step follows the spread of the scores whatever the norm of ``w``.
    """
    q = quantile[0]
    quantile[1] += 0.01 * (abs(score - q) - quantile[1])
    exceed = 1.0 if score > q else 0.0
    quantile[0] = q + 0.02 * quantile[1] * (exceed - level)


@kernel
def project_annulus(w, inner, outer):
    """Euclidean projection onto ``W = {inner <= ||w|| <= outer}``: ``w * clip(||w||, inner,
    outer) / ||w||``.  ``w = 0`` (every point of the inner sphere is nearest) is left as it is;
    ``inner = 0`` is the plain ball."""
    norm = 0.0
    for j in range(w.shape[0]):
        norm += w[j] * w[j]
    norm = np.sqrt(norm)
    if norm == 0.0:
        return
    factor = 1.0
    if norm > outer:
        factor = outer / norm
    elif norm < inner:
        factor = inner / norm
    if factor != 1.0:
        for j in range(w.shape[0]):
            w[j] *= factor


@kernel
def solver_steps(w, n_solver_steps, pos_X, pos_fill, neg_X, neg_fill, neg_seen, neg_admitted,
                 alpha, beta, lam, eta0, min_norm, inner_steps, grad, auc_weight,
                 half_life, n_events):  # fmt: skip
    """Warm-started subgradient steps (``inner_steps`` once the reservoirs are full,
    ``inner_steps * capacity / fill`` up to ``10 * inner_steps`` before) on
    ``F(w) = R_tight(alpha,beta)(w; B+, B-) + mu R(0,1)(w; B+, B-) + lam/2 ||w||^2`` over the
    reservoirs, ``mu = auc_weight`` (the second term: the same normalised hinge over every
    reservoir negative, i.e. the pairwise AUC hinge; skipped when ``mu = 0``):
    docs/algorithms/ftrl_pauc.md (ftrl_pauc.7).

    The admitted negatives are a fraction ``rho = admitted / seen`` of all negatives, so the top
    ``beta`` of the prefix is the top ``beta / rho`` of the reservoir: ``j_beta =
    ceil(beta fill / rho)``, ``j_alpha = floor(alpha fill / rho)``.
    Step ``k`` (counted over the whole stream): ``w <- Proj(w - gamma_k (g + lam w))`` with
    ``gamma_k = eta0 / (1 + eta0 lam k)`` (Bottou's schedule for a lam-strongly convex
    objective: about ``eta0`` at first, ``1 / (lam k)`` as in Pegasos later — Pegasos' own
    ``1 / (lam k)`` from k = 1 overshoots and flips the sign of ``w`` on this non-smooth
    objective), projected onto ``W = {min_norm <= ||w|| <= sqrt(2 / lam)}``: the outer ball
    holds the minimiser since ``F(0) = 1`` (Shalev-Shwartz et al. 2011); the inner radius is the
    minimum-norm safeguard of :class:`core.learners.ftrl_pauc.FTRLpAUC` (item 5).
    With forgetting (``half_life`` > 0), ``gamma_k`` reads ``k min(1, H / t)`` for ``k``, ``t``
    the events seen (``n_events``): about the solver steps of the last half-life, so the step
    stops shrinking after ``H`` events (docs/algorithms/ftrl_pauc.md (ftrl_pauc.9)).
    """
    n_pos = pos_fill[0]
    n_neg = neg_fill[0]
    if n_pos == 0 or n_neg == 0:
        return False
    # [CHOICE] constant work per update: while the reservoirs are filling, a step is cheaper
    # and the objective changes faster, so take proportionally more steps (at most 10x)
    capacity = pos_X.shape[0] + neg_X.shape[0]
    n_steps = min(10 * inner_steps, max(inner_steps, inner_steps * capacity // (n_pos + n_neg)))
    effective = n_neg * (neg_seen[0] / neg_admitted[0])
    j_alpha = np.int64(np.floor(alpha * effective + 1e-9))
    j_beta = np.int64(np.ceil(beta * effective - 1e-9))
    if j_beta > n_neg:
        j_beta = n_neg
    if j_beta < 1:
        j_beta = 1
    if j_alpha >= j_beta:
        j_alpha = j_beta - 1
    pos_rows = np.arange(n_pos)
    neg_rows = np.arange(n_neg)
    radius = np.sqrt(2.0 / lam)
    grad_auc = np.empty(w.shape[0])
    for _ in range(n_steps):
        pauc_gradient_counts(pos_X, pos_rows, neg_X, neg_rows, w, j_alpha, j_beta, grad)
        if auc_weight > 0.0:
            pauc_gradient_counts(pos_X, pos_rows, neg_X, neg_rows, w, 0, n_neg, grad_auc)
            for j in range(w.shape[0]):
                grad[j] += auc_weight * grad_auc[j]
        n_solver_steps[0] += 1
        step = eta0 / (1.0 + eta0 * lam * recent_steps(n_solver_steps[0], n_events, half_life))
        shrink = 1.0 - step * lam
        for j in range(w.shape[0]):
            w[j] = shrink * w[j] - step * grad[j]
        project_annulus(w, min_norm, radius)
    return True


@kernel
def ftrl_learn(X, indptr, indices, data, y, scores, w, n_solver_steps, n_updates, since_update,
               pos_X, pos_fill, pos_seen, neg_X, neg_fill, neg_seen, neg_admitted, quantile,
               rng_state, alpha, beta, lam, eta0, min_norm, update_every, first_update_every,
               inner_steps, admission_level, auc_weight, half_life):  # fmt: skip
    """Learn the events in order (dense ``X`` or CSR ``indptr/indices/data``; pre-update scores
    into ``scores`` if non-empty).

    Per event: score with the current ``w``; a positive is offered to the positive reservoir; a
    negative updates the quantile tracker and is offered to the negative reservoir when its
    score is at least the tracked quantile (all negatives when ``admission_level >= 1``).
    Every ``min(update_every, first_update_every * 2**u)`` events, ``u`` the number of updates
    so far ([CHOICE]: frequent updates while the reservoirs are small): :func:`solver_steps`.

    ``half_life`` > 0 (docs/algorithms/ftrl_pauc.md (ftrl_pauc.8)-(ftrl_pauc.9)): both
    reservoirs are biased towards the last ``half_life`` events and the solver's step stops
    shrinking after the solver steps of one half-life.
    """
    n_samples = y.shape[0]
    want_scores = scores.shape[0] > 0
    grad = np.empty(w.shape[0])
    for i in range(n_samples):
        score = event_dot(X, indptr, indices, data, i, w)
        if want_scores:
            scores[i] = score
        n_events = pos_seen[0] + neg_seen[0] + 1
        if y[i] > 0:
            reservoir_offer_forgetting(
                X, indptr, indices, data, i, pos_X, pos_fill, pos_seen, rng_state,
                half_life, n_events,
            )  # fmt: skip
        else:
            neg_seen[0] += 1
            admit = admission_level >= 1.0 or score >= quantile[0]
            if admission_level < 1.0:
                track_quantile(quantile, score, admission_level)
            if admit:
                reservoir_offer_forgetting(
                    X, indptr, indices, data, i, neg_X, neg_fill, neg_admitted, rng_state,
                    half_life, n_events,
                )  # fmt: skip
        since_update[0] += 1
        interval = first_update_every
        for _ in range(n_updates[0]):
            if interval >= update_every:
                break
            interval *= 2
        if since_update[0] >= min(interval, update_every):
            since_update[0] = 0
            if solver_steps(w, n_solver_steps, pos_X, pos_fill, neg_X, neg_fill, neg_seen,
                            neg_admitted, alpha, beta, lam, eta0, min_norm, inner_steps,
                            grad, auc_weight, half_life, pos_seen[0] + neg_seen[0]):  # fmt: skip
                n_updates[0] += 1
