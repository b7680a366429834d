"""Fitting the boosted ensemble of ``boosted_embedded`` (docs/algorithms/boosted_embedded.md)
into plain arrays.

scikit-learn's ``HistGradientBoostingClassifier`` grows the trees (log loss, no early stopping,
one thread: deterministic); each fitted predictor's nodes are copied into the arrays of
:class:`core._kernels.boosted_embedding.Ensemble`, padded to ``2 * max_leaves - 1`` nodes per
tree, so a fitted ensemble is part of a learner's pickle-free state and the embedding runs in a
numba kernel.  scikit-learn is imported only here, inside :func:`fit_ensemble`, never on the
scoring path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ENSEMBLE_KEYS",
    "EnsembleParams",
    "empty_ensemble",
    "fit_ensemble",
    "node_capacity",
    "unfitted_ensemble",
    "weighted_bins",
]

ENSEMBLE_KEYS = ("ens_left", "ens_right", "ens_feature", "ens_threshold", "ens_leaf",
                 "ens_value", "ens_baseline", "ens_trees")  # fmt: skip


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


def empty_ensemble(n_trees: int, max_leaves: int) -> dict[str, np.ndarray]:
    """The arrays of an ensemble not fitted yet (``ens_trees`` = 0: embeds no leaf)."""
    shape = (n_trees, node_capacity(max_leaves))
    return {
        "ens_left": np.full(shape, -1, dtype=np.int64),
        "ens_right": np.full(shape, -1, dtype=np.int64),
        "ens_feature": np.zeros(shape, dtype=np.int64),
        "ens_threshold": np.zeros(shape),
        "ens_leaf": np.zeros(shape, dtype=np.int64),
        "ens_value": np.zeros(shape),
        "ens_baseline": np.zeros(1),
        "ens_trees": np.zeros(1, dtype=np.int64),
    }


#: the ensemble's arrays with a row per tree, empty until a fit fills them (they grow as
#: ``core.learners._growing`` arrays: a young model holds no padded trees)
TREE_KEYS = ("ens_left", "ens_right", "ens_feature", "ens_threshold", "ens_leaf", "ens_value")


def unfitted_ensemble(max_leaves: int) -> dict[str, np.ndarray]:
    """:func:`empty_ensemble` with no tree rows: the state of a learner not fitted yet."""
    return {
        key: value[:0].copy() if key in TREE_KEYS else value
        for key, value in empty_ensemble(0, max_leaves).items()
    }


def ensemble_rows_problem(state: dict[str, np.ndarray]) -> str | None:
    """What is wrong with the rows of a stored ensemble (None: nothing): every tree array has
    the same rows, at least ``ens_trees`` (the kernels read the first ``ens_trees``)."""
    rows = {state[key].shape[0] for key in TREE_KEYS}
    if len(rows) != 1 or int(state["ens_trees"][0]) > min(rows):
        return (
            f"the ensemble's arrays hold {sorted(rows)} tree rows for "
            f"{int(state['ens_trees'][0])} trees"
        )
    return None


def weighted_bins(
    X: np.ndarray, sample_weight: np.ndarray, max_bins: int = 255
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each feature's bin codes (as floats) and upper edges: a value's code is the number of
    edges below it (so ``value <= edges[c]`` iff ``code <= c``).  At most ``max_bins`` bins: a
    feature with that few distinct values gets one per value (edges at the midpoints, as
    scikit-learn's binning), else edges at the values where the weighted cumulative
    distribution crosses ``k / max_bins`` (one sort and one cumulative sum per feature)."""
    codes = np.empty_like(X)
    edges = []
    levels = np.arange(1, max_bins) / max_bins
    for j in range(X.shape[1]):
        column = X[:, j]
        order = np.argsort(column, kind="stable")
        values = column[order]
        distinct = np.unique(values)
        if len(distinct) <= max_bins:
            upper = (distinct[:-1] + distinct[1:]) / 2.0
        else:
            cumulative = np.cumsum(sample_weight[order])
            at = np.searchsorted(cumulative, levels * cumulative[-1], side="left")
            upper = np.unique(values[np.minimum(at, len(values) - 1)])
        edges.append(upper)
        codes[:, j] = np.searchsorted(upper, column, side="left")
    return codes, edges


@functools.cache
def _threadpools() -> Any:
    """threadpoolctl's view of the process's thread pools, made once, after scikit-learn's
    OpenMP runtime is loaded: ``threadpool_limits`` looks the loaded libraries up again at each
    call (~3.5 ms, about 1 % of a fit of 8,000 rows)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def fit_ensemble(
    X: np.ndarray,
    y: np.ndarray,
    params: EnsembleParams,
    sample_weight: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Fit ``params.n_trees`` boosted trees on ``(X, y)`` (labels in {-1, 0, 1}: positive is
    1), each event weighing ``sample_weight`` (None: 1; a buffer's down-sampled negatives
    weigh the inverse of their sampling rate, so the fitted margin is that of the stream's
    class balance: He et al. 2014, "negative down-sampling"), and return their arrays
    (:func:`empty_ensemble`'s keys).  Needs both classes.

    With weights other than 1 the features are binned here (:func:`weighted_bins`) and the
    booster learns the bin codes, its thresholds then mapped back to the features' values:
    scikit-learn's own weighted binning takes one weighted percentile at a time, 254 per
    feature (12 s for 8,000 rows of 10 features, against 0.1 s unweighted)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    labels = (np.asarray(y) > 0).astype(np.int64)
    if labels.min() == labels.max():
        raise ValueError("the boosted ensemble needs events of both classes to fit")
    model = HistGradientBoostingClassifier(
        max_iter=params.n_trees,
        max_leaf_nodes=params.max_leaves,
        learning_rate=params.learning_rate,
        min_samples_leaf=params.min_samples_leaf,
        l2_regularization=params.l2_regularization,
        early_stopping=False,
        random_state=params.random_state,
    )
    # one thread: the fit runs beside the request threads, and its sums then have one order
    features = np.asarray(X, dtype=np.float64)
    edges = weights = None
    if sample_weight is not None and (np.asarray(sample_weight) != 1.0).any():
        weights = np.asarray(sample_weight, dtype=np.float64)
        features, edges = weighted_bins(features, weights)
    with _threadpools().limit(limits=1, user_api="openmp"):
        model.fit(features, labels, sample_weight=weights)
    state = empty_ensemble(params.n_trees, params.max_leaves)
    for t, (predictor,) in enumerate(model._predictors):
        nodes = predictor.nodes
        leaves = nodes["is_leaf"].astype(bool)
        count = len(nodes)
        state["ens_left"][t, :count] = np.where(leaves, -1, nodes["left"].astype(np.int64))
        state["ens_right"][t, :count] = np.where(leaves, -1, nodes["right"].astype(np.int64))
        state["ens_feature"][t, :count] = np.where(leaves, 0, nodes["feature_idx"])
        thresholds = np.where(leaves, 0.0, nodes["num_threshold"])
        if edges is not None:
            # code <= c + 1/2 (a midpoint between present codes) is value <= edges[c]
            for node in np.flatnonzero(~leaves):
                feature = int(nodes["feature_idx"][node])
                thresholds[node] = edges[feature][int(np.floor(thresholds[node]))]
        state["ens_threshold"][t, :count] = thresholds
        index = np.full(count, 0, dtype=np.int64)
        index[leaves] = np.arange(int(leaves.sum()))
        state["ens_leaf"][t, :count] = index
        state["ens_value"][t, :count] = np.where(leaves, nodes["value"], 0.0)
    state["ens_baseline"][0] = float(np.ravel(model._baseline_prediction)[0])
    state["ens_trees"][0] = len(model._predictors)
    return state
