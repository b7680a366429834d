"""The SQLite store: state on this machine's disk, shared by every process that opens the file
(the default of ``aucstream serve``).  What it guarantees (atomic versioned commits by ``BEGIN
IMMEDIATE``, one read snapshot per load, ``synchronous`` and durability) and its tables:
docs/architecture.md, "Stores" and "SQLite tables"; its file and transactions:
:mod:`service.stores.sqlite_file`.  A request's commit is a log entry
(:mod:`service.stores.sqlite_appends`, with a pass's commits, the kept records and the write
turns); the state is written by :meth:`SQLiteStore.checkpoint`, off the request path, which
drops the entries it covers.  :class:`SQLiteLossWatch` notices a file that lost data.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from service.engine.entries import decode
from service.errors import StoreLostData
from service.stores.base import (
    StoredState,
    checkpoint_applies,
    chunks,
    creation_refused,
    no_model,
    writer_token,
)
from service.stores.epoch import ACKNOWLEDGE, STORE, LossWatch, Marker, model_scope, new_epoch
from service.stores.fields import decode_fields, encode_fields
from service.stores.sqlite_appends import EXPIRED, HEAD, SEEN, Appends, marks
from service.stores.sqlite_file import (
    CHAIN,
    MODEL_TABLES,
    PRIVATE_FILE_MODE,
    Database,
    is_disk_full,
    translated,
)

logger = logging.getLogger("aucstream.store")


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
        self.database.read("SELECT 1 FROM models LIMIT 1").fetchall()
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
        rows = self.database.read("SELECT id FROM models ORDER BY id").fetchall()
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
            # the common case, a cached copy that is current: one statement, not a read
            # transaction of three
            row = self.database.read(HEAD, (model_id,)).fetchone()
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
        row = self.database.read(HEAD, (model_id,)).fetchone()
        if row is None or watch.saw(model_id, row[1], row[0], record=False, before=before):
            return None
        return row[0], row[1]

    @translated
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, SEEN, ids, now)

    @translated
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, EXPIRED, ids, now)


#: the marker's name (tables ``epoch_marker`` and ``loss_alarms``:
#: :data:`~service.stores.sqlite_file.SCHEMA`) in causes and in the copy
MARKER = "epoch_marker"


def _sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class SQLiteLossWatch:
    """The checks of one process on one SQLite file (called by the store's methods) that it
    lost data (:mod:`service.stores.epoch` is the watch both stores share): the epoch marker
    in table ``epoch_marker``, a copy of the last one accepted beside the file
    (``aucstream.sqlite3.epoch``: what notices a restore between two runs) and the alarms in
    ``loss_alarms``.  Why the copy may lag the file and never run ahead, and the checks on a
    full disk: docs/architecture.md, "Lost data" and "SQLite: a full disk, a replaced file"."""

    def __init__(self, database: Database) -> None:
        self.watch = LossWatch("SQLite")
        self.database = database
        self.copy = Path(f"{database.path}.epoch")
        self._checking = threading.Lock()
        try:  # what the last process accepted: a file restored since is noticed at start
            saved = json.loads(self.copy.read_text())
            self.watch.known[MARKER] = Marker(saved["epoch"], saved["clock"], saved["clock"])
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def _tick(self, db: sqlite3.Connection, acknowledge: bool = False) -> Marker:
        now = int(time.time() * 1000)
        row = db.execute("SELECT epoch, clock, acknowledged FROM epoch_marker").fetchone()
        if row is None or acknowledge:
            # never before a clock this process saw (a wall clock set back): the other
            # processes adopt an acknowledged epoch only if it is not older than what they saw
            seen = self.watch.known.get(MARKER)
            clock = max(now, row[1] if row else 0, seen.clock if seen else 0)
            epoch = new_epoch()
            db.execute(
                "INSERT OR REPLACE INTO epoch_marker VALUES (1, ?, ?, ?)",
                (epoch, clock, int(acknowledge)),
            )
            return Marker(epoch, clock, clock, created=row is None, acknowledged=acknowledge)
        epoch, clock, acknowledged = row
        after = max(now, clock)
        db.execute("UPDATE epoch_marker SET clock = ?", (after,))
        return Marker(epoch, clock, after, acknowledged=bool(acknowledged))

    def _save(self) -> None:
        """Copy the marker accepted beside the database, durably (synced, renamed into place,
        the rename synced); a copy that cannot be written (a full disk) is logged and left as
        it was: it may lag behind the database, which costs nothing acknowledged."""
        marker = self.watch.known.get(MARKER)
        if marker is None:
            return
        # one temporary file per process: two workers saving at once must not share one
        temporary = self.copy.with_name(f"{self.copy.name}.{os.getpid()}.tmp")
        try:
            # private as the database beside it (PRIVATE_FILE_MODE), whatever the umask
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            with os.fdopen(os.open(temporary, flags, PRIVATE_FILE_MODE), "w") as file:
                os.fchmod(file.fileno(), PRIVATE_FILE_MODE)
                file.write(json.dumps({"epoch": marker.epoch, "clock": marker.clock}))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.copy)
            _sync_directory(self.copy.parent)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink()
            full = " (disk full)" if error.errno == errno.ENOSPC else ""
            logger.warning("cannot save the epoch marker's copy %s%s: %s", self.copy, full, error)

    def check(self, force: bool = False) -> None:
        if not (force or self.watch.due()):
            return
        if not self._checking.acquire(blocking=force):
            return
        try:
            self.database.verify_file()  # also when the disk is full and nothing is written
            try:
                with self.database.write() as db:
                    judgement = self.watch.judge({MARKER: self._tick(db)})
                    if judgement.cause:
                        db.execute(
                            "INSERT OR IGNORE INTO loss_alarms VALUES (?, ?)",
                            (STORE, judgement.cause),
                        )
                    alarms = dict(db.execute("SELECT scope, cause FROM loss_alarms"))
            except sqlite3.Error as error:
                if not is_disk_full(error):
                    raise
                alarms = self._check_without_writing()
            else:  # committed: the marker's new clock is the store's
                self.watch.accept(judgement)
                if not alarms:
                    self._save()
            self.watch.raise_alarms(alarms)
        finally:
            self._checking.release()

    def _check_without_writing(self) -> dict[str, str]:
        """The disk is full: the marker is judged as it stands (its clock not moved) and the
        alarms read.  A loss found is raised in this process only; not accepting its marker,
        the next check that can write finds it again and writes the alarm."""
        with self.database.snapshot() as db:
            row = db.execute("SELECT epoch, clock, acknowledged FROM epoch_marker").fetchone()
            alarms = dict(db.execute("SELECT scope, cause FROM loss_alarms"))
        if row is None:
            if MARKER not in self.watch.known:
                return alarms  # a new file: its first check that can write makes the marker
            marker = Marker("", 0, 0, created=True)
        else:
            epoch, clock, acknowledged = row
            marker = Marker(epoch, clock, clock, acknowledged=bool(acknowledged))
        judgement = self.watch.judge({MARKER: marker})
        if judgement.cause:
            alarms.setdefault(STORE, judgement.cause)
        else:
            self.watch.accept(judgement)  # the clock as stored: nothing is ahead of the file
        return alarms

    def guard(self, model_id: str | None = None, *, verify: bool = True) -> None:
        """Refuse a call on a replaced file or a store (model) with an alarm.  ``verify=False``
        for a write, whose transaction verifies the file under the write lock
        (:meth:`~service.stores.sqlite_file.Database.write`): one ``stat`` per commit, not
        two."""
        if verify:
            self.database.verify_file()
        self.check()
        self.watch.guard(model_id)

    def saw(
        self, model_id: str, incarnation: str, version: int, before: tuple[str, int] | None
    ) -> None:
        """A read found ``version``: checked against ``before``, what this process had seen
        when the read began (``watch.seen``), and remembered; a loss writes its alarm."""
        cause = self.watch.saw(model_id, incarnation, version, before=before)
        if cause is not None:
            try:
                with self.database.write() as db:
                    db.execute(
                        "INSERT OR IGNORE INTO loss_alarms VALUES (?, ?)",
                        (model_scope(model_id), cause),
                    )
            except sqlite3.Error as error:
                if not is_disk_full(error):
                    raise
                # the version seen stays the higher one: a later read finds it again
                raise StoreLostData(cause + ACKNOWLEDGE, headers={"Retry-After": "60"}) from None
            self.check(force=True)
            self.watch.guard(model_id)

    def missing(self, model_id: str) -> None:
        """A model this process may have known is missing: a loss raises, a deletion forgets."""
        self.check(force=True)
        self.watch.guard(model_id)
        self.watch.forget(model_id)

    def acknowledge(self) -> dict[str, str]:
        self.check(force=True)
        with self._checking:
            acknowledged = dict(self.watch.alarms)
            with self.database.write() as db:
                marker = self._tick(db, acknowledge=True)
                db.execute("DELETE FROM loss_alarms")
            self.watch.acknowledged({MARKER: marker})
            self._save()
        return acknowledged
