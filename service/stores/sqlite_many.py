"""The SQLite store's calls over several models at once, for a pass of the coalescer
(:meth:`service.engine.coalesce.Coalescer.apply_pass`): the models' heads read by one query,
and their log entries written by one transaction (one fsync for the events of every model)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from service.errors import ModelNotFound, ServiceError, StaleVersion
from service.stores.base import Commit
from service.stores.sqlite_file import translated

if TYPE_CHECKING:
    from service.stores.sqlite import SQLiteStore

#: model ids per ``IN (...)`` query (well under SQLite's limit of bound parameters)
_CHUNK = 500


class ManyModels:
    """:class:`~service.stores.sqlite.SQLiteStore`'s calls over several models."""

    @translated
    def heads(self: SQLiteStore, model_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``(version, incarnation)`` of each of ``model_ids`` that exists, read by one query
        per 500 ids instead of one per model: a cached model at its head needs no other read
        (``ModelRepository.load``)."""
        self.loss.guard()
        heads: dict[str, tuple[int, str]] = {}
        db = self.database.connection()
        for start in range(0, len(model_ids), _CHUNK):
            part = list(model_ids[start : start + _CHUNK])
            marks = ",".join("?" * len(part))
            for model_id, version, incarnation in db.execute(
                f"SELECT id, version, incarnation FROM models WHERE id IN ({marks})",  # noqa: S608
                part,
            ):
                self.loss.saw(model_id, incarnation, version)
                heads[model_id] = (version, incarnation)
        return heads

    @translated
    def commit_many(
        self: SQLiteStore, commits: Sequence[tuple[str, Commit]]
    ) -> list[int | Exception]:
        """The log entries of several models (``Commit.entry`` set, at most one per model) in
        one transaction and one fsync, each in a savepoint: one that fails (stale, the model
        gone, its data lost) is undone alone and is its outcome, the others are written; a
        failure of the transaction itself raises (then nothing is written)."""
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
            for k, write in enumerate(writes):
                if write is None:
                    continue
                db.execute("SAVEPOINT model")
                try:
                    write(db)
                except (StaleVersion, ModelNotFound) as error:
                    db.execute("ROLLBACK TO model")
                    outcomes[k] = error
                db.execute("RELEASE model")

        alone = writes[0] if len(writes) == 1 else None
        if alone is not None:  # one model (a pass of one): its failure undoes its own write
            try:
                self.database.grouped(alone)
            except (StaleVersion, ModelNotFound) as error:
                outcomes[0] = error
        elif any(write is not None for write in writes):
            self.database.grouped(write_all)
        for (model_id, commit), outcome in zip(commits, outcomes, strict=True):
            if not isinstance(outcome, Exception):
                self.watch.saw(model_id, commit.incarnation, outcome)
        return outcomes
