"""OAM kernels (Zhao, Jin, Yang, Hoi, ICML 2011; Natole thesis §2.2, Algorithms 4-7).

Arrays and scalars in, arrays mutated in place; the caller (``core.learners.oam``) validates.

Per event ``(x_t, y_t)`` (thesis Alg. 4; docs/algorithms/oam.md (oam.3)-(oam.4) and its Errata):

1. pre-update score ``w · x_t`` (prequential);
2. the event's class count ``N_y`` grows by one and ``x_t`` enters that class's reservoir buffer
   (Vitter's Algorithm R = thesis Alg. 5);
3. ``C_t = C · max(1, N_opp / capacity_opp)`` and ``w`` is updated against every row of the
   *opposite* buffer: a passive-aggressive step per row (OAMseq, Alg. 6) or one gradient step
   whose hinge tests all use the pre-update ``w`` (OAMgra, Alg. 7).

Buffers come in two layouts: dense rows (``buffer[slot, :]``) and fixed-capacity sparse rows
(``indices[slot, :nnz[slot]]``, ``values[slot, :nnz[slot]]``).  Only the first ``fill`` slots of a
buffer are ever read, so the zero rows of a buffer that has not filled yet are never used.

Dot products use four independent accumulators: numba keeps ``fastmath`` off (bit-for-bit
reproducibility), so a single accumulator would serialise on the floating-point add latency.
The summation order is fixed, so results stay deterministic.
"""

from collections import namedtuple

import numpy as np

from core._kernels._config import inlined_kernel, kernel
from core._kernels._linalg import dot_dense4, dot_sparse
from core._kernels.forgetting import class_reservoir_slot, filled_after, represented
from core._kernels.random import reservoir_slot as reservoir_slot  # tests draw with it

#: The learned arrays with dense buffers (one row per buffered event).
OAMState = namedtuple("OAMState", ["w", "buffer_pos", "buffer_neg", "fill_pos", "fill_neg",
                                   "count_pos", "count_neg", "rng_state"])  # fmt: skip
#: The learned arrays with sparse buffers (``max_nnz`` index/value slots per buffered event).
OAMSparseState = namedtuple("OAMSparseState", [
    "w", "pos_indices", "pos_values", "pos_nnz", "neg_indices", "neg_values", "neg_nnz",
    "fill_pos", "fill_neg", "count_pos", "count_neg", "rng_state",
])  # fmt: skip
#: Hyper-parameters: ``C``, whether the variant is OAMgra (else OAMseq) and the half-life of
#: the reservoirs (docs/algorithms/oam.md (oam.6)-(oam.7); 0.0: uniform reservoirs).
OAMOptions = namedtuple("OAMOptions", ["C", "gradient", "half_life"])


@kernel
def _squared_distance(x, b):
    """``||x - b||²`` (four accumulators)."""
    n = x.shape[0]
    q0 = 0.0
    q1 = 0.0
    q2 = 0.0
    q3 = 0.0
    i = 0
    while i + 4 <= n:
        d0 = x[i] - b[i]
        d1 = x[i + 1] - b[i + 1]
        d2 = x[i + 2] - b[i + 2]
        d3 = x[i + 3] - b[i + 3]
        q0 += d0 * d0
        q1 += d1 * d1
        q2 += d2 * d2
        q3 += d3 * d3
        i += 4
    while i < n:
        d0 = x[i] - b[i]
        q0 += d0 * d0
        i += 1
    return (q0 + q1) + (q2 + q3)


@kernel
def _axpy_diff(w, coefficient, x, b):
    """``w += coefficient · (x - b)``."""
    for i in range(x.shape[0]):
        w[i] += coefficient * (x[i] - b[i])


@kernel
def _update_dense(x, label, w, score, buffer, fill, weight, gradient, violated):
    """UpdateClassifier against a dense buffer (thesis Alg. 6 / Alg. 7); ``score = w · x``.

    ``w · (x - b)`` is computed as ``w · x - w · b`` (2 flops per entry instead of 3, and
    ``w · x`` is shared by all rows), and ``||x - b||²`` only for rows whose hinge is active
    (about one in eight once the model has settled), so a row that needs no update costs one
    dot product.
    """
    if gradient:
        # OAMgra (Alg. 7): every hinge test uses the pre-update w, so test all rows first.
        for row in range(fill):
            violated[row] = label * (score - dot_dense4(w, buffer[row])) <= 1.0
        coefficient = weight * label * 0.5  # C_t y_t (x_t - x) / 2; the halving is exact
        for row in range(fill):
            if violated[row]:
                _axpy_diff(w, coefficient, x, buffer[row])
        return
    half_weight = 0.5 * weight
    for row in range(fill):
        # OAMseq (Alg. 6, eq. 2.8, errata 2): PA-I step on u = y (x_t - x),
        # tau = min(C_t / 2, max(0, 1 - w·u) / ||u||²); a pair with u = 0 is skipped.
        loss = 1.0 - label * (score - dot_dense4(w, buffer[row]))
        if loss > 0.0:
            norm2 = _squared_distance(x, buffer[row])
            if norm2 > 0.0:
                tau = min(half_weight, loss / norm2)
                _axpy_diff(w, tau * label, x, buffer[row])
                score = dot_dense4(w, x)


@inlined_kernel
def _admit(positive, count_pos, count_neg, fill_pos, fill_neg, capacity_pos, capacity_neg,
           rng_state, C, half_life):  # fmt: skip
    """What an event does before its steps, whatever the buffers' layout (thesis Alg. 4-5):
    its class's count grows by one and its class's reservoir draws a slot for it, whose fill
    this updates (the caller stores the row there; -1: not kept).  Returns the slot and the
    weight ``C_t`` of the event's steps against the opposite buffer.  Inlined, and it chooses
    scalars by the class, never arrays (each array chosen by a condition costs reference
    counts, per event)."""
    if positive:
        count_pos[0] += 1
    else:
        count_neg[0] += 1
    total = count_pos[0] + count_neg[0]
    count_own = count_pos[0] if positive else count_neg[0]
    fill_own = fill_pos[0] if positive else fill_neg[0]
    capacity = capacity_pos if positive else capacity_neg
    slot = class_reservoir_slot(rng_state, count_own, fill_own, capacity, half_life, total)
    if slot >= 0:
        fill_own = filled_after(slot, fill_own, count_own, capacity, half_life)
        if positive:
            fill_pos[0] = fill_own
        else:
            fill_neg[0] = fill_own
    # C_t = C max(1, N_opp^t / N_opp) (errata 1); N_opp^t within the half-life (oam.7)
    count_opposite = count_neg[0] if positive else count_pos[0]
    capacity_opposite = capacity_neg if positive else capacity_pos
    n_opposite = represented(count_opposite, total, half_life)
    return slot, C * max(1.0, n_opposite / capacity_opposite)


@kernel
def _event_dense(x, label, score, state, options, violated):
    w, buffer_pos, buffer_neg, fill_pos, fill_neg, count_pos, count_neg, rng_state = state
    C, gradient, half_life = options
    positive = label > 0
    slot, weight = _admit(
        positive, count_pos, count_neg, fill_pos, fill_neg, buffer_pos.shape[0],
        buffer_neg.shape[0], rng_state, C, half_life,
    )  # fmt: skip
    if positive:
        own, opposite, fill_opposite = buffer_pos, buffer_neg, fill_neg
    else:
        own, opposite, fill_opposite = buffer_neg, buffer_pos, fill_pos
    if slot >= 0:
        own[slot, :] = x
    sign = 1.0 if positive else -1.0
    _update_dense(x, sign, w, score, opposite, fill_opposite[0], weight, gradient, violated)


@inlined_kernel
def _scatter(x, w, indices, data, start, end):
    """Write the CSR row ``start:end`` into ``x`` (zero at its columns) and return ``w · x``,
    summed in the order of the row's stored entries."""
    total = 0.0
    for k in range(start, end):
        x[indices[k]] = data[k]
        total += w[indices[k]] * data[k]
    return total


@kernel
def oam_learn_dense(X, y, scores, state, options):
    """Learn a dense batch in order with dense buffers (``state``: :data:`OAMState`,
    ``options``: :data:`OAMOptions`); ``scores`` (length 0 or n) gets the pre-update score of
    each event."""
    w, buffer_pos, buffer_neg = state.w, state.buffer_pos, state.buffer_neg
    want_scores = scores.shape[0] > 0
    violated = np.zeros(max(buffer_pos.shape[0], buffer_neg.shape[0]), dtype=np.bool_)
    for t in range(X.shape[0]):
        x = X[t]
        score = dot_dense4(w, x)
        if want_scores:
            scores[t] = score
        _event_dense(x, y[t], score, state, options, violated)


@kernel
def oam_learn_csr_dense_buffers(indptr, indices, data, y, scores, state, options):
    """Sparse batch, dense buffers: each row is scattered into a dense work row."""
    w, buffer_pos, buffer_neg = state.w, state.buffer_pos, state.buffer_neg
    want_scores = scores.shape[0] > 0
    violated = np.zeros(max(buffer_pos.shape[0], buffer_neg.shape[0]), dtype=np.bool_)
    x = np.zeros(w.shape[0])
    for t in range(indptr.shape[0] - 1):
        start = indptr[t]
        end = indptr[t + 1]
        total = _scatter(x, w, indices, data, start, end)
        if want_scores:
            scores[t] = total
        _event_dense(x, y[t], total, state, options, violated)
        for k in range(start, end):
            x[indices[k]] = 0.0


# ---------------------------------------------------------------------- sparse buffers
@kernel
def _sparse_squared_distance(x_dense, x_indices, x_values, b_indices, b_values, b_nnz, mark,
                             stamp):  # fmt: skip
    """``||x - b||²`` over the union of the supports, O(nnz(x) + nnz(b)).

    ``x_dense`` holds x scattered (zero elsewhere); afterwards ``mark[j] == stamp`` flags b's
    support, which :func:`_sparse_axpy_diff` reuses.
    """
    norm2 = 0.0
    for k in range(b_nnz):
        j = b_indices[k]
        mark[j] = stamp
        difference = x_dense[j] - b_values[k]
        norm2 += difference * difference
    for k in range(x_indices.shape[0]):
        if mark[x_indices[k]] != stamp:
            norm2 += x_values[k] * x_values[k]
    return norm2


@kernel
def _sparse_axpy_diff(w, coefficient, event, b_indices, b_values, b_nnz, mark, stamp):
    """``w += coefficient · (x - b)`` on the union of the supports (b's marked with stamp);
    ``event`` is ``(x scattered, x's indices, x's values)``."""
    x_dense, x_indices, x_values = event
    for k in range(b_nnz):
        j = b_indices[k]
        w[j] += coefficient * (x_dense[j] - b_values[k])
    for k in range(x_indices.shape[0]):
        i = x_indices[k]
        if mark[i] != stamp:
            w[i] += coefficient * x_values[k]


@kernel
def _update_sparse(event, label, w, score, buffer, fill, weight, gradient, scratch, stamp):
    """UpdateClassifier against a sparse buffer (as :func:`_update_dense`: margins as
    ``w · x - w · b``, the union of supports only for active hinges); returns the last stamp."""
    x_dense, x_indices, x_values = event
    b_indices, b_values, b_nnz = buffer
    violated, mark = scratch
    if gradient:
        for row in range(fill):  # Alg. 7: tests with the pre-update w
            margin = score - dot_sparse(w, b_indices[row], b_values[row], 0, b_nnz[row])
            violated[row] = label * margin <= 1.0
        coefficient = weight * label * 0.5
        for row in range(fill):
            if violated[row]:
                stamp += 1
                for k in range(b_nnz[row]):
                    mark[b_indices[row, k]] = stamp
                _sparse_axpy_diff(
                    w, coefficient, event, b_indices[row], b_values[row], b_nnz[row], mark, stamp
                )
        return stamp
    half_weight = 0.5 * weight
    for row in range(fill):  # Alg. 6, PA-I step per buffered row
        loss = 1.0 - label * (score - dot_sparse(w, b_indices[row], b_values[row], 0, b_nnz[row]))
        if loss > 0.0:
            stamp += 1
            norm2 = _sparse_squared_distance(
                x_dense, x_indices, x_values, b_indices[row], b_values[row], b_nnz[row], mark,
                stamp,
            )  # fmt: skip
            if norm2 > 0.0:
                tau = min(half_weight, loss / norm2)
                _sparse_axpy_diff(
                    w, tau * label, event, b_indices[row], b_values[row], b_nnz[row], mark, stamp
                )
                score = dot_sparse(w, x_indices, x_values, 0, x_indices.shape[0])
    return stamp


@kernel
def _store_sparse_row(b_indices, b_values, b_nnz, slot, x_indices, x_values):
    n = x_indices.shape[0]
    b_indices[slot, :n] = x_indices
    b_values[slot, :n] = x_values
    b_indices[slot, n:] = 0
    b_values[slot, n:] = 0.0
    b_nnz[slot] = n


@kernel
def oam_learn_csr(indptr, indices, data, y, scores, state, options):
    """Sparse batch, sparse buffers (:data:`OAMSparseState`, rows of at most
    ``pos_indices.shape[1]`` entries; the caller checked): O(buffer · nnz) per event after an
    O(nnz) scatter."""
    (w, pos_indices, pos_values, pos_nnz, neg_indices, neg_values, neg_nnz, fill_pos, fill_neg,
     count_pos, count_neg, rng_state) = state  # fmt: skip
    C, gradient, half_life = options
    positives = (pos_indices, pos_values, pos_nnz)
    negatives = (neg_indices, neg_values, neg_nnz)
    want_scores = scores.shape[0] > 0
    capacity_pos = pos_indices.shape[0]
    capacity_neg = neg_indices.shape[0]
    violated = np.zeros(max(capacity_pos, capacity_neg), dtype=np.bool_)
    x_dense = np.zeros(w.shape[0])
    mark = np.zeros(w.shape[0], dtype=np.int64)
    scratch = (violated, mark)
    stamp = 0
    for t in range(indptr.shape[0] - 1):
        start = indptr[t]
        end = indptr[t + 1]
        x_indices = indices[start:end]
        x_values = data[start:end]
        event = (x_dense, x_indices, x_values)
        total = _scatter(x_dense, w, indices, data, start, end)
        if want_scores:
            scores[t] = total
        positive = y[t] > 0
        slot, weight = _admit(
            positive, count_pos, count_neg, fill_pos, fill_neg, capacity_pos, capacity_neg,
            rng_state, C, half_life,
        )  # fmt: skip
        # each branch names its arrays (an array chosen by a condition costs reference counts)
        if positive:
            if slot >= 0:
                _store_sparse_row(pos_indices, pos_values, pos_nnz, slot, x_indices, x_values)
            stamp = _update_sparse(
                event, 1.0, w, total, negatives, fill_neg[0], weight, gradient, scratch, stamp
            )
        else:
            if slot >= 0:
                _store_sparse_row(neg_indices, neg_values, neg_nnz, slot, x_indices, x_values)
            stamp = _update_sparse(
                event, -1.0, w, total, positives, fill_pos[0], weight, gradient, scratch, stamp
            )
        for k in range(start, end):
            x_dense[indices[k]] = 0.0
