"""The SQLite store's calls for a pass of the coalescer (:mod:`service.engine.passes`) and its
kept ``/score`` records.

A pass over several models reads their heads by one query and writes their log entries by one
transaction (one fsync for the events of every model).  :meth:`ManyModels.put_pending_at`
keeps the records of scores given by a cached model without a read of the model's head
before: the write's own update of the model's row reads it, and writes nothing when it moved
(the coalescer then scores again the usual way: :mod:`service.engine.coalesce`).  A kept
``/score`` from one sender pays the durable commit and no read besides; the records of other
threads are written in the same group commit
(:meth:`~service.stores.sqlite_file.Database.grouped`: one fsync for them all).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from service.errors import InsufficientStorage, ModelNotFound, ServiceError, StaleVersion
from service.stores.base import CHUNK, Commit, chunks, no_model, pending_full
from service.stores.sqlite_file import translated

if TYPE_CHECKING:
    from service.stores.sqlite import SQLiteStore


def marks(count: int, mark: str = "?") -> str:
    """``count`` parameter marks (or row values of them) for ``IN (...)``/``VALUES``."""
    return ",".join([mark] * count)


class ManyModels:
    """:class:`~service.stores.sqlite.SQLiteStore`'s calls over several models, and its kept
    records."""

    @translated
    def heads(self: SQLiteStore, model_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``(version, incarnation)`` of each of ``model_ids`` that exists, read by one query
        per 500 ids instead of one per model: a cached model at its head needs no other read
        (``ModelRepository.load``)."""
        self.loss.guard()
        heads: dict[str, tuple[int, str]] = {}
        db = self.database.connection()
        seen = self.watch.seen
        for part in chunks(model_ids):
            before = {model_id: seen(model_id) for model_id in part}
            for model_id, version, incarnation in db.execute(
                f"SELECT id, version, incarnation FROM models WHERE id IN ({marks(len(part))})",  # noqa: S608
                part,
            ):
                self.loss.saw(model_id, incarnation, version, before[model_id])
                heads[model_id] = (version, incarnation)
        return heads

    @translated
    def head_and_seen(
        self: SQLiteStore, model_id: str, ids: Sequence[str], now: float
    ) -> tuple[tuple[int, str] | None, set[str]]:
        """One model's ``heads`` and ``seen_many`` by one statement (a pass of one model: the
        usual one from one sender), for at most ``CHUNK - 2`` ids: the head (None: no such
        model) and those of ``ids`` learned and still remembered."""
        if len(ids) > CHUNK - 2:
            raise ValueError(f"at most {CHUNK - 2} ids, got {len(ids)}")
        # no stat of the file here: the pass's write transaction verifies it under the write
        # lock before anything is acknowledged (as ``seen`` reads, unverified)
        self.loss.guard(model_id, verify=False)
        head: tuple[int, str] | None = None
        found: set[str] = set()
        before = self.watch.seen(model_id)
        # the head's row first (kind 0), then the learned ids (1): one read snapshot
        rows = self.database.connection().execute(
            "SELECT 0, version, incarnation FROM models WHERE id = ? UNION ALL "
            "SELECT 1, event_id, NULL FROM ids WHERE model_id = ? AND kind = 0 "  # noqa: S608
            f"AND +expiry > ? AND event_id IN ({marks(len(ids))})",
            (model_id, model_id, now, *ids),
        )
        for kind, value, incarnation in rows:
            if kind == 0:
                self.loss.saw(model_id, incarnation, value, before)
                head = (value, incarnation)
            else:
                found.add(value)
        return head, found

    @translated
    def seen_many(
        self: SQLiteStore, ids_of: Mapping[str, Sequence[str]], now: float
    ) -> dict[str, set[str]]:
        """Of each model's ``ids_of[model_id]``, those learned and still remembered (as
        ``seen`` answers them), read by one query per 250 ids instead of one per model."""
        found: dict[str, set[str]] = {model_id: set() for model_id in ids_of}
        pairs = [(model_id, event_id) for model_id, ids in ids_of.items() for event_id in ids]
        db = self.database.connection()
        for part in chunks(pairs, CHUNK // 2):
            # the asked pairs joined to the ids' key: one lookup by key per pair
            asked = marks(len(part), "(?,?)")
            rows = db.execute(
                f"SELECT ids.model_id, ids.event_id FROM (VALUES {asked}) AS asked "  # noqa: S608
                "JOIN ids ON ids.model_id = asked.column1 AND ids.kind = 0 "  # 0: learned ids
                "AND ids.event_id = asked.column2 WHERE +ids.expiry > ?",
                [*itertools.chain.from_iterable(part), now],
            )
            for model_id, event_id in rows:
                found[model_id].add(event_id)
        return found

    @translated
    def commit_many(
        self: SQLiteStore, commits: Sequence[tuple[str, Commit]]
    ) -> list[int | Exception]:
        """The log entries of several models (``Commit.entry`` set, at most one per model) in
        one transaction and one fsync: one that fails (stale, the model gone, its data lost)
        wrote nothing and is its outcome, the others are written; a failure of the
        transaction itself raises (then nothing is written)."""
        outcomes: list[int | Exception] = []
        writes: list[Callable[[sqlite3.Connection], None] | None] = []
        for model_id, commit in commits:
            try:  # a model whose data was lost (an alarm) is refused alone
                writes.append(self._prepared(model_id, commit))
                outcomes.append(commit.expected_version + 1)
            except ServiceError as error:
                writes.append(None)
                outcomes.append(error)

        def write_all(db: sqlite3.Connection) -> None:
            # no savepoint per model: a write checks its version by its first statement and
            # raises these before it has written anything (SQLiteStore._prepared), and any
            # other failure is the transaction's
            for k, write in enumerate(writes):
                if write is None:
                    continue
                try:
                    write(db)
                except (StaleVersion, ModelNotFound) as error:
                    outcomes[k] = error

        if any(write is not None for write in writes):
            self.database.grouped(write_all)
        for (model_id, commit), outcome in zip(commits, outcomes, strict=True):
            if not isinstance(outcome, Exception):
                self.watch.saw(model_id, commit.incarnation, outcome)
        return outcomes

    # ------------------------------------------------------------------ kept records
    @translated
    def put_pending(
        self: SQLiteStore, model_id, records, deadline, max_records=None, incarnation=None
    ) -> None:
        self.loss.guard(model_id, verify=False)  # as every write: the transaction verifies
        if records:
            write = _pending_write(model_id, records, deadline, max_records, None, incarnation)
            self.database.grouped(write)

    @translated
    def put_pending_at(
        self: SQLiteStore,
        model_id: str,
        head: tuple[int, str],
        records: dict[str, bytes],
        deadline: float,
        max_records: int | None = None,
    ) -> None:
        """:meth:`put_pending`, written only while the model's ``(version, incarnation)`` is
        ``head`` (the cached model that gave the scores): :class:`StaleVersion` otherwise,
        and nothing is written."""
        self.loss.guard(model_id, verify=False)  # the write transaction verifies the file
        if records:
            self.database.grouped(_pending_write(model_id, records, deadline, max_records, head))

    @translated
    def get_pending(
        self: SQLiteStore, model_id: str, ids: Sequence[str]
    ) -> dict[str, tuple[bytes, float]]:
        db = self.database.connection()
        found: dict[str, tuple[bytes, float]] = {}
        for part in chunks(ids):
            for event_id, record, deadline in db.execute(
                "SELECT event_id, record, deadline FROM pending WHERE model_id = ? "
                f"AND event_id IN ({marks(len(part))})",  # noqa: S608 - only '?' marks
                (model_id, *part),
            ):
                found[event_id] = (bytes(record), float(deadline))
        return {event_id: found[event_id] for event_id in ids if event_id in found}

    @translated
    def pending_deadlines(self: SQLiteStore) -> dict[str, float]:
        """Each model's earliest pending deadline (one query on the deadline index; the label
        sweep's schedule starts from it: service/engine/deadlines.py)."""
        rows = self.database.connection().execute(
            "SELECT model_id, MIN(deadline) FROM pending GROUP BY model_id"
        )
        return {model_id: float(deadline) for model_id, deadline in rows}

    @translated
    def due_pending(self: SQLiteStore, model_id: str, now: float, limit: int) -> list[str]:
        rows = self.database.connection().execute(
            "SELECT event_id FROM pending WHERE model_id = ? AND deadline <= ? "
            "ORDER BY deadline LIMIT ?",
            (model_id, now, limit),
        )
        return [row[0] for row in rows]


def _pending_write(
    model_id: str,
    records: dict[str, bytes],
    deadline: float,
    max_records: int | None,
    head: tuple[int, str] | None = None,
    incarnation: str | None = None,
) -> Callable[[sqlite3.Connection], None]:
    """``write(db)`` of the records, for :meth:`~service.stores.sqlite_file.Database.grouped`:
    the insert counts the new records itself and the count's update reads the bound (and the
    head) back, two statements for the usual new record; a missing model, a full one, a
    head that moved or another incarnation raises, which undoes the insert."""
    rows = [(model_id, event_id, record, deadline) for event_id, record in records.items()]

    def write(db: sqlite3.Connection) -> None:
        insert = "INSERT OR IGNORE INTO pending VALUES (?, ?, ?, ?)"
        # one event per request: a statement, not executemany's machinery
        added = (
            db.execute(insert, rows[0]) if len(rows) == 1 else db.executemany(insert, rows)
        ).rowcount
        if added < len(rows):  # some were kept already: record and deadline move on
            db.executemany("INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?)", rows)
        row = db.execute(
            "UPDATE models SET pending = pending + ? WHERE id = ? "
            "RETURNING pending, version, incarnation",
            (added, model_id),
        ).fetchall()
        if not row:
            raise no_model(model_id)
        if head is not None and tuple(row[0][1:]) != head:
            raise StaleVersion(f"model {model_id!r} moved on since its scores were given")
        if incarnation is not None and row[0][2] != incarnation:
            raise StaleVersion(f"model {model_id!r} was replaced since its scores were given")
        if max_records is not None and row[0][0] > max_records:
            raise InsufficientStorage(pending_full(model_id, max_records))

    return write
