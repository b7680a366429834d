"""1PMB / 2PMB (Kar, Narasimhan, Jain 2014, §4, Algorithms 1 and 2) as one streaming kernel.

Loss codes (the wrapper maps names): 0 = pAUC (tight surrogate, [0, beta] or [alpha, beta]),
1 = Prec@k with a fixed fraction k, 2 = PRBEP (k = the buffer's share of positives).
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.forgetting import step_count
from core._kernels.pauc_buffers import (
    copy_row,
    doubling_interval,
    event_copy,
    event_dot,
    pauc_gradient,
    prec_at_k_gradient,
    project_ball,
    reservoir_offer_forgetting,
)
from core._kernels.pauc_buffers import decision as decision  # the learner scores with it


@kernel
def add_auc_gradient(pos_X, pos_rows, neg_X, neg_rows, w, auc_weight, grad):
    """``grad += auc_weight * g_AUC``: the subgradient of the same normalised surrogate over
    every negative (FPR range [0, 1], the pairwise AUC hinge): docs/algorithms/pmb.md (pmb.6)."""
    if auc_weight > 0.0:
        grad_auc = np.empty(grad.shape[0])
        pauc_gradient(pos_X, pos_rows, neg_X, neg_rows, w, 0.0, 1.0, grad_auc)
        for j in range(grad.shape[0]):
            grad[j] += auc_weight * grad_auc[j]


@kernel
def _surrogate_gradient(buf_X, buf_y, size, pos_X, pos_fill, passes, loss, alpha, beta, k, w,
                        grad, auc_weight):  # fmt: skip
    """Subgradient of the normalised surrogate on the first ``size`` buffered events (and the
    positive reservoir)."""
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
            value, used = pauc_gradient(buf_X, pos_rows, buf_X, neg_rows, w, alpha, beta, grad)
            if used:
                add_auc_gradient(buf_X, pos_rows, buf_X, neg_rows, w, auc_weight, grad)
            return value, used
        rows = np.arange(size)
        # (pmb.2): Prec@k with ceil(k s) slots, PRBEP with s_+ slots
        n_top = np.int64(np.ceil(k * size - 1e-9)) if loss == 1 else n_pos
        return prec_at_k_gradient(buf_X, rows, buf_y, n_top, w, grad)
    n_pos = pos_fill[0]
    if loss == 0:
        # Kar et al. Alg. 2 line 5: the positive reservoir B+ against the negative chunk B-
        pos_rows = np.arange(n_pos)
        neg_rows = np.arange(size)
        value, used = pauc_gradient(pos_X, pos_rows, buf_X, neg_rows, w, alpha, beta, grad)
        if used:
            add_auc_gradient(pos_X, pos_rows, buf_X, neg_rows, w, auc_weight, grad)
        return value, used
    # [CHOICE] (pmb.2) Prec@k on the union B+ u B-: PRBEP puts |B+| in the top,
    # Prec@k ceil(k (|B+| + |B-|)).
    total = n_pos + size
    union = np.empty((total, buf_X.shape[1]))
    labels = np.empty(total, dtype=np.int64)
    for i in range(n_pos):
        copy_row(pos_X, i, union, i)
        labels[i] = 1
    for i in range(size):
        copy_row(buf_X, i, union, n_pos + i)
        labels[n_pos + i] = -1
    n_top = np.int64(np.ceil(k * total - 1e-9)) if loss == 1 else n_pos
    return prec_at_k_gradient(union, np.arange(total), labels, n_top, w, grad)


@kernel
def pmb_learn(
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
    buf_X,
    buf_y,
    buf_fill,
    pos_X,
    pos_fill,
    pos_seen,
    rng_state,
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
    """Learn the events in order (dense ``X``, or CSR ``indptr/indices/data`` when ``indptr`` is
    non-empty); ``scores`` (if non-empty) gets each pre-update score
    of the served (averaged) model.

    1PMB (``passes == 1``): every event enters the buffer; a full buffer of ``s`` events is one
    epoch.  2PMB (``passes == 2``): positives are offered to the reservoir ``pos_X`` (when
    ``offer_positives``), negatives fill the buffer; a full buffer of ``s`` negatives is one
    epoch against the current reservoir.  ``s`` is
    :func:`~core._kernels.pauc_buffers.doubling_interval` (``first_size`` doubling with each
    step taken, up to the buffer's capacity).  ``take_steps`` False only
    collects (2PMB pass 1).

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
    size = doubling_interval(first_size, buf_X.shape[0], n_steps[0])
    want_scores = scores.shape[0] > 0
    grad = np.empty(w.shape[0])
    # dense rows: the score and the copy into the buffer written out (pauc_buffers.dot_row and
    # copy_row, the same arithmetic) instead of per-event calls that take the batch's arrays,
    # each of which costs numba reference-count updates (core._kernels.spam, "Per-event code")
    dense = indptr.shape[0] == 0
    n_features = w.shape[0]
    for i in range(n_samples):
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
                    # (pmb.9): pmb counts no negatives, so the half-life is in positives
                    reservoir_offer_forgetting(
                        X, indptr, indices, data, i, pos_X, pos_fill, pos_seen, rng_state,
                        half_life, pos_seen[0] + 1,
                    )  # fmt: skip
                continue
            if not take_steps:
                continue
        slot = buf_fill[0]
        if dense:
            for j in range(n_features):
                buf_X[slot, j] = X[i, j]
        else:
            event_copy(X, indptr, indices, data, i, buf_X, slot)
        buf_y[slot] = y[i]
        buf_fill[0] = slot + 1
        if buf_fill[0] < size:
            continue
        buf_fill[0] = 0  # flush (Alg. 1 line 6)
        if not take_steps:
            continue
        _, used = _surrogate_gradient(
            buf_X, buf_y, size, pos_X, pos_fill, passes, loss, alpha, beta, k, w, grad, auc_weight
        )
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
        size = doubling_interval(first_size, buf_X.shape[0], n_steps[0])
        # (pmb.7): the step counter stops at the epochs of one half-life
        cap = max(1.0, half_life / buf_X.shape[0]) if half_life > 0.0 else 0.0
        epochs = step_count(n_steps[0], cap)
        step = eta / np.sqrt(epochs) * (used_size / buf_X.shape[0])
        for j in range(w.shape[0]):
            w[j] -= step * grad[j]
        project_ball(w, radius)
        for j in range(w.shape[0]):
            w_avg[j] += (w[j] - w_avg[j]) * weight
