"""The inner learner of ``boosted_embedded`` before its first fit: without the leaves' columns.

The inner learner reads ``[x, m(x), e(x)]``: the features, the ensemble's margin and one column
per leaf of every tree (docs/algorithms/boosted_embedded.md).  Until the first fit is installed
there are no trees and no leaf is ever embedded; an inner learner whose arrays are per column
and whose unseen columns stay zero (FTRL ``logistic``) then learns and scores as at the whole
width, so it starts with the columns of ``x`` and the margin only.  The first installed fit
brings a new inner learner of the whole width (``BoostedEmbedded.prepare``), so the leaves'
columns come with the leaves.  A stored state whose inner learner has the whole width before
its first fit (written by the code before) loads, and learns the same.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from core._kernels import boosted_embedding as kernels
from core.boosted_trees import ENSEMBLE_KEYS
from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners._fit_buffer import growing_arrays as fit_buffer_arrays
from core.learners._growing import Growth
from core.learners._inner import INNER_PREFIX
from core.learners.pmb import event_arrays

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
    """The inner learner has the whole width once a fit was installed (or always: a state of
    the code before), the narrow one (:func:`inner_widths`) only before; its per-column
    arrays have its width."""
    small, width = inner_widths(learner, int(state["n_features"][0]))
    inner = int(state[INNER_PREFIX + "n_features"][0])
    if inner != width and (inner != small or state["fits"][0] > 0):
        raise InvalidState(
            f"state array '{INNER_PREFIX}n_features' holds {inner}; expected {width} (x, the "
            f"margin and every leaf), or {small} before the first fit is installed",
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
        int(learner.max_leaves), X.shape[1], bool(learner.append_features),
        bool(learner.append_margin), 1.0 / math.sqrt(learner.n_trees),
    )  # fmt: skip
    return CSRMatrix(indptr, indices, data, width)


def embed_fitted(learner: BoostedEmbedded, scaled: np.ndarray, row_leaves: np.ndarray,
                 ensemble: dict[str, np.ndarray], width: int) -> CSRMatrix:  # fmt: skip
    """:func:`embed` of the dense rows ``ensemble`` was just fitted on (``scaled``: their ``x``
    scaled) by the leaves the growth gave them (``row_leaves``), not routed again."""
    indptr, indices, data = kernels.embed_fitted_rows(
        scaled, row_leaves, *map(ensemble.__getitem__, ENSEMBLE_KEYS[:-1]),
        int(learner.max_leaves), bool(learner.append_features), bool(learner.append_margin),
        1.0 / math.sqrt(learner.n_trees),
    )  # fmt: skip
    return CSRMatrix(indptr, indices, data, width)
