"""regSOLAM kernels: Natole thesis ch. 3, Alg. 18; docs/algorithms/solam.md (solam.1)-(solam.10)
and its Errata.  lambda = 0 is SOLAM (Ying, Wen, Lyu 2016).

State layout (the same for dense and CSR input, see core._kernels.spam for the idea):

* ``w = w_scale * w_unscaled`` and ``w_sq_norm = ||w_unscaled||^2``: the L2 shrink
  ``(1 - gamma lambda)`` and the projection onto the ball only change the scale, and the squared
  norm after ``w_unscaled += c x`` is ``sq + 2 c (w_unscaled . x) + c^2 ||x||^2``, so a step costs
  O(nnz(x)).  A scale below 1e-3 in absolute value is folded into the vector (O(n_features),
  rare; ``w_sq_norm`` is recomputed exactly then).
* the sum of the pre-update iterates, ``sum_t w_t``, is ``avg_offset + avg_coef * w_unscaled``,
  and the averaged iterate is that over ``gamma_sum`` (the number of averaged iterates; the
  name is kept from the step-size-weighted average of Alg. 18, see core.learners.solam).

Kernels take arrays and scalars only, validate nothing and read no globals.  They inline helpers
from core._kernels.spam; numba's disk cache only watches this file, which is why
:func:`core._kernels._config.drop_stale_cache` fingerprints every kernel source.
"""

import numpy as np

from core._kernels._config import inlined_kernel, kernel
from core._kernels._linalg import dot_dense
from core._kernels.forgetting import advance, inflation, scale_in_place, step_count
from core._kernels.spam import (
    capped_rate,
    csr_row_in_order,
    fold_scale,
    mean_sq_norm,
    served_score,
)
from core._kernels.validation import ROW_SQUARED_NORM_BOUND


@kernel
def _fold(w_unscaled, w_scale, w_sq_norm, avg_offset, avg_coef, average):
    fold_scale(w_unscaled, w_scale, avg_offset, avg_coef, average)
    w_sq_norm[0] = dot_dense(w_unscaled, w_unscaled)


@kernel
def _clip(value, bound):
    return min(max(value, -bound), bound)


@inlined_kernel  # called per event with scalars only: inlined, faster (bench/README.md)
def solam_step(positive, s, xx, t, q, sq_norm_sum, max_norm, a, b, alpha, eta0, l2, radius,
               kappa, half_life):  # fmt: skip
    """Everything of one event but the counts, the average and the O(nnz) vector update, on
    scalars: ``(a', b', alpha', shrink, step, limit)`` for
    ``w' = P_limit(shrink * w - step * x)``, from the score ``s = w . x``, the event's
    ``||x||^2`` ``xx``, ``a``, ``b``, ``alpha`` and the counts once the kernel counted the
    event: ``t`` events, ``q = p_t`` the share of positives (the weighted share when
    forgetting), ``sq_norm_sum`` and ``max_norm``.  Scalars in and out: see "Per-event code"
    in ``core._kernels.spam`` (with the 16 arrays it took, it cost a dozen reference counts
    per event).

    With ``half_life`` > 0 (docs/algorithms/solam.md (solam.12)-(solam.13)) ``gamma_t`` stops
    shrinking at ``t = half_life``.

    Thesis Alg. 18 in the normalised coordinates x~ = x / sqrt(nu), w~ = sqrt(nu) w (scores are
    unchanged); in w that is ``w' = P_{R / sqrt(nu)}((1 - gamma lambda) w - (gamma / nu) c_w x)``.
    """
    nu = mean_sq_norm(sq_norm_sum, t)
    inv_root_nu = 1.0 / np.sqrt(nu)
    gamma = eta0 / np.sqrt(step_count(t, half_life))  # gamma_t = zeta / sqrt(t), Cor. 3.4.1
    if kappa <= 0.0:  # kappa = sup ||x~||, estimated as the running maximum
        kappa = max_norm * inv_root_nu
    # partial derivatives of F_t, docs/algorithms/solam.md (solam.4) with q = p_t
    if positive:
        curvature = 2.0 * (1.0 - q)  # d coef_w / d s: capped step of core._kernels.spam
        coef_w = 2.0 * (1.0 - q) * (s - a) - 2.0 * (1.0 + alpha) * (1.0 - q)
        grad_a = -2.0 * (1.0 - q) * (s - a)
        grad_b = 0.0
        grad_alpha = -2.0 * (1.0 - q) * s - 2.0 * q * (1.0 - q) * alpha
    else:
        curvature = 2.0 * q
        coef_w = 2.0 * q * (s - b) + 2.0 * (1.0 + alpha) * q
        grad_a = 0.0
        grad_b = -2.0 * q * (s - b)
        grad_alpha = 2.0 * q * s - 2.0 * q * (1.0 - q) * alpha
    bound = radius * kappa  # Omega_1, Omega_2 of eq. (3.18), projections §4.1 [DERIVED]
    new_a = _clip(a - gamma * grad_a, bound)
    new_b = _clip(b - gamma * grad_b, bound)
    new_alpha = _clip(alpha + gamma * grad_alpha, 2.0 * bound)  # ascent (solam.6)
    shrink = 1.0 - gamma * l2
    # the data term's rate gamma / nu is capped for rows of large norm (spam.capped_rate);
    # the a, b, alpha and L2 steps keep gamma
    step = capped_rate(gamma / nu, curvature, xx) * coef_w
    return new_a, new_b, new_alpha, shrink, step, radius * inv_root_nu


@kernel
def solam_average(c, w_scale, a, b, alpha, avg_coef, avg_a, avg_b, avg_alpha, gamma_sum):
    """The iterate before the update joins the average: the uniform average of the
    PRE-update iterates ([CHOICE], core.learners.solam: Alg. 18 weights them by gamma_t, which
    puts half of the weight on the first quarter of the stream); ``gamma_sum`` counts the
    averaged iterates; (solam.13): each weighs ``c`` when forgetting (1.0 otherwise)."""
    avg_coef[0] += w_scale[0] * c
    avg_a[0] += a[0] * c
    avg_b[0] += b[0] * c
    avg_alpha[0] += alpha[0] * c
    gamma_sum[0] += c


@kernel
def _after_update(w_scale, w_sq_norm, shrink, limit):
    """Apply the shrink to the scale, then project onto ||w|| <= limit (only the scale moves)."""
    w_scale[0] *= shrink
    if w_sq_norm[0] < 0.0:  # rounding in the incremental update
        w_sq_norm[0] = 0.0
    sq_norm = w_scale[0] * w_scale[0] * w_sq_norm[0]
    if sq_norm > limit * limit:  # a square root only when projecting
        w_scale[0] *= limit / np.sqrt(sq_norm)


@kernel
def _forget_step(clock, epoch, half_life, class_weight, avg_offset, averages):
    """One event learned (forgetting.3): advance the clock and, when due, renormalise every
    weighted sum (``averages``: avg_coef, avg_a, avg_b, avg_alpha, gamma_sum)."""
    factor = advance(clock, epoch, half_life)
    if factor != 1.0:
        scale_in_place(class_weight, factor)
        scale_in_place(avg_offset, factor)
        for values in averages:
            scale_in_place(values, factor)


@kernel
def solam_rows(
    X, indptr, indices, data, y, scores,
    table, w_scale, w_sq_norm, a, b, alpha,
    avg_coef, avg_a, avg_b, avg_alpha, gamma_sum,
    n_seen, n_pos, sq_norm_sum, max_norm,
    eta0, l2, radius, kappa, average, forget, check_rows,
):  # fmt: skip
    """Learn dense rows ``X`` (``indptr``, ``indices``, ``data`` None) or CSR rows (``X``
    None) in order: one loop for both, whose tests on ``None`` numba prunes when it compiles
    each version, so each reads its rows as a loop written for it would, and the event's step
    is written once.  ``table`` is (2, n_features): rows w_unscaled and avg_offset (a
    transposed view of an interleaved buffer for wide models, so both values of a column share
    a cache line).  ``forget``: ``(half_life, clock, epoch, class_weight)`` (half_life 0.0:
    off).

    Returns the number of rows learned: all of them, or with ``check_rows`` the index of the
    first row whose ``||x||^2`` is above ``ROW_SQUARED_NORM_BOUND`` or, for CSR, whose columns
    are not in order, of which nothing was learned (as ``core._kernels.spam.spam_l2_dense``
    and ``spam_l2_csr``, whose notes on per-event code apply here too: the per-event code is
    written out in this loop, not passed to array-taking helpers).

    Dense rows: one pass for ``||x||^2``, ``w_unscaled . x``, ``||w_unscaled||^2`` (free in a
    dense pass, so exact here) and, for a prequential score, ``avg_offset . x``, two
    accumulators each (even and odd columns: the order of ``_linalg.dot_dense``).  CSR rows:
    O(nnz) per event (plus a rare O(n_features) fold), one pass gathers, one pass scatters
    (with 2**20 features each pass pays memory latency)."""
    half_life, clock, epoch, class_weight = forget
    averages = (avg_coef, avg_a, avg_b, avg_alpha, gamma_sum)
    want_scores = scores.shape[0] > 0
    with_average = want_scores and average
    n_features = table.shape[1]
    n_learned = y.shape[0]
    w_unscaled = table[0]  # the dense loops read rows of one dimension, as a dense kernel would
    avg_offset = table[1]
    for i in range(y.shape[0]):
        # the layout's tests: numba decides (and prunes) a test of an argument that is None, so
        # each layout is tested where the other's argument is None
        xx = 0.0
        vx = 0.0
        ax = 0.0
        start = np.uint64(0)
        end = np.uint64(0)
        if X is None:
            if indptr is not None:  # CSR rows
                start = np.uint64(indptr[i])  # unsigned: see spam_l2_csr
                end = np.uint64(indptr[i + 1])
                if check_rows and not csr_row_in_order(indices, start, end, n_features):
                    n_learned = i
                    break
                for k in range(start, end):
                    j = np.uint64(indices[k])
                    value = data[k]
                    xx += value * value
                    vx += table[0, j] * value
                    if with_average:
                        ax += table[1, j] * value
                if check_rows and not xx <= ROW_SQUARED_NORM_BOUND:
                    n_learned = i
                    break
        elif indptr is None:  # dense rows
            xx0 = 0.0
            xx1 = 0.0
            vx0 = 0.0
            vx1 = 0.0
            ww0 = 0.0
            ww1 = 0.0
            ax0 = 0.0
            ax1 = 0.0
            j = 0
            while j + 2 <= n_features:
                u = X[i, j]
                v = X[i, j + 1]
                xx0 += u * u
                xx1 += v * v
                vx0 += w_unscaled[j] * u
                vx1 += w_unscaled[j + 1] * v
                ww0 += w_unscaled[j] * w_unscaled[j]
                ww1 += w_unscaled[j + 1] * w_unscaled[j + 1]
                if with_average:
                    ax0 += avg_offset[j] * u
                    ax1 += avg_offset[j + 1] * v
                j += 2
            if j < n_features:
                u = X[i, j]
                xx0 += u * u
                vx0 += w_unscaled[j] * u
                ww0 += w_unscaled[j] * w_unscaled[j]
                if with_average:
                    ax0 += avg_offset[j] * u
            xx = xx0 + xx1
            vx = vx0 + vx1
            ax = ax0 + ax1
            if check_rows and not xx <= ROW_SQUARED_NORM_BOUND:
                n_learned = i
                break
            w_sq_norm[0] = ww0 + ww1
        c = inflation(clock, epoch, half_life)
        if want_scores:
            scores[i] = served_score(vx, ax, w_scale[0], avg_coef[0], gamma_sum[0], average)
        positive = y[i] > 0
        # the event joins the counts (p_t includes the current label, thesis §3.4)
        n_seen[0] += 1
        if positive:
            n_pos[0] += 1
        sq_norm_sum[0] += xx
        if xx > max_norm[0] * max_norm[0]:  # a square root only when the maximum moves
            max_norm[0] = np.sqrt(xx)
        t = n_seen[0]
        q = n_pos[0] / t
        if half_life > 0.0:
            class_weight[1 if positive else 0] += c
            q = class_weight[1] / (class_weight[0] + class_weight[1])
        new_a, new_b, new_alpha, shrink, step, limit = solam_step(
            positive, w_scale[0] * vx, xx, t, q, sq_norm_sum[0], max_norm[0], a[0], b[0],
            alpha[0], eta0, l2, radius, kappa, half_life,
        )  # fmt: skip
        if average:
            solam_average(c, w_scale, a, b, alpha, avg_coef, avg_a, avg_b, avg_alpha, gamma_sum)
        a[0] = new_a
        b[0] = new_b
        alpha[0] = new_alpha
        if abs(w_scale[0] * shrink) < 1e-3:  # includes shrink <= 0 (gamma lambda >= 1)
            w_scale[0] *= shrink
            shrink = 1.0
            vx *= w_scale[0]
            _fold(table[0], w_scale, w_sq_norm, table[1], avg_coef, average)
        # w' = shrink * w - step * x  =  (shrink * scale) * (w_unscaled + delta * x)
        delta = -step / (w_scale[0] * shrink)
        w_sq_norm[0] += delta * (2.0 * vx + delta * xx)
        shift = avg_coef[0] * delta
        if X is None:
            if indptr is not None:  # CSR rows
                if average:
                    for k in range(start, end):
                        j = np.uint64(indices[k])
                        table[0, j] += delta * data[k]
                        table[1, j] -= shift * data[k]
                else:
                    for k in range(start, end):
                        table[0, np.uint64(indices[k])] += delta * data[k]
        elif indptr is None:  # dense rows
            if average:
                for j in range(n_features):
                    w_unscaled[j] += delta * X[i, j]
                    avg_offset[j] -= shift * X[i, j]
            else:
                for j in range(n_features):
                    w_unscaled[j] += delta * X[i, j]
        _after_update(w_scale, w_sq_norm, shrink, limit)
        if half_life > 0.0:  # not a call per event when off: it passes seven arrays
            _forget_step(clock, epoch, half_life, class_weight, table[1], averages)
    return n_learned
