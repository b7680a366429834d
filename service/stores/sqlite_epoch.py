"""Noticing an SQLite file that lost data (:mod:`service.stores.epoch` is the watch both stores
share): the epoch marker in table ``epoch_marker``, a copy of the last one accepted beside the
file (``aucstream.sqlite3.epoch``: what notices a restore between two runs) and the alarms in
``loss_alarms``.  Why the copy may lag the file and never run ahead, and the checks on a full
disk: docs/architecture.md, "Lost data" and "SQLite: a full disk, a replaced file"."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

from service.errors import StoreLostData
from service.stores.epoch import (
    ACKNOWLEDGE,
    STORE,
    LossWatch,
    Marker,
    model_scope,
    new_epoch,
)
from service.stores.sqlite_file import PRIVATE_FILE_MODE, Database, is_disk_full

logger = logging.getLogger("aucstream.store")

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
    """The checks of one process on one SQLite file (called by the store's methods)."""

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
