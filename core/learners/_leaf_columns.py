"""The inner learner of ``boosted_embedded`` before its first fit: without the leaves' columns.

The inner learner reads ``[x, m(x), e(x)]``: the features, the ensemble's margin and one column
per leaf of every tree (docs/algorithms/boosted_embedded.md).  Until the first fit is installed
there are no trees and no leaf is ever embedded; an inner learner whose arrays are per column
and whose unseen columns stay zero (FTRL ``logistic``) then learns and scores as at the whole
width, so it starts with the columns of ``x`` and the margin only.  The first installed fit
brings a new inner learner of the whole width (``BoostedEmbedded.prepare``), so the leaves'
columns come with the leaves.  A stored state whose inner learner has the whole width before
its first fit (written by the code before) loads, and learns the same.

[CHOICE] Once fitted, a tree's leaves take the columns of the installed ensemble's largest tree
(:func:`fitted_width`), not ``max_leaves`` each: a young model's trees stop short of
``max_leaves`` (the default model's 50-tree candidate had 10 of 15 after 400 events), and the
columns of leaves no tree has stay zero in every row, so the inner learner (FTRL ``logistic``,
each column on its own, the sums over a row's columns in their order) learns and scores the
same bits at either width.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from core._kernels import boosted_embedding as kernels
from core.boosted_trees import ENSEMBLE_KEYS, node_index_problem, nodes_in_use
from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners._event_rows import event_arrays
from core.learners._fit_buffer import growing_arrays as fit_buffer_arrays
from core.learners._growing import Growth
from core.learners._inner import INNER_PREFIX

if TYPE_CHECKING:
    from core.learners.boosted_embedded import BoostedEmbedded

#: the inner learner's arrays of one entry per column (``touched`` has one more, the
#: intercept's, last)
COLUMN_ARRAYS = ("z", "n")


def whole_width(learner: BoostedEmbedded, n_features: int) -> int:
    """The inner learner's width with every leaf: ``x``, the margin, the leaves' columns."""
    own = n_features if learner.append_features else 0
    return own + int(bool(learner.append_margin)) + learner.n_trees * learner.max_leaves


def inner_widths(learner: BoostedEmbedded, n_features: int) -> tuple[int, int]:
    """The inner learner's width before the first installed fit and after it
    (:func:`whole_width`): one, unless :func:`leaves_grow_in`."""
    width = whole_width(learner, n_features)
    small = width - learner.n_trees * learner.max_leaves
    return (small if leaves_grow_in(learner, small) else width), width


def leaves_grow_in(learner: BoostedEmbedded, width: int) -> bool:
    """Whether ``learner``'s inner learner may start at ``width`` (no leaves' columns): FTRL
    ``logistic`` at that width and at the whole one.  [CHOICE] only it: other inner learners
    (and the Laplace solver's D x D covariance) couple the columns or choose by the width.  A
    default model's two boosted candidates hold ~17 KB less until their first fit (10
    features: 761 and 211 columns of z and n, and the fast one's ``touched``)."""
    if learner.learner != "logistic":
        return False
    inner = learner._build_inner()
    full = width + learner.n_trees * learner.max_leaves
    return inner.resolved_solver(width) == inner.resolved_solver(full) == "ftrl"  # type: ignore[attr-defined]


def fitted_width(learner: BoostedEmbedded, n_features: int, left: np.ndarray) -> int:
    """The inner learner's width with the ensemble whose trees' left children are ``left``
    installed: ``x``, the margin and, per tree, the leaves of its largest tree (a tree of
    ``k`` nodes has ``(k + 1) / 2`` leaves); :func:`whole_width` unless
    :func:`leaves_grow_in` (another inner learner may choose by the width)."""
    small, width = inner_widths(learner, n_features)
    if small == width:
        return width
    return small + learner.n_trees * max((nodes_in_use(left) + 1) // 2, 1)


def leaf_stride(learner: BoostedEmbedded, n_features: int, width: int) -> int:
    """The columns each tree's leaves take in an inner learner of ``width`` columns (leaf
    ``l`` of tree ``t`` is column ``f + t * stride + l``, ``f`` the columns before the
    leaves'): ``max_leaves`` at the whole width, fewer at :func:`fitted_width`'s."""
    before = whole_width(learner, n_features) - learner.n_trees * learner.max_leaves
    return max(width - before, 0) // learner.n_trees


def leaves_problem(learner: BoostedEmbedded, n_features: int, left: np.ndarray,
                   feature_or_leaf: np.ndarray) -> str | None:  # fmt: skip
    """What is wrong with an ensemble's leaves for an inner learner of its
    :func:`fitted_width` (None: nothing): a leaf's index beyond its largest tree's leaves
    would index the next tree's columns, or past the inner learner's (unchecked)."""
    width = fitted_width(learner, n_features, left)
    return node_index_problem(
        left, feature_or_leaf, n_features, leaf_stride(learner, n_features, width)
    )


def leaves_per_tree(learner: BoostedEmbedded, state: dict[str, np.ndarray]) -> int:
    """The most leaves a tree of ``state``'s installed ensemble may have, the columns each
    takes in the inner learner (:func:`leaf_stride`; ``max_leaves`` before the first fit);
    after :func:`check_inner_width`."""
    if not state["fits"][0]:
        return int(learner.max_leaves)
    width = int(state[INNER_PREFIX + "n_features"][0])
    return leaf_stride(learner, int(state["n_features"][0]), width)


def at_whole_width(learner: BoostedEmbedded, n_features: int, terms: np.ndarray) -> np.ndarray:
    """Per-column ``terms`` of an inner learner (rows x its width) laid out at the whole width:
    each tree's leaves at ``max_leaves`` columns, zeros for the leaves no tree has.  Why:
    numpy sums a row pairwise by position, so a sum over the narrow layout may round
    otherwise; over this one it is the sum over the whole width's columns, bit for bit."""
    width, whole = terms.shape[1], whole_width(learner, n_features)
    stride = leaf_stride(learner, n_features, width)
    if width == whole or stride == 0:  # the whole width, or no leaves' columns yet
        return terms
    first, n_trees, rows = whole - learner.n_trees * learner.max_leaves, learner.n_trees, len(terms)
    out = np.zeros((rows, whole))
    out[:, :first] = terms[:, :first]
    leaves = out[:, first:].reshape(rows, n_trees, learner.max_leaves)
    leaves[:, :, :stride] = terms[:, first:].reshape(rows, n_trees, stride)
    return out


def growing_arrays(learner: BoostedEmbedded) -> dict[str, Growth]:
    """``learner``'s growing arrays (name -> (axis, capacity)): the fit buffer's, the trees'
    and the held rows' (:func:`core.learners._fit_buffer.growing_arrays`), and the inner
    arrays whose length follows the inner learner's width (:func:`inner_widths`), so that
    either width loads."""
    growing = fit_buffer_arrays(
        learner.buffer_size, learner.n_trees, learner.max_leaves, learner.fit_delay
    )
    small, width = inner_widths(learner, learner.n_features_in_)
    if small == width:
        return growing
    growing.update({INNER_PREFIX + key: (0, width) for key in COLUMN_ARRAYS})
    if learner._build_inner().half_life is not None:  # type: ignore[attr-defined]
        growing[INNER_PREFIX + "touched"] = (0, width + 1)
    return growing


def check_inner_width(learner: BoostedEmbedded, state: dict[str, np.ndarray]) -> None:
    """The inner learner has the width of the installed ensemble's leaves
    (:func:`fitted_width`) once a fit was installed, the narrow one (:func:`inner_widths`) or
    the whole one (a state of the code before) before; its per-column arrays have its
    width."""
    n_features = int(state["n_features"][0])
    small, width = inner_widths(learner, n_features)
    inner = int(state[INNER_PREFIX + "n_features"][0])
    if state["fits"][0] > 0:
        fitted = fitted_width(learner, n_features, state["ens_left"])
        if inner != fitted:
            raise InvalidState(
                f"state array '{INNER_PREFIX}n_features' holds {inner}; expected {fitted} (x, "
                "the margin and the leaves of the installed trees)",
                field=INNER_PREFIX + "n_features",
            )
    elif inner not in (small, width):
        raise InvalidState(
            f"state array '{INNER_PREFIX}n_features' holds {inner}; expected {small} (or "
            f"{width}) before the first fit is installed",
            field=INNER_PREFIX + "n_features",
        )
    for key in (*COLUMN_ARRAYS, "touched"):
        array = state.get(INNER_PREFIX + key)
        expected = inner + (key == "touched")
        if array is not None and array.shape[0] != expected:
            raise InvalidState(
                f"state array '{INNER_PREFIX}{key}' has {array.shape[0]} entries; expected "
                f"{expected} (the inner learner's width)",
                field=INNER_PREFIX + key,
            )


_NO_ROWS, _NO_DATA = np.empty((0, 0)), np.empty(0)


def embed(learner: BoostedEmbedded, X, scaled, ensemble: dict[str, np.ndarray], width: int):
    """``[x, m(x), e(x)]`` of the rows ``X`` (dense or CSR, as posted: the trees route them)
    whose ``x`` columns are ``scaled`` (the same rows scaled), by ``ensemble``'s trees, as the
    CSR input of an inner learner of ``width`` columns."""
    scaled_rows, scaled_data = (
        (_NO_ROWS, scaled.data) if isinstance(scaled, CSRMatrix) else (scaled, _NO_DATA)
    )
    indptr, indices, data = kernels.embed_arrays(
        *event_arrays(X), scaled_rows, scaled_data,
        *map(ensemble.__getitem__, ENSEMBLE_KEYS[:-1]), int(ensemble["ens_trees"][0]),
        leaf_stride(learner, X.shape[1], width), X.shape[1], bool(learner.append_features),
        bool(learner.append_margin), 1.0 / math.sqrt(learner.n_trees),
    )  # fmt: skip
    return CSRMatrix(indptr, indices, data, width)


def embed_fitted(learner: BoostedEmbedded, scaled: np.ndarray, row_leaves: np.ndarray,
                 ensemble: dict[str, np.ndarray], width: int) -> CSRMatrix:  # fmt: skip
    """:func:`embed` of the dense rows ``ensemble`` was just fitted on (``scaled``: their ``x``
    scaled) by the leaves the growth gave them (``row_leaves``), not routed again."""
    indptr, indices, data = kernels.embed_fitted_rows(
        scaled, row_leaves, *map(ensemble.__getitem__, ENSEMBLE_KEYS[:-1]),
        leaf_stride(learner, scaled.shape[1], width), bool(learner.append_features),
        bool(learner.append_margin),
        1.0 / math.sqrt(learner.n_trees),
    )  # fmt: skip
    return CSRMatrix(indptr, indices, data, width)
