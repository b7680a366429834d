"""Structural surrogates of pAUC and Prec@k on a set of scored points, with subgradients.

Everything here works on *scores* and returns per-point *coefficients*, so that one routine
serves every caller (1PMB/2PMB buffers, FTRL reservoirs, the cutting-plane solver on a whole
data set): the subgradient of a surrogate with respect to ``w`` is ``sum_i coef_i * x_i``,
accumulated by the caller from whatever row layout it keeps.

pAUC, tight structural surrogate (docs/algorithms/svm_pauc.md (svm_pauc.5)-(svm_pauc.6))
-------------------------------------------------------------------------------------
Positives with scores ``s_i`` (i < m), negatives with scores ``t`` (n of them).  With
``j_alpha`` and ``j_beta`` negatives (callers use ``floor(n alpha)`` and ``ceil(n beta)``),
``Z`` = the ``j_beta`` highest-scoring negatives, ``t_(1) >= ... >= t_(j_beta)``:

* j_alpha = 0 (FPR range [0, beta]): the value is the hinge over the top negatives,
  ``sum_i sum_{j <= j_beta} max(0, 1 - (s_i - t_(j)))`` — Kar et al. eq. (5) with the hinge,
  and [J] eq. (10)/(15) (Theorem 5: tight surrogate = hinge surrogate).
* j_alpha > 0: the tight convex surrogate of [J] eq. (18), evaluated per positive over the two
  groups of prefix orderings of Algorithm 3 (rows ``r_i`` = number of top negatives placed above
  positive i):
  ``H_A = sum_{j <= k1} (t_(j) - s_i)`` with ``k1 = #{j <= j_alpha : t_(j) >= s_i}`` and
  ``H_B = sum_{j <= j_alpha} (t_(j) - s_i) + sum_{j_alpha < j <= j_alpha + k2} (1 - s_i + t_(j))``
  with ``k2 = #{j_alpha < j <= j_beta : t_(j) >= s_i - 1}``.

Both cases return the *unnormalised* value ``sum_i max(H_A, H_B)``, the loss term
``Delta = sum_i max(0, r_i - j_alpha)`` of the most violated constraint, and the coefficients
``pos_coef[i] = -r_i`` and ``neg_coef[j] = q_j = #{i : r_i >= rank(j)}`` (0 outside ``Z``), so that
``value = Delta - w.g`` with ``g = sum_i r_i x_i - sum_j q_j z_j`` and the subgradient is
``-g = sum_j neg_coef_j x_j + sum_i pos_coef_i x_i``.  Divide everything by
``N = m (j_beta - j_alpha)`` for the normalised surrogate.

Cost: one stable sort of the negatives, O(n log n), then O(log j_beta) per positive — the
O(s log s + s d) computation of Kar et al. App. H, docs/algorithms/pmb.md (pmb.1), once the
caller adds the O(s d) scoring and accumulation.

Conventions [CHOICE]: a pair with margin exactly 1 counts as active (ties are violations, as in
[J]); any choice is a valid subgradient (Danskin) and the value is the same.  Ties between
negative scores at the top-``j_beta`` boundary are broken by index (stable sort), so results are
deterministic.

Prec@k / PRBEP structural surrogate (Kar et al. eq. (3), App. C eqs. (12)-(13))
-------------------------------------------------------------------------------
With ``z_i = f_i - y_i``, the maximiser puts ``ybar = +1`` on the ``K`` largest ``z`` and the value
is ``2 sum_top z - sum z - sum y f``; the Danskin subgradient is ``sum_i (ybar_i - y_i) x_i``.
"""

import numpy as np

from core._kernels._config import kernel


@kernel
def tight_pauc_coefficients(pos_scores, neg_scores, j_alpha, j_beta, pos_coef, neg_coef):
    """Tight pAUC surrogate (unnormalised) and its most-violated constraint.

    Parameters
    ----------
    pos_scores : float64[m]; neg_scores : float64[n]
    j_alpha, j_beta : int, ``0 <= j_alpha < j_beta <= n``
    pos_coef : float64[m] (out)  ``-r_i``
    neg_coef : float64[n] (out)  ``q_j`` for the top ``j_beta`` negatives, else 0

    Returns
    -------
    (value, delta) : the surrogate value ``sum_i H_i`` and ``sum_i max(0, r_i - j_alpha)``.
    """
    m = pos_scores.shape[0]
    n = neg_scores.shape[0]
    for j in range(n):
        neg_coef[j] = 0.0
    if m == 0 or n == 0 or j_beta <= 0:
        for i in range(m):
            pos_coef[i] = 0.0
        return 0.0, 0.0
    # descending by score, ties by index: a stable ascending sort of -score
    order = np.argsort(-neg_scores, kind="mergesort")
    # ascending copy of the negated top scores, for binary search; prefix sums of t
    neg_top = np.empty(j_beta)
    prefix = np.zeros(j_beta + 1)
    for j in range(j_beta):
        t = neg_scores[order[j]]
        neg_top[j] = -t
        prefix[j + 1] = prefix[j] + t
    head = neg_top[:j_alpha]
    tail = neg_top[j_alpha:j_beta]
    counts = np.zeros(j_beta + 1, dtype=np.int64)
    value = 0.0
    delta = 0.0
    for i in range(m):
        s = pos_scores[i]
        # group A ([J] Alg. 3 lines 3-4): only negatives scoring >= s go above positive i
        k1 = np.searchsorted(head, -s, side="right") if j_alpha > 0 else 0
        h_a = prefix[k1] - k1 * s
        # group B ([J] Alg. 3 lines 5-6): top j_alpha forced above, margin-1 rule below
        k2 = np.searchsorted(tail, 1.0 - s, side="right")
        h_b = (
            (prefix[j_alpha] - j_alpha * s)
            + k2 * (1.0 - s)
            + (prefix[j_alpha + k2] - prefix[j_alpha])
        )
        if h_a > h_b:  # ties go to group B ([J] Alg. 3 line 7); same value either way
            r = k1
            value += h_a
        else:
            r = j_alpha + k2
            value += h_b
        pos_coef[i] = -float(r)
        counts[r] += 1
        if r > j_alpha:
            delta += r - j_alpha
    # q_j = #{i : r_i >= j} for ranks j = 1..j_beta (suffix sums of the r histogram)
    running = 0
    for rank in range(j_beta, 0, -1):
        running += counts[rank]
        neg_coef[order[rank - 1]] = float(running)
    return value, delta


@kernel
def prec_at_k_coefficients(scores, labels, n_top, coef):
    """Structural Prec@k surrogate (Kar et al. eq. (13)) with ``n_top = ceil(k t)`` slots.

    ``labels`` are +-1 (int64); ``coef[i] = ybar_i - y_i`` (out), so the subgradient is
    ``sum_i coef_i x_i``.  Returns the (unnormalised) surrogate value.
    """
    t = scores.shape[0]
    z = np.empty(t)
    total_z = 0.0
    linear = 0.0
    for i in range(t):
        z[i] = scores[i] - labels[i]
        total_z += z[i]
        linear += labels[i] * scores[i]
    order = np.argsort(-z, kind="mergesort")
    top_sum = 0.0
    for i in range(t):
        coef[i] = -1.0 - labels[i]
    for r in range(min(n_top, t)):
        i = order[r]
        top_sum += z[i]
        coef[i] = 1.0 - labels[i]
    return 2.0 * top_sum - total_z - linear


@kernel
def count_above(fraction, n):
    """``ceil(fraction * n)`` robust to rounding (``0.07 * 100`` is 7, not 8)."""
    return np.int64(np.ceil(fraction * n - 1e-9))


@kernel
def count_below(fraction, n):
    """``floor(fraction * n)`` robust to rounding."""
    return np.int64(np.floor(fraction * n + 1e-9))
