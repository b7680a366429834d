"""The write turns of the SQLite store's processes (:mod:`service.engine.turns`): a row of
``turns`` per model whose turn a process holds, until a time (unix seconds: the processes of
one SQLite file share a machine, so its clock).  The table holds nothing durable: a row whose
time passed is a turn that lapsed, and the row is replaced by the next turn taken."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, NoReturn

from service.errors import StaleVersion, TurnTaken
from service.stores.base import Commit, no_model
from service.stores.sqlite_file import translated

#: the condition an append's version update adds: no other process holds the model's turn
#: (parameters: the model id, this process, now)
NOT_TURNED = (
    "AND NOT EXISTS (SELECT 1 FROM turns WHERE turns.model_id = ? AND holder != ? AND until > ?)"
)

if TYPE_CHECKING:
    from service.stores.sqlite import SQLiteStore


class Turns:
    """The turn methods of :class:`~service.stores.sqlite.SQLiteStore`."""

    #: this process among the writers of the file, and the models whose turn it took (set
    #: by the store)
    writer: str
    _holding: set[str]

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
        self._holding.add(model_id)
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
