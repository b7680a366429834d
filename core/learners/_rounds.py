"""Several rounds learned in one call (:meth:`core.learners.OnlineLearner.learn_rounds`).

A *round* is what one request to the service carried; the regret window (:mod:`core.regret`)
takes, per round, the weights served at its start and the rows as the learner saw them.  One
call per round gives those at the price of a whole call (validation, scaling, recording) per
round; these functions give exactly the same with one call:

* :func:`learn_rounds_one_by_one`: the reference, and the way of any learner whose result
  depends on its batches (``spdam`` learns a batch as its window; ``svm_pauc`` solves on it):
  one ``prequential_step`` (or ``partial_fit``) per round.
* :func:`learn_rounds_at_once`: for a learner that learns a batch as its events one at a time
  (``online`` and not ``streams_on_window``, tested bit for bit across batchings): the batch is
  coerced, checked and scaled once, and the learner's kernel call (``_learn``) is cut at each
  round's end, where its served weights are taken.  The online scalers update their statistics
  event by event, so scaling the whole batch once gives the rows of each round bit for bit.
  A learner with a ``_learn_rounds(X, y, scores, stops)`` (``auto``) learns several rounds in
  one call and gives the served weights at each round's start itself
  (core.learners._auto_learning): the same bits without a call per round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from core.csr import CSRMatrix
from core.errors import InvalidFeatures
from core.preprocessing import scale_batch
from core.validation import check_rows, row_range

if TYPE_CHECKING:
    from core.learners._base import OnlineLearner

NO_SCORES = np.empty(0, dtype=np.float64)


class LearnedRounds(NamedTuple):
    """What :meth:`~core.learners.OnlineLearner.learn_rounds` gives the regret window."""

    #: each event's pre-update score (empty when not asked for)
    scores: np.ndarray
    #: the served weights (``coef_``) at the start of each round, one row per round
    served: np.ndarray
    #: the rows the learner's kernels learned from, scaled, in order: their concatenation is
    #: every round's rows (the learner's own arrays, dense or CSR: to read, not to modify)
    rows: list


def check_stops(stops: Sequence[int], n_events: int) -> list[int]:
    """The rounds' ends as ints: non-decreasing, the last one ``n_events`` (a round may be
    empty: its served weights are taken, nothing is learned)."""
    ends = [int(stop) for stop in stops]
    previous = 0
    for stop in ends:
        if stop < previous:
            raise ValueError(f"round stops {ends} must not decrease from 0")
        previous = stop
    if not ends or ends[-1] != n_events:
        raise ValueError(f"round stops {ends} must end at the {n_events} events")
    return ends


def learn_rounds_one_by_one(
    learner: OnlineLearner, X, y: np.ndarray, stops: list[int], want_scores: bool
) -> LearnedRounds:
    """One learner call per round, its served weights taken before and its rows recorded."""
    served = []
    rows: list = []
    parts = []
    start = 0
    for stop in stops:
        served.append(np.array(learner.coef_, dtype=np.float64))
        if stop > start:
            with learner.recording_inputs() as inputs:
                rows_of_round, labels = row_range(X, start, stop), y[start:stop]
                try:
                    parts.append(learner._learn_batch(rows_of_round, labels, want_scores))
                except InvalidFeatures as error:
                    if error.row is not None:  # the event at fault, counted in the whole batch
                        error.row += start
                    raise
            rows.extend(inputs)
        start = stop
    scores = np.concatenate(parts) if want_scores and parts else NO_SCORES
    return LearnedRounds(scores, np.stack(served), rows)


def learn_rounds_at_once(
    learner: OnlineLearner, X, y: np.ndarray, stops: list[int], want_scores: bool
) -> LearnedRounds:
    """The batch checked and scaled once, the kernel call cut at the rounds' ends: what
    :func:`learn_rounds_one_by_one` gives for a learner that learns a batch event by event.
    The grown state is checked after each round, as one call per round does."""
    features, labels = learner._coerce(X, y, check_finite=False)
    check_rows(features)
    scores = np.empty(len(labels)) if want_scores else NO_SCORES
    rows: list = []
    served = []
    outer = learner._inputs_sink
    learner._inputs_sink = rows  # a learner that scales its own rows records them (auto)
    try:
        if not learner.scales_itself:
            if learner.scaling == "standard" and isinstance(features, CSRMatrix):
                # raises before any statistics move: a rejected batch changes nothing
                scale_batch(learner.scaling, learner._scaler_arrays, features, learn=False)
            features = scale_batch(learner.scaling, learner._scaler_arrays, features, learn=True)
            rows.append(features)
        rounds = getattr(learner, "_learn_rounds", None)
        # one learning call, the weights taken inside it (auto); a single round is the plain
        # call, whose weights are those before it
        if rounds is not None and len(stops) > 1:
            at_starts = rounds(features, labels, scores, stops)
            served = [np.array(coef, dtype=np.float64) for coef in at_starts]
            learner._check_grown_state(restored=False)
            return LearnedRounds(scores, np.stack(served), rows)
        start = 0
        for stop in stops:
            served.append(np.array(learner.coef_, dtype=np.float64))
            if stop > start:
                part = scores[start:stop] if want_scores else NO_SCORES
                learner._learn(row_range(features, start, stop), labels[start:stop], part)
                learner._check_grown_state(restored=False)
            start = stop
    finally:
        learner._inputs_sink = outer
    return LearnedRounds(scores, np.stack(served), rows)
