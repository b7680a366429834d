"""The write turns of the SQLite store's processes (:mod:`service.engine.turns`): a row of
``turns`` per model whose turn a process holds, until a time (unix seconds: the processes of
one SQLite file share a machine, so its clock).  The table holds nothing durable: a row whose
time passed is a turn that lapsed, and the row is replaced by the next turn taken."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from service.errors import TurnTaken
from service.stores.sqlite_file import translated

if TYPE_CHECKING:
    from service.stores.sqlite import SQLiteStore


class Turns:
    """The turn methods of :class:`~service.stores.sqlite.SQLiteStore`."""

    #: this process among the writers of the file (set by the store)
    writer: str

    @translated
    def take_turn(self: SQLiteStore, model_id: str, seconds: float) -> bool:
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
            return True

    @translated
    def turn_taken(self: SQLiteStore, model_id: str) -> bool:
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
    def release_turn(self: SQLiteStore, model_id: str) -> None:
        """This process's turn of ``model_id`` ended without an append (its write failed)."""
        with self.database.write() as db:
            db.execute(
                "DELETE FROM turns WHERE model_id = ? AND holder = ?", (model_id, self.writer)
            )

    def check_turn(self, db: sqlite3.Connection, model_id: str) -> bool:
        """Inside an append's transaction, before it writes: :class:`TurnTaken` when another
        process holds the model's turn; whether this one does (its append ends it)."""
        row = db.execute(
            "SELECT holder FROM turns WHERE model_id = ? AND until > ?", (model_id, time.time())
        ).fetchone()
        if row is not None and row[0] != self.writer:
            raise TurnTaken(model_id)
        return row is not None
