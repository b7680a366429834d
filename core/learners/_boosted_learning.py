"""``boosted_embedded``'s learning of a batch, segment by segment (a segment ends where a fit
falls due or is installed: docs/algorithms/boosted_embedded.md, "Fit points"), with its inner
learner's kernel call cut at given positions where the served weights are taken.

The cuts serve ``auto``'s rounds (:meth:`core.learners.OnlineLearner.learn_rounds`): the
weights served at the start of each round, without a learner call per round.  Only the inner
learner's call is cut; the rows are scaled, embedded and buffered once per segment.  Each
of those steps takes the events one after the other, so the state, the scores and the weights
at each cut are those of one call per piece, bit for bit; the background fitter is handed a
fit exactly when one call per piece would hand it over (``in_call``: the events to the next cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.learners import _fit_scaling as fit_scaling
from core.learners._boosted_fused import learn_fused, learn_whole
from core.learners._boosted_fused import to_next_cut as _to_next_cut
from core.learners._fit_buffer import hold
from core.learners._row_pool import pooled_rows
from core.preprocessing import scale_batch
from core.validation import row_range

if TYPE_CHECKING:
    from core.learners.boosted_embedded import BoostedEmbedded

_NONE = np.empty(0, dtype=np.int64)


def learn(
    learner: BoostedEmbedded, X, y, scores, cuts: Sequence[int] = (), want_coef: bool = False
) -> list[np.ndarray | None]:
    """Learn the batch as posted (scaled segment by segment: a fit due keeps its scaling);
    ``cuts`` (increasing positions in ``[0, len(y))``) cut the inner learner's call, and the
    learner's ``coef_`` before the event at each cut is returned (None without
    ``want_coef``), as one call per piece with ``coef_`` taken before each gives it."""
    # before the call, as a caller per piece takes it
    coefs: list[np.ndarray | None] = (
        [learner.coef_ if want_coef else None] if cuts and cuts[0] == 0 else []
    )
    # no cut, or one before the first event only (a one-event round's): the call in one piece
    if len(cuts) == len(coefs) and _learned_at_once(learner, X, y, scores):
        return coefs
    own = learner._own_state
    start, n_events = 0, len(y)
    recorded: list = []
    if own["pending"][0] and int(own["pending_fill"][0]) >= learner._delay():
        learner._install_pending()  # held under a longer delay (an older state): it is due
    if own["pending"][0]:
        to_install = learner._delay() - int(own["pending_fill"][0])
        learner._hand_over(to_install, _to_next_cut(cuts, 0, n_events))
    counted = None  # the schedule's count after a fused segment that remembered its events
    while True:
        # the schedule's count, read once per segment unless a fit falls due (it moves)
        if own["pending"][0]:
            until = None
        else:
            until = learner._until_counted() if counted is None else counted
        counted = None
        if until is not None and until <= 0 and learner._due(_NONE)[0]:
            # at a cut, a call per piece saw it fall due at the end of the call before
            in_call = 0 if cuts and start in cuts else _to_next_cut(cuts, start, n_events)
            learner._fall_due(min(in_call, n_events - start))
            until = None if own["pending"][0] else learner._until_counted()
        if start >= n_events:
            break
        if until is None:
            stop = min(n_events, start + learner._delay() - int(own["pending_fill"][0]))
        elif until > n_events - start:  # most calls: no label look
            stop = n_events
        else:
            due = np.flatnonzero(learner._due(y[start:])[1:])
            stop = start + int(due[0]) + 1 if len(due) else n_events
        part, labels = row_range(X, start, stop), y[start:stop]
        segment_scores = scores[start:stop] if len(scores) else scores
        inside = [cut - start for cut in cuts if start <= cut < stop and cut > 0] if cuts else ()
        if learn_fused(learner, part, labels, scores, start, inside, (cuts, n_events), coefs,
                       want_coef, recorded):  # fmt: skip
            # the common case, one kernel call per piece (core.learners._boosted_fused)
            if own["pending"][0] and int(own["pending_fill"][0]) == learner._delay():
                learner._install_pending()
            elif until is not None:  # remembered: each event brought the count one nearer
                counted = until - (stop - start)
            start = stop
            continue
        scaled = scale_batch(learner.scaling, learner._scaler_arrays, part, learn=True)
        recorded.append(scaled)  # for recording_inputs
        embedded = learner._embed(part, scaled)
        if not inside:
            learner._inner._learn(embedded, labels, segment_scores)
        else:
            _learn_pieces(learner, embedded, labels, scores, start, inside, (cuts, n_events), coefs,
                          want_coef)  # fmt: skip
        if own["pending"][0]:
            hold(own, part, labels, learner.fit_delay, pooled_rows(learner._rows_link))
            if int(own["pending_fill"][0]) == learner._delay():
                learner._install_pending()
        else:
            learner._remember(part, labels)
        start = stop
    if learner._inputs_sink is not None:
        learner._inputs_sink.append(fit_scaling.joined_rows(recorded, X))
    learner._refresh_view()
    return coefs


def _learned_at_once(learner: BoostedEmbedded, X, y, scores) -> bool:
    """The usual call (one event, or a batch that no fit point cuts: neither a fit falling due
    nor the pending fit's install point) learned in one fused kernel call, as :func:`learn`'s
    loop learns it in one segment, without the loop's reads of the schedule (~1.5 us an
    event); False (nothing learned) otherwise."""
    n_events = len(y)
    own = learner._own_state
    to_install = 0
    holding = bool(own["pending"][0])  # read once: nothing below installs or lets a fit fall due
    if holding:  # the events are held for the pending fit until its install point
        to_install = learner._delay() - int(own["pending_fill"][0])
        if not 0 < n_events < to_install:
            return False
    elif learner._until_counted() <= n_events:
        return False
    scaled = learn_whole(learner, X, y, scores, to_install, holding)
    if scaled is None:
        return False
    if learner._inputs_sink is not None:
        learner._inputs_sink.append(fit_scaling.joined_rows([scaled], X))
    # no _refresh_view: the kernel wrote the arrays in place and nothing swapped one (a hand-over
    # copies the buffer), so the view holds the same arrays
    return True


def _learn_pieces(learner, embedded, labels, scores, start, inside, batch, coefs, want_coef):
    """The inner learner's call on the embedded rows of a segment from event ``start`` cut at
    the positions ``inside`` it; ``coef_`` appended to ``coefs`` at each (``batch``: the
    batch's cuts and length, for the fitter's hand-over; ``scores``: the batch's)."""
    own = learner._own_state
    length, position = len(labels), 0
    for cut in (*inside, length):
        if cut > position:
            part = scores[start + position : start + cut] if len(scores) else scores
            learner._inner._learn(row_range(embedded, position, cut), labels[position:cut], part)
            position = cut
        if cut < length:
            coefs.append(learner.coef_ if want_coef else None)
            if own["pending"][0]:  # a call per piece would offer the pending fit here
                to_install = learner._delay() - int(own["pending_fill"][0])
                cuts, n_events = batch
                learner._hand_over(to_install, _to_next_cut(cuts, start + cut, n_events))
