"""Fitting POISE's decision tree (docs/algorithms/poise.md (poise.8)-(poise.10)) into arrays.

scikit-learn grows the trees and imbalanced-learn's SMOTE upsamples each side of the root split;
the result is plain arrays (:class:`core._kernels.tree_embedding.TreeArrays`), nodes in preorder,
padded to the capacity of ``max_depth``, so a fitted tree is part of a learner's pickle-free
state and the embedding runs in a numba kernel.  Both libraries are imported only here, when a
tree is fitted (the ``trees`` extra).
"""

from __future__ import annotations

import numpy as np

from core.learners.spdam import exact_minimiser

__all__ = ["EMBEDDINGS", "edge_capacity", "empty_tree", "fit_tree", "node_capacity"]

EMBEDDINGS = ("full", "frugal")
#: [CHOICE] the linear AUC scorer ``s`` is fitted in closed form (O(n d^2 + d^3)); refused above
MAX_SCORER_FEATURES = 4096


def node_capacity(max_depth: int) -> int:
    """Nodes of a root split plus two subtrees of depth ``max_depth - 1``: ``2^(D+1) - 1``."""
    return 2 ** (max_depth + 1) - 1


def edge_capacity(max_depth: int, embedding: str) -> int:
    """Embedding columns: one per edge (``full``, ``N - 1``) or one per internal node
    (``frugal``, its left edge: ``(N - 1) / 2``) (poise.9)."""
    edges = node_capacity(max_depth) - 1
    return edges if embedding == "full" else edges // 2


def empty_tree(n_features: int, max_depth: int) -> dict[str, np.ndarray]:
    """The state of a tree not fitted yet: a single leaf of label 0 (embeds nothing)."""
    size = node_capacity(max_depth)
    return {
        "tree_left": np.full(size, -1, dtype=np.int64),
        "tree_right": np.full(size, -1, dtype=np.int64),
        "tree_feature": np.full(size, -1, dtype=np.int64),
        "tree_threshold": np.zeros(size),
        "tree_leaf_label": np.zeros(size),
        "tree_column": np.full(size, -1, dtype=np.int64),
        "tree_score_w": np.zeros(n_features),
    }


def _smote(X: np.ndarray, y: np.ndarray, random_state: int):
    """SMOTE to balanced classes when the minority has at least 2 rows (k = min(5, minority
    - 1)); the data unchanged otherwise ([CHOICE], the paper gives no ratio nor k)."""
    minority = min(int((y > 0).sum()), int((y <= 0).sum()))
    if minority < 2 or minority == len(y) - minority:
        return X, y
    try:
        from imblearn.over_sampling import SMOTE
    except ImportError as error:  # pragma: no cover - the extra is installed with dev
        raise ImportError(
            "the tree embedding needs imbalanced-learn: pip install 'aucstream[trees]'"
        ) from error
    sampler = SMOTE(k_neighbors=min(5, minority - 1), random_state=random_state)
    return sampler.fit_resample(X, y)


def _subtree(X, y, depth, min_samples_leaf, random_state):
    from sklearn.tree import DecisionTreeClassifier

    if depth == 0 or len(np.unique(y)) < 2:
        label = 1.0 if (y > 0).sum() * 2 > len(y) else -1.0
        return [(-1, -1, -1, 0.0, label)]
    model = DecisionTreeClassifier(
        max_depth=depth, min_samples_leaf=min_samples_leaf, random_state=random_state
    ).fit(X, y)
    tree = model.tree_
    positive = int(np.flatnonzero(model.classes_ == 1)[0]) if 1 in model.classes_ else -1
    nodes = []
    order = []  # sklearn's ids in preorder (sklearn numbers nodes depth first, left first)
    stack = [0]
    while stack:
        node = stack.pop()
        order.append(node)
        if tree.children_left[node] >= 0:
            stack.append(tree.children_right[node])
            stack.append(tree.children_left[node])
    position = {node: k for k, node in enumerate(order)}
    for node in order:
        left, right = tree.children_left[node], tree.children_right[node]
        if left < 0:
            share = tree.value[node][0][positive] / tree.value[node][0].sum()
            nodes.append((-1, -1, -1, 0.0, 1.0 if share > 0.5 else -1.0))
        else:
            nodes.append(
                (position[left], position[right], int(tree.feature[node]),
                 float(tree.threshold[node]), 0.0)
            )  # fmt: skip
    return nodes


def fit_tree(X, y, *, max_depth: int, min_samples_leaf: int, embedding: str, smote: bool,
             score_lam: float, random_state: int) -> dict[str, np.ndarray]:  # fmt: skip
    """The tree arrays of (poise.8): the linear AUC scorer ``s``, a root split on ``[x, s]``,
    each side SMOTE-upsampled and grown to ``max_depth - 1``, leaves labelled by their
    majority class (on the upsampled side)."""
    from sklearn.tree import DecisionTreeClassifier

    X = np.asarray(X, dtype=np.float64)
    y = np.where(np.asarray(y) > 0, 1, -1)
    n_features = X.shape[1]
    if n_features > MAX_SCORER_FEATURES:
        raise ValueError(
            f"the tree embedding fits its linear AUC scorer in closed form, up to "
            f"{MAX_SCORER_FEATURES} features; got {n_features}"
        )
    score_w = exact_minimiser(X, y, score_lam)
    augmented = np.column_stack([X, X @ score_w])
    state = empty_tree(n_features, max_depth)
    root = DecisionTreeClassifier(max_depth=1, min_samples_leaf=min_samples_leaf,
                                  random_state=random_state).fit(augmented, y)  # fmt: skip
    if root.tree_.node_count < 3:
        nodes = _subtree(augmented, y, 0, min_samples_leaf, random_state)
    else:
        feature, threshold = int(root.tree_.feature[0]), float(root.tree_.threshold[0])
        goes_left = augmented[:, feature] <= threshold
        sides = []
        for mask in (goes_left, ~goes_left):
            side_X, side_y = augmented[mask], y[mask]
            if smote:
                side_X, side_y = _smote(side_X, side_y, random_state)
            sides.append(_subtree(side_X, side_y, max_depth - 1, min_samples_leaf, random_state))
        left, right = sides
        shift_left, shift_right = 1, 1 + len(left)
        nodes = [(shift_left, shift_right, feature, threshold, 0.0)]
        for shift, side in ((shift_left, left), (shift_right, right)):
            for a, b, f, t, label in side:
                nodes.append(
                    (a + shift if a >= 0 else -1, b + shift if b >= 0 else -1, f, t, label)
                )
    rank = 0
    for v, (a, b, f, t, label) in enumerate(nodes):
        state["tree_left"][v], state["tree_right"][v] = a, b
        state["tree_feature"][v] = f
        state["tree_threshold"][v] = t
        state["tree_leaf_label"][v] = label
        if a >= 0:
            if embedding == "full":  # (poise.9): one column per edge, the edge into node v
                state["tree_column"][a], state["tree_column"][b] = a - 1, b - 1
            else:  # (poise.10): one column per internal node, its left edge
                state["tree_column"][a] = rank
                rank += 1
    state["tree_score_w"][:] = score_w
    return state
