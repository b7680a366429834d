"""A plain router over a fitted ensemble's arrays (docs/algorithms/boosted_embedded.md
(boosted_embedded.1)-(boosted_embedded.2)): Python loops from the definitions, one dense row at
a time."""

from __future__ import annotations

import numpy as np


def leaf_node(state, t, x):
    """The node of tree ``t`` that ``x`` reaches, walked from the root (a split's right child
    is the node after its left one)."""
    node = 0
    while state["ens_left"][t, node] >= 0:
        feature = state["ens_feature_or_leaf"][t, node]
        go_left = x[feature] <= state["ens_threshold_or_value"][t, node]
        node = state["ens_left"][t, node] + (0 if go_left else 1)
    return int(node)


def margin_row(state, x):
    """``baseline + sum_t value[t, leaf_t(x)]`` (boosted_embedded.1)."""
    total = float(state["ens_baseline"][0])
    for t in range(int(state["ens_trees"][0])):
        total += float(state["ens_threshold_or_value"][t, leaf_node(state, t, x)])
    return total


def embed_row(state, x, n_trees, max_leaves, append_features=True, append_margin=True,
              scaled=None):  # fmt: skip
    """``[x, m(x), e(x)]`` (boosted_embedded.2) as a dense row: the leaf of tree ``t`` sets column
    ``f + t * max_leaves + leaf`` to ``1 / sqrt(n_trees)``; the trees route ``x``, the first
    columns hold ``scaled`` (``x`` when None)."""
    d = len(x) if append_features else 0
    first = d + (1 if append_margin else 0)
    row = np.zeros(first + n_trees * max_leaves)
    row[:d] = (x if scaled is None else scaled)[:d]
    fitted = int(state["ens_trees"][0])
    if append_margin and fitted:
        row[d] = margin_row(state, x)
    for t in range(fitted):
        leaf = int(state["ens_feature_or_leaf"][t, leaf_node(state, t, x)])
        row[first + t * max_leaves + leaf] = 1.0 / np.sqrt(n_trees)
    return row
