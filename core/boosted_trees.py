"""Fitting the boosted ensemble of ``boosted_embedded`` (docs/algorithms/boosted_embedded.md)
into plain arrays.

A numba kernel (:mod:`core._kernels.boosted_growth`) grows the trees as scikit-learn's
``HistGradientBoostingClassifier`` does (log loss, binned features, best-first growth, no early
stopping; deterministic) into plain arrays, ``2 * max_leaves - 1`` nodes per tree, which
:func:`fit_ensemble` packs into the three arrays of
:class:`core._kernels.boosted_embedding.Ensemble` (a node's left child, its feature or leaf
index, its threshold or leaf value), so a fitted ensemble is part of a learner's pickle-free
state and the embedding runs in a numba kernel.  scikit-learn's Python loop per node cost about
ten times the kernel's time, and its import (1.4 s of CPU) fell on the first fit of every
process (bench/README.md, "Real time-ordered streams").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ENSEMBLE_KEYS",
    "EnsembleParams",
    "bin_features",
    "children_problem",
    "empty_ensemble",
    "fit_ensemble",
    "fit_with_leaves",
    "fitted_ensemble_problem",
    "negative_sampling_shift",
    "node_capacity",
    "node_index_problem",
    "nodes_in_use",
    "trimmed_trees",
    "unfitted_ensemble",
]

ENSEMBLE_KEYS = ("ens_left", "ens_feature_or_leaf", "ens_threshold_or_value", "ens_baseline",
                 "ens_trees")  # fmt: skip


@dataclass(frozen=True)
class EnsembleParams:
    """What a fit needs: the learner's tree hyper-parameters (plain values, so a fit can run in
    another thread without the learner)."""

    n_trees: int
    max_leaves: int
    learning_rate: float
    min_samples_leaf: int
    l2_regularization: float
    random_state: int


def node_capacity(max_leaves: int) -> int:
    """Nodes of a binary tree with ``max_leaves`` leaves."""
    return 2 * max_leaves - 1


#: [CHOICE] the dtype of the trees' child indices (``ens_left``): ``max_leaves`` is at most 255
#: (boosted_embedded's constraint), so a node index is below 509 and fits int16; a quarter of
#: int64's bytes in every cached model (loadtest/README.md, "R:").
NODE_DTYPE = np.dtype(np.int16)
#: [CHOICE] the dtype of ``ens_feature_or_leaf``: a feature index is below the model's
#: n_features, whose dense rows (fit buffer: at least 16 of them) keep it far below 2**31, and a
#: leaf index below ``max_leaves``; one dtype for every width, so the kernels compile one
#: specialisation.
FEATURE_DTYPE = np.dtype(np.int32)


def empty_ensemble(n_trees: int, max_leaves: int) -> dict[str, np.ndarray]:
    """The arrays of an ensemble not fitted yet (``ens_trees`` = 0: embeds no leaf)."""
    if node_capacity(max_leaves) > np.iinfo(NODE_DTYPE).max:
        raise ValueError(f"max_leaves {max_leaves} has node indices beyond {NODE_DTYPE}")
    shape = (n_trees, node_capacity(max_leaves))
    return {
        "ens_left": np.full(shape, -1, dtype=NODE_DTYPE),
        "ens_feature_or_leaf": np.zeros(shape, dtype=FEATURE_DTYPE),
        "ens_threshold_or_value": np.zeros(shape),
        "ens_baseline": np.zeros(1),
        "ens_trees": np.zeros(1, dtype=np.int64),
    }


#: the ensemble's arrays with a row per tree, empty until a fit fills them (they grow as
#: ``core.learners._growing`` arrays: a young model holds no padded trees), and as many
#: columns as its largest tree has nodes (:func:`trimmed_trees`)
TREE_KEYS = ("ens_left", "ens_feature_or_leaf", "ens_threshold_or_value")


def nodes_in_use(left: np.ndarray) -> int:
    """The nodes of the ensemble's largest tree (``left``: its trees' left children): a tree's
    nodes are its root and each split's two children, the right one next to the left, so they
    end after its last split's right child."""
    if not left.size:
        return 0
    return max(int(left.max()) + 2, 1)


def trimmed_trees(ensemble: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``ensemble`` with its trees' arrays cut to the nodes of its largest tree (C-contiguous
    copies): a fit allocates ``2 * max_leaves - 1`` nodes a tree, and trees fitted on a young
    model's few rows use about two thirds of them (loadtest/README.md, "RS").  The kernels
    route a row from the root through the children and read no node past a tree's last."""
    width = nodes_in_use(ensemble["ens_left"])
    return {
        key: np.ascontiguousarray(value[:, :width]) if key in TREE_KEYS else value
        for key, value in ensemble.items()
    }


def unfitted_ensemble(max_leaves: int) -> dict[str, np.ndarray]:
    """:func:`empty_ensemble` with no tree rows: the state of a learner not fitted yet."""
    return {
        key: value[:0].copy() if key in TREE_KEYS else value
        for key, value in empty_ensemble(0, max_leaves).items()
    }


def ensemble_rows_problem(state: dict[str, np.ndarray]) -> str | None:
    """What is wrong with the rows of a stored ensemble (None: nothing): every tree array has
    the same rows, at least ``ens_trees`` (the kernels read the first ``ens_trees``), and the
    same nodes (the kernels read a node of each where ``ens_left`` has one)."""
    rows = {state[key].shape[0] for key in TREE_KEYS}
    if len(rows) != 1 or int(state["ens_trees"][0]) > min(rows):
        return (
            f"the ensemble's arrays hold {sorted(rows)} tree rows for "
            f"{int(state['ens_trees'][0])} trees"
        )
    nodes = {state[key].shape[1] for key in TREE_KEYS}
    if len(nodes) != 1:
        return f"the ensemble's arrays hold {sorted(nodes)} nodes a tree"
    return None


def children_problem(left: np.ndarray) -> str | None:
    """What is wrong with the trees' routing (None: nothing): every left child after its parent
    and its right sibling (the next node) inside the tree, so routing ends there."""
    nodes = np.broadcast_to(np.arange(left.shape[1])[None, :], left.shape)
    internal = left >= 0
    if (left[internal] <= nodes[internal]).any() or (left[internal] >= left.shape[1] - 1).any():
        return "'ens_left' does not describe trees with children after their parents"
    return None


def node_index_problem(
    left: np.ndarray, feature_or_leaf: np.ndarray, n_features: int, max_leaves: int
) -> str | None:
    """What is wrong with the nodes' indices (None: nothing): a split's feature below
    ``n_features``, a leaf's index below ``max_leaves`` (the kernels index rows and leaf columns
    by them unchecked)."""
    ends = np.where(left >= 0, n_features, max_leaves)
    if ((feature_or_leaf < 0) | (feature_or_leaf >= ends)).any():
        return (
            f"'ens_feature_or_leaf' holds a split's feature outside [0, {n_features - 1}] or a "
            f"leaf's index outside [0, {max_leaves - 1}]"
        )
    return None


def fitted_ensemble_problem(
    ensemble: dict[str, np.ndarray], params: EnsembleParams, n_features: int
) -> str | None:
    """What is wrong with an ensemble's arrays as :func:`fit_ensemble` gives them for
    ``params`` on ``n_features`` features (None: nothing): a fit read back from a log entry is
    checked so before it is installed, as a stored state is (no kernel sees a node index out
    of its tree, a feature out of the rows, a value not finite)."""
    if set(ensemble) != set(ENSEMBLE_KEYS):
        return f"holds the arrays {sorted(ensemble)}, expected {sorted(ENSEMBLE_KEYS)}"
    expected = empty_ensemble(params.n_trees, params.max_leaves)
    for key, template in expected.items():
        value = ensemble[key]
        if value.dtype != template.dtype or value.shape != template.shape:
            return (
                f"array {key!r} has dtype {value.dtype} and shape {value.shape}, expected "
                f"{template.dtype} and {template.shape}"
            )
    nodes = node_capacity(params.max_leaves)
    for key, low, high in (("ens_left", -1, nodes - 2),
                           ("ens_trees", params.n_trees, params.n_trees)):  # fmt: skip
        value = ensemble[key]
        if len(value) and (value.min() < low or value.max() > high):
            return f"array {key!r} holds values outside [{low}, {high}]"
    for key in ("ens_threshold_or_value", "ens_baseline"):  # the stored states' bound
        # (core.learners._state.VALUE_BOUND; not imported: core.learners imports this module)
        if not np.isfinite(ensemble[key]).all() or (np.abs(ensemble[key]) > 1e250).any():
            return f"array {key!r} holds values that are not finite (or beyond 1e250)"
    left = ensemble["ens_left"]
    return children_problem(left) or node_index_problem(
        left, ensemble["ens_feature_or_leaf"], n_features, params.max_leaves
    )


def bin_features(X: np.ndarray, max_bins: int = 255) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes, n_edges, table)``: each feature's bin codes (feature-major, uint8), its
    number of edges and its upper edges (``table[f, :n_edges[f]]``, increasing); a value's code
    is the number of its feature's edges below it, so ``value <= table[f, c]`` iff ``code <=
    c``.  At most ``max_bins`` bins: a feature with that few distinct values gets one per value
    (edges at the midpoints), else edges at the percentiles that scikit-learn's
    ``HistGradientBoostingClassifier`` takes."""
    from core._kernels.boosted_growth import bin_codes

    n, d = X.shape
    ordered = np.sort(X, axis=0)
    steps = np.diff(ordered, axis=0) > 0
    distinct = 1 + steps.sum(axis=0)
    table = np.zeros((d, max_bins - 1))
    n_edges = np.zeros(d, dtype=np.int64)
    many = np.flatnonzero(distinct > max_bins)
    if len(many):
        levels = np.linspace(0, 100, num=max_bins + 1)[1:-1]
        quantiles = np.percentile(ordered[:, many], levels, axis=0, method="averaged_inverted_cdf")
    for j in range(d):
        if distinct[j] <= max_bins:
            values = ordered[np.concatenate(([True], steps[:, j])), j]
            upper = (values[:-1] + values[1:]) / 2.0
        else:
            upper = np.unique(quantiles[:, np.searchsorted(many, j)])
        table[j, : len(upper)] = upper
        n_edges[j] = len(upper)
    return bin_codes(X, table, n_edges), n_edges, table


def fit_ensemble(
    X: np.ndarray,
    y: np.ndarray,
    params: EnsembleParams,
    sample_weight: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """:func:`fit_with_leaves`' ensemble alone."""
    return fit_with_leaves(X, y, params, sample_weight)[0]


def fit_with_leaves(
    X: np.ndarray,
    y: np.ndarray,
    params: EnsembleParams,
    sample_weight: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Fit ``params.n_trees`` boosted trees on ``(X, y)`` (labels in {-1, 0, 1}: positive is
    1) and return their arrays (:func:`empty_ensemble`'s keys) and the leaf index each row
    of ``X`` reaches in each tree (``(rows, n_trees)``, uint8: ``max_leaves`` is at most 255),
    the routing of the fitted rows that the growth knows: relearning the buffer embedded by
    the new trees needs no routing.  Needs both classes.

    ``sample_weight`` (None: 1) is a buffer's sampling weights, the inverse of the rate at
    which each row was kept (docs/algorithms/boosted_embedded.md (boosted_embedded.5)): He et
    al. 2014's negative down-sampling.  The trees are grown on the rows as sampled, each
    weighing 1, and the margin is then corrected for the negatives' sampling rate: the baseline
    moves by the log of the rate (negative rows over the negatives they stand for), so that the
    margin is the stream's log-odds, not the sample's.  [CHOICE] Not weighted in the growth: at
    0.16 % positives the weighted fit is the whole stream's fit, whose Newton steps on leaves
    of one positive among many negatives (hessians of ``p (1 - p)``, ``p`` near 0.002) are
    tens of log-odds and overfit.  Grown on the sample, the trees of bench/rare_positives.py
    seed 0's buffer ranked its held-out set at 0.9998 / 0.9985 AUC / pAUC(0, 0.1), weighted at
    0.73 / 0.33 (bench/README.md, "Rare positives: trees grown on the sample").

    The features are binned (:func:`bin_features`, at most 255 bins each) and the trees
    grown on the bin codes (:func:`core._kernels.boosted_growth.grow_ensemble`), their split
    bins then mapped back to the features' values.  ``random_state`` plays no part: the
    growth draws nothing."""
    from core._kernels.boosted_growth import grow_ensemble

    labels = (np.asarray(y) > 0).astype(np.float64)
    if labels.min() == labels.max():
        raise ValueError("the boosted ensemble needs events of both classes to fit")
    features = np.asarray(X, dtype=np.float64)
    codes, n_edges, table = bin_features(features)
    state = empty_ensemble(params.n_trees, params.max_leaves)
    # the growth's own layout: a slot per node for each of a split's and a leaf's fields
    right = np.full_like(state["ens_left"], -1)
    feature = np.zeros_like(state["ens_feature_or_leaf"])
    split_bin = np.zeros_like(feature)
    leaf = np.zeros_like(state["ens_left"])
    value = np.zeros(feature.shape)
    row_leaves = np.empty((len(labels), params.n_trees), dtype=np.uint8)
    # the sample's base rate's log-odds, as scikit-learn's ``fit_intercept_only`` gives it
    eps = 10 * np.finfo(np.float64).eps
    rate = float(np.clip(labels.mean(), eps, 1.0 - eps))
    baseline = float(np.log(rate / (1.0 - rate)))
    grow_ensemble(
        codes, n_edges + 1, labels, np.ones(len(labels)), baseline, params.n_trees,
        params.max_leaves, params.learning_rate, params.min_samples_leaf,
        params.l2_regularization, state["ens_left"], right, feature, split_bin, leaf, value,
        row_leaves,
    )  # fmt: skip
    internal = state["ens_left"] >= 0
    if (right[internal] != state["ens_left"][internal] + 1).any():  # what routing relies on
        raise RuntimeError("the growth put a split's children apart")
    state["ens_feature_or_leaf"][...] = np.where(internal, feature, leaf)
    state["ens_threshold_or_value"][...] = value
    state["ens_threshold_or_value"][internal] = table[feature[internal], split_bin[internal]]
    state["ens_baseline"][0] = baseline + negative_sampling_shift(labels, sample_weight)
    state["ens_trees"][0] = params.n_trees
    return state, row_leaves


def negative_sampling_shift(labels: np.ndarray, sample_weight: np.ndarray | None) -> float:
    """The log of the negatives' sampling rate, ``log(n_neg / sum of their weights)`` (0
    unsampled): what He et al.'s correction ``q = p / (p + (1 - p) / r)`` of a probability
    ``p`` learned on negatives kept at rate ``r`` adds to its log-odds.  Rows kept at
    different rates count at their mean rate; positives are all kept."""
    if sample_weight is None:
        return 0.0
    negatives = labels <= 0
    return float(np.log(negatives.sum() / np.asarray(sample_weight)[negatives].sum()))
