"""The boosted-leaves embedding (docs/algorithms/boosted_embedded.md (boosted_embedded.2)):
every event becomes the CSR row ``[x, m(x), e(x)]``: its features, the ensemble's margin and one
column per tree for the leaf it reaches, in O(nnz(x) + trees * depth)."""

import math
from collections import namedtuple

import numpy as np

from core._kernels._config import kernel
from core._kernels.logistic import logistic_csr
from core._kernels.random import random_unit
from core._kernels.scaling import standard_learn_dense
from core._kernels.tree_embedding import embedded_rows

#: A fitted ensemble as arrays of shape ``(n_trees, n_nodes)``, the root of each tree at node 0.
#: A node is either internal (a split) or a leaf, never both, so it has one slot for each:
#: ``left[t, v]``, its left child (-1 at a leaf; the right child is always the next node,
#: ``left + 1``: the growth creates a split's children together); ``feature_or_leaf[t, v]``,
#: the split's feature, or the leaf's index within its tree; ``threshold_or_value[t, v]``, the
#: split's threshold (go left when ``value <= threshold``), or the leaf's additive margin;
#: ``baseline`` of shape (1,).
Ensemble = namedtuple("Ensemble", ["left", "feature_or_leaf", "threshold_or_value", "baseline"])


@kernel
def _leaf(ens, t, X, i, dense, sparse):
    """The node of tree ``t`` that row ``i`` of ``X`` (dense) or ``dense`` (the scattered CSR
    row) reaches."""
    node = 0
    while ens.left[t, node] >= 0:
        f = ens.feature_or_leaf[t, node]
        value = dense[f] if sparse else X[i, f]
        left = ens.left[t, node]
        # not `left + (value > threshold)`: a NaN goes right, as `value <= threshold` is false
        node = left if value <= ens.threshold_or_value[t, node] else left + 1
    return node


@kernel
def embed(X, indptr, indices, data, scaled_X, scaled_data, ens, n_trees, max_leaves, n_features,
          append_features, append_margin, leaf_value):  # fmt: skip
    """``(indptr, indices, data)`` of the embedded batch: columns ``[0, d)`` hold ``x`` scaled
    (when ``append_features``; ``e = d``, else ``e = 0``), column ``e`` the margin (when
    ``append_margin``; ``f = e + 1``, else ``f = e``), column ``f + t * max_leaves + l`` holds
    ``leaf_value`` when the event reaches leaf ``l`` of tree ``t`` (the first ``n_trees``).

    The trees route the rows as given (``X``, or the CSR ``indptr, indices, data``); the
    columns of ``x`` are their scaled values, ``scaled_X`` (dense) or ``scaled_data`` (CSR, the
    same non-zeros)."""
    return _embedded(X, indptr, indices, data, scaled_X, scaled_data, ens, n_trees, max_leaves,
                     n_features, append_features, append_margin, leaf_value,
                     np.empty((0, 0), dtype=np.uint8))  # fmt: skip


@kernel
def embed_fitted_rows(scaled_X, row_leaves, left, feature_or_leaf, threshold_or_value, baseline,
                      max_leaves, append_features, append_margin, leaf_value):  # fmt: skip
    """:func:`embed` of the dense rows an ensemble was just fitted on (its arrays, every tree),
    whose leaves the growth gave (``row_leaves[i, t]``: the leaf index of tree ``t`` that row
    ``i`` reaches, :func:`core.boosted_trees.fit_with_leaves`) instead of routing them; the
    same arrays, bit for bit (the margin sums the same leaves' values in the same order)."""
    ens = Ensemble(left, feature_or_leaf, threshold_or_value, baseline)
    no_index, no_data = np.empty(0, dtype=np.int64), np.empty(0)
    return _embedded(scaled_X, no_index, no_index, no_data, scaled_X, no_data, ens, left.shape[0],
                     max_leaves, scaled_X.shape[1], append_features, append_margin, leaf_value,
                     row_leaves)  # fmt: skip


@kernel
def _embedded(X, indptr, indices, data, scaled_X, scaled_data, ens, n_trees, max_leaves,
              n_features, append_features, append_margin, leaf_value, row_leaves):  # fmt: skip
    """:func:`embed`, each row's leaves read from ``row_leaves`` when it has rows (dense rows
    only) instead of routed."""
    sparse = indptr.shape[0] > 0
    given = row_leaves.shape[0] > 0
    first = n_features if append_features else 0
    leaves_at = first + 1 if append_margin else first
    n_samples, out_indptr, out_indices, out_data = embedded_rows(
        X, indptr, n_features, append_features, 1 + n_trees
    )
    # each leaf's node: a node is the root or a split's child (the slots past a tree's last
    # node hold -1 too, but no split's child)
    leaf_nodes = np.zeros((n_trees if given else 0, max_leaves), dtype=np.int64)
    for t in range(leaf_nodes.shape[0]):
        for v in range(ens.left.shape[1]):
            child = np.int64(ens.left[t, v])
            for side in range(2 if child >= 0 else 0):
                if ens.left[t, child + side] < 0:
                    leaf_nodes[t, ens.feature_or_leaf[t, child + side]] = child + side
            if v == 0 and child < 0:  # a tree of one leaf
                leaf_nodes[t, ens.feature_or_leaf[t, 0]] = 0
    dense = np.zeros(n_features)
    k = 0
    for i in range(n_samples):
        if sparse:
            for p in range(indptr[i], indptr[i + 1]):
                dense[indices[p]] = data[p]
                if append_features:
                    out_indices[k] = indices[p]
                    out_data[k] = scaled_data[p]
                    k += 1
        elif append_features:
            for j in range(n_features):
                out_indices[k] = j
                out_data[k] = scaled_X[i, j]
                k += 1
        margin_slot = k
        if append_margin:
            k += 1
        margin = ens.baseline[0]
        for t in range(n_trees):
            if given:
                node = leaf_nodes[t, row_leaves[i, t]]
            else:
                node = _leaf(ens, t, X, i, dense, sparse)
            margin += ens.threshold_or_value[t, node]
            out_indices[k] = leaves_at + t * max_leaves + ens.feature_or_leaf[t, node]
            out_data[k] = leaf_value
            k += 1
        if append_margin:
            out_indices[margin_slot] = first
            out_data[margin_slot] = margin if n_trees > 0 else 0.0
        if sparse:
            for p in range(indptr[i], indptr[i + 1]):
                dense[indices[p]] = 0.0
        out_indptr[i + 1] = k
    return out_indptr, out_indices[:k], out_data[:k]


@kernel
def embed_arrays(X, indptr, indices, data, scaled_X, scaled_data, left, feature_or_leaf,
                 threshold_or_value, baseline, n_trees, max_leaves, n_features, append_features,
                 append_margin, leaf_value):  # fmt: skip
    """:func:`embed` of the ensemble given as its arrays (:data:`Ensemble`'s fields, in order):
    a namedtuple argument is typed in Python at every call, several microseconds that a
    one-event batch pays at each event."""
    ens = Ensemble(left, feature_or_leaf, threshold_or_value, baseline)
    return embed(X, indptr, indices, data, scaled_X, scaled_data, ens, n_trees, max_leaves,
                 n_features, append_features, append_margin, leaf_value)  # fmt: skip


@kernel
def margin(X, indptr, indices, data, ens, n_trees, n_features):
    """The ensemble's margin (its log-odds) of each event: ``baseline + sum_t value[t, leaf]``."""
    sparse = indptr.shape[0] > 0
    n_samples = indptr.shape[0] - 1 if sparse else X.shape[0]
    out = np.empty(n_samples)
    dense = np.zeros(n_features)
    for i in range(n_samples):
        if sparse:
            for p in range(indptr[i], indptr[i + 1]):
                dense[indices[p]] = data[p]
        total = ens.baseline[0]
        for t in range(n_trees):
            total += ens.threshold_or_value[t, _leaf(ens, t, X, i, dense, sparse)]
        out[i] = total
        if sparse:
            for p in range(indptr[i], indptr[i + 1]):
                dense[indices[p]] = 0.0
    return out


@kernel
def keep_events(labels, rng_state, seen, fill, capacity, negatives_per_positive, kept, weights):
    """Which events of a batch the fit buffer keeps (boosted_embedded.3): every positive; every
    negative while the buffer is not full; once it is, a negative with probability
    ``r = min(1, negatives_per_positive * P / N)`` (``P``, ``N``: the positives and negatives
    seen so far, this one included), one draw per such negative, kept with weight ``1 / r``.
    ``seen`` = ``[P, N]`` is updated in place; ``kept`` / ``weights`` get the kept events'
    indices and weights; returns how many were kept."""
    n_kept = 0
    for i in range(labels.shape[0]):
        rate = 1.0
        if labels[i] > 0:
            seen[0] += 1
        else:
            seen[1] += 1
            if fill + n_kept >= capacity:
                rate = min(1.0, negatives_per_positive * seen[0] / seen[1])
        if rate >= 1.0 or random_unit(rng_state) < rate:
            kept[n_kept] = i
            weights[n_kept] = 1.0 / rate
            n_kept += 1
    return n_kept


@kernel
def learn_segment(X, y, scores, scaled, count, mean, m2, present, magnitude, floor, left,
                  feature_or_leaf, threshold_or_value, baseline, n_trees, planned_trees,
                  append_features, append_margin, z, n, bias_z, bias_n, clock, touched,
                  class_counts, hyper, holding, pooled, rng_state, seen, fill, ring_next,
                  written, capacity, negatives_per_positive, rows, labels, weights, events,
                  since_fit):  # fmt: skip
    """One segment of ``boosted_embedded``'s learning in one call (the Python path's steps, in
    its order, through the same kernels, so the same bits): ``X`` scaled under ``standard``
    into ``scaled`` (the statistics updated), embedded by the ensemble (its arrays), learned by
    the inner FTRL logistic learner (its accumulators and ``hyper``; its pre-update scores into
    ``scores`` when that is not empty), then kept: held for a pending fit (``holding``: ``rows``
    / ``labels`` are ``pending_X`` / ``pending_y``, ``fill`` is ``pending_fill``), or remembered
    by the fit buffer (``rows`` / ``labels`` / ``weights``: ``buffer_X`` / ``buffer_y`` /
    ``buffer_w``, :func:`keep_events`' draws; the learner's counters ``events`` and
    ``since_fit`` count them).  ``pooled``: the rows are the composite's pool's, only labels are
    written (the weights are 1).  The caller checked that the arrays have the slots (no growth)
    and that a pooled buffer neither wraps nor samples here (no detach).  ``n_trees``: the
    installed trees; ``planned_trees``: the learner's ``n_trees``, which sets the leaves' columns
    and value (derived here, not passed: ~1 us of Python a call)."""
    standard_learn_dense(X, scaled, count, mean, m2, present, magnitude, floor)
    ens = Ensemble(left, feature_or_leaf, threshold_or_value, baseline)
    # each tree's share of the inner learner's width after x and the margin, as
    # core.learners._leaf_columns.leaf_stride takes it, and a leaf's value 1 / sqrt(n_trees)
    before = (X.shape[1] if append_features else 0) + (1 if append_margin else 0)
    stride = max(z.shape[0] - before, 0) // planned_trees
    leaf_value = 1.0 / math.sqrt(planned_trees)
    no_index, no_data = np.empty(0, dtype=np.int64), np.empty(0)
    indptr, indices, data = embed(X, no_index, no_index, no_data, scaled, no_data, ens, n_trees,
                                  stride, X.shape[1], append_features, append_margin,
                                  leaf_value)  # fmt: skip
    logistic_csr(indptr, indices, data, y, scores, z, n, bias_z, bias_n, clock, touched,
                 class_counts, hyper)  # fmt: skip
    n_events = y.shape[0]
    first = fill[0]
    if holding:
        for i in range(n_events):
            if not pooled:
                rows[first + i, :] = X[i, :]
            labels[first + i] = y[i]
        fill[0] = first + n_events
        return
    kept = np.empty(n_events, dtype=np.int64)
    kept_weights = np.empty(n_events)
    start = ring_next[0]
    n_kept = keep_events(y, rng_state, seen, first, capacity, negatives_per_positive, kept,
                         kept_weights)  # fmt: skip
    # only the last `capacity` kept rows can stay
    for q in range(max(n_kept - capacity, 0), n_kept):
        slot = (start + q) % capacity
        if not pooled:
            rows[slot, :] = X[kept[q], :]
            weights[slot] = kept_weights[q]
        labels[slot] = y[kept[q]]
    ring_next[0] = (start + n_kept) % capacity
    fill[0] = min(first + n_kept, capacity)
    written[0] += n_kept
    events[0] += n_events
    since_fit[0] += n_events
