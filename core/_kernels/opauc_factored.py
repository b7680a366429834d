"""Plain OPAUC with rank-k sketches on CSR rows: the factored form (docs/algorithms/opauc.md).

The batch kernel is :func:`core._kernels.opauc_sketch.opauc_sketch_learn`; this module holds the
parts that share the basis layout described below: slot bookkeeping, the factored shrink, the
rebuild, the per-event step and the materialisation before a dense call.
"""

from collections import namedtuple

import numpy as np

from core._kernels._config import inlined_kernel, kernel
from core._kernels.covariance import shrink_combination
from core._kernels.opauc import step_size

#: Scratch arrays of :func:`factored_event`, allocated once per batch (:func:`factored_work`).
FactoredWork = namedtuple("FactoredWork", ["products", "used", "block", "gw", "p", "new_rows"])


@kernel
def factored_work(n_slots, size, d):
    """The scratch of :func:`factored_event` for a basis of ``n_slots`` slots and class
    sketches of ``size`` rows of ``d`` features (``products`` zeroed again per event)."""
    used = np.empty(n_slots, dtype=np.int64)
    block = np.empty(n_slots, dtype=np.int64)
    return FactoredWork(np.zeros(n_slots), used, block, np.zeros(n_slots), np.zeros(size),
                        np.empty((size + 2, d)))  # fmt: skip


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
# same frequent-directions step as :func:`sketch_shrink`, done on ``M_s R Rᵀ M_sᵀ`` (the
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
@inlined_kernel
def _append_slots(slots, n, first, count):
    """``slots[n : n + count] = first, first + 1, ...``; returns ``n + count``."""
    for j in range(count):
        slots[n + j] = first + j
    return n + count


@kernel
def _block_slots(s, size, length, base_rows, buffer_rows, block):
    """Slots of class ``s``'s block (its materialised rows, its mean, its buffered rows)."""
    n = _append_slots(block, 0, s * size, base_rows[s])
    n = _append_slots(block, n, 2 * size + 1 + s, 1)
    return _append_slots(block, n, 2 * size + 3 + s * length, buffer_rows[s])


@kernel
def _used_slots(size, length, base_rows, buffer_rows, used):
    """Every slot in use, in a fixed order (sums over slots follow it): both classes'
    materialised rows, ``v`` and the two means, both classes' buffered rows."""
    n = _append_slots(used, 0, 0, base_rows[0])
    n = _append_slots(used, n, size, base_rows[1])
    n = _append_slots(used, n, 2 * size, 3)
    n = _append_slots(used, n, 2 * size + 3, buffer_rows[0])
    return _append_slots(used, n, 2 * size + 3 + length, buffer_rows[1])


@kernel
def _factored_shrink(s, rank, gram, sketch_map, rows, block, n_block):
    """Frequent-directions shrink of class ``s``'s full sketch ``B = M R`` (as
    :func:`sketch_shrink`): ``B Bᵀ = M (R Rᵀ) Mᵀ = U Λ Uᵀ``, ``M <- E M`` with
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
    combination = np.zeros((rank, m))
    kept, _, _ = shrink_combination(sketch_gram, rank, combination)
    new_map = np.dot(combination, sub_map)
    for e in range(m):
        for b in range(n_block):
            sketch_map[s, e, block[b]] = new_map[e, b] if e < kept else 0.0
    rows[0] = kept


@kernel
def _rebuild(s, state, rank, new_rows, block, used):
    """Materialise class ``s``: its sketch rows ``M_s R`` become its new ``Q_s``, its current
    mean its new ``c_s``, and ``w``'s part on the class's slots is folded into ``v``; the
    Gram is mapped to the new slots (new = K · old, so the products are ``K G`` and
    ``K G Kᵀ``); the class's buffer is emptied and ``M_s = I``."""
    coef, gram, sketch_map = state.coef, state.basis_gram, state.sketch_map
    base_rows, base_count, buffer_rows = state.base_rows, state.base_count, state.buffer_rows
    buffer_indptr, buffer_indices = state.buffer_indptr, state.buffer_indices
    buffer_data, w_direct = state.buffer_data, state.w_direct
    mean = state.mean_pos if s == 0 else state.mean_neg
    sketch = state.sketch_pos if s == 0 else state.sketch_neg
    rows = state.rows_pos if s == 0 else state.rows_neg
    count = state.count_pos if s == 0 else state.count_neg
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
def factored_event(x, start, stop, indices, data, label, state, options, work):
    """One plain OPAUC event on the factored state (comment above), CSR row ``start:stop``
    (also scattered into the zero work row ``x``); returns the pre-update score."""
    w_direct, coef, gram, sketch_map = (
        state.w_direct,
        state.coef,
        state.basis_gram,
        state.sketch_map,
    )
    base_rows, base_count, buffer_rows = state.base_rows, state.base_count, state.buffer_rows
    buffer_indptr, buffer_indices = state.buffer_indptr, state.buffer_indices
    buffer_data, sq_norm_mean = state.buffer_data, state.sq_norm_mean
    means = (state.mean_pos, state.mean_neg)
    sketches = (state.sketch_pos, state.sketch_neg)
    rows = (state.rows_pos, state.rows_neg)
    counts = (state.count_pos, state.count_neg)
    lam, eta, auto_eta, rank = options
    products, used, block, gw, p, new_rows = work
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
        _rebuild(own, state, rank, new_rows, block, used)
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
    step = step_size(eta, auto_eta, squared_norm, sq_norm_mean, counts[0][0] + counts[1][0])
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
        _rebuild(own, state, rank, new_rows, block, used)
    return score


@kernel
def materialise(state, rank):
    """Bring the factored state to the layout :func:`_lazy_event` works on (empty buffers,
    ``M = I``, no coefficient on the means): rebuild each class with buffered rows, then fold
    the means' coefficients into ``v``.  Nothing to do after dense events."""
    coef, gram, w_direct = state.coef, state.basis_gram, state.w_direct
    buffer_rows = state.buffer_rows
    means = (state.mean_pos, state.mean_neg)
    size = 2 * rank
    n_slots = coef.shape[0]
    for s in range(2):
        if buffer_rows[s] > 0:
            new_rows = np.empty((size + 2, w_direct.shape[0]))
            block = np.empty(n_slots, dtype=np.int64)
            used = np.empty(n_slots, dtype=np.int64)
            _rebuild(s, state, rank, new_rows, block, used)
    _fold_means(coef, gram, w_direct, means[0], means[1], size)
