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
from typing import TYPE_CHECKING, Any

import numpy as np

from core._kernels import boosted_embedding as kernels
from core.boosted_trees import ENSEMBLE_KEYS
from core.learners._row_pool import pooled_rows
from core.learners.logistic import Logistic
from core.preprocessing import STANDARD_FLOOR
from core.preprocessing import standard_arrays as _STANDARD

if TYPE_CHECKING:
    from core.learners.boosted_embedded import BoostedEmbedded

__all__ = ["MOST_CUTS", "CallPlan", "call_plan", "fusable", "learn_fused", "learn_whole",
           "to_next_cut", "until_counted"]  # fmt: skip

_NONE_F = np.empty(0)
# the kernel's arrays read in one C call each (a list of lookups costs ~1 us more a call);
# the scaler's running statistics are the learner's own arrays (ComposedState._scaler_arrays),
# read with core.preprocessing.standard_arrays
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
    if learner.scaling != "standard" or type(X) is not np.ndarray or X.ndim != 2:
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
        capacity, weights = int(learner.fit_delay), _NONE_F
        needed = min(int(fill[0]) + n_events, capacity)
    else:
        fill, rows, labels, weights = _KEPT(own)
        count, capacity = int(fill[0]), int(learner.buffer_size)
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
    holding = bool(own["pending"][0])  # nor this: a fit falls due or is installed between segments
    where = _fusable(learner, X, y, segment_scores, pooled, holding)
    if where is None:
        return False
    if not inside:  # most calls: the segment in one piece
        recorded.append(_learn(learner, X, y, segment_scores, pooled, holding, where))
        return True
    held = int(own["pending_fill"][0])
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
    learner: BoostedEmbedded, X, y, scores, to_install: int, holding: bool,
    plan: CallPlan | None = None,
) -> np.ndarray | None:  # fmt: skip
    """:func:`learn_fused` of a whole batch in one piece (``scores``: its inner pre-update
    scores, or empty), the call of one event: its scaled rows, or None (nothing learned) when it
    is not :func:`fusable`.  Without the pieces' bookkeeping: the batch is not sliced, and
    whether its rows are pooled is read once.  ``to_install``: while a fit is pending, the
    events to its install point (after this batch's), the fit offered to the background fitter
    first, as the segment loop offers it at each call.  ``plan``: the learner's
    :func:`call_plan`, when the caller holds it."""
    if plan is None:
        plan = call_plan(learner)
    link = learner._rows_link
    pooled = link is not None and link.first() >= 0  # pooled_rows, inlined: read every event
    n_events = len(y)
    # _fusable's tests, the learner's part of them taken from the plan
    if not plan.fusable or type(X) is not np.ndarray or X.ndim != 2:
        return None
    if not (_contiguous(X, _FLOAT64) and _contiguous(y, _INT64)):
        return None
    if len(scores) and not _contiguous(scores, _FLOAT64):
        return None
    if holding:
        fill, capacity, room = plan.held_fill, plan.held_capacity, plan.held_room
    else:
        fill, capacity, room = plan.kept_fill, plan.kept_capacity, plan.kept_room
    count = int(fill[0])
    if not holding and pooled and count + n_events > capacity:  # it would leave the pool here
        return None
    needed = min(count + n_events, capacity)
    if room[0] < needed or not (pooled or room[1] >= needed):  # the arrays grow first
        return None
    if to_install:
        learner._hand_over(to_install, n_events)
    scaled = np.empty(X.shape)  # X is C-ordered float64: np.empty skips empty_like's dispatch
    kernels.learn_segment(
        X, y, scores, scaled, *plan.head, int(plan.ens_trees[0]), *plan.shape,
        *plan.inner._accumulators(), holding, pooled,
        *(plan.held_tail if holding else plan.kept_tail),
    )  # fmt: skip
    return scaled


class CallPlan:
    """What the fused call of :func:`learn_whole` reads that stays between events: the kernel's
    arguments from the learner's own arrays and parameters, whether they are :func:`fusable`
    at all, and the fit schedule's interval (for :func:`until_counted`).  The arrays and
    parameters it was made from are kept with it: it holds while they are the same objects
    and values (:func:`call_plan`), where the usual call read and checked them all again
    (~5 us of Python a one-event call)."""

    inner: Any

    __slots__ = ("own", "arrays", "params", "inner", "inner_state", "fusable", "head",
                 "ens_trees", "shape", "held_fill", "held_capacity", "held_room", "held_tail",
                 "kept_fill", "kept_capacity", "kept_room", "kept_tail", "ready", "fit_from",
                 "since_fit", "buffer_fill", "interval_at", "read")  # fmt: skip

    def __init__(self, learner: BoostedEmbedded) -> None:
        own = self.own = learner._own_state
        self.params = _PARAMS(learner)
        inner = self.inner = learner._inner  # a Logistic when fusable
        self.inner_state = inner.state_
        # the tests of _fusable that do not depend on the batch
        self.fusable = (
            learner.scaling == "standard"
            and type(inner) is Logistic
            and "covariance" not in inner.state_
        )
        self.ready, self.fit_from = own["ready"], own["fit_from"]
        self.since_fit, self.buffer_fill = own["since_fit"], own["buffer_fill"]
        self.interval_at: tuple[int, int] | None = None  # (fit_from, the interval from it)
        # the schedule's arrays only, when the kernel is not called (another scaling has
        # other arrays)
        self.read = _READ if self.fusable else _SCHEDULE
        self.arrays = self.read(own)
        if not self.fusable:
            return
        self.head = (*_STANDARD(own), STANDARD_FLOOR, *_ENSEMBLE(own))
        self.ens_trees = own["ens_trees"]
        self.shape = (int(learner.n_trees), bool(learner.append_features),
                      bool(learner.append_margin))  # fmt: skip
        npp = float(learner.negatives_per_positive)
        fill, rows, labels = _HELD(own)
        self.held_fill, self.held_capacity = fill, int(learner.fit_delay)
        self.held_room = (len(labels), len(rows))
        self.held_tail = (*_DRAWS(own), fill, *_RING(own), self.held_capacity, npp, rows,
                          labels, _NONE_F, *_COUNTED(own))  # fmt: skip
        fill, rows, labels, weights = _KEPT(own)
        self.kept_fill, self.kept_capacity = fill, int(learner.buffer_size)
        self.kept_room = (len(labels), len(rows))
        self.kept_tail = (*_DRAWS(own), fill, *_RING(own), self.kept_capacity, npp, rows,
                          labels, weights, *_COUNTED(own))  # fmt: skip


#: every array of the learner's own a :class:`CallPlan` reads: it holds while each is the same
#: object (a grown buffer, an installed ensemble, a detached pool or a new state is a new one)
_READ = operator.itemgetter(
    "scaler_count", "scaler_mean", "scaler_m2", "scaler_present", "scaler_magnitude",
    *ENSEMBLE_KEYS, "buffer_rng", "buffer_seen", "buffer_next", "buffer_written", "events",
    "since_fit", "pending_fill", "pending_X", "pending_y", "buffer_fill", "buffer_X", "buffer_y",
    "buffer_w", "ready", "fit_from",
)  # fmt: skip
#: the arrays of the fit schedule (:func:`until_counted`), which every state holds
_SCHEDULE = operator.itemgetter("ready", "fit_from", "since_fit", "buffer_fill")
#: the learner's parameters a :class:`CallPlan` reads: it holds while they keep their values
_PARAMS = operator.attrgetter(
    "scaling", "n_trees", "append_features", "append_margin", "negatives_per_positive",
    "buffer_size", "fit_delay", "first_fit", "refit_every", "refit_growth",
)  # fmt: skip


def call_plan(learner: BoostedEmbedded) -> CallPlan:
    """The learner's :class:`CallPlan`, made again when an array it read was replaced, a
    parameter changed or the inner learner (or its state) is another."""
    plan: CallPlan | None = learner.__dict__.get("_call_plan")
    if (
        plan is None
        or plan.own is not learner._own_state
        or plan.inner is not learner._inner
        or plan.inner.state_ is not plan.inner_state
        or plan.params != _PARAMS(learner)
        or not all(map(operator.is_, plan.read(plan.own), plan.arrays))
    ):
        plan = learner.__dict__["_call_plan"] = CallPlan(learner)
    return plan


def until_counted(learner: BoostedEmbedded, plan: CallPlan) -> float:
    """``learner._until_counted()`` from the plan's arrays: the interval is computed again
    only when ``fit_from`` moved (a fit installed)."""
    if not plan.ready[0]:
        return learner.first_fit - int(plan.buffer_fill[0])
    if learner.refit_every is None:
        return float("inf")
    fit_from = int(plan.fit_from[0])
    kept = plan.interval_at
    if kept is None or kept[0] != fit_from:
        kept = plan.interval_at = (fit_from, learner._interval())
    return kept[1] - int(plan.since_fit[0])


def _learn(
    learner: BoostedEmbedded, X, y: np.ndarray, scores: np.ndarray, pooled: bool, holding: bool,
    where: _Where,
) -> np.ndarray:  # fmt: skip
    own = learner._own_state
    inner: Logistic = learner._inner  # type: ignore[assignment]  # fusable checked it
    fill, rows, labels, weights, capacity = where
    # X is C-ordered float64 (fusable checked it): np.empty skips empty_like's dispatch
    scaled = np.empty(X.shape)
    # the kernel derives the leaves' columns and value from n_trees and counts the events it
    # remembers (as _remember counts them)
    kernels.learn_segment(
        X, y, scores, scaled, *_STANDARD(own), STANDARD_FLOOR,
        *_ENSEMBLE(own), int(own["ens_trees"][0]), int(learner.n_trees),
        bool(learner.append_features), bool(learner.append_margin), *inner._accumulators(),
        holding, pooled, *_DRAWS(own), fill, *_RING(own), capacity,
        float(learner.negatives_per_positive), rows, labels, weights, *_COUNTED(own),
    )  # fmt: skip
    return scaled
