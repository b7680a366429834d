"""``auto``'s learning of a batch (core.learners.auto): scaled once, then learned segment by
segment by every candidate, served, recorded and evaluated; and the weights it serves at given
positions of the batch, the starts of the rounds of :meth:`~core.learners.OnlineLearner.
learn_rounds`.

A segment ends where an evaluation, a fast period (``track_drift``) or a boosted candidate's
first fit point is due: event counts, so a batch learned at once leaves what its events learned
one at a time leave.  The rounds do not end segments: each candidate's learning is cut at the
rounds' starts only to take its weights there (:func:`learn_cut`; ``boosted_embedded`` cuts only
its inner learner's call), and the served scores' statistics are recorded up to each start, so
the served weights at each are those one call per round takes, bit for bit, without the
per-call work of every candidate at every round (~100 us of Python a one-event round).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.learners._row_pool import ROWS, dense, settle
from core.learners._tournament import (
    coef_of_mix,
    evaluate,
    grow_window,
    next_evaluation,
    serve_and_record,
    steady_candidates,
)
from core.learners._tree_admission import admit_fitted, awaiting_first_fit, until_first_fit
from core.preprocessing import scale_batch
from core.validation import row_range

if TYPE_CHECKING:
    from core.learners.auto import Auto


def learn_cut(candidate, X, y, scores, cuts: Sequence[int], want_coef: bool) -> list:
    """Learn the batch, the learner's call cut at ``cuts`` (increasing positions in ``[0,
    len(y))``), and give its ``coef_`` before the event at each (None without ``want_coef``):
    one call per piece, or the learner's own ``_learn_cut`` (``boosted_embedded``'s)."""
    own = getattr(candidate, "_learn_cut", None)
    if own is not None:
        return own(X, y, scores, cuts, want_coef)
    coefs = []
    position = 0
    for cut in (*cuts, len(y)):
        if cut > position:
            part = scores[position:cut] if len(scores) else scores
            candidate._learn(row_range(X, position, cut), y[position:cut], part)
            position = cut
        if cut < len(y):
            coefs.append(candidate.coef_ if want_coef else None)
    return coefs


def learn_segments(auto: Auto, X, y: np.ndarray, scores: np.ndarray, starts=()) -> dict:
    """Learn the unscaled batch (scaled once for the candidates that do not scale their own
    rows); returns the served weights (``coef_``) before the event at each of ``starts``
    (increasing positions in ``[0, len(y))``), by position."""
    own = auto._own_state
    candidates = auto._candidates
    raw = X
    X = scale_batch(auto.scaling, own, raw, learn=True)  # a composite's scaler arrays: its own
    if auto._inputs_sink is not None:
        auto._inputs_sink.append(X)
    roles = auto._candidate_roles()
    unscaled, joiners = roles.unscaled, roles.joiners
    # the pool's capacity while a candidate is pooled (once none is, none is again)
    pooled = ROWS in own and max(own["rows_pooled"].tolist()) >= 0  # K ints: no array op
    pooling = roles.pool_capacity if pooled else 0
    drift = auto._drift()
    every, first = int(auto.evaluate_every), int(auto.first_evaluation)
    temperature = auto.temperature
    n_events = y.shape[0]
    if n_events == 1 and not starts and not pooling and drift is not None and temperature != 0.0:
        if _learned_one_event(auto, own, candidates, X, raw, y, scores, roles, drift, every, first):
            return {}
    want_scores = scores.shape[0] > 0
    candidate_scores = np.empty((len(candidates), n_events))
    served_all = scores if want_scores else np.empty(n_events)
    served_at: dict[int, np.ndarray] = {}
    start = 0
    while start < n_events:
        seen = int(own["n_seen"][0])
        # a segment ends with the next event after which an evaluation (or, with drift
        # tracking, a fast period) is due: event counts, so batching does not matter
        regular = next_evaluation(seen, every, first)
        due = regular if drift is None else min(regular, drift.boundary(seen))
        stop = min(n_events, start + due - seen)
        # a boosted candidate joins the mix at its first fit: ends there too (auto.14)
        if awaiting := awaiting_first_fit(candidates, own["served_weights"], temperature, joiners):
            stop = start + until_first_fit(candidates, awaiting, y[start:stop])
        whole = start == 0 and stop == n_events
        part = X if whole else row_range(X, start, stop)
        raw_part = raw if whole or not any(unscaled) else row_range(raw, start, stop)
        labels = y if whole else y[start:stop]
        segment_scores = candidate_scores if whole else candidate_scores[:, start:stop]
        if pooling:  # the pooled candidates' rows of this segment (core.learners._row_pool)
            auto._rows_segment = segment = dense(raw_part)
        cuts = [at - start for at in starts if start <= at < stop] if starts else []
        # the weights the mix serves are fixed within a segment: only those with a share (or
        # the leader, served alone) are taken at the cuts
        wanted = _coef_wanted(own, len(candidates), temperature) if cuts else []
        coefs = []
        for k, candidate in enumerate(candidates):
            rows = raw_part if unscaled[k] else part
            if cuts:
                coefs.append(learn_cut(candidate, rows, labels, segment_scores[k], cuts, wanted[k]))
            else:
                candidate._learn(rows, labels, segment_scores[k])
        served = served_all if whole else served_all[start:stop]
        grow_window(own, int(auto.window), seen + stop - start)
        if cuts == [0]:  # a round starts with the segment: the weights served before it
            at_start = [coef[0] for coef in coefs]
            served_at[start] = coef_of_mix(own, at_start, int(own["n_features"][0]), temperature)
            cuts = []  # and the segment is served as one
        if drift is not None and not cuts and temperature != 0.0:
            # the mix served: its scores, records and the detector's step in one kernel call
            since = drift.serve_record_and_watch(own, segment_scores, labels, served,
                candidates, min_positives=auto.min_positives, temperature=temperature)  # fmt: skip
        else:
            if cuts:
                served_at.update(_serve_to_cuts(own, segment_scores, labels, temperature,
                                                served, cuts, coefs, start))  # fmt: skip
            else:
                serve_and_record(own, segment_scores, labels, temperature, served)
            since = 0 if drift is None else drift.watch(own, served, labels, candidates,
                min_positives=auto.min_positives, temperature=temperature)  # fmt: skip
        admit_fitted(own, candidates, awaiting, temperature)
        end = seen + stop - start
        if end == regular or (since and end == due):
            _evaluate(auto, own, candidates, since, temperature)
        if pooling:
            settle(own, segment, pooling)
            auto._rows_segment = None
        start = stop
    auto._refresh_view()
    return served_at


def _learned_one_event(auto: Auto, own, candidates, X, raw, y, scores, roles, drift, every: int,
                       first: int) -> bool:  # fmt: skip
    """The loop of :func:`learn_segments` for a one-event batch served as the mix with drift
    tracking and no pooled candidate (the service's usual call): the event is one segment
    whatever falls due after it, so the loop's bookkeeping of positions, cuts and views is
    left out (~10 us of Python a call).  The same calls on the same arrays in the same order,
    so the same state; False (nothing learned) while a boosted candidate awaits its first fit,
    left to the loop (its segment's end is asked of the candidate)."""
    temperature = auto.temperature
    if awaiting_first_fit(candidates, own["served_weights"], temperature, roles.joiners):
        return False
    seen = own["n_seen"].item()  # a Python int, as int() of its element, at a third of the cost
    candidate_scores = roles.one_event_scores
    # the roles are those of this list of candidates: one each
    for candidate, unscaled, row in zip(
        candidates, roles.unscaled, roles.one_event_rows, strict=False
    ):
        candidate._learn(raw if unscaled else X, y, row)
    served = scores if scores.shape[0] > 0 else np.empty(1)
    grow_window(own, int(auto.window), seen + 1)
    min_positives = auto.min_positives
    since = drift.serve_record_and_watch(
        own, candidate_scores, y, served, candidates, min_positives=min_positives,
        temperature=temperature,
    )  # fmt: skip
    end = seen + 1
    regular = next_evaluation(seen, every, first)
    # as the loop's ``end == due``: the segment ends at the earlier of the two
    if end == regular or (since and end == drift.boundary(seen)):
        _evaluate(auto, own, candidates, since, temperature)
    auto._refresh_view()
    return True


def _evaluate(auto: Auto, own, candidates, since: int, temperature: float) -> None:
    """:func:`evaluate` at a segment's end, with auto's parameters (a drift detection at
    ``since`` decides at once: patience 1)."""
    evaluate(
        own,
        auto.pauc_range,
        min_positives=auto.min_positives,
        min_negatives=auto.min_negatives,
        margin=auto.margin,
        patience=1 if since else auto.patience,
        since=since,
        temperature=temperature,
        steady=steady_candidates(candidates),
    )


def _serve_to_cuts(own, segment_scores, labels, temperature, served, cuts, coefs, start) -> dict:
    """:func:`serve_and_record` of a segment cut at ``cuts`` (relative positions), and the
    served weights at each from the candidates' ``coefs`` there (by absolute position: the
    segment starts at ``start``): the mix's statistics as they are before that event."""
    served_at = {}
    length, position = len(labels), 0
    for index, cut in enumerate((*cuts, length)):
        if cut > position:
            piece = slice(position, cut)
            if cut - position < length:  # a round's start inside the segment
                serve_and_record(own, segment_scores[:, piece], labels[piece], temperature,
                                 served[piece])  # fmt: skip
            else:
                serve_and_record(own, segment_scores, labels, temperature, served)
            position = cut
        if cut < length:
            width = int(own["n_features"][0])
            at_cut = [coef[index] for coef in coefs]
            served_at[start + cut] = coef_of_mix(own, at_cut, width, temperature)
    return served_at


def _coef_wanted(own: dict[str, np.ndarray], n_candidates: int, temperature: float) -> list:
    """Whose weights the served mix reads: the candidates with a share, or the leader alone
    (``temperature`` 0)."""
    if temperature == 0.0:
        leader = int(own["leader"][0])
        return [k == leader for k in range(n_candidates)]
    return [weight > 0.0 for weight in own["served_weights"].tolist()]


def served_at_rounds(auto: Auto, X, y, scores, stops: Sequence[int]) -> list[np.ndarray]:
    """The served weights at the start of each round ending at ``stops``, learning the batch
    (:func:`learn_segments`): at the batch's end for an empty round there."""
    n_events = len(y)
    starts = [0, *stops[:-1]]
    inside = sorted({start for start in starts if start < n_events})
    served_at = learn_segments(auto, X, y, scores, inside) if n_events else {}
    at_end = None
    out = []
    for start in starts:
        if start < n_events:
            out.append(served_at[start])
        else:
            at_end = auto.coef_ if at_end is None else at_end
            out.append(at_end)
    return out
