"""Online penalties of Kar et al. eq. (6) (batched form, §3.2) for every round in one call.

``round_penalties`` is :func:`core.regret.online_penalties` without the Python loop: for round
``b`` (events ``ends[b-1] .. ends[b]-1``, served by ``w_b``), given the scores of the prefix
``X[:ends[b]]`` under ``w_b``, it writes
``out[b] = l(x_{1:ends[b]}, W[b]) - l(x_{1:ends[b-1]}, W[b])``, ``l`` being the unnormalised
tight pAUC surrogate of :func:`core._kernels.pauc_surrogate.tight_pauc_coefficients` with each
prefix's own ``(floor(alpha n_-), ceil(beta n_-))`` negatives.  Cost ``O(R T)`` for ``R``
rounds over ``T`` events (quickselect of the top negatives, then a sort of only those), plus
the caller's ``O(R T d)`` matrix product.
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.pauc_surrogate import count_above, count_below, tight_pauc_coefficients


@kernel
def _prefix_value(scores, labels, n, alpha, beta, pos, neg, pos_coef, neg_coef):
    """The surrogate of the first ``n`` scored events (0 with one class only)."""
    m = 0
    k = 0
    for i in range(n):
        if labels[i] > 0:
            pos[m] = scores[i]
            m += 1
        else:
            neg[k] = scores[i]
            k += 1
    if m == 0 or k == 0:
        return 0.0
    j_alpha = count_below(alpha, k)
    j_beta = min(max(count_above(beta, k), j_alpha + 1), k)
    top = neg[:k]
    if j_beta < k:  # only the top j_beta negatives count: select them in O(k), sort j_beta
        top = np.partition(top, k - j_beta)[k - j_beta :]
    value, _ = tight_pauc_coefficients(
        pos[:m], top, j_alpha, j_beta, pos_coef[:m], neg_coef[:j_beta]
    )
    return value


@kernel
def round_penalties(scores, labels, start, ends, alpha, beta, out):
    """``out[b] = L_b(w_b)`` for rounds ending (exclusive) at ``ends`` (increasing; the first
    one starts at ``start``), where ``scores[b, i] = w_b . x_i`` (the caller scores with BLAS,
    ``W @ X.T``, in blocks of rounds)."""
    n_events = scores.shape[1]
    pos = np.empty(n_events)
    neg = np.empty(n_events)
    pos_coef = np.empty(n_events)
    neg_coef = np.empty(n_events)
    for b in range(ends.shape[0]):
        end = ends[b]
        row = scores[b]
        after = _prefix_value(row, labels, end, alpha, beta, pos, neg, pos_coef, neg_coef)
        before = 0.0
        if start > 0:
            before = _prefix_value(row, labels, start, alpha, beta, pos, neg, pos_coef, neg_coef)
        out[b] = after - before
        start = end
