"""``boosted_embedded``'s segment in one kernel call (issue 36's request path, issue 39's Elec2
cost): scaling, embedding, the inner learner's step and the fit buffer's keep
(:func:`core._kernels.boosted_embedding.learn_segment`), the same kernels in the same order as
the general path of :mod:`core.learners._boosted_learning`, so the same state and scores bit for
bit, for ~5 us of dispatch where the general path spends ~30 us of Python per one-event call.

It takes the common case only: dense C-ordered rows under the ``standard`` scaling, an inner
FTRL ``logistic`` (not the Laplace solver) and arrays that need neither growth nor the pool's
detach for this segment; anything else returns None and goes the general way.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from core._kernels import boosted_embedding as kernels
from core.boosted_trees import ENSEMBLE_KEYS
from core.learners._fit_schedule import ScheduleParams
from core.learners._kept_params import KEPT
from core.learners._row_pool import pooled_rows
from core.learners.logistic import Logistic
from core.preprocessing import STANDARD_FLOOR, standard_arrays

if TYPE_CHECKING:
    from core.learners.boosted_embedded import BoostedEmbedded

__all__ = ["MOST_CUTS", "BoostedParams", "fusable", "learn_fused", "learn_whole", "to_next_cut"]

_NONE_F = np.empty(0)


class BoostedParams(NamedTuple):
    """``boosted_embedded``'s parameters as this module and its schedule read them, kept
    (:mod:`core.learners._kept_params`): converted once, not at every one-event call."""

    standard: bool  # scaling == "standard"
    fit_delay: int
    buffer_size: int
    n_trees: int
    append_features: bool
    append_margin: bool
    negatives_per_positive: float
    schedule: ScheduleParams


# the kernel's arrays read in one C call each (a list of lookups costs ~1 us more a call)
#: the ensemble's arrays (its tree count goes as an int)
_ENSEMBLE = operator.itemgetter(*ENSEMBLE_KEYS[:-1])
#: the draws of the fit buffer's keep, then its ring's position and count
_DRAWS = operator.itemgetter("buffer_rng", "buffer_seen")
_RING = operator.itemgetter("buffer_next", "buffer_written")
#: where the events go: held for a pending fit, or kept by the fit buffer
_HELD = operator.itemgetter("pending_fill", "pending_X", "pending_y")
_KEPT = operator.itemgetter("buffer_fill", "buffer_X", "buffer_y", "buffer_w")
#: the events learned and those since the last fit, counted by the kernel
_COUNTED = operator.itemgetter("events", "since_fit")

#: [CHOICE] a segment cut more times than this goes the step-by-step way: a piece's kernel call
#: costs ~6 us (its dispatch and arguments), where the step-by-step path scales, embeds and keeps
#: the segment once (~15 us) and then pays ~1.5 us an inner call, so fused pieces win up to ~3
#: of them and lose beyond (bench/learn_rounds.py, 32 one-event rounds: 52 -> 55 us/event fused)
MOST_CUTS = 3


def to_next_cut(cuts: Sequence[int], position: int, n_events: int) -> int:
    """Events from ``position`` to the next cut after it (or the batch's end)."""
    return min([cut for cut in cuts if cut > position], default=n_events) - position


_FLOAT64, _INT64 = np.dtype(np.float64), np.dtype(np.int64)


def _contiguous(array: np.ndarray, dtype: np.dtype) -> bool:
    # ``is`` first: the dtypes of the usual arrays are numpy's one instance (~0.2 us less a
    # test than ``==``, which decides the others)
    return (array.dtype is dtype or array.dtype == dtype) and array.flags.c_contiguous


def fusable(learner: BoostedEmbedded, X, y: np.ndarray, scores: np.ndarray) -> bool:
    """Whether the segment ``(X, y)`` (``scores``: where its inner pre-update scores go, or
    empty) is the common case (module docstring); then so is every piece of it."""
    holding = bool(learner._own_state["pending"][0])
    return _fusable(learner, X, y, scores, pooled_rows(learner._rows_link), holding) is not None


#: where a fused segment's events go (:func:`_fusable`): the fill count (written in place by
#: the kernel), the rows, the labels, the weights (none while held) and the capacity
_Where = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]


def _fusable(
    learner: BoostedEmbedded, X, y: np.ndarray, scores: np.ndarray, pooled: bool, holding: bool
) -> _Where | None:
    """:func:`fusable`, whether the learner's rows are its composite's pool's and whether a
    fit is pending (its events held) given: where the events go (the arrays the check read,
    handed to :func:`_learn` rather than looked up again), or None."""
    kept: BoostedParams = learner.__dict__.get(KEPT) or learner._kernel_params()
    if not kept.standard or type(X) is not np.ndarray or X.ndim != 2:
        return None
    if not (_contiguous(X, _FLOAT64) and _contiguous(y, _INT64)):
        return None
    if len(scores) and not _contiguous(scores, _FLOAT64):
        return None
    inner = learner._inner
    if type(inner) is not Logistic or "covariance" in inner.state_:
        return None
    own = learner._own_state
    n_events = len(y)
    if holding:
        fill, rows, labels = _HELD(own)
        capacity, weights = kept.fit_delay, _NONE_F
        needed = min(fill.item() + n_events, capacity)
    else:
        fill, rows, labels, weights = _KEPT(own)
        count, capacity = fill.item(), kept.buffer_size
        if pooled and count + n_events > capacity:  # it would leave the pool here
            return None
        needed = min(count + n_events, capacity)
    # else the arrays grow first: the general path
    if len(labels) >= needed and (pooled or len(rows) >= needed):
        return fill, rows, labels, weights, capacity
    return None


def learn_fused(
    learner: BoostedEmbedded, X, y, scores, start: int, inside, batch, coefs: list,
    want_coef: bool, recorded: list,
) -> bool:  # fmt: skip
    """Learn the segment ``(X, y)`` from event ``start`` of the batch (``scores``: the batch's
    inner pre-update scores, or empty) when it is :func:`fusable` and cut fewer than
    :data:`MOST_CUTS` times (False otherwise: nothing changed), one kernel call per piece
    between the positions ``inside`` it, appending ``coef_`` to ``coefs`` before each and
    offering the pending fit there, as ``_boosted_learning._learn_pieces`` does after one
    scaling and embedding of the segment: each step takes the events one after the other, so
    the pieces leave the same state; the events held for a pending fit are counted as of the
    segment's start at the cuts, as there (they join after the segment).  ``batch``: the
    batch's cuts and length; ``recorded`` takes the scaled rows."""
    segment_scores = scores[start : start + len(y)] if len(scores) else scores
    if len(inside) >= MOST_CUTS:
        return False
    pooled = pooled_rows(learner._rows_link)  # the pieces do not change it
    own = learner._own_state
    # nor this: a fit falls due or is installed between segments
    holding = bool(own["pending"].item())
    where = _fusable(learner, X, y, segment_scores, pooled, holding)
    if where is None:
        return False
    if not inside:  # most calls: the segment in one piece
        recorded.append(_learn(learner, X, y, segment_scores, pooled, holding, where))
        return True
    held = own["pending_fill"].item()
    length, position = len(y), 0
    for cut in (*inside, length):
        if cut > position:
            part = scores[start + position : start + cut] if len(scores) else scores
            # the same arrays for every piece: the kernel writes them in place
            piece = _learn(learner, X[position:cut], y[position:cut], part, pooled, holding, where)
            recorded.append(piece)
            position = cut
        if cut < length:
            coefs.append(learner.coef_ if want_coef else None)
            if holding:  # a call per piece would offer the pending fit here
                cuts, n_events = batch
                learner._hand_over(learner._delay() - held, to_next_cut(cuts, start + cut,
                                                                         n_events))  # fmt: skip
    return True


def learn_whole(
    learner: BoostedEmbedded, X, y, scores, to_install: int, holding: bool
) -> np.ndarray | None:
    """:func:`learn_fused` of a whole batch in one piece (``scores``: its inner pre-update
    scores, or empty), the call of one event: its scaled rows, or None (nothing learned) when it
    is not :func:`fusable`.  Without the pieces' bookkeeping: the batch is not sliced, and
    whether its rows are pooled is read once.  ``to_install``: while a fit is pending, the
    events to its install point (after this batch's), the fit offered to the background fitter
    first, as the segment loop offers it at each call."""
    pooled = pooled_rows(learner._rows_link)
    where = _fusable(learner, X, y, scores, pooled, holding)
    if where is None:
        return None
    if to_install:
        learner._hand_over(to_install, len(y))
    return _learn(learner, X, y, scores, pooled, holding, where)


def _learn(
    learner: BoostedEmbedded, X, y: np.ndarray, scores: np.ndarray, pooled: bool, holding: bool,
    where: _Where,
) -> np.ndarray:  # fmt: skip
    own = learner._own_state
    inner: Logistic = learner._inner  # type: ignore[assignment]  # fusable checked it
    kept: BoostedParams = learner.__dict__.get(KEPT) or learner._kernel_params()
    fill, rows, labels, weights, capacity = where
    scaled = np.empty_like(X)
    # the kernel derives the leaves' columns and value from n_trees and counts the events it
    # remembers (as _remember counts them)
    kernels.learn_segment(
        X, y, scores, scaled, *standard_arrays(learner._scaler_arrays), STANDARD_FLOOR,
        *_ENSEMBLE(own), own["ens_trees"].item(), kept.n_trees,
        kept.append_features, kept.append_margin, *inner._accumulators(),
        holding, pooled, *_DRAWS(own), fill, *_RING(own), capacity,
        kept.negatives_per_positive, rows, labels, weights, *_COUNTED(own),
    )  # fmt: skip
    return scaled
