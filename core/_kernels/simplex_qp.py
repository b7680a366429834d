"""The dual QP of the 1-slack cutting-plane method, solved exactly by pairwise coordinate descent.

Problem (Joachims et al. 2009, 1-slack structural SVM dual;
docs/algorithms/svm_pauc.md (svm_pauc.8))::

    max_{lam >= 0, sum(lam) <= C}  b . lam - 1/2 lam' G lam

with ``G`` the Gram matrix of the constraint vectors (positive semi-definite, often singular).
A slack coordinate ``lam_0`` with ``G_0. = 0`` and ``b_0 = 0`` turns ``sum <= C`` into
``sum = C``, i.e. a scaled simplex.  On a simplex the classical SMO step (Platt 1998; Keerthi et
al. 2001) is exact: move mass ``t`` from the coordinate with the largest gradient of the
minimised objective ``f = 1/2 lam' G lam - b . lam`` among those with ``lam > 0`` to the one
with the smallest gradient, with the exact line search ``t = (g_j - g_i) / (G_ii + G_jj -
2 G_ij)`` clipped to ``[0, lam_j]``.  KKT conditions hold to ``tol`` when
``max_{lam_j > 0} g_j - min_i g_i <= tol``; each step is O(k) with the gradient kept up to
date.  [CHOICE] Own code rather than scipy (``core`` is numpy + numba only): the QP is tiny
(one row per cutting-plane iteration), warm-starts from the previous ``lam``, and SMO reaches
machine-precision KKT residuals without a generic solver's tolerances.
"""

import numpy as np

from core._kernels._config import kernel


@kernel
def solve_simplex_qp(gram, linear, total, lam, tol, max_steps):
    """Minimise ``1/2 lam' G lam - linear . lam`` over ``lam >= 0``, ``sum(lam) <= total``.

    ``gram`` (k, k), ``linear`` (k,), ``lam`` (k + 1,) in/out: ``lam[1:]`` are the constraint
    multipliers, ``lam[0]`` the slack ``total - sum(lam[1:])`` (a feasible warm start is
    required).  Returns the number of SMO steps taken.
    """
    k = gram.shape[0]
    # gradient of the minimised objective, slack coordinate first (its gradient is 0)
    grad = np.zeros(k + 1)
    for a in range(k):
        value = -linear[a]
        for c in range(k):
            value += gram[a, c] * lam[c + 1]
        grad[a + 1] = value
    steps = 0
    while steps < max_steps:
        low = 0
        for a in range(1, k + 1):
            if grad[a] < grad[low]:
                low = a
        high = -1
        for a in range(k + 1):
            if lam[a] > 0.0 and (high < 0 or grad[a] > grad[high]):
                high = a
        if high < 0 or grad[high] - grad[low] <= tol:
            break
        g_ll = gram[low - 1, low - 1] if low > 0 else 0.0
        g_hh = gram[high - 1, high - 1] if high > 0 else 0.0
        g_lh = gram[low - 1, high - 1] if (low > 0 and high > 0) else 0.0
        curvature = g_ll + g_hh - 2.0 * g_lh
        gap = grad[high] - grad[low]
        if curvature > 1e-300:
            step = gap / curvature
            if step > lam[high]:
                step = lam[high]
        else:
            step = lam[high]
        lam[low] += step
        lam[high] -= step
        if lam[high] < 0.0:
            lam[high] = 0.0
        for a in range(k):
            change = 0.0
            if low > 0:
                change += gram[a, low - 1]
            if high > 0:
                change -= gram[a, high - 1]
            grad[a + 1] += step * change
        steps += 1
    return steps
