"""Delayed labels: ``/score`` keeps an event's features and score (a pending record, see
:mod:`service.codec`); its label, when it comes, is learned with the score given then; the
sweep handles events whose label never came.

Per label id the outcome is ``learned``; ``duplicate`` (already learned, or repeated in the
request); ``expired`` (its features were dropped after the TTL, or it is past its deadline);
``unknown`` (never scored with this id, or forgotten).  A kept record that cannot be learned
(a score not finite or features beyond the bound: damaged in the store; or an event that would
overflow the model's state) is dropped alone, as if expired; ``/score`` never keeps one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, Unpack

import numpy as np

from core._kernels.validation import count_nonfinite
from core.csr import CSRMatrix
from core.errors import InvalidFeatures, StateOverflow
from core.validation import check_rows, first_out_of_range, rows_out_of_range
from service.codec import decode_pending, encode_pending
from service.engine.deadlines import Deadlines
from service.engine.entries import Entry
from service.engine.learning import Merged, apply, check_batch_fits, first_overflowing_event
from service.engine.model import Loaded
from service.engine.reasons import top_reasons
from service.engine.repository import ModelRepository
from service.errors import InsufficientStorage, InvalidInput, ServiceError, StaleVersion
from service.ingest import Batch, FeatureSpec, joined_labels
from service.ingest.fields import Locator, feature_label

R = TypeVar("R")


@dataclass
class Scored:
    """``/score``'s answer; ``probabilities`` and ``reasons`` only when asked (else None)."""

    version: int
    scores: np.ndarray
    kept: int
    probabilities: np.ndarray | None = None
    reasons: list[dict[str, Any]] | None = None


class ScoreOptions(TypedDict, total=False):
    """The keywords of :meth:`DelayedLabels.score` and ``Coalescer.score`` (defaults:
    :class:`ScoreRequest`)."""

    keep: bool
    probabilities: bool
    reasons: int


@dataclass(frozen=True)
class ScoreRequest:
    """One ``/score`` request as :meth:`DelayedLabels.score_group` takes it."""

    batch: Batch
    keep: bool = True
    probabilities: bool = False
    reasons: int = 0


def _merged(records: list[dict[str, bytes]]) -> dict[str, bytes]:
    """Several requests' kept records as one write: an id kept twice keeps the later record."""
    if sum(1 for kept in records if kept) == 1:
        return next(kept for kept in records if kept)
    merged: dict[str, bytes] = {}
    for kept in records:
        for event_id, record in kept.items():
            merged.pop(event_id, None)  # the later one, at its own position
            merged[event_id] = record
    return merged


@dataclass
class LabelResult:
    version: int
    learned: int
    statuses: list[tuple[str, str]]
    #: drifts the detector reported on the events these labels completed
    drifts: int = 0


def label_statuses(
    ids: Sequence[str],
    records: dict[str, tuple[bytes, float]],
    seen: np.ndarray,
    expired: np.ndarray,
    now: float,
) -> list[tuple[str, str]]:
    """The outcome of each label id (module docstring), in request order."""
    statuses: list[tuple[str, str]] = []
    taken: set[str] = set()
    for position, event_id in enumerate(ids):
        record = records.get(event_id)
        if event_id in taken:
            status = "duplicate"
        elif expired[position] or (record is not None and record[1] <= now and not seen[position]):
            status = "expired"  # checked first: a default label may have been learned
        elif seen[position]:
            status = "duplicate"
        elif record is None:
            status = "unknown"
        else:
            status = "learned"
        taken.add(event_id)
        statuses.append((event_id, status))
    return statuses


class _Unlearnable(Exception):
    """An event of kept records whose learning overflows the model's state (raised inside a
    repository write, whose cached model is then dropped; the caller retries without it)."""

    def __init__(self, event_id: str) -> None:
        super().__init__(event_id)
        self.event_id = event_id


def _decode(loaded: Loaded, records: list[bytes]):
    config = loaded.config
    return decode_pending(records, config.n_features, config.feature_mode == "dense")


def _learnable(loaded: Loaded, records: list[bytes], ids: list[str], unlearnable: set[str]):
    """The decoded ``records`` of ``ids`` and the mask of the bad ones: ``unlearnable``, a score
    not finite, features beyond the bound (NaN is a missing value when the model fills them with
    running means)."""
    X, scores = _decode(loaded, records)
    checked = np.where(np.isnan(X), 0.0, X) if loaded.means is not None else X
    bad = ~np.isfinite(scores) | rows_out_of_range(checked) | np.isin(ids, list(unlearnable))
    if not bad.any():
        return X, scores, bad
    keep = np.flatnonzero(~bad)
    return (X.take_rows(keep) if isinstance(X, CSRMatrix) else X[keep]), scores[keep], bad


def _apply_kept(
    repository: ModelRepository, model_id: str, loaded: Loaded, entry: Entry, ids: list[str]
) -> int:
    """``apply(loaded, entry)``'s drifts; a state overflow raises :class:`_Unlearnable` naming
    the event at fault among ``ids``."""
    try:
        return apply(loaded, entry)[1]
    except StateOverflow:
        if entry.X is None or entry.y is None:
            raise
        row = first_overflowing_event(repository, model_id, entry.X, entry.y)
        if row is None:
            raise
        raise _Unlearnable(ids[row]) from None


def _kept_entry(now: float, learned: tuple | None, counts: dict[str, int]) -> Entry:
    """The entry of kept records: ``learned`` its ``(X, y, recorded scores, rounds)`` or None,
    with the nonzero ``counts``."""
    nonzero = tuple((name, count) for name, count in counts.items() if count)
    if learned is None:
        return Entry(now, counts=nonzero)
    X, y, recorded, rounds = learned
    return Entry(now, X, y, recorded, rounds, nonzero)


def _check_scorable(
    X: np.ndarray | CSRMatrix, ids: list[str | None] | None, spec: FeatureSpec
) -> None:
    """Refuse (422 naming the event and the feature) a missing value left unfilled or a value
    beyond the feature bound: a score is never computed from such a batch, whichever way it came
    in."""
    if first_out_of_range(X.data if isinstance(X, CSRMatrix) else X) is None:
        return
    try:
        check_rows(X)
    except InvalidFeatures as error:
        if error.value is None or not np.isnan(error.value):  # beyond the feature bound
            raise Locator(ids).core_error(error, "x") from None
        assert error.row is not None and error.column is not None
        label = feature_label(spec, error.column)
        detail = f"feature {label} is missing: this model has no value to fill it with"
        raise Locator(ids).error(error.row, detail, field="x") from None


class DelayedLabels:
    """Scores kept for later labels, the labels, and the label-timeout sweep."""

    def __init__(
        self,
        repository: ModelRepository,
        *,
        label_ttl_seconds: float,
        max_pending_records: int | None = None,
    ) -> None:
        self.repository = repository
        self.label_ttl_seconds = label_ttl_seconds
        #: most records kept per model waiting for labels (None: unbounded)
        self.max_pending_records = max_pending_records
        #: when each model's next kept record falls due (what :meth:`sweep_all` visits)
        self.deadlines = Deadlines()

    def score(self, model_id: str, batch: Batch, **options: Unpack[ScoreOptions]) -> Scored:
        """Scores of the served model; with ids (and ``keep``) features and scores are kept so
        that a later label is learned with the score given now."""
        outcome = self.score_group(model_id, [ScoreRequest(batch, **options)])
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def score_group(
        self, model_id: str, requests: Sequence[ScoreRequest]
    ) -> list[Scored | ServiceError]:
        """Several ``/score`` requests against one load of the model, their kept records written
        by one store call: each request's :class:`Scored`, or the error refusing it alone. An
        error of the model as a whole is raised."""
        while True:  # scored again when the model was replaced (a reset) before the write
            with self.repository.lock(model_id):
                loaded = self.repository.load(model_id)
                outcomes, records = self.score_loaded(loaded, requests)
            with contextlib.suppress(StaleVersion):
                self.keep(model_id, loaded, outcomes, records)
                return outcomes

    def keep(self, model_id: str, loaded: Loaded, outcomes: list, records: list, head=None) -> None:
        """Write :meth:`score_loaded`'s records by one durable store call (a request the bound
        refuses gets its error in ``outcomes``); with ``head`` only while that (version,
        incarnation) is the model's (``put_pending_at``), else only while ``loaded``'s
        incarnation is (:class:`StaleVersion`)."""
        if not any(records):
            return
        ttl = loaded.config.label_ttl_seconds or self.label_ttl_seconds
        deadline, store = self.repository.clock() + ttl, self.repository.store
        bound, incarnation = self.max_pending_records, loaded.incarnation
        if head is not None:
            store.put_pending_at(model_id, head, _merged(records), deadline, bound)  # type: ignore[attr-defined]
        else:
            try:
                store.put_pending(model_id, _merged(records), deadline, bound, incarnation)
            except InsufficientStorage:
                # the bound refuses the group: then each request as if alone, in order
                for position, kept in enumerate(records):
                    if kept:
                        try:
                            store.put_pending(model_id, kept, deadline, bound, incarnation)
                        except InsufficientStorage as error:
                            outcomes[position] = error
        self.deadlines.schedule(model_id, deadline)

    def score_loaded(
        self, loaded: Loaded, requests: Sequence[ScoreRequest]
    ) -> tuple[list[Scored | ServiceError], list[dict[str, bytes]]]:
        """Each request's scores or its error, and the records it keeps, scored by ``loaded``
        (held under the model's lock)."""
        outcomes: list[Scored | ServiceError] = []
        records: list[dict[str, bytes]] = []
        for request in requests:
            outcome: Scored | ServiceError
            try:
                outcome, kept = self._score_one(loaded, request)
            except ServiceError as error:
                outcome, kept = error, {}
            outcomes.append(outcome)
            records.append(kept)
        return outcomes, records

    def _score_one(self, loaded: Loaded, request: ScoreRequest) -> tuple[Scored, dict[str, bytes]]:
        """One request's :class:`Scored` and the records it keeps."""
        batch = request.batch
        check_batch_fits(loaded, batch)
        X = batch.X
        if loaded.means is not None:  # missing values: the current means, unchanged
            X = loaded.means.fill_for_scoring(X)  # type: ignore[arg-type]
        _check_scorable(X, batch.ids, loaded.spec)
        try:
            # the batch was validated when parsed, and fits the model (checked above)
            scores = loaded.learner.decision_function(X, check_input=False)
        except ValueError as error:
            raise InvalidInput(str(error)) from None
        if count_nonfinite(scores):  # never served, never kept
            row = int(np.flatnonzero(~np.isfinite(scores))[0])
            raise Locator(batch.ids).error(
                row,
                "the model's score of this event is not finite (its weights are too large "
                "for features this large); scale the features (the 'scaling' parameter)",
                field="x",
            )
        explained = None
        if request.reasons > 0:
            spec = loaded.spec
            hasher = spec.hasher() if spec.feature_mode == "hashed" else None
            explained = top_reasons(
                loaded.learner, X, request.reasons, spec.feature_names, batch.named_rows, hasher
            )
        calibrated = loaded.calibrator.probabilities(scores) if request.probabilities else None
        records: dict[str, bytes] = {}
        if request.keep and batch.ids is not None:
            rows = [position for position, i in enumerate(batch.ids) if i is not None]
            if rows:
                if len(rows) == len(batch):  # every event has an id: no copy
                    subset, subset_scores = batch, scores
                else:
                    index = np.asarray(rows, dtype=np.int64)
                    subset, subset_scores = batch.take(index), scores[index]
                ids = [str(i) for i in subset.ids or []]
                records = dict(zip(ids, encode_pending(subset.X, subset_scores), strict=True))
        return Scored(loaded.version, scores, len(records), calibrated, explained), records

    def labels(
        self,
        model_id: str,
        ids: list[str],
        labels: np.ndarray,
        *,
        checkpoint: dict[str, str] | None = None,
        rounds: Sequence[int] | None = None,
    ) -> LabelResult:
        """Join delayed labels to kept features, learned with the scores recorded at scoring;
        ``checkpoint`` and ``rounds`` as in :meth:`Learning.learn
        <service.engine.learning.Learning.learn>`."""
        merged = Merged.of(rounds, len(ids), checkpoint)
        self.sweep(model_id)
        return self._write_learnable(model_id, self._labels_once, ids, labels, merged)

    def _write_learnable(self, model_id: str, step: Callable[..., R], *args: Any) -> R:
        """``repository.write(model_id, step, *args, unlearnable)``, again without each record
        found unlearnable (once more per record at most)."""
        unlearnable: set[str] = set()
        while True:
            try:
                return self.repository.write(model_id, step, *args, unlearnable)
            except _Unlearnable as error:
                unlearnable.add(error.event_id)

    def labels_group(
        self, model_id: str, requests: Sequence[tuple[list[str], np.ndarray]]
    ) -> list[LabelResult]:
        """Several ``/labels`` requests joined as one commit, each its own round (an id labelled
        twice is a duplicate in the later one); the group's drifts are credited to its last
        request."""
        ids, labels = joined_labels(requests)
        whole = self.labels(model_id, ids, labels, rounds=[len(i) for i, _ in requests])
        results = []
        start = 0
        for request_ids, _ in requests:
            statuses = whole.statuses[start : start + len(request_ids)]
            learned = sum(1 for _, status in statuses if status == "learned")
            results.append(LabelResult(whole.version, learned, statuses))
            start += len(request_ids)
        results[-1].drifts = whole.drifts
        return results

    def _labels_once(
        self,
        model_id: str,
        loaded: Loaded,
        ids: list[str],
        labels: np.ndarray,
        merged: Merged,
        unlearnable: set[str],
    ) -> LabelResult:
        """One attempt of :meth:`labels` (again on a stale version, or without the records found
        ``unlearnable``)."""
        store, now = self.repository.store, self.repository.clock()
        records = store.get_pending(model_id, ids)
        statuses = label_statuses(
            ids, records, store.seen(model_id, ids, now), store.expired(model_id, ids, now), now
        )
        chosen = [p for p, (_, status) in enumerate(statuses) if status == "learned"]
        # a label for an event already learned counts as a duplicate, as an event does
        duplicates = merged.counted_duplicates(
            np.array([status == "duplicate" for _, status in statuses], dtype=bool)
        )
        dropped: list[str] = []
        if chosen:
            candidates = [ids[p] for p in chosen]
            X, scores, bad = _learnable(
                loaded, [records[i][0] for i in candidates], candidates, unlearnable
            )
            dropped = [ids[chosen[k]] for k in np.flatnonzero(bad)]
            for k in np.flatnonzero(bad):
                statuses[chosen[k]] = (ids[chosen[k]], "expired")
            chosen = [chosen[k] for k in np.flatnonzero(~bad)]
        if not (chosen or merged.checkpoint or dropped):
            # nothing but duplicates (a client's retry) changes nothing: no commit (as
            # service.engine.learning does for events; Merged.counted_duplicates)
            return LabelResult(loaded.version, 0, statuses)
        counts = {
            "duplicates": duplicates,
            "labels_expired": len(dropped),
            "labels_joined": len(chosen),
        }
        chosen_ids = [ids[p] for p in chosen]
        learned = None
        if chosen:
            positions = np.asarray(chosen, dtype=np.int64)
            learned = (X, labels[positions], scores, merged.rounds(positions, len(chosen)))
        entry = _kept_entry(now, learned, counts)
        drifts = _apply_kept(self.repository, model_id, loaded, entry, chosen_ids)
        version = self.repository.commit(
            model_id,
            loaded,
            entry,
            learned_ids=chosen_ids,
            remove_pending=chosen_ids + dropped,
            expired_ids=dropped,
            meta=merged.checkpoint,
        )
        return LabelResult(version, len(chosen), statuses, drifts)

    def sweep(self, model_id: str, limit: int = 10_000) -> int:
        """Scored events past their deadline with no label: learned with the model's
        ``default_label`` and recorded score (``labels_defaulted``), else forgotten
        (``labels_expired``); their ids are remembered as ``expired``. Returns how many."""
        store = self.repository.store
        due = list(dict.fromkeys(store.due_pending(model_id, self.repository.clock(), limit)))
        if not due:
            return 0
        return self._write_learnable(model_id, self._sweep_once, due)

    def _sweep_once(
        self, model_id: str, loaded: Loaded, due: list[str], unlearnable: set[str]
    ) -> int:
        """One attempt of :meth:`sweep` (again on a stale version, or without the records found
        ``unlearnable``, which are forgotten)."""
        store, now = self.repository.store, self.repository.clock()
        records = store.get_pending(model_id, due)
        ready = [i for i in due if i in records and records[i][1] <= now]
        if not ready:
            return 0
        default = loaded.config.default_label
        learned: list[str] = []
        if default is not None:
            seen = store.seen(model_id, ready, now)
            learned = [i for i, known in zip(ready, seen, strict=True) if not known]
        if learned:
            X, scores, bad = _learnable(
                loaded, [records[i][0] for i in learned], learned, unlearnable
            )
            learned = [learned[k] for k in np.flatnonzero(~bad)]
        counts = {"labels_defaulted": len(learned), "labels_expired": len(ready) - len(learned)}
        y = np.full(len(learned), 1 if default == 1 else -1, dtype=np.int64)
        entry = _kept_entry(now, (X, y, scores, ()) if learned else None, counts)
        _apply_kept(self.repository, model_id, loaded, entry, learned)
        self.repository.commit(
            model_id, loaded, entry, learned_ids=learned, remove_pending=ready, expired_ids=ready
        )
        return len(ready)

    def sweep_all(self) -> int:
        """:meth:`sweep` each model with a kept record past its deadline; returns how many
        records were handled."""
        return self.deadlines.sweep_due(self.repository.store, self.repository.clock(), self.sweep)
