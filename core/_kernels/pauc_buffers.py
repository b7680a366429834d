"""Row buffers, reservoirs and surrogate subgradients over buffered rows.

Shared by the ``pmb`` and ``ftrl_pauc`` kernels.  Rows live in dense ``(capacity, n_features)``
float64 arrays that are part of a learner's state; explicit loops (no BLAS) keep every result
bit-for-bit reproducible and free of a scipy dependency.
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.forgetting import class_reservoir_slot, filled_after
from core._kernels.pauc_surrogate import prec_at_k_coefficients, tight_pauc_coefficients


@kernel
def doubling_interval(first, cap, doublings):
    """``min(cap, first * 2**doublings)`` without overflow: [CHOICE] the learners on buffers
    act after 16, 32, 64 ... events at first (``first``), so that a short stream already
    learns, then every ``cap`` events (pmb's epochs, ftrl_pauc's solver updates)."""
    interval = first
    for _ in range(doublings):
        if interval >= cap:
            break
        interval *= 2
    return min(interval, cap)


@kernel
def dot_row(X, row, w):
    total = 0.0
    for j in range(w.shape[0]):
        total += X[row, j] * w[j]
    return total


@kernel
def score_rows(X, rows, w, out):
    for i in range(rows.shape[0]):
        out[i] = dot_row(X, rows[i], w)


@kernel
def copy_row(source, source_row, target, target_row):
    for j in range(source.shape[1]):
        target[target_row, j] = source[source_row, j]


@kernel
def event_dot(X, indptr, indices, data, i, w):
    """``x_i . w`` for event ``i`` of a dense batch ``X`` or, when ``indptr`` is non-empty, of
    the CSR batch ``(indptr, indices, data)`` (one kernel serves both layouts)."""
    if indptr.shape[0] == 0:
        return dot_row(X, i, w)
    total = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        total += data[k] * w[indices[k]]
    return total


@kernel
def decision(X, indptr, indices, data, w):
    """``w · x`` of every event of a dense or CSR batch (as :func:`event_dot`): the scores of
    the linear learners whose kernels use these buffers (pmb, ftrl_pauc)."""
    n_samples = indptr.shape[0] - 1 if indptr.shape[0] > 0 else X.shape[0]
    out = np.empty(n_samples)
    for i in range(n_samples):
        out[i] = event_dot(X, indptr, indices, data, i, w)
    return out


@kernel
def event_copy(X, indptr, indices, data, i, target, target_row):
    """Write event ``i`` (dense or CSR, as :func:`event_dot`) into the dense row buffer."""
    if indptr.shape[0] == 0:
        copy_row(X, i, target, target_row)
        return
    for j in range(target.shape[1]):
        target[target_row, j] = 0.0
    for k in range(indptr[i], indptr[i + 1]):
        target[target_row, indices[k]] = data[k]


@kernel
def reservoir_offer_forgetting(X, indptr, indices, data, i, buffer, fill, seen, rng_state,
                               half_life, count_total):  # fmt: skip
    """Vitter's Algorithm R (docs/algorithms/oam.md (oam.2)) for event ``i`` with
    ``half_life`` 0 (after ``seen`` offers the buffer is a uniform sample without replacement
    of them; ``fill`` and ``seen`` are int64 arrays of shape (1,)), or Aggarwal's biased
    reservoir (docs/algorithms/forgetting.md (forgetting.4)) that keeps the events of the last
    ``half_life`` stream events preferentially; ``count_total`` is the number of stream events
    so far (the reservoir's offers are a share of them).  Returns the slot the event went to,
    or -1."""
    seen[0] += 1
    capacity = buffer.shape[0]
    slot = class_reservoir_slot(rng_state, seen[0], fill[0], capacity, half_life, count_total)
    if slot >= 0:
        event_copy(X, indptr, indices, data, i, buffer, slot)
        fill[0] = filled_after(slot, fill[0], seen[0], capacity, half_life)
    return slot


@kernel
def add_rows(X, rows, coef, scale, out):
    """``out += scale * sum_i coef_i X[rows[i]]`` (zero coefficients skipped)."""
    for i in range(rows.shape[0]):
        c = coef[i]
        if c != 0.0:
            c *= scale
            row = rows[i]
            for j in range(out.shape[0]):
                out[j] += c * X[row, j]


@kernel
def pauc_gradient(pos_X, pos_rows, neg_X, neg_rows, w, alpha, beta, grad):
    """Normalised tight pAUC surrogate on the rows ``pos_X[pos_rows]`` (positives) and
    ``neg_X[neg_rows]`` (negatives), and its subgradient.

    ``j_alpha = floor(alpha n_neg)``, ``j_beta = ceil(beta n_neg)`` (a range without a negative
    is unused);
    value and ``grad`` (out, overwritten) are divided by ``n_pos (j_beta - j_alpha)`` (Kar et al.
    Thm 7 normalisation; [J] eq. (16)).  Returns ``(value, used)``; ``used`` is False when a
    class is missing (then grad = 0: docs/algorithms/pmb.md (pmb.3): the step is skipped).
    """
    for j in range(grad.shape[0]):
        grad[j] = 0.0
    n_neg = neg_rows.shape[0]
    j_alpha = np.int64(np.floor(alpha * n_neg + 1e-9))
    j_beta = np.int64(np.ceil(beta * n_neg - 1e-9))
    return pauc_gradient_counts(pos_X, pos_rows, neg_X, neg_rows, w, j_alpha, j_beta, grad)


@kernel
def pauc_gradient_counts(pos_X, pos_rows, neg_X, neg_rows, w, j_alpha, j_beta, grad):
    """:func:`pauc_gradient` with the counts ``j_alpha < j_beta`` given (``j_beta`` is clipped
    to the number of negatives)."""
    for j in range(grad.shape[0]):
        grad[j] = 0.0
    n_pos = pos_rows.shape[0]
    n_neg = neg_rows.shape[0]
    if n_pos == 0 or n_neg == 0:
        return 0.0, False
    if j_beta > n_neg:
        j_beta = n_neg
    if j_beta <= j_alpha:
        return 0.0, False
    pos_scores = np.empty(n_pos)
    neg_scores = np.empty(n_neg)
    score_rows(pos_X, pos_rows, w, pos_scores)
    score_rows(neg_X, neg_rows, w, neg_scores)
    pos_coef = np.empty(n_pos)
    neg_coef = np.empty(n_neg)
    value, _ = tight_pauc_coefficients(pos_scores, neg_scores, j_alpha, j_beta, pos_coef, neg_coef)
    scale = 1.0 / (n_pos * (j_beta - j_alpha))
    add_rows(pos_X, pos_rows, pos_coef, scale, grad)
    add_rows(neg_X, neg_rows, neg_coef, scale, grad)
    return value * scale, True


@kernel
def prec_at_k_gradient(X, rows, labels, n_top, w, grad):
    """Normalised Prec@k structural surrogate (Kar et al. eq. (13)) on the rows ``X[rows]``
    with labels ``labels`` (aligned with ``rows``) and ``n_top`` slots; value and ``grad``
    (out) divided by ``n_top``."""
    for j in range(grad.shape[0]):
        grad[j] = 0.0
    n_rows = rows.shape[0]
    if n_rows == 0 or n_top <= 0:
        return 0.0, False
    scores = np.empty(n_rows)
    score_rows(X, rows, w, scores)
    coef = np.empty(n_rows)
    value = prec_at_k_coefficients(scores, labels, n_top, coef)
    add_rows(X, rows, coef, 1.0 / n_top, grad)
    return value / n_top, True


@kernel
def project_ball(w, radius):
    """Euclidean projection onto {||w|| <= radius}; radius <= 0 means no constraint."""
    if radius <= 0.0:
        return
    norm = 0.0
    for j in range(w.shape[0]):
        norm += w[j] * w[j]
    norm = np.sqrt(norm)
    if norm > radius:
        factor = radius / norm
        for j in range(w.shape[0]):
            w[j] *= factor
