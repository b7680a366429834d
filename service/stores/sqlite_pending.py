"""The SQLite store's writes of kept ``/score`` records (the ``pending`` table), with the
other threads' writes in one group commit (:meth:`~service.stores.sqlite_file.Database.grouped`:
one fsync for them all).

:meth:`KeptRecords.put_pending_at` keeps the records of scores given by a cached model
without a read of the model's head before: the write's own update of the model's row reads
it, and writes nothing when it moved (the coalescer then scores again the usual way:
:meth:`service.engine.coalesce.Coalescer._score_kept`).  A kept ``/score`` from one sender pays
the durable commit and no read besides."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from service.errors import InsufficientStorage, StaleVersion
from service.stores.base import no_model, pending_full
from service.stores.sqlite_file import translated

if TYPE_CHECKING:
    from service.stores.sqlite import SQLiteStore


class KeptRecords:
    """:class:`~service.stores.sqlite.SQLiteStore`'s writes of kept records."""

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
