"""1PMB / 2PMB (Kar, Narasimhan, Jain 2014, §4, Algorithms 1 and 2) as one streaming kernel.

Loss codes (the wrapper maps names): 0 = pAUC (tight surrogate, [0, beta] or [alpha, beta]),
1 = Prec@k with a fixed fraction k, 2 = PRBEP (k = the buffer's share of positives).

The buffer and the positive reservoir are row stores: CSR arrays ``indptr`` (one more than
its rows), ``indices`` and ``values``, each row's columns increasing, each once, its zeros left
out, the entries past ``indptr[-1]`` zero.  A row is replaced in place, the rows after it
moved; an event is written when the store's arrays hold its entries and the event's (the
wrapper grows them when :func:`has_room` says no, so a store holds what its rows hold, not
``rows x n_features``).
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.forgetting import class_reservoir_slot, filled_after, step_count
from core._kernels.pauc_buffers import decision as decision  # the learner scores with it
from core._kernels.pauc_buffers import doubling_interval, event_dot, project_ball
from core._kernels.pauc_surrogate import prec_at_k_coefficients, tight_pauc_coefficients


@kernel
def sorted_event(X, indptr, indices, data, i, columns, values):
    """Event ``i``'s non-zero values (dense ``X``, or CSR when ``indptr`` is non-empty) into
    ``columns`` / ``values``, its columns increasing, each once (a duplicate index: the last
    wins); returns how many.  Zeros (stored ones, a duplicate's last value) take no entry."""
    count = 0
    if indptr.shape[0] == 0:
        for j in range(X.shape[1]):
            if X[i, j] != 0.0:
                columns[count] = j
                values[count] = X[i, j]
                count += 1
        return count
    # insertion sort (a hashed event has a few columns, usually in order already): the
    # epoch's sums run over each row's columns in the dense loop's order (row_dot)
    for k in range(indptr[i], indptr[i + 1]):
        column = indices[k]
        t = count
        while t > 0 and columns[t - 1] > column:
            t -= 1
        if t > 0 and columns[t - 1] == column:
            values[t - 1] = data[k]
            continue
        for u in range(count, t, -1):
            columns[u] = columns[u - 1]
            values[u] = values[u - 1]
        columns[t] = column
        values[t] = data[k]
        count += 1
    kept = 0
    for t in range(count):
        if values[t] != 0.0:
            columns[kept] = columns[t]
            values[kept] = values[t]
            kept += 1
    return kept


@kernel
def event_scratch(X, indptr, start):
    """Room for one event of the batch from ``start`` on (:func:`sorted_event`): its width
    (dense), or its longest CSR row."""
    if indptr.shape[0] == 0:
        return X.shape[1]
    longest = 0
    for i in range(start, indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    return longest


@kernel
def has_room(store_indptr, store_values, count, room, which):
    """Whether the store's entry arrays hold its entries and ``count`` more (a row of them
    written in place of any row); if not, ``room[which]`` gets the length needed and nothing
    changed, so the wrapper grows the store and learns again from this event."""
    needed = store_indptr[store_indptr.shape[0] - 1] + count
    if needed <= store_values.shape[0]:
        return True
    room[which] = needed
    return False


@kernel
def place_row(store_indptr, store_indices, store_values, slot, columns, values, count):
    """The ``count`` entries of ``columns`` / ``values`` as row ``slot`` of a store, in place of
    the row's previous ones, in O(``count`` + the entries after the row): those move by the
    difference, and the entries freed at the end are zeroed."""
    n_rows = store_indptr.shape[0] - 1
    total = store_indptr[n_rows]
    start, stop = store_indptr[slot], store_indptr[slot + 1]
    delta = count - (stop - start)
    if delta > 0:
        for t in range(total - 1, stop - 1, -1):
            store_indices[t + delta] = store_indices[t]
            store_values[t + delta] = store_values[t]
    elif delta < 0:
        for t in range(stop, total):
            store_indices[t + delta] = store_indices[t]
            store_values[t + delta] = store_values[t]
        for t in range(total + delta, total):
            store_indices[t] = 0
            store_values[t] = 0.0
    for t in range(count):
        store_indices[start + t] = columns[t]
        store_values[start + t] = values[t]
    if delta != 0:
        for r in range(slot + 1, n_rows + 1):
            store_indptr[r] += delta


@kernel
def clear_rows(store_indptr, store_indices, store_values):
    """Empty every row of a store (the buffer, once its epoch is used)."""
    for t in range(store_indptr[store_indptr.shape[0] - 1]):
        store_indices[t] = 0
        store_values[t] = 0.0
    for r in range(store_indptr.shape[0]):
        store_indptr[r] = 0


@kernel
def offer_positive(columns, values, count, pos_indptr, pos_indices, pos_values, pos_fill,
                   pos_seen, rng_state, half_life):  # fmt: skip
    """``pauc_buffers.reservoir_offer_forgetting`` of an event (its sorted entries,
    :func:`sorted_event`) to the positive reservoir, a row store (:func:`place_row`);
    ``half_life`` is in positives (the count of stream events the biased reservoir is given
    is ``pos_seen``)."""
    pos_seen[0] += 1
    capacity = pos_indptr.shape[0] - 1
    slot = class_reservoir_slot(
        rng_state, pos_seen[0], pos_fill[0], capacity, half_life, pos_seen[0]
    )
    if slot >= 0:
        place_row(pos_indptr, pos_indices, pos_values, slot, columns, values, count)
        pos_fill[0] = filled_after(slot, pos_fill[0], pos_seen[0], capacity, half_life)


@kernel
def row_dot(store_indptr, store_indices, store_values, row, w):
    """The row's dot product with ``w`` over its entries.  Bit for bit the dense sum
    (``pauc_buffers.dot_row``) of the same row: the columns run increasing, and a left-out
    term ``0 * w_j`` is a signed zero, which leaves a running sum started at +0.0 unchanged
    (such a sum never holds -0.0; ``w`` is finite)."""
    total = 0.0
    for t in range(store_indptr[row], store_indptr[row + 1]):
        total += store_values[t] * w[store_indices[t]]
    return total


@kernel
def add_row_terms(store_indptr, store_indices, store_values, rows, coef, scale, out):
    """``out += scale * sum_i coef_i x_{rows[i]}`` (``pauc_buffers.add_rows``) over each row's
    entries: bit for bit the dense sweep, since ``out`` starts at +0.0 and so never holds -0.0,
    the only value a left-out ``c * 0`` term would change."""
    for i in range(rows.shape[0]):
        c = coef[i]
        if c != 0.0:
            c *= scale
            row = rows[i]
            for t in range(store_indptr[row], store_indptr[row + 1]):
                out[store_indices[t]] += c * store_values[t]


@kernel
def pauc_rows_gradient(pos_indptr, pos_indices, pos_values, pos_rows, neg_indptr, neg_indices,
                       neg_values, neg_rows, w, alpha, beta, grad):  # fmt: skip
    """``pauc_buffers.pauc_gradient`` on rows of two stores (:func:`row_dot`,
    :func:`add_row_terms`): the value and subgradient of the same dense rows, bit for bit."""
    for j in range(grad.shape[0]):
        grad[j] = 0.0
    n_pos = pos_rows.shape[0]
    n_neg = neg_rows.shape[0]
    j_alpha = np.int64(np.floor(alpha * n_neg + 1e-9))
    j_beta = min(np.int64(np.ceil(beta * n_neg - 1e-9)), n_neg)
    if n_pos == 0 or n_neg == 0 or j_beta <= j_alpha:
        return 0.0, False
    pos_scores = np.empty(n_pos)
    neg_scores = np.empty(n_neg)
    for i in range(n_pos):
        pos_scores[i] = row_dot(pos_indptr, pos_indices, pos_values, pos_rows[i], w)
    for i in range(n_neg):
        neg_scores[i] = row_dot(neg_indptr, neg_indices, neg_values, neg_rows[i], w)
    pos_coef = np.empty(n_pos)
    neg_coef = np.empty(n_neg)
    value, _ = tight_pauc_coefficients(pos_scores, neg_scores, j_alpha, j_beta, pos_coef, neg_coef)
    scale = 1.0 / (n_pos * (j_beta - j_alpha))
    add_row_terms(pos_indptr, pos_indices, pos_values, pos_rows, pos_coef, scale, grad)
    add_row_terms(neg_indptr, neg_indices, neg_values, neg_rows, neg_coef, scale, grad)
    return value * scale, True


@kernel
def pairs_gradient(pos_indptr, pos_indices, pos_values, pos_rows, neg_indptr, neg_indices,
                   neg_values, neg_rows, w, alpha, beta, auc_weight, grad):  # fmt: skip
    """The pAUC pairs' subgradient (:func:`pauc_rows_gradient`) and, when it used any pair,
    ``auc_weight`` times that of the same normalised surrogate over every negative (FPR range
    [0, 1], the pairwise AUC hinge: docs/algorithms/pmb.md (pmb.6)), into ``grad``; returns
    ``(value, used)``."""
    value, used = pauc_rows_gradient(pos_indptr, pos_indices, pos_values, pos_rows,
                                     neg_indptr, neg_indices, neg_values, neg_rows, w, alpha,
                                     beta, grad)  # fmt: skip
    if used and auc_weight > 0.0:
        grad_auc = np.empty(grad.shape[0])
        pauc_rows_gradient(pos_indptr, pos_indices, pos_values, pos_rows, neg_indptr,
                           neg_indices, neg_values, neg_rows, w, 0.0, 1.0, grad_auc)  # fmt: skip
        for j in range(grad.shape[0]):
            grad[j] += auc_weight * grad_auc[j]
    return value, used


@kernel
def prec_rows_gradient(first_indptr, first_indices, first_values, first_labels, second_indptr,
                       second_indices, second_values, second_labels, n_top, w,
                       grad):  # fmt: skip
    """``pauc_buffers.prec_at_k_gradient`` on the first rows of a store (as many as
    ``first_labels``) then those of another: the value and subgradient, bit for bit, of the
    two stacked into one dense array."""
    for j in range(grad.shape[0]):
        grad[j] = 0.0
    n_first = first_labels.shape[0]
    n_rows = n_first + second_labels.shape[0]
    if n_rows == 0 or n_top <= 0:
        return 0.0, False
    scores = np.empty(n_rows)
    labels = np.empty(n_rows, dtype=np.int64)
    for i in range(n_first):
        scores[i] = row_dot(first_indptr, first_indices, first_values, i, w)
        labels[i] = first_labels[i]
    for i in range(n_rows - n_first):
        scores[n_first + i] = row_dot(second_indptr, second_indices, second_values, i, w)
        labels[n_first + i] = second_labels[i]
    coef = np.empty(n_rows)
    value = prec_at_k_coefficients(scores, labels, n_top, coef)
    # first's rows, then second's: each column sums its terms in the stacked array's order
    add_row_terms(first_indptr, first_indices, first_values, np.arange(n_first),
                  coef[:n_first], 1.0 / n_top, grad)  # fmt: skip
    add_row_terms(second_indptr, second_indices, second_values, np.arange(n_rows - n_first),
                  coef[n_first:], 1.0 / n_top, grad)  # fmt: skip
    return value / n_top, True


@kernel
def _surrogate_gradient(buf_indptr, buf_indices, buf_values, buf_y, size, pos_indptr,
                        pos_indices, pos_values, pos_fill, passes, loss, alpha, beta, k, w,
                        grad, auc_weight):  # fmt: skip
    """Subgradient of the normalised surrogate on the first ``size`` buffered events (and the
    positive reservoir)."""
    no_labels = np.empty(0, dtype=np.int64)
    if passes == 1:
        n_pos = 0
        for i in range(size):
            if buf_y[i] > 0:
                n_pos += 1
        if loss == 0:
            pos_rows = np.empty(n_pos, dtype=np.int64)
            neg_rows = np.empty(size - n_pos, dtype=np.int64)
            a = 0
            b = 0
            for i in range(size):
                if buf_y[i] > 0:
                    pos_rows[a] = i
                    a += 1
                else:
                    neg_rows[b] = i
                    b += 1
            # (pmb.1): pairs (buffer positive, top ceil(beta s_-) buffer negatives)
            return pairs_gradient(buf_indptr, buf_indices, buf_values, pos_rows, buf_indptr,
                                  buf_indices, buf_values, neg_rows, w, alpha, beta,
                                  auc_weight, grad)  # fmt: skip
        # (pmb.2): Prec@k with ceil(k s) slots, PRBEP with s_+ slots
        n_top = np.int64(np.ceil(k * size - 1e-9)) if loss == 1 else n_pos
        return prec_rows_gradient(buf_indptr, buf_indices, buf_values, no_labels, buf_indptr,
                                  buf_indices, buf_values, buf_y[:size], n_top, w,
                                  grad)  # fmt: skip
    n_pos = pos_fill[0]
    if loss == 0:
        # Kar et al. Alg. 2 line 5: the positive reservoir B+ against the negative chunk B-
        return pairs_gradient(pos_indptr, pos_indices, pos_values, np.arange(n_pos),
                              buf_indptr, buf_indices, buf_values, np.arange(size), w, alpha,
                              beta, auc_weight, grad)  # fmt: skip
    # [CHOICE] (pmb.2) Prec@k on the union B+ u B-: PRBEP puts |B+| in the top,
    # Prec@k ceil(k (|B+| + |B-|)).
    total = n_pos + size
    n_top = np.int64(np.ceil(k * total - 1e-9)) if loss == 1 else n_pos
    return prec_rows_gradient(pos_indptr, pos_indices, pos_values,
                              np.ones(n_pos, dtype=np.int64), buf_indptr, buf_indices,
                              buf_values, np.full(size, -1, dtype=np.int64), n_top, w,
                              grad)  # fmt: skip


@kernel
def pmb_learn(
    start,
    X,
    indptr,
    indices,
    data,
    y,
    scores,
    w,
    w_avg,
    n_steps,
    averaged_events,
    buf_indptr,
    buf_indices,
    buf_values,
    buf_y,
    buf_fill,
    pos_indptr,
    pos_indices,
    pos_values,
    pos_fill,
    pos_seen,
    rng_state,
    room,
    passes,
    loss,
    alpha,
    beta,
    k,
    eta,
    radius,
    first_size,
    offer_positives,
    take_steps,
    auc_weight,
    half_life,
):
    """Learn the events from ``start`` on, in order (dense ``X``, or CSR
    ``indptr/indices/data`` when ``indptr`` is non-empty); ``scores`` (if non-empty) gets each
    pre-update score of the served (averaged) model.  Returns the number of events learned
    when done, or the event a store has no room for (:func:`has_room`: ``room[0]`` (the
    buffer) or ``room[1]`` (the positive reservoir) holds the length it needs; that event
    changed nothing but its score, which is written again).

    1PMB (``passes == 1``): every event enters the buffer; a full buffer of ``s`` events is one
    epoch.  2PMB (``passes == 2``): positives are offered to the reservoir (when
    ``offer_positives``), negatives fill the buffer; a full buffer of ``s`` negatives is one
    epoch against the current reservoir.  ``s`` is
    :func:`~core._kernels.pauc_buffers.doubling_interval` (``first_size`` doubling with each
    step taken, up to the buffer's capacity).  ``take_steps`` False only
    collects (2PMB pass 1).  The buffer is emptied once its epoch is used.

    One epoch (Kar et al. Alg. 1/2 line 5 with the errata of docs/algorithms/pmb.md (pmb.3)):
    ``w <- Proj_{||w|| <= radius}(w - eta (s_e / s) / sqrt(e) * g)``, ``e = 1, 2, ...`` counting
    the steps taken, ``s_e`` the epoch's length, ``g`` the subgradient of the normalised
    surrogate on the buffer; a buffer without a positive (or negative) takes no step and does
    not advance ``e``.  The served model is the average of the iterates ``w_1 .. w_e`` weighted
    by ``s_e`` (Alg. 1 line 9 once ``s_e = s``).  [CHOICE] The ``s_e / s`` factor and weights
    keep the short first epochs from throwing ``w`` far on a noisy 16-event gradient: without
    them the held-out pAUC(0, 0.1) of ``bench/quality.py`` fell by 0.05 to 0.14.

    ``half_life`` > 0 (docs/algorithms/pmb.md (pmb.7)-(pmb.9)): ``e`` in the step stops at
    ``max(1, half_life / s)`` epochs, an iterate's weight in the average is at least
    ``1 - 2 ** (-s_e / half_life)`` and the positive reservoir is biased towards recent events.
    """
    n_samples = y.shape[0]
    capacity = buf_y.shape[0]
    size = doubling_interval(first_size, capacity, n_steps[0])
    want_scores = scores.shape[0] > 0
    grad = np.empty(w.shape[0])
    # a dense event's score written out (pauc_buffers.dot_row, the same arithmetic) instead of
    # a per-event call that takes the batch's arrays, each of which costs numba reference-count
    # updates (core._kernels.spam, "Per-event code")
    dense = indptr.shape[0] == 0
    n_features = w.shape[0]
    # an event's sorted entries, before they are placed in a store's row
    scratch = event_scratch(X, indptr, start)
    columns = np.empty(scratch, dtype=np.int64)
    values = np.empty(scratch)
    for i in range(start, n_samples):
        if want_scores:
            if dense:
                total = 0.0
                for j in range(n_features):
                    total += X[i, j] * w_avg[j]
                scores[i] = total
            else:
                scores[i] = event_dot(X, indptr, indices, data, i, w_avg)
        if passes == 2:
            if y[i] > 0:
                if offer_positives:
                    count = sorted_event(X, indptr, indices, data, i, columns, values)
                    if not has_room(pos_indptr, pos_values, count, room, 1):
                        return i
                    # (pmb.9): pmb counts no negatives, so the half-life is in positives
                    offer_positive(columns, values, count, pos_indptr, pos_indices, pos_values,
                                   pos_fill, pos_seen, rng_state, half_life)  # fmt: skip
                continue
            if not take_steps:
                continue
        count = sorted_event(X, indptr, indices, data, i, columns, values)
        if not has_room(buf_indptr, buf_values, count, room, 0):
            return i
        slot = buf_fill[0]
        place_row(buf_indptr, buf_indices, buf_values, slot, columns, values, count)
        buf_y[slot] = y[i]
        buf_fill[0] = slot + 1
        if buf_fill[0] < size:
            continue
        buf_fill[0] = 0  # flush (Alg. 1 line 6)
        used = False
        if take_steps:
            _, used = _surrogate_gradient(
                buf_indptr, buf_indices, buf_values, buf_y, size, pos_indptr, pos_indices,
                pos_values, pos_fill, passes, loss, alpha, beta, k, w, grad, auc_weight,
            )  # fmt: skip
        clear_rows(buf_indptr, buf_indices, buf_values)
        if not used:
            continue
        n_steps[0] += 1
        # [CHOICE] each iterate is weighted in the average by the events its epoch used, so
        # the short first epochs do not weigh as much as full ones (equal weights once s is
        # reached, as in Alg. 1 line 9)
        used_size = size
        averaged_events[0] += size
        weight = size / averaged_events[0]
        if half_life > 0.0:  # (pmb.8): an exponentially weighted average once it is the larger
            weight = max(weight, 1.0 - np.exp2(-size / half_life))
        size = doubling_interval(first_size, capacity, n_steps[0])
        # (pmb.7): the step counter stops at the epochs of one half-life
        cap = max(1.0, half_life / capacity) if half_life > 0.0 else 0.0
        epochs = step_count(n_steps[0], cap)
        step = eta / np.sqrt(epochs) * (used_size / capacity)
        for j in range(w.shape[0]):
            w[j] -= step * grad[j]
        project_ball(w, radius)
        for j in range(w.shape[0]):
            w_avg[j] += (w[j] - w_avg[j]) * weight
    return n_samples
