"""The tree-path embedding of POISE (docs/algorithms/poise.md (poise.8)-(poise.10)) from the
tree's arrays: every event becomes the CSR row ``[x, s, t(x)]`` (or ``[s, t(x)]``) in
O(nnz(x) + depth)."""

from collections import namedtuple

import numpy as np

from core._kernels._config import kernel

#: A fitted tree as arrays, nodes in preorder (children after their parent): ``left[v]`` /
#: ``right[v]`` (-1 at leaves), ``feature[v]`` (``n_features`` = the AUC score ``s``),
#: ``threshold[v]`` (go left when ``value <= threshold``), ``leaf_label[v]`` (+-1 at leaves),
#: ``column[v]``: the embedding column of the edge into ``v`` (-1: none).
TreeArrays = namedtuple(
    "TreeArrays", ["left", "right", "feature", "threshold", "leaf_label", "column", "score_w"]
)


@kernel
def _route(tree, X, i, dense, sparse, s, n_features, path):
    """Fill ``path`` with the nodes below the root on the way to the leaf; returns
    ``(length, leaf)``.  Feature values come from row ``i`` of ``X`` (dense) or ``dense`` (the
    CSR row scattered)."""
    node = 0
    length = 0
    while tree.left[node] >= 0:
        f = tree.feature[node]
        if f == n_features:
            value = s
        elif sparse:
            value = dense[f]
        else:
            value = X[i, f]
        node = tree.left[node] if value <= tree.threshold[node] else tree.right[node]
        path[length] = node
        length += 1
    return length, node


@kernel
def embedded_rows(X, indptr, n_features, append_features, slots_per_event):
    """``(n_samples, indptr, indices, data)``: the empty CSR arrays of an embedded batch of
    the rows of ``X`` (dense) or of ``indptr`` (CSR), with room for each row's features (when
    ``append_features``) and ``slots_per_event`` more columns per row."""
    sparse = indptr.shape[0] > 0
    n_samples = indptr.shape[0] - 1 if sparse else X.shape[0]
    capacity = 0
    if append_features:
        capacity = indptr[n_samples] if sparse else n_samples * n_features
    capacity += n_samples * slots_per_event
    out_indptr = np.zeros(n_samples + 1, dtype=np.int64)
    return n_samples, out_indptr, np.empty(capacity, dtype=np.int64), np.empty(capacity)


@kernel
def embed(X, indptr, indices, data, tree, append_score, append_features, max_depth):
    """``(indptr, indices, data)`` of the embedded CSR batch: columns ``[0, d)`` hold ``x``
    (when ``append_features``; ``e = d``, else ``e = 0`` and ``x`` is only routed), column
    ``e`` the score ``s = score_w . x`` (when ``append_score``), column ``e + 1 + c`` the
    leaf's label on every path edge with embedding column ``c`` (poise.9), (poise.10)."""
    sparse = indptr.shape[0] > 0
    n_features = tree.score_w.shape[0]
    first = n_features if append_features else 0  # the column of s
    n_samples, out_indptr, out_indices, out_data = embedded_rows(
        X, indptr, n_features, append_features, 1 + max_depth
    )
    dense = np.zeros(n_features)
    path = np.empty(max_depth + 1, dtype=np.int64)
    k = 0
    for i in range(n_samples):
        s = 0.0
        if sparse:
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                dense[j] = data[p]
                s += tree.score_w[j] * data[p]
                if append_features:
                    out_indices[k] = j
                    out_data[k] = data[p]
                    k += 1
        else:
            for j in range(n_features):
                s += tree.score_w[j] * X[i, j]
                if append_features:
                    out_indices[k] = j
                    out_data[k] = X[i, j]
                    k += 1
        if append_score:
            out_indices[k] = first
            out_data[k] = s
            k += 1
        length, leaf = _route(tree, X, i, dense, sparse, s, n_features, path)
        label = tree.leaf_label[leaf]
        for p in range(length):
            c = tree.column[path[p]]
            if c >= 0:
                out_indices[k] = first + 1 + c
                out_data[k] = label
                k += 1
        if sparse:
            for p in range(indptr[i], indptr[i + 1]):
                dense[indices[p]] = 0.0
        out_indptr[i + 1] = k
    # views, not copies: the capacity exceeds ``k`` only by the slots of paths shorter than
    # ``max_depth`` or of edges without a column, and of the score when it is not appended
    return out_indptr, out_indices[:k], out_data[:k]
