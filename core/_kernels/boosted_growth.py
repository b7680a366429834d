"""Gradient boosting of ``boosted_embedded``'s trees on binned features
(docs/algorithms/boosted_embedded.md, "The fits"): log loss, each tree grown best
first (the leaf whose best split gains most is split next) on per-node histograms of the
gradients and hessians, as scikit-learn's ``HistGradientBoostingClassifier`` grows them, in one
numba call instead of a Python loop per node.

Every sum runs in one fixed order (the rows' order within each node), so a fit is the same bit
for bit in any process and any thread.
"""

import numpy as np

from core._kernels._config import kernel

#: a split needs at least this hessian on each side (scikit-learn's ``min_hessian_to_split``)
MIN_HESSIAN = 1e-3


@kernel
def bin_codes(X, table, n_edges):
    """The bin code of every value (the number of its feature's edges below it, so ``value <=
    table[f, c]`` iff ``code <= c``), feature-major: shape ``(features, rows)``, uint8 (at
    most 255 bins)."""
    n, n_features = X.shape
    codes = np.empty((n_features, n), dtype=np.uint8)
    for f in range(n_features):
        m = n_edges[f]
        for i in range(n):
            value = X[i, f]
            lo, hi = 0, m
            while lo < hi:
                mid = (lo + hi) // 2
                if table[f, mid] < value:
                    lo = mid + 1
                else:
                    hi = mid
            codes[f, i] = lo
    return codes


@kernel
def _gradients(y, raw, weight, gradient, hessian):
    """The half binomial loss's gradients and hessians at ``raw``, weighted, rounded to float32
    (scikit-learn's formulas and precision)."""
    for i in range(y.shape[0]):
        r = raw[i]
        if r > -37.0:
            e = np.exp(-r)
            g = ((1.0 - y[i]) - y[i] * e) / (1.0 + e)
            h = e / (1.0 + e) ** 2
        else:
            e = np.exp(r)
            g = e - y[i]
            h = e
        gradient[i] = np.float32(weight[i] * g)
        hessian[i] = np.float32(weight[i] * h)


@kernel
def _histogram(codes, features, n_bins, gradient, hessian, order, start, stop, ordered_g,
               ordered_h, hist):  # fmt: skip
    """Per feature of ``features`` and bin, the sums of gradients, hessians and rows of
    ``order[start:stop]`` into ``hist`` (features x bins x 3), in the rows' order; the other
    features' entries and the bins past ``n_bins[f]`` are left as they are (no row has them)."""
    count = stop - start
    for p in range(count):
        i = order[start + p]
        ordered_g[p] = gradient[i]
        ordered_h[p] = hessian[i]
    for k in range(features.shape[0]):
        f = features[k]
        hist[f, : n_bins[f], :] = 0.0
        row = codes[f]
        for p in range(count):
            b = row[order[start + p]]
            hist[f, b, 0] += ordered_g[p]
            hist[f, b, 1] += ordered_h[p]
            hist[f, b, 2] += 1.0


@kernel
def _subtract(hist, other, features, n_bins):
    """``hist -= other`` over the entries :func:`_histogram` writes for ``features``."""
    for k in range(features.shape[0]):
        f = features[k]
        for b in range(n_bins[f]):
            for j in range(3):
                hist[f, b, j] -= other[f, b, j]


@kernel
def _pairwise(values, k):
    """``values[:, k]`` summed as numpy sums 256 values (two blocks of 128, eight partial sums
    each), zeros past its length: how scikit-learn totals the root's histogram."""
    total = 0.0
    for block in range(2):
        r = np.zeros(8)
        for i in range(16):
            for j in range(8):
                at = block * 128 + i * 8 + j
                value = values[at, k] if at < values.shape[0] else 0.0
                r[j] = value if i == 0 else r[j] + value
        total += ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    return total


@kernel
def _node_value(sum_g, sum_h, l2):
    return -sum_g / (sum_h + l2 + 1e-15)


@kernel
def _best_split(hist, n_bins, total_g, total_h, total_c, value, min_samples_leaf, l2):
    """``(gain, feature, bin, left gradients, left hessians)`` of the node's best split (rows
    with code <= bin go left; the first best on a tie); feature -1 when no split gains (each
    side keeps ``min_samples_leaf`` rows and :data:`MIN_HESSIAN`).  The gain is scikit-learn's,
    from the node's ``value`` (0 at the root, as there)."""
    current = total_g * value
    best_gain, best_f, best_b, best_g, best_h = -1.0, -1, -1, 0.0, 0.0
    for f in range(hist.shape[0]):
        gain_f, b_f, g_f, h_f = -1.0, -1, 0.0, 0.0
        gl, hl, cl = 0.0, 0.0, 0.0
        for b in range(n_bins[f] - 1):
            cl += hist[f, b, 2]
            hl += hist[f, b, 1]
            hr = total_h - hl
            gl += hist[f, b, 0]
            gr = total_g - gl
            if cl < min_samples_leaf:
                continue
            if total_c - cl < min_samples_leaf:
                break
            if hl < MIN_HESSIAN:
                continue
            if hr < MIN_HESSIAN:
                break
            gain = current
            gain -= gl * _node_value(gl, hl, l2)
            gain -= gr * _node_value(gr, hr, l2)
            if gain > gain_f and gain > 0.0:
                gain_f, b_f, g_f, h_f = gain, b, gl, hl
        if b_f >= 0 and (best_f < 0 or gain_f > best_gain):
            best_gain, best_f, best_b, best_g, best_h = gain_f, f, b_f, g_f, h_f
    return best_gain, best_f, best_b, best_g, best_h


@kernel
def grow_ensemble(codes, n_bins, y, weight, baseline, n_trees, max_leaves, learning_rate,
                  min_samples_leaf, l2, left, right, feature, split_bin, leaf, value,
                  row_leaves):  # fmt: skip
    """Boost ``n_trees`` trees of at most ``max_leaves`` leaves from the margin ``baseline`` on
    the bin ``codes`` (features x rows, :func:`bin_codes`; ``n_bins[f]`` bins of feature
    ``f``) of labels ``y`` in {0, 1} weighing ``weight``; fills the ensemble's node arrays
    (shape ``(n_trees, 2 * max_leaves - 1)``: children after their parent, ``split_bin`` the
    bin a node's rows go left up to).

    scikit-learn's growth (``HistGradientBoostingClassifier``, no early stopping, one thread):
    float32 gradients, best first (the open leaf of the largest gain; the one opened first on
    a tie), a child's sums from its parent's histogram scan, the histogram built from the rows
    only for the smaller child of a split and the larger one's its parent's less it.

    ``row_leaves[i, t]`` gets the leaf index of tree ``t`` that row ``i`` ends in: where the
    trees route it (a finite value ``<= table[f, b]`` iff its code ``<= b``), so the fit's
    rows need not be routed again.  A feature of one bin never splits: it gets no histogram
    (but feature 0 at the root, whose sums are the node's)."""
    n_features, n = codes.shape
    raw = np.full(n, baseline)
    gradient = np.empty(n, dtype=np.float32)
    hessian = np.empty(n, dtype=np.float32)
    ordered_g = np.empty(n, dtype=np.float32)
    ordered_h = np.empty(n, dtype=np.float32)
    order = np.empty(n, dtype=np.int64)
    spare = np.empty(n, dtype=np.int64)
    n_nodes = 2 * max_leaves - 1
    start = np.empty(n_nodes, dtype=np.int64)
    stop = np.empty(n_nodes, dtype=np.int64)
    sum_g = np.empty(n_nodes)
    sum_h = np.empty(n_nodes)
    node_value = np.empty(n_nodes)
    gain = np.empty(n_nodes)
    best_f = np.empty(n_nodes, dtype=np.int64)
    best_b = np.empty(n_nodes, dtype=np.int64)
    left_g = np.empty(n_nodes)
    left_h = np.empty(n_nodes)
    slot = np.empty(n_nodes, dtype=np.int64)
    width = 1
    for f in range(n_features):
        width = max(width, n_bins[f])
    # one histogram per open leaf: a split hands its slot to one child and takes one more
    hists = np.empty((max_leaves, n_features, width, 3))
    # the features that may split (more than one bin); at the root feature 0 too, whose
    # histogram gives the root's sums
    splitting = np.flatnonzero(n_bins[:n_features] > 1)
    at_root = splitting if n_bins[0] > 1 else np.concatenate((np.zeros(1, np.int64), splitting))
    for t in range(n_trees):
        _gradients(y, raw, weight, gradient, hessian)
        for i in range(n):
            order[i] = i
        for node in range(n_nodes):
            best_f[node] = -1
        _histogram(codes, at_root, n_bins, gradient, hessian, order, 0, n, ordered_g, ordered_h,
                   hists[0])  # fmt: skip
        start[0], stop[0], slot[0], node_value[0] = 0, n, 0, 0.0
        root = hists[0, 0, : n_bins[0]]
        sum_g[0], sum_h[0] = _pairwise(root, 0), _pairwise(root, 1)
        if n >= 2 * min_samples_leaf and sum_h[0] >= MIN_HESSIAN:
            gain[0], best_f[0], best_b[0], left_g[0], left_h[0] = _best_split(
                hists[0], n_bins, sum_g[0], sum_h[0], n, 0.0, min_samples_leaf, l2
            )
        created, slots, leaves = 1, 1, 1
        while leaves < max_leaves:
            node = -1
            for v in range(created):  # the open leaf that gains most (the first on a tie)
                if best_f[v] >= 0 and (node < 0 or gain[v] > gain[node]):
                    node = v
            if node < 0:
                break
            f, b = best_f[node], best_b[node]
            best_f[node] = -1
            # a stable partition of the node's rows: code <= b first
            row = codes[f]
            kept, moved = start[node], 0
            for p in range(start[node], stop[node]):
                i = order[p]
                if row[i] <= b:
                    order[kept] = i
                    kept += 1
                else:
                    spare[moved] = i
                    moved += 1
            for q in range(moved):
                order[kept + q] = spare[q]
            a, c = created, created + 1
            created += 2
            leaves += 1
            left[t, node], right[t, node] = a, c
            feature[t, node], split_bin[t, node] = f, b
            start[a], stop[a], start[c], stop[c] = start[node], kept, kept, stop[node]
            sum_g[a], sum_h[a] = left_g[node], left_h[node]
            sum_g[c], sum_h[c] = sum_g[node] - left_g[node], sum_h[node] - left_h[node]
            for child in (a, c):
                node_value[child] = _node_value(sum_g[child], sum_h[child], l2)
            if leaves == max_leaves:
                break
            if stop[a] - start[a] < 2 * min_samples_leaf and (
                stop[c] - start[c] < 2 * min_samples_leaf
            ):
                continue
            small, large = (a, c) if stop[a] - start[a] < stop[c] - start[c] else (c, a)
            parent_slot = slot[node]
            slot[small], slot[large] = slots, parent_slot
            slots += 1
            _histogram(codes, splitting, n_bins, gradient, hessian, order, start[small],
                       stop[small], ordered_g, ordered_h, hists[slot[small]])  # fmt: skip
            _subtract(hists[parent_slot], hists[slot[small]], splitting, n_bins)
            for child in (a, c):
                rows = stop[child] - start[child]
                if rows >= 2 * min_samples_leaf:
                    gain[child], best_f[child], best_b[child], left_g[child], left_h[child] = (
                        _best_split(hists[slot[child]], n_bins, sum_g[child], sum_h[child],
                                    rows, node_value[child], min_samples_leaf, l2)
                    )  # fmt: skip
        index = 0
        for v in range(created):
            if left[t, v] >= 0:
                continue
            step = node_value[v] * learning_rate
            leaf[t, v], value[t, v] = index, step
            index += 1
            for p in range(start[v], stop[v]):
                raw[order[p]] += step
                row_leaves[order[p], t] = leaf[t, v]
