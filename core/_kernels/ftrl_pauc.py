"""FTRL-pAUC on reservoir samples of the prefix (Kar et al. §3; streaming interpretation:
docs/algorithms/ftrl_pauc.md (ftrl_pauc.2)-(ftrl_pauc.7)); see
:class:`core.learners.ftrl_pauc.FTRLpAUC` for the approximation."""

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import four
from core._kernels.forgetting import class_reservoir_slot, filled_after, recent_steps
from core._kernels.pauc_buffers import decision as decision  # the learner scores with it
from core._kernels.pauc_buffers import doubling_interval, event_copy


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
def transpose_rows(X, n_rows, out):
    """``out[j, i] = X[i, j]`` for ``i < n_rows``: the reservoir by feature, for
    :func:`score_columns`."""
    for i in range(n_rows):
        for j in range(X.shape[1]):
            out[j, i] = X[i, j]


@kernel
def score_columns(columns, w, out):
    """``out[i] = sum_j columns[j, i] w[j]``, each sum in the order of
    :func:`core._kernels.pauc_buffers.dot_row` (so the very same scores as ``dot_row`` on the
    rows ``columns.T``).

    Why by feature: without fastmath one row's dot product is one chain of dependent additions
    (about four cycles each) that the compiler may not reorder; with the rows' sums side by
    side in ``out``, the additions of one feature for consecutive rows are independent and
    vectorise.  Four features per pass over ``out`` (it stays in L1) keep its loads and
    stores at a quarter.  The solver scores every reservoir row at every step: the transposed
    copy is made once per update and this takes about half the time of row-wise scoring."""
    d = w.shape[0]
    n = out.shape[0]
    for i in range(n):
        out[i] = 0.0
    j = 0
    while j + 4 <= d:
        w0, w1, w2, w3 = four(w, j)
        for i in range(n):
            out[i] = (
                ((out[i] + columns[j, i] * w0) + columns[j + 1, i] * w1) + columns[j + 2, i] * w2
            ) + columns[j + 3, i] * w3
        j += 4
    while j < d:
        wj = w[j]
        for i in range(n):
            out[i] += columns[j, i] * wj
        j += 1


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


@kernel
def step_coefficients(pos_scores, pos_order, neg_scores, order, j_alpha, j_beta, with_auc,
                      neg_top, prefix, counts, auc_counts, pos_coef, neg_coef, pos_auc_coef,
                      neg_auc_coef):  # fmt: skip
    """The coefficients of both terms of one solver step from one sorted order: those of
    :func:`core._kernels.pauc_surrogate.tight_pauc_coefficients` with ``(j_alpha, j_beta)``
    into ``pos_coef``, ``neg_coef`` and, if ``with_auc``, with ``(0, n)`` (the all-pairs term)
    into ``pos_auc_coef``, ``neg_auc_coef`` — the same numbers (same expressions on the same
    prefix sums), computed with one pass over the positives.

    ``pos_order`` and ``order`` are the descending orders of ``pos_scores`` and ``neg_scores``
    (:func:`resort_descending`); ``neg_top``, ``prefix`` (n and n + 1), ``counts``
    (j_beta + 1) and ``auc_counts`` (n + 1) are scratch.  The all-pairs term needs every
    negative ranked, so ``neg_top`` (ascending ``-t``) and ``prefix`` cover all of them and the
    pAUC term reads their first ``j_beta``.

    The counts ``tight_pauc_coefficients`` finds by binary search (``k1`` over the top
    ``j_alpha``, ``k2`` over ranks ``j_alpha..j_beta``) come from a merge instead: taken in
    descending score order the positives' bounds ``-s`` and ``1 - s`` only grow (rounding is
    monotone), so the number of ``neg_top`` entries at most the bound only grows, and one
    pointer walks ``neg_top`` once for all positives (a binary search's branches are
    unpredictable: it cost most of this function).  The entries ``<= 1 - s`` are a prefix of
    ``neg_top``, so their number ``k`` gives both terms' ``k2``: ``k`` itself for the
    all-pairs term, ``clip(k - j_alpha, 0, j_beta - j_alpha)`` within ranks
    ``[j_alpha, j_beta)``."""
    n_pos = pos_scores.shape[0]
    n_neg = neg_scores.shape[0]
    # the all-pairs term reads all negatives, the pAUC term alone those of rank < j_beta
    walk_end = n_neg if with_auc else j_beta
    # the running sum in a local: through prefix[j] it would wait for a store at every entry
    total = 0.0
    prefix[0] = total
    for j in range(walk_end):
        t = neg_scores[order[j]]
        neg_top[j] = -t
        total += t
        prefix[j + 1] = total
    for j in range(j_beta + 1):
        counts[j] = 0
    if with_auc:
        for j in range(n_neg + 1):
            auc_counts[j] = 0
    k_head = 0  # #{j < j_alpha : -t_(j) <= -s}
    k_all = 0  # #{j < walk_end : -t_(j) <= 1 - s}
    for p in range(n_pos):
        i = pos_order[p]
        s = pos_scores[i]
        bound = 1.0 - s
        while k_head < j_alpha and neg_top[k_head] <= -s:
            k_head += 1
        while k_all < walk_end and neg_top[k_all] <= bound:
            k_all += 1
        # the pAUC term: tight_pauc_coefficients' groups A and B
        k1 = k_head
        h_a = prefix[k1] - k1 * s
        k2 = min(max(k_all - j_alpha, 0), j_beta - j_alpha)
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

    The same arithmetic as two :func:`core._kernels.pauc_buffers.add_rows`: each ``grad[j]``
    receives the rows' terms one by one in row order.  Why four rows at a time: one row at a
    time loads and stores ``grad`` (and ``grad_auc``) once per row, and those stores bound the
    loop; here once per four rows.  ``add_rows`` skips a zero coefficient; adding its term
    ``0 x = +-0`` instead changes nothing, since the rows are finite and a sum that starts at
    +0 is never -0 (only ``-0 + -0`` is) — so a block skips a gradient only when all four of
    its coefficients are 0 (the pAUC term's, for most negatives)."""
    d = grad.shape[0]
    i = 0
    while i + 4 <= n_rows:
        c0 = coef[i] * scale
        c1 = coef[i + 1] * scale
        c2 = coef[i + 2] * scale
        c3 = coef[i + 3] * scale
        a0 = auc_coef[i] * auc_scale
        a1 = auc_coef[i + 1] * auc_scale
        a2 = auc_coef[i + 2] * auc_scale
        a3 = auc_coef[i + 3] * auc_scale
        with_pauc = c0 != 0.0 or c1 != 0.0 or c2 != 0.0 or c3 != 0.0
        with_auc = a0 != 0.0 or a1 != 0.0 or a2 != 0.0 or a3 != 0.0
        if with_pauc and with_auc:
            for j in range(d):
                x0 = X[i, j]
                x1 = X[i + 1, j]
                x2 = X[i + 2, j]
                x3 = X[i + 3, j]
                grad[j] = (((grad[j] + c0 * x0) + c1 * x1) + c2 * x2) + c3 * x3
                grad_auc[j] = (((grad_auc[j] + a0 * x0) + a1 * x1) + a2 * x2) + a3 * x3
        elif with_pauc:
            for j in range(d):
                grad[j] = (
                    ((grad[j] + c0 * X[i, j]) + c1 * X[i + 1, j]) + c2 * X[i + 2, j]
                ) + c3 * X[i + 3, j]
        elif with_auc:
            for j in range(d):
                grad_auc[j] = (
                    ((grad_auc[j] + a0 * X[i, j]) + a1 * X[i + 1, j]) + a2 * X[i + 2, j]
                ) + a3 * X[i + 3, j]
        i += 4
    while i < n_rows:
        c = coef[i] * scale
        a = auc_coef[i] * auc_scale
        for j in range(d):
            grad[j] += c * X[i, j]
            grad_auc[j] += a * X[i, j]
        i += 1


@kernel
def solver_steps(w, n_solver_steps, pos_X, pos_fill, neg_X, neg_fill, neg_seen, neg_admitted,
                 alpha, beta, lam, eta0, min_norm, inner_steps, grad, auc_weight,
                 half_life, n_events, capacity):  # fmt: skip
    """Warm-started subgradient steps (``inner_steps`` once the reservoirs are full,
    ``inner_steps * capacity / fill`` up to ``10 * inner_steps`` before) on
    ``F(w) = R_tight(alpha,beta)(w; B+, B-) + mu R(0,1)(w; B+, B-) + lam/2 ||w||^2`` over the
    reservoirs, ``mu = auc_weight`` (the second term: the same normalised hinge over every
    reservoir negative, i.e. the pairwise AUC hinge; skipped when ``mu = 0``):
    docs/algorithms/ftrl_pauc.md (ftrl_pauc.7).  ``capacity``: the two reservoirs' declared
    capacities together (their arrays grow as they fill, so their rows are not it).

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
    pAUC term, then the all-pairs term) computed, with the same arithmetic (bit for bit the
    same ``w``), but scores the reservoirs once (from a copy by feature made once per update),
    sorts the negatives and positives once (from the previous step's orders), takes both
    terms' coefficients from those orders and reads the rows once for both gradients, in
    scratch arrays allocated once per update: an update on full default reservoirs (d = 50)
    took 5.9 ms that way, 1.3 ms this way.
    """
    n_pos = pos_fill[0]
    n_neg = neg_fill[0]
    if n_pos == 0 or n_neg == 0:
        return False
    # [CHOICE] constant work per update: while the reservoirs are filling, a step is cheaper
    # and the objective changes faster, so take proportionally more steps (at most 10x)
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
    pos_columns = np.empty((d, n_pos))
    neg_columns = np.empty((d, n_neg))
    transpose_rows(pos_X, n_pos, pos_columns)
    transpose_rows(neg_X, n_neg, neg_columns)
    order = np.arange(n_neg)
    pos_order = np.arange(n_pos)
    for k in range(n_steps):
        score_columns(pos_columns, w, pos_scores)
        score_columns(neg_columns, w, neg_scores)
        # the first step of an update sorts from scratch (rows were replaced since the last
        # update); so does a step that moved w far enough to reorder much (insertion sort is
        # quadratic in the worst case: give up beyond about a mergesort's work)
        if k == 0 or not resort_descending(neg_scores, order, 16 * n_neg):
            order = np.argsort(-neg_scores, kind="mergesort")
        if k == 0 or not resort_descending(pos_scores, pos_order, 16 * n_pos):
            pos_order = np.argsort(-pos_scores, kind="mergesort")
        step_coefficients(
            pos_scores, pos_order, neg_scores, order, j_alpha, j_beta, with_auc, neg_top, prefix,
            counts, auc_counts, pos_coef, neg_coef, pos_auc_coef, neg_auc_coef,
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
def score_dense_events(X, start, stop, w, out):
    """``out[i] = X[i] . w`` for ``start <= i < stop``, four rows side by side, each sum in
    the order of :func:`core._kernels.pauc_buffers.event_dot` (so the same scores): one
    row's sum is a chain of dependent additions, four rows' chains overlap."""
    d = w.shape[0]
    i = start
    while i + 4 <= stop:
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
    while i < stop:
        total = 0.0
        for j in range(d):
            total += X[i, j] * w[j]
        out[i] = total
        i += 1


@kernel
def ftrl_learn(X, indptr, indices, data, y, scores, w, n_solver_steps, n_updates, since_update,
               pos_X, pos_fill, pos_seen, neg_X, neg_fill, neg_seen, neg_admitted, quantile,
               rng_state, alpha, beta, lam, eta0, min_norm, update_every, first_update_every,
               inner_steps, admission_level, auc_weight, half_life, pos_capacity,
               neg_capacity, keep_rows):  # fmt: skip
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

    ``pos_capacity`` / ``neg_capacity``: the reservoirs' declared capacities; their arrays
    grow as they fill (core.learners._growing) and hold at least the slots this batch can
    write (a slot is at most the fill).

    ``keep_rows`` False: the events are counted into the reservoirs but their rows are not
    copied (``pos_X`` / ``neg_X`` are not read): for a batch in which no update is due, of a
    learner whose reservoirs are its stream's prefix and whose rows are kept elsewhere
    (:class:`core.learners.ftrl_pauc.FTRLpAUC`, inside ``auto``).
    """
    n_samples = y.shape[0]
    want_scores = scores.shape[0] > 0
    dense = indptr.shape[0] == 0
    grad = np.empty(w.shape[0])
    event_scores = np.empty(n_samples)
    scored_until = 0
    interval = doubling_interval(first_update_every, update_every, n_updates[0])
    for i in range(n_samples):
        if i >= scored_until:
            # w changes only when an update fires, after event i + interval - since_update - 1
            # at the earliest: score the events up to there at once (dense rows four at a
            # time, each sum in event_dot's order, so the same scores)
            scored_until = min(n_samples, i + max(1, interval - since_update[0]))
            if dense:
                score_dense_events(X, i, scored_until, w, event_scores)
            else:  # event_dot's CSR loop
                for k in range(i, scored_until):
                    total = 0.0
                    for nz in range(indptr[k], indptr[k + 1]):
                        total += data[nz] * w[indices[nz]]
                    event_scores[k] = total
        score = event_scores[i]
        if want_scores:
            scores[i] = score
        n_events = pos_seen[0] + neg_seen[0] + 1
        # pauc_buffers.reservoir_offer_forgetting written out (a call passing eight arrays per
        # event cost about 45 ns of reference counting, half of this loop); the row is copied
        # only when it goes in, which is rare once the reservoir is full
        if y[i] > 0:
            pos_seen[0] += 1
            slot = class_reservoir_slot(
                rng_state, pos_seen[0], pos_fill[0], pos_capacity, half_life, n_events
            )
            if slot >= 0:
                if keep_rows:
                    event_copy(X, indptr, indices, data, i, pos_X, slot)
                pos_fill[0] = filled_after(slot, pos_fill[0], pos_seen[0], pos_capacity, half_life)
        else:
            neg_seen[0] += 1
            admit = admission_level >= 1.0 or score >= quantile[0]
            if admission_level < 1.0:
                track_quantile(quantile, score, admission_level)
            if admit:
                neg_admitted[0] += 1
                slot = class_reservoir_slot(
                    rng_state, neg_admitted[0], neg_fill[0], neg_capacity, half_life, n_events
                )
                if slot >= 0:
                    if keep_rows:
                        event_copy(X, indptr, indices, data, i, neg_X, slot)
                    neg_fill[0] = filled_after(
                        slot, neg_fill[0], neg_admitted[0], neg_capacity, half_life
                    )
        since_update[0] += 1
        if since_update[0] >= interval:
            since_update[0] = 0
            if solver_steps(w, n_solver_steps, pos_X, pos_fill, neg_X, neg_fill, neg_seen,
                            neg_admitted, alpha, beta, lam, eta0, min_norm, inner_steps,
                            grad, auc_weight, half_life, pos_seen[0] + neg_seen[0],
                            pos_capacity + neg_capacity):  # fmt: skip
                n_updates[0] += 1
                interval = doubling_interval(first_update_every, update_every, n_updates[0])
