"""The SQLite store: state on this machine's disk, shared by every process that opens the file
(the default of ``aucstream serve``).  What it guarantees (atomic versioned commits by ``BEGIN
IMMEDIATE``, one read snapshot per load, ``synchronous`` and durability) and its tables:
docs/architecture.md, "Stores" and "SQLite tables"; its file and transactions:
:mod:`service.stores.sqlite_file`.  A request's commit is a log entry
(:mod:`service.stores.sqlite_appends`, with a pass's commits, the kept records and the write
turns); the state is written by :meth:`SQLiteStore.checkpoint`, off the request path, which
drops the entries it covers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from service.engine.entries import decode
from service.stores.base import (
    StoredState,
    checkpoint_applies,
    chunks,
    creation_refused,
    no_model,
    writer_token,
)
from service.stores.fields import decode_fields, encode_fields
from service.stores.sqlite_appends import EXPIRED, SEEN, Appends, marks
from service.stores.sqlite_epoch import SQLiteLossWatch
from service.stores.sqlite_file import CHAIN, MODEL_TABLES, Database, translated


def _drop_entries(db: sqlite3.Connection, model_id: str, up_to: int = 2**63 - 1) -> None:
    """Delete the model's log entries up to version ``up_to`` (by default all of them)."""
    db.execute(
        CHAIN + "DELETE FROM log WHERE seq IN (SELECT seq FROM chain WHERE version <= ?3)",
        (model_id, 0, up_to),
    )


class SQLiteStore(Appends):
    name = "sqlite"
    #: disk I/O (a commit waits for fsync): the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, database: Database) -> None:
        self.database = database
        #: the epoch marker's checks: a file replaced by an older copy answers 503
        self.loss = SQLiteLossWatch(database)
        self.watch = self.loss.watch
        #: this process among the writers of the file, and the models whose write turn it
        #: took (:class:`~.sqlite_appends.Appends`)
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
        return self._alive(model_id, SEEN, ids, now)

    @translated
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, EXPIRED, ids, now)
