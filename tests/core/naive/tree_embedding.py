"""A plain router over a fitted tree's arrays (docs/algorithms/poise.md (poise.8)-(poise.10)):
Python loops from the definitions, one dense row at a time."""

from __future__ import annotations

import numpy as np


def path_nodes(tree, x, s):
    """The nodes below the root on the way of ``(x, s)`` to its leaf, and the leaf."""
    nodes, node = [], 0
    d = len(tree["tree_score_w"])
    while tree["tree_left"][node] >= 0:
        feature = tree["tree_feature"][node]
        value = s if feature == d else x[feature]
        node = (
            tree["tree_left"][node]
            if value <= tree["tree_threshold"][node]
            else tree["tree_right"][node]
        )
        nodes.append(int(node))
    return nodes, node


def embed_row(tree, x, width, append_score=True, append_features=True):
    """``[x, s, t(x)]`` (``[s, t(x)]`` without ``append_features``) as a dense row of
    ``width`` columns."""
    d = len(x) if append_features else 0
    s = float(x @ tree["tree_score_w"])
    row = np.zeros(width)
    row[:d] = x[:d]
    if append_score:
        row[d] = s
    nodes, leaf = path_nodes(tree, x, s)
    for node in nodes:
        column = tree["tree_column"][node]
        if column >= 0:
            row[d + 1 + column] = tree["tree_leaf_label"][leaf]
    return row
