"""Plain OPAUC with rank-k frequent-directions sketches (docs/algorithms/opauc.md): ``w`` kept as
``w_direct + B_posᵀ a_pos + B_negᵀ a_neg`` so a step is an O(k) change of the coefficients.

Dense rows go through :func:`_lazy_event` here; CSR rows through the factored form of
:mod:`core._kernels.opauc_factored`; :func:`opauc_sketch_learn` is the batch kernel of both.
"""

from collections import namedtuple

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import blas_dot
from core._kernels.covariance import shrink_combination
from core._kernels.opauc import step_size
from core._kernels.opauc_factored import factored_event, factored_work, materialise

#: The learned arrays of plain OPAUC with sketches (``coef`` / ``basis_gram``: the basis ``R``).
SketchState = namedtuple("SketchState", [
    "w", "w_direct", "coef", "basis_gram", "sketch_map", "base_rows", "base_count",
    "buffer_rows", "buffer_indptr", "buffer_indices", "buffer_data", "mean_pos", "mean_neg",
    "sketch_pos", "sketch_neg", "rows_pos", "rows_neg", "count_pos", "count_neg", "sq_norm_mean",
])  # fmt: skip
#: Its hyper-parameters.
SketchOptions = namedtuple("SketchOptions", ["lam", "eta", "auto_eta", "rank"])
#: The products :func:`_lazy_event` keeps up to date (copies of blocks of ``basis_gram``).
LazyProducts = namedtuple("LazyProducts", ["coef", "gram", "direct_products", "mean_products",
                                           "mean_direct", "mean_gram"])  # fmt: skip
#: Scratch arrays of :func:`_lazy_event`.
LazyWork = namedtuple("LazyWork", ["products", "centred", "combination", "new_rows"])


# ---------------------------------------------------------------------- plain OPAUC, rank k
# [CHOICE] Plain OPAUC with a sketch keeps ``w`` in two parts,
#
#     w = w_direct + B_posᵀ a_pos + B_negᵀ a_neg,
#
# so the ``- η Bᵀ(B w)/T`` part of every step is an O(k) change of the coefficients ``a``
# instead of two passes over the ``2k × d`` sketch.  The products the step needs are kept up to
# date in O(k²) per event: the joint Gram ``J`` of the rows of both sketches, ``B w_direct``,
# ``B c`` for both class means, ``c · w_direct`` and ``c · c``.  Per event the kernel touches
# the sketches only through ``B x`` (a BLAS ``gemv``); the rest is two O(d) passes (mean and
# new sketch row; ``w_direct``) and ``b · b`` for the new row.  When a sketch shrinks,
# ``B_sᵀ a_s`` is flushed into ``w_direct`` (one BLAS ``gemm`` computes the new rows and the
# flush together).  The
# served ``w`` is written at the end of each call from the parts, so it is a function of the
# state alone.  The frequent-directions algorithm is unchanged (same rows as
# :func:`sketch_shrink` up to rounding; the shrink's Gram is the kept one, not recomputed).
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
# independent of ``OPENBLAS_NUM_THREADS`` (see :func:`blas_dot`).  Run with
# ``OPENBLAS_NUM_THREADS=1``: OpenBLAS threads these ``gemv``/``gemm`` sizes, and on a busy
# machine the threaded calls wait for a second core (the bench sets it).
#
# This is the dense path (``_lazy_event``).  CSR input uses the factored form further down
# (``factored_event``), which holds this layout as its special case of empty buffers; the
# products above (``J``, ``B w_direct``, ``B c``, ``c · w_direct``, ``c · c``) are blocks of
# its basis Gram ``basis_gram``.
#
# Cost: a dense event is bounded by memory traffic, not arithmetic: ``B x`` reads both
# sketches from L3 every event (``w`` moves along a dense ``z`` every step, so every exact
# per-event method must read the opposite sketch once per event).  Only several events per
# pass over the sketches would cut that, and batch = one-at-a-time bit for bit then needs a
# product whose summation order does not depend on the grouping: not BLAS (OpenBLAS forwards a
# one-column ``gemm`` to ``gemv``), but a numba kernel, which measured slower than the
# memory-bound ``gemv``.  The factored form does not help dense rows either: buffered dense rows
# add a dot per row per event and make the rebuild (k+1+L)·k·d, more work than the shrink
# ``gemm``.  The figures (per event, by part, and of the blocked kernels tried):
# bench/README.md, "OPAUC's low-rank sketch".
@kernel
def _sketch_times_row(sketch, m, x, out):
    """``out[r] = sketch[r] · x`` for ``r < m``: one BLAS ``gemv``."""
    if m > 0:
        np.dot(sketch[:m], x, out[:m])


@kernel
def _lazy_shrink(sketch, rows, offset, rank, w_direct, kept, work):
    """Frequent-directions shrink of one full sketch (``2k`` rows, joint rows ``offset ..``),
    with the Gram taken from ``gram`` instead of recomputed.

    As in :func:`sketch_shrink`: ``B Bᵀ = U Λ Uᵀ``, ``θ`` the (k+1)-th largest eigenvalue,
    new rows ``M B`` with ``M_e = sqrt((λ_e - θ)/λ_e) u_eᵀ`` for the top ``k`` eigenvalues
    ``λ_e > θ``.  Before the rows change, ``Bᵀ a`` is added to ``w_direct`` (it could not be
    expressed in the new rows), which changes ``B' w_direct`` by ``B' Bᵀ a`` for every row
    ``B'`` of both sketches.  The maintained products are mapped by ``M``; the new rows are
    orthogonal, so their Gram block is ``diag(λ_e - θ)``.
    """
    coef, gram, direct_products, mean_products, mean_direct, _ = kept
    products, _, combination, new_rows = work
    m = rows[0]
    total = gram.shape[0]
    block = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            block[i, j] = gram[offset + i, offset + j]
    combination[:] = 0.0
    kept, values, threshold = shrink_combination(block, rank, combination)
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
def _lazy_event(x, label, kept, state, options, work):
    """One plain OPAUC event (a dense row) on the split ``w`` (see the comment above); returns
    the pre-update score ``w · x``.

    Besides the sketch products, ``mean_direct[a] = c_a · w_direct`` and
    ``mean_gram[a, b] = c_a · c_b`` (index 0 positive, 1 negative) are kept up to date, so
    the products of the new sketch row ``b = sqrt((T-1)/T) δ`` and of ``z = x - c_opp`` with
    the dense vectors follow from ``x``'s own products instead of O(d) dot products; only
    ``b · b`` (the Gram diagonal, which the shrink's eigenvalues rest on) and ``b · x`` are
    computed directly.
    """
    coef, gram, direct_products, mean_products, mean_direct, mean_gram = kept
    w_direct, sq_norm_mean = state.w_direct, state.sq_norm_mean
    mean_pos, mean_neg = state.mean_pos, state.mean_neg
    sketch_pos, sketch_neg = state.sketch_pos, state.sketch_neg
    rows_pos, rows_neg = state.rows_pos, state.rows_neg
    count_pos, count_neg = state.count_pos, state.count_neg
    lam, eta, auto_eta, rank = options
    products, centred, combination, new_rows = work
    size = 2 * rank
    # 1. B x for both sketches; x · w_direct, x · x, x · c_pos, x · c_neg; the score
    products[:] = 0.0
    _sketch_times_row(sketch_pos, rows_pos[0], x, products[:size])
    _sketch_times_row(sketch_neg, rows_neg[0], x, products[size:])
    direct_score = blas_dot(w_direct, x)
    squared_norm = blas_dot(x, x)
    x_mean_pos = blas_dot(mean_pos, x)
    x_mean_neg = blas_dot(mean_neg, x)
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
        row_square = blas_dot(new_row, new_row)
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
        products[j] = blas_dot(new_row, x)
        rows_own[0] += 1
        if rows_own[0] == size:
            _lazy_shrink(sketch_own, rows_own, offset, rank, w_direct, kept, work)
    step = step_size(eta, auto_eta, squared_norm, sq_norm_mean, count_pos[0] + count_neg[0])
    if count_opp[0] == 0:
        return score  # no update until both classes were seen (docs/algorithms/opauc.md, Choices)
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


@kernel
def _dense_sketch_batch(X, y, scores, want_scores, state, options):
    """Dense rows through :func:`_lazy_event`, on the basis Gram's blocks (copied out and back:
    ``gram`` = the sketch rows' block, ``direct_products`` = ``B v``, ``mean_products`` =
    ``B c``, ``mean_direct`` = ``c · v``, ``mean_gram`` = ``c · c``)."""
    coef, basis_gram, w_direct = state.coef, state.basis_gram, state.w_direct
    rank = options.rank
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
    kept = LazyProducts(sketch_coef, gram, direct_products, mean_products, mean_direct, mean_gram)
    work = LazyWork(products, centred, combination, new_rows)
    for t in range(X.shape[0]):
        score = _lazy_event(X[t], y[t], kept, state, options, work)
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
def opauc_sketch_learn(batch, y, scores, state, options):
    """Plain OPAUC with rank-``k`` frequent-directions sketches: learn a batch in order
    (CSR rows on the factored state, dense rows on the materialised one, see the comments
    above), ``scores`` (length 0 or n) gets each pre-update score, and ``w`` is written from
    the parts at the end."""
    X, indptr, indices, data, sparse = batch
    (w, w_direct, coef, basis_gram, sketch_map, base_rows, base_count, buffer_rows,
     buffer_indptr, buffer_indices, buffer_data, mean_pos, mean_neg, sketch_pos, sketch_neg,
     rows_pos, rows_neg, count_pos, count_neg, sq_norm_mean) = state  # fmt: skip
    rank = options.rank
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
        x = np.zeros(d)
        work = factored_work(coef.shape[0], size, d)
        products = work.products
        for t in range(indptr.shape[0] - 1):
            start = indptr[t]
            stop = indptr[t + 1]
            for k in range(start, stop):
                x[indices[k]] = data[k]
            products[:] = 0.0
            score = factored_event(x, start, stop, indices, data, y[t], state, options, work)
            if want_scores:
                scores[t] = score
            for k in range(start, stop):
                x[indices[k]] = 0.0
    elif X.shape[0] > 0:
        materialise(state, rank)
        _dense_sketch_batch(X, y, scores, want_scores, state, options)
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
