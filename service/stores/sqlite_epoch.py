"""Noticing an SQLite file that lost data (:mod:`service.stores.epoch` for the Redis store's
version of it): the file holds an epoch marker (table ``epoch_marker``: a random id and the
clock, in ms, of the last check), and the data directory a copy of the last one a process
accepted, ``aucstream.sqlite3.epoch``.  A database file replaced by an older copy (a backup
restored) or by another file, while the service ran or between two runs, shows a marker that
is missing, of another epoch or older than the copy: an alarm (table ``loss_alarms``) makes
the store answer 503 until an operator acknowledges it."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from service.stores.epoch import STORE, LossWatch, Marker, model_scope, new_epoch
from service.stores.sqlite_file import PRIVATE_FILE_MODE

TABLES = (
    "CREATE TABLE IF NOT EXISTS epoch_marker (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "epoch TEXT NOT NULL, clock INTEGER NOT NULL, acknowledged INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS loss_alarms (scope TEXT PRIMARY KEY, cause TEXT NOT NULL)",
)
#: the marker's name in causes and in the copy
MARKER = "epoch_marker"


class SQLiteLossWatch:
    """The checks of one process on one SQLite file (called by the store's methods)."""

    def __init__(
        self,
        database_path: Path,
        write: Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]],
    ) -> None:
        self.watch = LossWatch("SQLite")
        self.write = write  # the store's write transaction (context manager)
        self.copy = Path(f"{database_path}.epoch")
        self._checking = threading.Lock()
        try:  # what the last process accepted: a file restored since is noticed at start
            saved = json.loads(self.copy.read_text())
            self.watch.known[MARKER] = Marker(saved["epoch"], saved["clock"], saved["clock"])
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def _tick(self, db: sqlite3.Connection, acknowledge: bool = False) -> Marker:
        for statement in TABLES:
            db.execute(statement)
        now = int(time.time() * 1000)
        row = db.execute("SELECT epoch, clock, acknowledged FROM epoch_marker").fetchone()
        if row is None or acknowledge:
            clock = max(now, row[1] if row else 0)
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
        marker = self.watch.known.get(MARKER)
        if marker is None:
            return
        temporary = self.copy.with_suffix(".epoch.tmp")
        # private as the database beside it (sqlite_file.PRIVATE_FILE_MODE), whatever the umask
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
        with os.fdopen(descriptor, "w") as file:
            os.fchmod(file.fileno(), PRIVATE_FILE_MODE)
            file.write(json.dumps({"epoch": marker.epoch, "clock": marker.clock}))
        os.replace(temporary, self.copy)

    def check(self, force: bool = False) -> None:
        if not (force or self.watch.due()):
            return
        if not self._checking.acquire(blocking=force):
            return
        try:
            with self.write() as db:
                cause = self.watch.judge({MARKER: self._tick(db)})
                if cause:
                    db.execute("INSERT OR IGNORE INTO loss_alarms VALUES (?, ?)", (STORE, cause))
                alarms = dict(db.execute("SELECT scope, cause FROM loss_alarms"))
            self.watch.raise_alarms(alarms)
            if not alarms:
                self._save()
        finally:
            self._checking.release()

    def guard(self, model_id: str | None = None) -> None:
        self.check()
        self.watch.guard(model_id)

    def saw(self, model_id: str, incarnation: str, version: int) -> None:
        cause = self.watch.saw(model_id, incarnation, version)
        if cause is not None:
            with self.write() as db:
                for statement in TABLES:
                    db.execute(statement)
                db.execute(
                    "INSERT OR IGNORE INTO loss_alarms VALUES (?, ?)",
                    (model_scope(model_id), cause),
                )
            self.check(force=True)
            self.watch.guard(model_id)

    def missing(self, model_id: str) -> None:
        """A model this process may have known is missing: a loss raises, a deletion forgets."""
        self.check(force=True)
        self.watch.guard(model_id)
        self.watch.forget(model_id)

    def alarms(self) -> dict[str, str]:
        self.check(force=True)
        return dict(self.watch.alarms)

    def acknowledge(self) -> dict[str, str]:
        self.check(force=True)
        with self._checking:
            acknowledged = dict(self.watch.alarms)
            with self.write() as db:
                marker = self._tick(db, acknowledge=True)
                db.execute("DELETE FROM loss_alarms")
            self.watch.acknowledged({MARKER: marker})
            self._save()
        return acknowledged
