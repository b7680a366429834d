"""The SQLite store: state on this machine's disk, shared by every process that opens the file
(the default of ``aucstream serve``).  What it guarantees (atomic versioned commits by ``BEGIN
IMMEDIATE``, one read snapshot per load, ``synchronous`` and durability) and its tables:
docs/architecture.md, "Stores" and "SQLite tables"; its file and transactions:
:mod:`service.stores.sqlite_file`.  A request's commit is a log entry
(:mod:`service.engine.entries`); the state is written by :meth:`SQLiteStore.checkpoint`, off
the request path, which drops the entries it covers.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, NoReturn

import numpy as np
import orjson

from service.engine.entries import decode, encode
from service.errors import StaleVersion, TurnTaken
from service.stores.base import (
    Commit,
    StoredState,
    checkpoint_applies,
    chunks,
    creation_refused,
    no_model,
    writer_token,
)
from service.stores.fields import decode_fields, encode_fields
from service.stores.sqlite_epoch import SQLiteLossWatch
from service.stores.sqlite_file import CHAIN, MODEL_TABLES, Database, translated
from service.stores.sqlite_many import ManyModels, marks

#: the condition an append's version update adds: no other process holds the model's turn
#: (parameters: the model id, this process, now)
NOT_TURNED = (
    "AND NOT EXISTS (SELECT 1 FROM turns WHERE turns.model_id = ? AND holder != ? AND until > ?)"
)
#: the ``kind`` of a row of the ids table
_SEEN, _EXPIRED = 0, 1
#: the column of ``models`` counting the rows of ``ids`` of each kind
_COUNTS = {_SEEN: "seen_ids", _EXPIRED: "expired_ids"}


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
    if len(rows) == 1:  # one event per request: a statement, not executemany's machinery
        added = db.execute("INSERT OR IGNORE INTO ids VALUES (?, ?, ?, ?)", rows[0]).rowcount
    else:
        added = db.executemany("INSERT OR IGNORE INTO ids VALUES (?, ?, ?, ?)", rows).rowcount
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


def _drop_entries(db: sqlite3.Connection, model_id: str, up_to: int = 2**63 - 1) -> None:
    """Delete the model's log entries up to version ``up_to`` (by default all of them)."""
    db.execute(
        CHAIN + "DELETE FROM log WHERE seq IN (SELECT seq FROM chain WHERE version <= ?3)",
        (model_id, 0, up_to),
    )


class SQLiteStore(ManyModels):
    name = "sqlite"
    #: disk I/O (a commit waits for fsync): the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, database: Database) -> None:
        self.database = database
        #: the epoch marker's checks: a file replaced by an older copy answers 503
        self.loss = SQLiteLossWatch(database)
        self.watch = self.loss.watch
        #: this process among the writers of the file, and the models whose write turn it
        #: took (below)
        self.writer = writer_token()
        self._holding: set[str] = set()

    @classmethod
    def open(
        cls, data_dir: str | Path, synchronous: Literal["full", "normal"] = "full"
    ) -> SQLiteStore:
        """The store in ``data_dir`` (created if needed); :class:`~.sqlite_file.StoreOpenError`
        naming the path and the reason when it cannot be used."""
        return cls(Database.open(data_dir, synchronous))

    @property
    def path(self) -> Path:
        return self.database.path

    @property
    def synchronous(self) -> str:
        return self.database.synchronous

    @translated
    def ping(self) -> None:
        self.database.connection().execute("SELECT 1 FROM models LIMIT 1").fetchall()
        self.loss.check(force=True)
        self.watch.guard_any()

    @translated
    def alarms(self) -> dict[str, str]:
        """The losses of data noticed and not yet acknowledged (``store``, ``model:<id>``)."""
        self.loss.check(force=True)
        return dict(self.watch.alarms)

    @translated
    def acknowledge_loss(self) -> dict[str, str]:
        """An operator knows what was lost: clear the alarms, start a new epoch."""
        return self.loss.acknowledge()

    def close(self) -> None:
        self.database.close()

    # ------------------------------------------------------------------ models
    @translated
    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        self.loss.guard()
        fields, layouts = encode_fields(arrays)
        with self.database.write() as db:
            row = db.execute("SELECT incarnation FROM models WHERE id = ?", (model_id,)).fetchone()
            refused = creation_refused(model_id, None if row is None else row[0], replace, replaces)
            if refused is not None:
                raise refused
            if row is not None:
                self._delete_rows(db, model_id)
            db.execute(
                "INSERT INTO models (id, version, incarnation, saved) VALUES (?, 1, ?, 1)",
                (model_id, incarnation),
            )
            db.execute(
                "INSERT INTO configs VALUES (?, ?)", (model_id, orjson.dumps(config).decode())
            )
            db.execute("INSERT INTO meta VALUES (?, 'incarnation', ?)", (model_id, incarnation))
            self._write_fields(db, model_id, fields, layouts)
        self.watch.saw(model_id, incarnation, 1)
        return 1

    @staticmethod
    def _delete_rows(db: sqlite3.Connection, model_id: str) -> int:
        _drop_entries(db, model_id)
        for table in MODEL_TABLES:
            db.execute(f"DELETE FROM {table} WHERE model_id = ?", (model_id,))  # noqa: S608
        return db.execute("DELETE FROM models WHERE id = ?", (model_id,)).rowcount

    @staticmethod
    def _write_fields(
        db: sqlite3.Connection, model_id: str, fields: dict[str, bytes], layouts: dict[str, str]
    ) -> None:
        """The state rows of ``model_id``, replacing the ones stored."""
        db.execute("DELETE FROM state WHERE model_id = ?", (model_id,))
        db.execute("DELETE FROM layouts WHERE model_id = ?", (model_id,))
        db.executemany(
            "INSERT OR REPLACE INTO state VALUES (?, ?, ?)",
            [(model_id, name, data) for name, data in fields.items()],
        )
        db.executemany(
            "INSERT OR REPLACE INTO layouts VALUES (?, ?, ?)",
            [(model_id, name, layout) for name, layout in layouts.items()],
        )

    @translated
    def list_models(self) -> list[str]:
        self.loss.check(force=True)
        self.watch.guard()
        rows = self.database.connection().execute("SELECT id FROM models ORDER BY id").fetchall()
        return [row[0] for row in rows]

    @translated
    def delete_model(self, model_id: str) -> None:
        self.loss.guard(model_id)
        self.watch.forget(model_id)
        with self.database.write() as db:
            deleted = self._delete_rows(db, model_id)
        if not deleted:
            raise no_model(model_id)

    @translated
    def load(self, model_id, known_version=None, known_incarnation=None) -> StoredState:
        """The model's checkpoint and the log entries after it, from one read snapshot; only
        its version and incarnation when they are the caller's (its cached copy is current);
        only the entries after the caller's version when its copy is behind."""
        self.loss.guard(model_id)
        before = self.watch.seen(model_id)  # what the reads below are checked against
        if known_version is not None:
            # the common case, a cached copy that is current: one statement (its own read
            # snapshot), not a read transaction of three
            row = (
                self.database.connection()
                .execute("SELECT version, incarnation FROM models WHERE id = ?", (model_id,))
                .fetchone()
            )
            if row is not None and tuple(row) == (known_version, known_incarnation):
                self.loss.saw(model_id, known_incarnation, known_version, before)
                return StoredState(known_version, known_incarnation)
        tail = None
        with self.database.snapshot() as db:
            row = db.execute(
                "SELECT version, incarnation, saved FROM models WHERE id = ?", (model_id,)
            ).fetchone()
            current = row is not None and tuple(row[:2]) == (known_version, known_incarnation)
            if row is not None and not current:
                meta = dict(
                    db.execute("SELECT name, value FROM meta WHERE model_id = ?", (model_id,))
                )
                version, incarnation, saved = row
                behind = known_version is not None and saved <= known_version < version
                if behind and incarnation == known_incarnation:  # the cache catches up
                    tail = self._entries(db, model_id, known_version)
                else:
                    config = db.execute(
                        "SELECT config FROM configs WHERE model_id = ?", (model_id,)
                    ).fetchone()
                    raw = dict(
                        db.execute("SELECT field, data FROM state WHERE model_id = ?", (model_id,))
                    )
                    layouts = dict(
                        db.execute(
                            "SELECT name, layout FROM layouts WHERE model_id = ?", (model_id,)
                        )
                    )
                    entries = self._entries(db, model_id, saved)
        # the checks of lost data write (an alarm): after the read snapshot
        if row is None:
            self.loss.missing(model_id)
            raise no_model(model_id)
        version, incarnation, saved = row
        self.loss.saw(model_id, incarnation, version, before)
        if current:
            return StoredState(version, incarnation)
        if tail is not None:
            return StoredState(version, incarnation, meta=meta, entries=tail)
        arrays = decode_fields(raw, layouts)
        return StoredState(
            version, incarnation, orjson.loads(config[0]), arrays, meta, saved, entries
        )

    @staticmethod
    def _entries(db: sqlite3.Connection, model_id: str, after: int) -> list:
        rows = db.execute(
            CHAIN + "SELECT log.version, log.entry FROM chain JOIN log ON log.seq = chain.seq "
            "ORDER BY log.version",
            (model_id, after),
        )
        return [(version, decode(entry)) for version, entry in rows]

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
                _remember_ids(db, model_id, _SEEN, learned, commit, counted[0][0])
            if commit.expired_ids:
                expired = list(dict.fromkeys(commit.expired_ids))
                _remember_ids(db, model_id, _EXPIRED, expired, commit, None)
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
    def checkpoint(self, model_id, incarnation, version, arrays) -> bool:
        """The state rows of ``model_id`` at ``version``, and its log entries up to it
        dropped (see ``Store.checkpoint``)."""
        self.loss.guard(model_id)
        fields, layouts = encode_fields(arrays)  # outside the write lock
        with self.database.write() as db:
            row = db.execute(
                "SELECT version, incarnation, saved FROM models WHERE id = ?", (model_id,)
            ).fetchone()
            if not checkpoint_applies(row, incarnation, version):
                return False
            _drop_entries(db, model_id, up_to=version)
            db.execute("UPDATE models SET saved = ? WHERE id = ?", (version, model_id))
            self._write_fields(db, model_id, fields, layouts)
        return True

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
        row = (
            self.database.connection()
            .execute(
                "SELECT holder FROM turns WHERE model_id = ? AND until > ?",
                (model_id, time.time()),
            )
            .fetchone()
        )
        return row is not None and row[0] != self.writer

    @translated
    def release_turn(self, model_id: str) -> None:
        """This process's turn of ``model_id`` ended without an append (its write failed)."""
        if model_id not in self._holding:
            return
        self._holding.discard(model_id)
        with self.database.write() as db:
            db.execute(
                "DELETE FROM turns WHERE model_id = ? AND holder = ?", (model_id, self.writer)
            )

    def refusal(self, db: sqlite3.Connection, model_id: str, commit: Commit) -> NoReturn:
        """Why an append's version update (with :data:`NOT_TURNED`) changed no row: no model,
        another process's turn at the expected version, or a stale version."""
        row = db.execute(
            "SELECT version, incarnation FROM models WHERE id = ?", (model_id,)
        ).fetchone()
        if row is None:
            raise no_model(model_id)
        if tuple(row) == (commit.expected_version, commit.incarnation):
            raise TurnTaken(model_id)
        raise StaleVersion(model_id)

    def turn_appended(self, db: sqlite3.Connection, model_id: str) -> None:
        """Inside an append's transaction: the append ends this process's turn, if it took
        one (known here, so that an append without one reads nothing more)."""
        if model_id in self._holding:
            self._holding.discard(model_id)
            db.execute(
                "DELETE FROM turns WHERE model_id = ? AND holder = ?", (model_id, self.writer)
            )

    # ------------------------------------------------------------------ ids
    def _alive(self, model_id: str, kind: int, ids: Sequence[str], now: float) -> np.ndarray:
        db = self.database.connection()
        alive: set[str] = set()
        for part in chunks(ids):
            # '+expiry': a lookup by key per id; without the '+', SQLite may pick the expiry
            # index and scan every remembered id of the model (24 ms at 40,000 ids)
            alive.update(
                row[0]
                for row in db.execute(
                    "SELECT event_id FROM ids WHERE model_id = ? AND kind = ? AND +expiry > ? "
                    f"AND event_id IN ({marks(len(part))})",  # noqa: S608 - only '?' marks
                    (model_id, kind, now, *part),
                )
            )
        return np.array([event_id in alive for event_id in ids], dtype=bool)

    @translated
    def head_now(self, model_id: str) -> tuple[int, str] | None:
        """``(version, incarnation)`` of the model, read only when the read is all there is
        to do (the event loop's read, which must not write, sync or wait for a lock): None
        while the lost-data check is due (it writes the epoch marker and syncs its copy) or
        would raise an alarm, and when the model does not exist; the caller then goes the
        way of :meth:`load` in a thread."""
        watch = self.loss.watch
        if watch.due():
            return None
        self.database.verify_file()
        watch.guard(model_id)
        before = watch.seen(model_id)
        row = (
            self.database.connection()
            .execute("SELECT version, incarnation FROM models WHERE id = ?", (model_id,))
            .fetchone()
        )
        if row is None or watch.saw(model_id, row[1], row[0], record=False, before=before):
            return None
        return row[0], row[1]

    @translated
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, _SEEN, ids, now)

    @translated
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, _EXPIRED, ids, now)
