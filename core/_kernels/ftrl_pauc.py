"""FTRL-pAUC on reservoir samples of the prefix (Kar et al. §3; streaming interpretation:
docs/algorithms/ftrl_pauc.md (ftrl_pauc.2)-(ftrl_pauc.7)); see
:class:`core.learners.ftrl_pauc.FTRLpAUC` for the approximation."""

import numpy as np

from core._kernels._config import inlined_kernel, kernel
from core._kernels.forgetting import recent_steps
from core._kernels.pauc_buffers import decision as decision  # the learner scores with it
from core._kernels.pauc_buffers import (
    event_dot,
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
def score_leading_rows(X, n_rows, w, out):
    """``out[i] = X[i] . w`` for ``i < n_rows``, each sum in the order of
    :func:`core._kernels.pauc_buffers.dot_row` (so the very same scores).

    Why four rows at a time: without fastmath a dot product is one chain of dependent additions
    (about four cycles each); four rows' chains advance side by side instead of one after the
    other.  The solver scores every reservoir row at every step."""
    d = w.shape[0]
    i = 0
    while i + 4 <= n_rows:
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for j in range(d):
            wj = w[j]
            s0 += X[i, j] * wj
            s1 += X[i + 1, j] * wj
            s2 += X[i + 2, j] * wj
            s3 += X[i + 3, j] * wj
        out[i] = s0
        out[i + 1] = s1
        out[i + 2] = s2
        out[i + 3] = s3
        i += 4
    while i < n_rows:
        total = 0.0
        for j in range(d):
            total += X[i, j] * w[j]
        out[i] = total
        i += 1


@kernel
def resort_descending(scores, order, max_moves):
    """Insertion sort of the permutation ``order`` by descending ``scores``, ties by index: the
    key ``(-score, index)`` is a total order, so the result is the permutation
    ``np.argsort(-scores, kind="mergesort")`` gives (the one
    :func:`core._kernels.pauc_surrogate.tight_pauc_coefficients` uses), whatever ``order``
    held.  Returns False (``order`` is then some permutation) once more than ``max_moves``
    elements have been moved.

    Why: the solver sorts the same negatives again after every step of ``w``, which swaps few
    of them; from the previous order this costs ``n`` plus the swapped pairs, where a mergesort
    costs ``n log n`` and allocates."""
    moves = 0
    for i in range(1, order.shape[0]):
        item = order[i]
        score = scores[item]
        k = i
        while k > 0:
            above = order[k - 1]
            if score > scores[above] or (score == scores[above] and item < above):
                order[k] = above
                k -= 1
            else:
                break
        order[k] = item
        moves += i - k
        if moves > max_moves:
            return False
    return True


@inlined_kernel
def count_at_most(ascending, n, value):
    """``#{j < n : ascending[j] <= value}``: ``np.searchsorted(ascending[:n], value, "right")``
    for a value that is not NaN, without a slice and a call per positive."""
    low = 0
    high = n
    while low < high:
        middle = (low + high) >> 1
        if ascending[middle] <= value:
            low = middle + 1
        else:
            high = middle
    return low


@kernel
def step_coefficients(pos_scores, neg_scores, order, j_alpha, j_beta, with_auc, neg_top,
                      prefix, counts, auc_counts, pos_coef, neg_coef, pos_auc_coef,
                      neg_auc_coef):  # fmt: skip
    """The coefficients of both terms of one solver step from one sorted order: those of
    :func:`core._kernels.pauc_surrogate.tight_pauc_coefficients` with ``(j_alpha, j_beta)``
    into ``pos_coef``, ``neg_coef`` and, if ``with_auc``, with ``(0, n)`` (the all-pairs term)
    into ``pos_auc_coef``, ``neg_auc_coef`` — the same numbers (same expressions on the same
    prefix sums), computed with one pass over the positives.

    ``order`` is the descending order of ``neg_scores`` (:func:`resort_descending`);
    ``neg_top``, ``prefix`` (n and n + 1), ``counts`` (j_beta + 1) and ``auc_counts`` (n + 1)
    are scratch.  The all-pairs term needs every negative ranked, so ``neg_top`` (ascending
    ``-t``) and ``prefix`` cover all of them and the pAUC term reads their first ``j_beta``;
    one binary search for ``1 - s`` over all ``n`` gives both terms' ``k2``: the entries
    ``<= 1 - s`` of an ascending array are a prefix of it, so its count within
    ``[j_alpha, j_beta)`` is ``clip(k - j_alpha, 0, j_beta - j_alpha)``."""
    n_pos = pos_scores.shape[0]
    n_neg = neg_scores.shape[0]
    prefix[0] = 0.0
    for j in range(n_neg):
        t = neg_scores[order[j]]
        neg_top[j] = -t
        prefix[j + 1] = prefix[j] + t
    for j in range(j_beta + 1):
        counts[j] = 0
    if with_auc:
        for j in range(n_neg + 1):
            auc_counts[j] = 0
    for i in range(n_pos):
        s = pos_scores[i]
        # the pAUC term: tight_pauc_coefficients' groups A and B
        k1 = count_at_most(neg_top, j_alpha, -s) if j_alpha > 0 else 0
        h_a = prefix[k1] - k1 * s
        k_all = count_at_most(neg_top, n_neg, 1.0 - s) if with_auc else 0
        if with_auc:
            k2 = min(max(k_all - j_alpha, 0), j_beta - j_alpha)
        else:
            k2 = count_at_most(neg_top, j_beta, 1.0 - s) - j_alpha
            if k2 < 0:
                k2 = 0
        h_b = (
            (prefix[j_alpha] - j_alpha * s)
            + k2 * (1.0 - s)
            + (prefix[j_alpha + k2] - prefix[j_alpha])
        )
        r = k1 if h_a > h_b else j_alpha + k2
        pos_coef[i] = -float(r)
        counts[r] += 1
        if with_auc:
            # the all-pairs term: the same expressions with j_alpha = 0, j_beta = n
            h_a = prefix[0] - 0 * s
            h_b = (prefix[0] - 0 * s) + k_all * (1.0 - s) + (prefix[k_all] - prefix[0])
            r = 0 if h_a > h_b else k_all
            pos_auc_coef[i] = -float(r)
            auc_counts[r] += 1
    # q_j = #{i : r_i >= rank(j)}: suffix sums of the histograms of r
    running = 0
    for rank in range(n_neg, 0, -1):
        if rank <= j_beta:
            running += counts[rank]
            neg_coef[order[rank - 1]] = float(running)
        else:
            neg_coef[order[rank - 1]] = 0.0
    if with_auc:
        running = 0
        for rank in range(n_neg, 0, -1):
            running += auc_counts[rank]
            neg_auc_coef[order[rank - 1]] = float(running)


@kernel
def add_scaled_rows(X, n_rows, coef, scale, auc_coef, auc_scale, grad, grad_auc):
    """``grad += sum_i (coef_i scale) X[i]`` and ``grad_auc += sum_i (auc_coef_i auc_scale)
    X[i]`` over ``i < n_rows`` (``auc_scale`` 0: the first only), in one pass over the rows.

    The same arithmetic as two :func:`core._kernels.pauc_buffers.add_rows` (each sum in row
    order, a zero coefficient skipped): one read of the rows instead of two."""
    d = grad.shape[0]
    for i in range(n_rows):
        c = coef[i] * scale
        c_auc = auc_coef[i] * auc_scale if auc_scale != 0.0 else 0.0
        if c != 0.0 and c_auc != 0.0:
            for j in range(d):
                x = X[i, j]
                grad[j] += c * x
                grad_auc[j] += c_auc * x
        elif c != 0.0:
            for j in range(d):
                grad[j] += c * X[i, j]
        elif c_auc != 0.0:
            for j in range(d):
                grad_auc[j] += c_auc * X[i, j]


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

    Each step computes what two :func:`core._kernels.pauc_buffers.pauc_gradient_counts` (the
    pAUC term, then the all-pairs term) computed, with the same arithmetic, but scores the
    reservoirs once, sorts the negatives once (from the previous step's order), takes both
    terms' coefficients from that order and reads the rows once for both gradients, in scratch
    arrays allocated once per update (about 5x less time per update at the defaults).
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
    radius = np.sqrt(2.0 / lam)
    d = w.shape[0]
    with_auc = auc_weight > 0.0
    # pauc_gradient_counts' normalisations, 1 / (n_+ (j_beta - j_alpha)) for each term
    scale = 1.0 / (n_pos * (j_beta - j_alpha))
    auc_scale = 1.0 / (n_pos * n_neg) if with_auc else 0.0
    pos_scores = np.empty(n_pos)
    neg_scores = np.empty(n_neg)
    neg_top = np.empty(n_neg)
    prefix = np.empty(n_neg + 1)
    counts = np.empty(j_beta + 1, dtype=np.int64)
    auc_counts = np.empty(n_neg + 1, dtype=np.int64)
    pos_coef = np.empty(n_pos)
    neg_coef = np.empty(n_neg)
    pos_auc_coef = np.zeros(n_pos)
    neg_auc_coef = np.zeros(n_neg)
    grad_auc = np.zeros(d)
    order = np.arange(n_neg)
    for k in range(n_steps):
        score_leading_rows(pos_X, n_pos, w, pos_scores)
        score_leading_rows(neg_X, n_neg, w, neg_scores)
        # the first step of an update sorts from scratch (rows were replaced since the last
        # update); so does a step that moved w far enough to reorder much (insertion sort is
        # quadratic in the worst case: give up beyond about a mergesort's work)
        if k == 0 or not resort_descending(neg_scores, order, 16 * n_neg):
            order = np.argsort(-neg_scores, kind="mergesort")
        step_coefficients(
            pos_scores, neg_scores, order, j_alpha, j_beta, with_auc, neg_top, prefix, counts,
            auc_counts, pos_coef, neg_coef, pos_auc_coef, neg_auc_coef,
        )  # fmt: skip
        for j in range(d):
            grad[j] = 0.0
            grad_auc[j] = 0.0
        add_scaled_rows(pos_X, n_pos, pos_coef, scale, pos_auc_coef, auc_scale, grad, grad_auc)
        add_scaled_rows(neg_X, n_neg, neg_coef, scale, neg_auc_coef, auc_scale, grad, grad_auc)
        if with_auc:
            for j in range(d):
                grad[j] += auc_weight * grad_auc[j]
        n_solver_steps[0] += 1
        step = eta0 / (1.0 + eta0 * lam * recent_steps(n_solver_steps[0], n_events, half_life))
        shrink = 1.0 - step * lam
        for j in range(d):
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
