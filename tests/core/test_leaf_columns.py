"""``boosted_embedded``'s leaf columns at the stride of the installed trees' leaves
(core/learners/_leaf_columns.py): the inner learner learns and scores the same bits as at
``max_leaves`` columns a tree, and a stored leaf beyond that stride is refused."""

from __future__ import annotations

import numpy as np
import pytest

from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners import _leaf_columns as columns
from core.learners import learner_class, make_learner

#: shallow trees (few rows a leaf may not split), so a fit stops short of max_leaves
PARAMS = {"first_fit": 120, "refit_every": 150, "buffer_size": 200, "n_trees": 6,
          "max_leaves": 9, "min_samples_leaf": 40, "fit_delay": 0,
          "params": {"solver": "ftrl"}}  # fmt: skip


def fitted(seed: int = 0, n: int = 400):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=n) > 0.4).astype(np.int64)
    learner = make_learner("boosted_embedded", **PARAMS).partial_fit(X, y)
    assert learner.fits_ >= 1
    return learner, X, y


def spaced(embedded: CSRMatrix, first: int, stride: int, max_leaves: int) -> CSRMatrix:
    """``embedded`` with each tree's leaves at ``max_leaves`` columns (the layout before)."""
    indices = embedded.indices.copy()
    leaf = indices >= first
    tree, index = np.divmod(indices[leaf] - first, stride)
    indices[leaf] = first + tree * max_leaves + index
    n_trees = PARAMS["n_trees"]
    return CSRMatrix(embedded.indptr, indices, embedded.data, first + n_trees * max_leaves)


def test_the_leaves_columns_learn_and_score_as_at_max_leaves_a_tree():
    learner, X, y = fitted()
    stride = columns.leaves_per_tree(learner, learner.state_)
    width = columns.fitted_width(learner, X.shape[1], learner.state_["ens_left"])
    first = width - PARAMS["n_trees"] * stride
    assert stride < PARAMS["max_leaves"]  # the shallow trees left columns out
    assert learner.state_["inner:z"].shape == (width,)
    embedded = learner.transform(X)
    assert embedded.n_features == width
    wide = spaced(embedded, first, stride, PARAMS["max_leaves"])
    narrow_inner = learner._build_inner().initialize(width)
    wide_inner = learner._build_inner().initialize(wide.n_features)
    for start in range(0, len(y), 64):
        rows = slice(start, start + 64)
        part = CSRMatrix(*_rows(embedded, rows), width)
        wide_part = CSRMatrix(*_rows(wide, rows), wide.n_features)
        np.testing.assert_array_equal(
            narrow_inner.prequential_step(part, y[rows]),
            wide_inner.prequential_step(wide_part, y[rows]),
        )
    # the terms per column, summed over the leaves (the reasons' remainder): the same bits
    # once laid out at the whole width (numpy sums a row pairwise by position)
    narrow_terms, narrow_rest = narrow_inner._contributions(embedded)
    wide_terms, wide_rest = wide_inner._contributions(wide)
    np.testing.assert_array_equal(narrow_rest, wide_rest)
    laid_out = columns.at_whole_width(learner, X.shape[1], narrow_terms)
    np.testing.assert_array_equal(laid_out, wide_terms)
    np.testing.assert_array_equal(laid_out[:, 6:].sum(axis=1), wide_terms[:, 6:].sum(axis=1))
    # the wide inner's columns of leaves no tree has stayed zero; the others are the narrow's
    for key in ("z", "n"):
        kept = np.ones(wide.n_features, dtype=bool)
        leaves = np.arange(PARAMS["n_trees"] * PARAMS["max_leaves"]) % PARAMS["max_leaves"]
        kept[first:] = leaves < stride
        assert not wide_inner.state_[key][~kept].any()
        np.testing.assert_array_equal(wide_inner.state_[key][kept], narrow_inner.state_[key])


def _rows(matrix: CSRMatrix, rows: slice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start, stop = matrix.indptr[rows.start], matrix.indptr[min(rows.stop, len(matrix.indptr) - 1)]
    indptr = matrix.indptr[rows.start : rows.stop + 1] - start
    return indptr, matrix.indices[start:stop], matrix.data[start:stop]


def test_a_leaf_beyond_the_installed_trees_leaves_is_refused():
    """Its column would be another tree's, or past the inner learner's arrays (the kernels
    index them unchecked): the stored state is refused before any kernel reads it."""
    learner, _, _ = fitted(seed=1)
    state = learner.get_state()
    stride = columns.leaves_per_tree(learner, state)
    assert stride < PARAMS["max_leaves"]
    left = state["ens_left"]
    tree, node = (int(i[0]) for i in np.nonzero(left[:, : 2 * stride - 1] < 0))
    bad = {**state, "ens_feature_or_leaf": state["ens_feature_or_leaf"].copy()}
    bad["ens_feature_or_leaf"][tree, node] = stride  # below max_leaves, beyond the stride
    with pytest.raises(InvalidState) as caught:
        learner_class("boosted_embedded").from_state(learner.get_params(), bad)
    assert caught.value.field == "ens_feature_or_leaf"


def test_an_inner_learner_at_max_leaves_a_tree_after_a_fit_is_refused():
    """The width the code before kept after a fit is not this ensemble's (a state of another
    format is refused by its version before it gets here)."""
    learner, X, _ = fitted(seed=2)
    state = learner.get_state()
    whole = columns.whole_width(learner, X.shape[1])
    fitted_width = columns.fitted_width(learner, X.shape[1], state["ens_left"])
    assert fitted_width < whole
    bad = {**state, "inner:n_features": np.array([whole])}
    for key in ("z", "n"):
        bad["inner:" + key] = np.zeros(whole)
    with pytest.raises(InvalidState) as caught:
        learner_class("boosted_embedded").from_state(learner.get_params(), bad)
    assert caught.value.field == "inner:n_features"
