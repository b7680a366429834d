"""SPAM-NET kernel: SPAM with the elastic-net penalty (docs/algorithms/spam.md (spam.6)), Natole
thesis ch. 4, Alg. 20 with the prox of §4.3.

Apart from the L2 kernels of :mod:`core._kernels.spam` because it keeps the weights explicit:
the soft-threshold moves every coordinate, so ``w_scale`` is 1 and ``avg_coef`` 0 throughout
and an event costs O(n_features) for dense and CSR rows alike.  It takes the L2 kernels' state
bundle and shares their step size, gradient and counts (their helpers are called here).

Kernels take arrays and scalars only, validate nothing and read no globals.
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels._linalg import dot_dense, dot_sparse, sq_norm_sparse
from core._kernels.forgetting import advance, class_share, class_total, inflation, step_count
from core._kernels.spam import (
    averaged_weight,
    capped_rate,
    count_event,
    fold_scale,
    mean_sq_norm,
    renormalise,
    served_score,
    spam_curvature,
    spam_eta,
    spam_gradient_coef,
)


@kernel
def _elastic_net_prox_all(w, threshold, shrink, avg_offset, average, c):
    """w_j = sign(u_j) max(|u_j| - eta l1, 0) / (1 + eta l2) on every coordinate
    (docs/algorithms/spam.md (spam.6), SPAM-NET); the iterate sum gains w, weighted by ``c``
    (spam.14) (avg_coef stays 0 in these kernels)."""
    for j in range(w.shape[0]):
        u = w[j]
        if u > threshold:
            u = (u - threshold) * shrink
        elif u < -threshold:
            u = (u + threshold) * shrink
        else:
            u = 0.0
        w[j] = u
        if average:
            avg_offset[j] += c * u


@kernel
def spam_elastic_net(batch, y, scores, state, options, forget):
    """SPAM-NET, dense rows (``dense``) or CSR rows: O(n_features) per event either way, since
    the soft-threshold moves every coordinate and w . m+- depends on all of them non-linearly
    (so neither lazy thresholding nor incremental dot products apply).  The weights are kept
    explicit: ``w_scale`` is 1 and ``avg_coef`` 0 throughout.  ``state`` is the L2 kernels'
    :data:`~core._kernels.spam.SpamTableState`, its table's rows taken once per call."""
    X, indptr, indices, data, sparse = batch
    dense = not sparse
    (table, w_scale, avg_coef, w_dot_sum_pos, w_dot_sum_neg,
     n_seen, n_pos, n_neg, n_steps, sq_norm_sum) = state  # fmt: skip
    w_unscaled, avg_offset, sum_neg, sum_pos = table[0], table[1], table[2], table[3]
    eta0, l2, l1, inverse, average, n_warmup, half_life = options
    clock, epoch, class_weight, avg_weight = forget
    if w_scale[0] != 1.0:
        fold_scale(w_unscaled, w_scale, avg_offset, avg_coef, average)
    w = w_unscaled
    want_scores = scores.shape[0] > 0
    n_samples = X.shape[0] if dense else indptr.shape[0] - 1
    for i in range(n_samples):
        c = inflation(clock, epoch, half_life)  # this event's weight in the sums (spam.12)
        if dense:
            x = X[i]
            xx = dot_dense(x, x)
            wx = dot_dense(w, x)
            ax = dot_dense(avg_offset, x) if (average and want_scores) else 0.0
        else:
            start = indptr[i]
            end = indptr[i + 1]
            xx = sq_norm_sparse(data, start, end)
            wx = dot_sparse(w, indices, data, start, end)
            ax = dot_sparse(avg_offset, indices, data, start, end) if average else 0.0
        if want_scores:
            n_averaged = averaged_weight(n_steps[0], avg_weight, half_life)
            scores[i] = served_score(wx, ax, 1.0, 0.0, n_averaged, average)
        n_seen[0] += 1
        sq_norm_sum[0] += xx
        positive = y[i] > 0
        if n_seen[0] > n_warmup and n_pos[0] > 0 and n_neg[0] > 0:
            p = class_share(n_pos[0], n_neg[0], class_weight, half_life)
            n_opposite = class_total(not positive, n_pos[0], n_neg[0], class_weight, half_life)
            if positive:
                w_dot_mean = dot_dense(w, sum_neg) / n_opposite
            else:
                w_dot_mean = dot_dense(w, sum_pos) / n_opposite
            n_steps[0] += 1
            eta = spam_eta(step_count(n_steps[0], half_life), eta0, l2, inverse)
            nu = mean_sq_norm(sq_norm_sum[0], n_seen[0])
            rate = capped_rate(eta / nu, spam_curvature(positive, p), xx)
            step = rate * spam_gradient_coef(positive, wx, w_dot_mean, p)
            if dense:
                for j in range(w.shape[0]):
                    w[j] -= step * x[j]
            else:
                for k in range(start, end):
                    w[indices[k]] -= step * data[k]
            # penalties act on the weights of x / sqrt(nu): threshold eta l1 / sqrt(nu) in w
            _elastic_net_prox_all(
                w, eta * l1 / np.sqrt(nu), 1.0 / (1.0 + eta * l2), avg_offset, average, c
            )
            if average and half_life > 0.0:
                avg_weight[0] += c
        target = sum_pos if positive else sum_neg
        if dense:
            for j in range(x.shape[0]):
                target[j] += c * x[j]
        else:
            for k in range(start, end):
                target[indices[k]] += c * data[k]
        count_event(positive, c, n_pos, n_neg, class_weight, half_life)
        factor = advance(clock, epoch, half_life)
        if factor != 1.0:
            renormalise(factor, (sum_pos, sum_neg), class_weight, avg_offset, avg_coef,
                        avg_weight, (w_dot_sum_pos, w_dot_sum_neg))  # fmt: skip
    w_dot_sum_pos[0] = dot_dense(w, sum_pos)
    w_dot_sum_neg[0] = dot_dense(w, sum_neg)
