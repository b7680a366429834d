"""Learning a labelled batch: duplicate ids skipped, one learner call for the batch's rounds
(a *round* is what one request carried: the coalescer or a queue worker merges several into one
call), the regret window, metrics window and counters fed, one log entry committed
(docs/architecture.md, "The coalescer and group commit", "The log and checkpoints").
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core import logged_fits
from core._kernels.validation import count_nonfinite
from core.csr import CSRMatrix
from core.errors import InvalidFeatures, StateOverflow
from core.metrics.calibration import OnlineCalibrator
from core.validation import check_labelled_scores, row_range
from service.engine.entries import Entry
from service.engine.history import catch_up_due
from service.engine.history import record as record_history
from service.engine.model import RATE_TIME_CONSTANT, Loaded, log_drifts
from service.errors import InvalidInput, ModelChanged
from service.ingest import Batch, concatenate
from service.ingest.fields import Locator

if TYPE_CHECKING:
    from service.engine.repository import ModelRepository


@dataclass
class LearnResult:
    version: int
    received: int
    learned: int
    duplicate_ids: list[str]
    #: pre-update score per received event (NaN for a skipped duplicate), when asked for
    scores: np.ndarray | None
    #: drifts the detector reported on this batch (docs/algorithms/drift.md)
    drifts: int = 0
    #: which received events were skipped as duplicates (None: none was)
    skipped: np.ndarray | None = None

    def part(self, start: int, stop: int, ids: list[str | None] | None, wants: bool) -> LearnResult:
        """The result of the request of events ``[start, stop)`` of a merged call, ``ids`` its
        events' ids: its scores if it ``wants`` them, no drift (the caller credits them)."""
        skipped = None if self.skipped is None else self.skipped[start:stop]
        positions = () if skipped is None else np.flatnonzero(skipped).tolist()
        duplicate_ids = [] if ids is None else [str(ids[k]) for k in positions]
        learned = stop - start - len(positions)
        scores = None if self.scores is None or not wants else self.scores[start:stop]
        return LearnResult(self.version, stop - start, learned, duplicate_ids, scores, 0, skipped)


# ---------------------------------------------------------------------------- rounds
@dataclass(frozen=True, eq=False)
class Merged:
    """What a call that may merge several requests (a queue worker's read) brings besides its
    events: the round of each received event (None: one request) and the checkpoint fields
    committed atomically with the state (a worker's last applied stream id; empty: none)."""

    round_ids: np.ndarray | None
    checkpoint: dict[str, str]

    @classmethod
    def of(
        cls, rounds: Sequence[int] | None, n_received: int, checkpoint: dict[str, str] | None
    ) -> Merged:
        """From the sizes of the requests merged (``rounds``) and the checkpoint, if any."""
        if rounds is None and not checkpoint:
            return ONE_REQUEST  # the usual call: no instance built for it
        if rounds is None or len(rounds) <= 1:
            return cls(None, checkpoint or {})
        if sum(rounds) != n_received or min(rounds) < 0:
            raise ValueError(f"rounds {list(rounds)} do not add up to the {n_received} events")
        return cls(np.repeat(np.arange(len(rounds)), rounds), checkpoint or {})

    def counted_duplicates(self, duplicate: np.ndarray) -> int:
        """How many of the ``duplicate`` events (a mask over those received) the ``duplicates``
        counter takes: those of the requests that learned something (a retry of nothing but
        duplicates changes nothing)."""
        if self.round_ids is None:
            return int(duplicate.sum()) if not duplicate.all() else 0
        n_rounds = int(self.round_ids[-1]) + 1 if len(self.round_ids) else 0
        per_round = np.bincount(self.round_ids[duplicate], minlength=n_rounds)
        sizes = np.bincount(self.round_ids, minlength=n_rounds)
        return int(per_round[per_round < sizes].sum())

    def rounds(self, kept: np.ndarray | None, n_kept: int) -> tuple[int, ...]:
        """The sizes of the rounds of the events ``kept`` (a mask or positions among those
        received; None: all), as :attr:`Entry.rounds` (empty: one round)."""
        if self.round_ids is None or n_kept == 0:
            return ()
        round_ids = self.round_ids if kept is None else self.round_ids[kept]
        sizes = np.diff([0, *(np.flatnonzero(np.diff(round_ids)) + 1).tolist(), n_kept])
        return tuple(sizes.tolist()) if len(sizes) > 1 else ()


#: one request without a checkpoint (its dict is read, never written)
ONE_REQUEST = Merged(None, {})


# ---------------------------------------------------------------------------- one model
def one_call_is_exact(loaded: Loaded) -> bool:
    """Whether one plain learner call on several rounds gives what one call per round gives:
    the regret window is off (it takes each round's served weights and rows:
    :func:`learn_rows` asks the learner for them) and the learner learns a batch as its
    events one at a time (``spdam`` does not: a batch is its window)."""
    return loaded.regret is None and not getattr(type(loaded.learner), "streams_on_window", False)


def _learn_call(
    loaded: Loaded, X: np.ndarray | CSRMatrix, y: np.ndarray, recorded: np.ndarray | None
) -> np.ndarray:
    if recorded is not None:
        loaded.learner.partial_fit(X, y)
        return recorded
    scores = loaded.learner.prequential_step(X, y)
    _check_scores(scores, recorded)
    return scores


def _check_scores(scores: np.ndarray, recorded: np.ndarray | None) -> None:
    """Refuse prequential scores that are not finite (nothing is committed: the cache is
    dropped); ``recorded`` scores were given at scoring time."""
    if recorded is None and count_nonfinite(scores):
        row = int(np.flatnonzero(~np.isfinite(scores))[0])
        raise InvalidFeatures(
            "the model's score of this event is not finite (its weights diverged on "
            "features this large); nothing was learned: scale the features (the 'scaling' "
            "parameter) or lower the step size",
            row=row,
        )


def learn_rows(
    loaded: Loaded,
    X: np.ndarray | CSRMatrix,
    y: np.ndarray,
    recorded: np.ndarray | None,
    bounds: list[tuple[int, int]],
) -> np.ndarray:
    """Learn ``(X, y)`` in order, its ``(start, stop)`` rounds in one learner call (a plain one
    when :func:`one_call_is_exact`, else ``learn_rounds``: bit for bit one call per round), and
    feed the regret window (when on) the rows as the learner saw them (its own scaled batches,
    densified: not scaled twice) and the weights served at each round's start. Returns the scores
    the metrics use (the prequential ones, or ``recorded`` at scoring time).
    ``missing_values='mean'`` first fills each NaN with the running mean as of its event
    (:mod:`service.engine.missing`)."""
    if loaded.means is not None:
        X = loaded.means.fill_and_learn(X)  # type: ignore[arg-type]
    several = len(bounds) > 1 and not one_call_is_exact(loaded)
    if loaded.regret is None and not several:
        return _learn_call(loaded, X, y, recorded)
    sizes = [stop - start for start, stop in bounds] if several else [X.shape[0]]
    stops = list(itertools.accumulate(sizes))
    learned = loaded.learner.learn_rounds(X, y, stops, want_scores=recorded is None)
    scores = learned.scores if recorded is None else recorded
    _check_scores(scores, recorded)
    if loaded.regret is not None:
        # copies: the learner's own arrays may be reused by its next call
        rows = [r.toarray() if isinstance(r, CSRMatrix) else np.array(r) for r in learned.rows]
        joined = rows[0] if len(rows) == 1 else np.concatenate(rows)
        loaded.regret.update_rounds(joined, y, scores, learned.served, sizes)
    return scores


def after_learning(loaded: Loaded, scores: np.ndarray, y: np.ndarray, now: float) -> int:
    """After :func:`learn_rows`: the metrics window, drift detector, calibrator, counters and
    history fed; returns the drifts detected."""
    # checked once here for the window, the drift detector and the calibrator
    signs, scores = check_labelled_scores(y, scores)
    drifts = feed_metrics(loaded, scores, signs, y, [now], [len(y)])
    if drifts and loaded.config.on_drift == "reset":
        loaded.learner.initialize(loaded.config.n_features)
        # the probabilities map the restarted learner's scores, not the old one's
        loaded.calibrator = OnlineCalibrator()
    record_history(loaded.history, loaded, now)
    return drifts


def feed_metrics(
    loaded: Loaded,
    scores: np.ndarray,
    signs: np.ndarray,
    y: np.ndarray,
    times: Sequence[float],
    sizes: Sequence[int],
) -> int:
    """The metrics window, drift detector, calibrator and counters fed the events of consecutive
    changes at once (``sizes`` events each, at ``times``; ``signs`` and ``scores`` checked by
    ``check_labelled_scores``): each takes its events one by one, so this equals
    :func:`after_learning` of each change in turn when no history point falls between them and no
    drift restarts the learner. Returns the drifts detected."""
    start = int(loaded.drift.counters[0])
    loaded.window.update(scores, signs, validated=True)
    detected_at = loaded.drift.update(scores, signs, validated=True)
    loaded.calibrator.update(scores, signs, validated=True)
    if detected_at:  # each drift logged at the time of the change whose event raised it
        ends = list(itertools.accumulate(sizes))
        for event in detected_at:
            change = bisect.bisect_right(ends, event - start)
            log_drifts(loaded.stats, [event], times[change])
    _count(loaded.stats, y, times, sizes)
    return len(detected_at)


def _count(
    stats: dict[str, np.ndarray], labels: np.ndarray, times: Sequence[float], sizes: Sequence[int]
) -> None:
    """The counters and the throughput after changes of ``sizes`` events at ``times``."""
    n_events = len(labels)
    if n_events == 1:  # a request's one event: a scalar test (numpy's costs microseconds)
        n_positive = 1 if labels[0] > 0 else 0
    else:
        n_positive = int(np.count_nonzero(labels > 0))
    stats["events_learned"][0] += n_events
    stats["positives"][0] += n_positive
    stats["negatives"][0] += n_events - n_positive
    # the decayed count in Python floats: the same IEEE operations as on the arrays' scalars
    first, last, rate = float(stats["times"][0]), float(stats["times"][1]), float(stats["rate"][0])
    for now, size in zip(times, sizes, strict=True):
        if first == 0.0:
            first = now
        elapsed = max(now - last, 0.0) if last else 0.0
        rate = rate * math.exp(-elapsed / RATE_TIME_CONSTANT) + size
        last = now
    stats["times"][0], stats["times"][1], stats["rate"][0] = first, last, rate


# ---------------------------------------------------------------------------- log entries
def apply(loaded: Loaded, entry: Entry) -> tuple[np.ndarray | None, int]:
    """Make ``entry``'s change on ``loaded``; returns the scores the metrics took (None: nothing
    learned) and the drifts. Live, the boosted fits the change installs go into ``entry.fits``
    (logged with it); a replay provides them (:func:`service.engine.replay.replay`)."""
    scores, drifts = None, 0
    if entry.n_events:
        assert entry.X is not None and entry.y is not None
        live = logged_fits.active() is None
        with logged_fits.fit_log(loaded.learner) if live else contextlib.nullcontext() as log:
            scores = learn_rows(loaded, entry.X, entry.y, entry.recorded, entry.bounds())
        if log is not None:
            entry.fits.extend(log.recorded)
        drifts = after_learning(loaded, scores, entry.y, entry.now)
    _finish(loaded, entry)
    return scores, drifts


def _finish(loaded: Loaded, entry: Entry) -> None:
    for name, count in entry.counts:
        loaded.stats[name][0] += count
    # the point that brings a quiet model's history up to its events, unless one was written
    # since the entry was made (:func:`~service.engine.history.catch_up_due`)
    if entry.history and catch_up_due(
        loaded.history, int(loaded.stats["events_learned"][0]), entry.now
    ):
        record_history(loaded.history, loaded, entry.now)


def check_batch_fits(loaded: Loaded, batch: Batch) -> None:
    """The batch was parsed against a cached configuration; the model may have been re-created
    with another one since (by this or another process)."""
    dense = loaded.config.feature_mode == "dense"
    if int(batch.X.shape[1]) != loaded.config.n_features or dense != isinstance(
        batch.X, np.ndarray
    ):
        raise ModelChanged(
            f"model {loaded.config.id!r} was re-created with another feature layout while "
            "the request was parsed; resend it"
        )


# ---------------------------------------------------------------------------- refused
def first_overflowing_event(
    repository: ModelRepository, model_id: str, X: np.ndarray | CSRMatrix, y: np.ndarray
) -> int | None:
    """The first event of ``(X, y)`` whose learning, one at a time from the committed state,
    overflows the model's state: the error of a batch refused as a whole names it."""
    loaded = repository.rebuilt(model_id)
    learner, means = loaded.learner, loaded.means
    for row in range(X.shape[0]):
        rows = row_range(X, row, row + 1)
        if means is not None:
            rows = means.fill_and_learn(rows)  # type: ignore[arg-type]
        try:
            learner.partial_fit(rows, y[row : row + 1])
        except StateOverflow:
            return row
    return None


def refusal(
    repository: ModelRepository,
    model_id: str,
    error: ValueError,
    X: np.ndarray | CSRMatrix,
    y: np.ndarray,
    locate: Locator,
    positions: np.ndarray | None = None,
) -> InvalidInput:
    """The 422 of a learner error on ``(X, y)``, naming the event at fault when there is one;
    ``positions`` maps the rows of ``X`` to the request's events (None: the same)."""
    row = getattr(error, "row", None)
    if isinstance(error, StateOverflow) and row is None:
        row = first_overflowing_event(repository, model_id, X, y)
    if row is None:
        return InvalidInput(str(error))
    index = int(row if positions is None else positions[row])
    return locate.error(index, str(error))


# ---------------------------------------------------------------------------- the service
class Learning:
    """Labelled batches into models of a :class:`ModelRepository`."""

    def __init__(self, repository: ModelRepository) -> None:
        self.repository = repository

    def learn(
        self,
        model_id: str,
        batch: Batch,
        *,
        want_scores: bool = False,
        checkpoint: dict[str, str] | None = None,
        rounds: Sequence[int] | None = None,
    ) -> LearnResult:
        """Learn a validated labelled batch, skipping known ids. ``checkpoint`` fields are
        committed atomically with the state (a queue worker's last applied stream id);
        ``rounds``: sizes of the requests a worker merged."""
        merged = Merged.of(rounds, len(batch), checkpoint)
        if batch.y is None:
            raise InvalidInput("events need labels 'y' to be learned", field="y")
        return self.repository.write(model_id, self._learn_once, batch, want_scores, merged)

    def learn_group(
        self, model_id: str, batches: Sequence[Batch], want_scores: Sequence[bool]
    ) -> list[LearnResult]:
        """Several requests' batches learned as one commit, each its own round: request by
        request what :meth:`learn` of each in turn gives (duplicates across requests included).
        The group's drifts are credited to its last request; raises as :meth:`learn` of the whole
        would (nothing committed)."""
        sizes = [len(batch) for batch in batches]
        whole = self.learn(
            model_id, concatenate(batches), want_scores=any(want_scores), rounds=sizes
        )
        stops = itertools.accumulate(sizes)
        results = [
            whole.part(stop - len(batch), stop, batch.ids, wants)
            for batch, wants, stop in zip(batches, want_scores, stops, strict=True)
        ]
        results[-1].drifts = whole.drifts
        return results

    def _learn_once(
        self, model_id: str, loaded: Loaded, batch: Batch, want_scores: bool, merged: Merged
    ) -> LearnResult:
        """One attempt of :meth:`learn` on the loaded model (run again on a stale version)."""
        check_batch_fits(loaded, batch)
        # the usual batch of new ids skips nothing: then no mask indexes the rounds or counts
        skipped = self.duplicates(model_id, batch.ids)
        keep = None if skipped is None else np.flatnonzero(~skipped)
        todo = batch if keep is None else batch.take(keep)
        duplicate_ids = (
            [] if skipped is None else [str(batch.ids[i]) for i in np.flatnonzero(skipped)]  # type: ignore[index]
        )
        scores = None
        drifts = 0
        version = loaded.version
        # A batch of nothing but duplicates (a client's retry) changes nothing: no commit, the
        # version stays, and the model's duplicate counter with it (the response and
        # Prometheus' aucstream_events_duplicate_total still count them).  A queue worker's
        # checkpoint is the exception: its position must advance.
        if len(todo) or merged.checkpoint:
            duplicates = 0 if skipped is None else merged.counted_duplicates(skipped)
            # each request is a regret round, and a learner that learns a batch otherwise
            # than event by event (spdam) sees the same calls as when the requests come one
            # after another (learn_rows)
            entry = Entry(
                self.repository.clock(),
                todo.X if len(todo) else None,
                todo.y if len(todo) else None,
                rounds=merged.rounds(None if skipped is None else ~skipped, len(todo)),
                counts=(("duplicates", duplicates),) if duplicates else (),
            )
            try:
                scores, drifts = apply(loaded, entry)
            except ValueError as error:
                assert todo.y is not None
                raise refusal(
                    self.repository, model_id, error, todo.X, todo.y, Locator(batch.ids), keep
                ) from None
            version = self.repository.commit(
                model_id,
                loaded,
                entry,
                learned_ids=[] if todo.ids is None else [i for i in todo.ids if i is not None],
                meta=merged.checkpoint,
            )
        all_scores = None
        if want_scores:
            all_scores = np.full(len(batch), np.nan)
            if scores is not None:
                learned = slice(None) if skipped is None else np.flatnonzero(~skipped)
                all_scores[learned] = scores
        return LearnResult(
            version, len(batch), len(todo), duplicate_ids, all_scores, drifts, skipped
        )

    def duplicates(self, model_id: str, ids: list[str | None] | None) -> np.ndarray | None:
        """Mask of events to skip (ids already learned, or repeated in the batch); None when none
        is."""
        if ids is None:
            return None
        event_id = ids[0] if len(ids) == 1 else None
        if event_id is not None:  # a request's one event: no dict, no loop
            seen = self.repository.seen(model_id, [event_id], self.repository.clock())
            return np.ones(1, dtype=bool) if seen[0] else None
        present = [i for i in ids if i is not None]
        seen = self.repository.seen(model_id, present, self.repository.clock())
        known = dict(zip(present, seen, strict=True))
        positions = []
        first: set[str] = set()
        for position, event_id in enumerate(ids):
            if event_id is None:
                continue
            if known[event_id] or event_id in first:
                positions.append(position)
            first.add(event_id)
        if not positions:
            return None
        mask = np.zeros(len(ids), dtype=bool)
        mask[positions] = True
        return mask
