"""The SQLite store's appends (:class:`Appends`, a part of
:class:`~service.stores.sqlite.SQLiteStore`): a request's commit, a log entry
(:mod:`service.engine.entries`); a pass of the coalescer (:mod:`service.engine.passes`), its
reads and its commits of several models; the kept ``/score`` records; and the write turns an
append honours (:mod:`service.engine.turns`).

A pass over several models reads their heads by one query and writes their log entries by one
transaction (one fsync for the events of every model).  :meth:`Appends.put_pending_at`
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
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

from service.engine.entries import encode
from service.errors import (
    InsufficientStorage,
    ModelNotFound,
    ServiceError,
    StaleVersion,
    TurnTaken,
)
from service.stores.base import CHUNK, Commit, chunks, no_model, pending_full
from service.stores.sqlite_file import translated

if TYPE_CHECKING:
    from service.stores.epoch import LossWatch
    from service.stores.sqlite import SQLiteLossWatch
    from service.stores.sqlite_file import Database


def marks(count: int, mark: str = "?") -> str:
    """``count`` parameter marks (or row values of them) for ``IN (...)``/``VALUES``."""
    return ",".join([mark] * count)


#: the condition an append's version update adds: no other process holds the model's turn
#: (parameters: the model id, this process, now)
NOT_TURNED = (
    "AND NOT EXISTS (SELECT 1 FROM turns WHERE turns.model_id = ? AND holder != ? AND until > ?)"
)
#: a model's head (parameter: its id)
HEAD = "SELECT version, incarnation FROM models WHERE id = ?"
#: the ``kind`` of a row of the ids table
SEEN, EXPIRED = 0, 1
#: the column of ``models`` counting the rows of ``ids`` of each kind
_COUNTS = {SEEN: "seen_ids", EXPIRED: "expired_ids"}


def _insert(db: sqlite3.Connection, statement: str, rows: list[tuple]) -> int:
    """The rows ``statement`` inserted; one row (one event per request) by a statement, not
    executemany's machinery."""
    return (
        db.execute(statement, rows[0]) if len(rows) == 1 else db.executemany(statement, rows)
    ).rowcount


def _remember_ids(
    db, model_id: str, kind: int, unique: Sequence[str], commit: Commit, counted: int | None
) -> None:
    """Remember ``unique`` (ids without repeats) until the commit's expiry, forget those past
    theirs and, beyond ``max_remembered_ids``, the oldest (lowest expiry, then id: Redis's
    sorted-set order).

    The number remembered is kept in the model's row (``seen_ids``, ``expired_ids``) so that
    the bound costs O(ids of the commit), not a count of every remembered id per commit, and
    the count dirties no page the commit's version update does not.  ``counted``: the count
    after the version's update added ``len(unique)`` to it (the learned ids' usual case: all
    new, three statements: the version, the ids, the expired ones), else None (the count is
    moved here).  The stored count is ``max(count + added - forgotten, 0)`` either way."""
    rows = [(model_id, kind, event_id, commit.id_expiry) for event_id in unique]
    added = _insert(db, "INSERT OR IGNORE INTO ids VALUES (?, ?, ?, ?)", rows)
    if added < len(unique):  # some were remembered already: their expiry moves on
        db.executemany(
            "UPDATE ids SET expiry = ? WHERE model_id = ? AND kind = ? AND event_id = ?",
            [(commit.id_expiry, model_id, kind, event_id) for event_id in unique],
        )
    forgotten = db.execute(
        "DELETE FROM ids WHERE model_id = ? AND kind = ? AND expiry <= ?",
        (model_id, kind, commit.now),
    ).rowcount
    column = _COUNTS[kind]
    # the update already made (if any) counted every id as added: what is left to move
    moved = added - forgotten - (len(unique) if counted is not None else 0)
    count = counted
    if count is None or moved:
        count = db.execute(
            f"UPDATE models SET {column} = max({column} + ?, 0) WHERE id = ? "  # noqa: S608
            f"RETURNING {column}",
            (moved, model_id),
        ).fetchall()[0][0]
    bound = commit.max_remembered_ids
    if bound and count > bound:
        db.execute(
            "DELETE FROM ids WHERE model_id = ? AND kind = ? AND event_id IN ("
            "SELECT event_id FROM ids WHERE model_id = ? AND kind = ? "
            "ORDER BY expiry, event_id LIMIT ?)",
            (model_id, kind, model_id, kind, count - bound),
        )
        db.execute(f"UPDATE models SET {column} = ? WHERE id = ?", (bound, model_id))  # noqa: S608


class Appends:
    """:class:`~service.stores.sqlite.SQLiteStore`'s appends, its calls over several models,
    its kept records and its write turns."""

    #: the store's (:class:`~service.stores.sqlite.SQLiteStore` sets them): its file,
    #: its lost-data checks, this process among the file's writers and the models whose write
    #: turn it took
    database: Database
    loss: SQLiteLossWatch
    watch: LossWatch
    writer: str
    _holding: set[str]

    @translated
    def commit(self, model_id: str, commit: Commit) -> int:
        """Write ``commit`` (:meth:`_prepared`) in the group commit of the threads writing
        now (:meth:`~service.stores.sqlite_file.Database.grouped`: one fsync for them all)."""
        self.database.grouped(self._prepared(model_id, commit))
        version = commit.expected_version + 1
        self.watch.saw(model_id, commit.incarnation, version)
        return version

    def _prepared(self, model_id: str, commit: Commit) -> Callable[[sqlite3.Connection], None]:
        """``write(db)``: ``commit`` written by a write transaction (see :meth:`commit`),
        its bytes encoded now, outside the write lock."""
        if commit.fence is not None:
            raise ValueError("writer leases (queue mode) exist on the Redis store only")
        self.loss.guard(model_id, verify=False)  # the write transaction verifies the file
        version = commit.expected_version + 1
        entry = encode(commit.entry)
        learned = list(dict.fromkeys(commit.learned_ids)) if commit.learned_ids else []

        def write(db: sqlite3.Connection) -> None:
            # the version check is the entry's append itself (one statement, not a read and
            # a write), and comes first: a stale or missing model appends no row and raises
            # before anything is written (commit_many needs no savepoint per model); so does
            # another process's write turn (checked by the same statement)
            appended = db.execute(
                "INSERT INTO log (model_id, version, previous, entry) "
                "SELECT id, ?, last_entry, ? FROM models "
                "WHERE id = ? AND version = ? AND incarnation = ? " + NOT_TURNED,
                (version, entry, model_id, commit.expected_version, commit.incarnation,
                 model_id, self.writer, time.time()),
            )  # fmt: skip
            if not appended.rowcount:
                self.refusal(db, model_id, commit)
            # the learned ids are counted as all new (the usual case) by the head's update;
            # _remember_ids moves the count by what it finds otherwise
            counted = db.execute(
                "UPDATE models SET version = ?, last_entry = ?, seen_ids = seen_ids + ? "
                "WHERE id = ? RETURNING seen_ids",
                (version, appended.lastrowid, len(learned), model_id),
            ).fetchall()
            self.turn_appended(db, model_id)
            if learned:
                _remember_ids(db, model_id, SEEN, learned, commit, counted[0][0])
            if commit.expired_ids:
                expired = list(dict.fromkeys(commit.expired_ids))
                _remember_ids(db, model_id, EXPIRED, expired, commit, None)
            if commit.remove_pending:
                consumed = db.executemany(
                    "DELETE FROM pending WHERE model_id = ? AND event_id = ?",
                    [(model_id, event_id) for event_id in commit.remove_pending],
                ).rowcount
                db.execute(
                    "UPDATE models SET pending = pending - ? WHERE id = ?", (consumed, model_id)
                )
            if commit.meta:
                db.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?, ?)",
                    [(model_id, name, value) for name, value in commit.meta.items()],
                )

        return write

    @translated
    def heads(self, model_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
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
        self, model_id: str, ids: Sequence[str], now: float
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
        rows = self.database.read(
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
    def seen_many(self, ids_of: Mapping[str, Sequence[str]], now: float) -> dict[str, set[str]]:
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
    def commit_many(self, commits: Sequence[tuple[str, Commit]]) -> list[int | Exception]:
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
    def put_pending(self, model_id, records, deadline, max_records=None, incarnation=None) -> None:
        self.loss.guard(model_id, verify=False)  # as every write: the transaction verifies
        if records:
            write = _pending_write(model_id, records, deadline, max_records, None, incarnation)
            self.database.grouped(write)

    @translated
    def put_pending_at(
        self,
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
    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
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
    def pending_deadlines(self) -> dict[str, float]:
        """Each model's earliest pending deadline (one query on the deadline index; the label
        sweep's schedule starts from it: service/engine/deadlines.py)."""
        rows = self.database.read("SELECT model_id, MIN(deadline) FROM pending GROUP BY model_id")
        return {model_id: float(deadline) for model_id, deadline in rows}

    @translated
    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        rows = self.database.read(
            "SELECT event_id FROM pending WHERE model_id = ? AND deadline <= ? "
            "ORDER BY deadline LIMIT ?",
            (model_id, now, limit),
        )
        return [row[0] for row in rows]

    # ------------------------------------------------------------------ write turns
    # (service.engine.turns) a row of ``turns`` per model until a time (unix s: the processes
    # of one file share a machine's clock); nothing durable: a row whose time passed is a turn
    # that lapsed, replaced by the next turn taken
    @translated
    def take_turn(self, model_id: str, seconds: float) -> bool:
        """Whether this process holds ``model_id``'s write turn for ``seconds`` now (taken, or
        its own renewed); False when another process holds it."""
        now = time.time()
        with self.database.write() as db:
            row = db.execute(
                "SELECT holder FROM turns WHERE model_id = ? AND until > ?", (model_id, now)
            ).fetchone()
            if row is not None and row[0] != self.writer:
                return False
            db.execute(
                "INSERT OR REPLACE INTO turns VALUES (?, ?, ?)",
                (model_id, self.writer, now + seconds),
            )
        self._holding.add(model_id)
        return True

    @translated
    def turn_taken(self, model_id: str) -> bool:
        """Whether another process holds ``model_id``'s write turn."""
        row = self.database.read(
            "SELECT holder FROM turns WHERE model_id = ? AND until > ?", (model_id, time.time())
        ).fetchone()
        return row is not None and row[0] != self.writer

    @translated
    def release_turn(self, model_id: str) -> None:
        """This process's turn of ``model_id`` ended without an append (its write failed)."""
        if model_id in self._holding:
            with self.database.write() as db:
                self.turn_appended(db, model_id)

    def refusal(self, db: sqlite3.Connection, model_id: str, commit: Commit) -> NoReturn:
        """Why an append's version update (with :data:`NOT_TURNED`) changed no row: no model,
        another process's turn at the expected version, or a stale version."""
        row = db.execute(HEAD, (model_id,)).fetchone()
        if row is None:
            raise no_model(model_id)
        if tuple(row) == (commit.expected_version, commit.incarnation):
            raise TurnTaken(model_id)
        raise StaleVersion(model_id)

    def turn_appended(self, db: sqlite3.Connection, model_id: str) -> None:
        """Inside an append's (or :meth:`release_turn`'s) transaction: this process's turn
        ends, if it took one (known here, so that an append without one reads nothing more)."""
        if model_id in self._holding:
            self._holding.discard(model_id)
            db.execute(
                "DELETE FROM turns WHERE model_id = ? AND holder = ?", (model_id, self.writer)
            )


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
        added = _insert(db, "INSERT OR IGNORE INTO pending VALUES (?, ?, ?, ?)", rows)
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
