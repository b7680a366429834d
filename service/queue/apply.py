"""Applying stream entries to a model exactly once, in stream order from the checkpoint
committed with the state (docs/architecture.md §4 Modes): a run of entries of one kind is one
engine call, each entry its own round; an entry that one not yet applied precedes (held by
another consumer) waits (:class:`OutOfOrder`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from service.codec import decode_events, decode_labels
from service.engine import Engine
from service.errors import Contention
from service.groups import each_alone, refused_alone
from service.ingest import concatenate, joined_labels
from service.queue.streams import (
    APPLIED_ENTRIES,
    APPLIED_EVENTS,
    LAST_ID,
    Entry,
    StreamQueue,
    parse_id,
)
from service.telemetry import Telemetry

#: the worker's logger (service.queue.worker logs through it too)
logger = logging.getLogger("aucstream.worker")
T = TypeVar("T")

#: attempts to apply one read when other writers keep committing first
MAX_APPLY_ATTEMPTS = 50
#: seconds between two lag readings of a model (gauges and log)
LAG_INTERVAL = 1.0


class OutOfOrder(Exception):
    """Entries of a read follow stream entries not yet applied (held by another consumer):
    the ones before the gap were applied and acknowledged, the rest were not."""


class EntryApplier:
    """Learns a worker's stream entries with the engine, acknowledges them, accounts for them."""

    def __init__(self, engine: Engine, queue: StreamQueue, telemetry: Telemetry, name: str):
        self.engine = engine
        self.queue = queue
        self.telemetry = telemetry
        self.name = name
        self._lag_read: dict[str, float] = {}

    def forget(self, model: str) -> None:
        """The worker no longer writes ``model``."""
        self._lag_read.pop(model, None)

    def apply(self, model: str, entries: list[Entry]) -> int:
        """Learn the entries after the checkpoint, acknowledge and trim those it then covers;
        returns how many were read.  Raises ModelNotFound, LeaseLost (nothing acknowledged)
        or :class:`OutOfOrder`."""
        started = time.perf_counter()
        totals = Counter(learned=0, duplicates=0, applied=0, redelivered=0, rejected=0)
        for attempt in range(MAX_APPLY_ATTEMPTS):
            checkpoint = self.engine.checkpoint(model)
            last_applied = checkpoint.get(LAST_ID)
            done = parse_id(last_applied or "0-0")
            todo = [e for e in entries if e.fields is not None and parse_id(e.id) > done]
            if attempt == 0:  # later attempts also skip what this worker just committed
                totals["redelivered"] = len(entries) - len(todo)
            gap = self.queue.first_gap(model, last_applied or "0-0", [e.id for e in todo])
            waiting = None if gap is None else todo[gap].id
            todo = todo if gap is None else todo[:gap]  # stream entries not yet applied first
            try:
                last_applied = self._learn(model, todo, checkpoint, totals) or last_applied
                break
            except Contention:
                continue  # another writer committed first: reload the checkpoint, filter again
        else:
            raise Contention(f"model {model!r}: the checkpoint kept moving; retrying the read")
        # only what the checkpoint covers was applied (entries after a gap wait in our list)
        applied_to = parse_id(last_applied or "0-0")
        self.queue.ack(model, [e.id for e in entries if parse_id(e.id) <= applied_to], last_applied)
        self._account(model, entries, totals, time.perf_counter() - started)
        if waiting is not None:
            raise OutOfOrder(f"model {model!r}: entries not yet applied precede {waiting}")
        return len(entries)

    def _learn(
        self,
        model: str,
        todo: list[Entry],
        checkpoint: dict[str, str],
        totals: Counter[str],
    ) -> str | None:
        """Learn ``todo`` a run of one kind at a time (:func:`service.groups.each_alone`);
        returns the last id applied.  A server error is raised: nothing after it is applied."""
        done = {name: checkpoint.get(name, "0") for name in (APPLIED_ENTRIES, APPLIED_EVENTS)}
        done[LAST_ID] = ""

        def past(piece: list[Entry]) -> dict[str, str]:  # the checkpoint committed with piece
            return {
                LAST_ID: piece[-1].id,
                APPLIED_ENTRIES: str(int(done[APPLIED_ENTRIES]) + len(piece)),
                APPLIED_EVENTS: str(int(done[APPLIED_EVENTS]) + sum(e.n_events for e in piece)),
            }

        def learned(piece: list[Entry]) -> list[None]:
            fields = past(piece)
            self._learn_piece(model, piece, fields, totals)
            done.update(fields)
            return [None] * len(piece)

        def learned_or_rejected(entry: Entry) -> None:
            try:
                learned([entry])
            except Exception as error:
                if not refused_alone(error):
                    raise  # not the entry's fault: it must not be rejected
                self._reject(model, entry, past([entry]), error)
                totals["rejected"] += 1
                done.update(past([entry]))

        for _, run in itertools.groupby(todo, key=lambda entry: entry.kind):
            for outcome in each_alone(learned, learned_or_rejected, list(run)):
                if isinstance(outcome, Exception):
                    raise outcome
        return done[LAST_ID] or None

    def _learn_piece(
        self, model: str, piece: list[Entry], fields: dict[str, str], totals: Counter[str]
    ) -> None:
        kind = piece[0].kind
        if kind == "events":
            parts = [_decoded(decode_events, entry) for entry in piece]
            batch = concatenate(parts)
            # each entry is its own regret round, as its request is in sync mode
            rounds = [len(part) for part in parts]
            result = self.engine.learn(model, batch, checkpoint=fields, rounds=rounds)
            totals["learned"] += result.learned
            totals["duplicates"] += len(result.duplicate_ids)
            totals["drifts"] += result.drifts
        elif kind == "labels":
            decoded = [_decoded(decode_labels, entry) for entry in piece]
            ids, labels = joined_labels(decoded)
            outcome = self.engine.labels(
                model, ids, labels, checkpoint=fields, rounds=[len(i) for i, _ in decoded]
            )
            totals["learned"] += outcome.learned
            totals["drifts"] += outcome.drifts
            statuses = Counter(status for _, status in outcome.statuses)
            totals["duplicates"] += statuses["duplicate"]
            for status, count in statuses.items():
                self.telemetry.labels.labels(model, status).inc(count)
                if status != "learned":
                    totals[f"labels_{status}"] += count
        else:
            raise ValueError(f"unknown entry kind {kind!r}")
        totals["applied"] += len(piece)

    def _reject(self, model: str, entry: Entry, fields: dict[str, str], error: Exception) -> None:
        """Skip a bad entry: commit only the checkpoint past it, and say why."""
        detail = getattr(error, "detail", None) or str(error)
        logger.error(
            "model %s: entry %s rejected and skipped: %s",
            model,
            entry.id,
            detail,
            extra={"fields": {"worker": self.name, "model": model, "entry": entry.id}},
        )
        self.engine.labels(model, [], np.zeros(0, dtype=np.int64), checkpoint=fields)

    def _account(
        self, model: str, entries: list[Entry], totals: Counter[str], elapsed: float
    ) -> None:
        telemetry = self.telemetry
        telemetry.count_learned(model, totals["learned"], totals["drifts"])
        telemetry.duplicates.labels(model).inc(totals["duplicates"])
        for outcome in ("applied", "redelivered", "rejected"):
            if totals[outcome]:
                telemetry.entries.labels(model, outcome).inc(totals[outcome])
        telemetry.batch_duration.observe(elapsed)
        fields: dict[str, Any] = {
            "worker": self.name,
            "model": model,
            "entries": len(entries),
            "events": sum(e.n_events for e in entries),
            **totals,
            "duration_ms": round(elapsed * 1000.0, 3),
            "last_id": entries[-1].id,
        }
        now = time.monotonic()
        if now - self._lag_read.get(model, 0.0) >= LAG_INTERVAL:
            self._lag_read[model] = now
            lag = self.queue.lag(model)
            telemetry.set_lag(model, lag)
            fields["lag_events"] = lag["events"]
            fields["lag_seconds"] = round(lag["seconds"], 3)
        logger.info(
            "model %s: %d entries, %d events learned",
            model,
            len(entries),
            totals["learned"],
            extra={"fields": fields},
        )


def _decoded(decode: Callable[[dict[bytes, bytes]], T], entry: Entry) -> T:
    """An entry's fields decoded; a field missing (a corrupt entry) is a ValueError, as
    every other fault of its bytes (:mod:`service.codec`)."""
    assert entry.fields is not None  # trimmed entries were applied: never decoded
    try:
        return decode(entry.fields)
    except KeyError as error:
        raise ValueError(f"entry {entry.id} lacks the field {error}") from None
