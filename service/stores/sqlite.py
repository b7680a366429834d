"""The SQLite store: state on this machine's disk, shared by every process that opens the file.

The default store of ``aucstream serve``: models survive a restart and several uvicorn workers
on one machine share them without a Redis.  One file, ``<data dir>/aucstream.sqlite3``
(``AUCSTREAM_DATA_DIR``), in WAL mode, written with Python's own :mod:`sqlite3`; its tables,
connections and transactions are :mod:`service.stores.sqlite_file`.

Atomicity and concurrency: every write is one ``BEGIN IMMEDIATE`` transaction, which holds the
database's write lock from before its first read, so the version check of
:meth:`SQLiteStore.commit` and the writes it guards are one atomic step across threads and
processes.  A commit whose expected version or incarnation is not current raises
:class:`~service.errors.StaleVersion` and writes nothing -- as the Redis store's ``WATCH`` /
``EXEC`` -- so the engine reloads and retries; a process whose cache is current learns it from
the version alone.  :meth:`SQLiteStore.load` reads one snapshot.  As in Redis, a commit writes
only the 1 KiB chunks that changed since the version it builds on, when this process knows
them (it loaded or wrote that version of a model it caches: :mod:`service.stores.fields`).

Durability: ``synchronous=FULL`` (the default, ``AUCSTREAM_SQLITE_SYNCHRONOUS``) syncs the
WAL to the disk before a commit returns, so an acknowledged write survives ``kill -9``, an OS
crash and a power cut.  ``normal`` syncs only at checkpoints: a write is in the WAL file (the
OS page cache) before it is acknowledged, so it survives ``kill -9`` of the server, but the
last writes may be lost if the machine loses power.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from service.errors import (
    InsufficientStorage,
    ModelChanged,
    ModelExists,
    ModelNotFound,
    StaleVersion,
)
from service.stores.base import Commit, StoredState, pending_full
from service.stores.fields import (
    DEFAULT_KNOWN_MODELS,
    Encoded,
    KnownStates,
    decode_fields,
    encode_changes,
)
from service.stores.sqlite_epoch import SQLiteLossWatch
from service.stores.sqlite_file import (
    MODEL_TABLES,
    Database,
    StoreOpenError,
    translated,
)

__all__ = ["SQLiteStore", "StoreOpenError"]

#: ids per ``IN (...)`` query (well under SQLite's limit of bound parameters)
_CHUNK = 500
#: the ``kind`` of a row of the ids table
_SEEN, _EXPIRED = 0, 1


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield list(ids[start : start + _CHUNK])


def _marks(count: int) -> str:
    return ",".join("?" * count)


def _remember_ids(db, model_id: str, kind: int, ids: Sequence[str], commit: Commit) -> None:
    """Remember ``ids`` until the commit's expiry, forget those past theirs and, beyond
    ``max_remembered_ids``, the oldest (lowest expiry, then id: Redis's sorted-set order).

    The number remembered is kept in ``id_counts`` so that the bound costs O(ids of the
    commit), not a count of every remembered id per commit."""
    unique = list(dict.fromkeys(ids))
    known = sum(
        db.execute(
            "SELECT COUNT(*) FROM ids WHERE model_id = ? AND kind = ? "
            f"AND event_id IN ({_marks(len(part))})",  # noqa: S608 - only '?' marks
            (model_id, kind, *part),
        ).fetchone()[0]
        for part in _chunks(unique)
    )
    db.executemany(
        "INSERT OR REPLACE INTO ids VALUES (?, ?, ?, ?)",
        [(model_id, kind, event_id, commit.id_expiry) for event_id in unique],
    )
    forgotten = db.execute(
        "DELETE FROM ids WHERE model_id = ? AND kind = ? AND expiry <= ?",
        (model_id, kind, commit.now),
    ).rowcount
    row = db.execute(
        "SELECT n FROM id_counts WHERE model_id = ? AND kind = ?", (model_id, kind)
    ).fetchone()
    count = (row[0] if row else 0) + len(unique) - known - forgotten
    bound = commit.max_remembered_ids
    if bound and count > bound:
        db.execute(
            "DELETE FROM ids WHERE model_id = ? AND kind = ? AND event_id IN ("
            "SELECT event_id FROM ids WHERE model_id = ? AND kind = ? "
            "ORDER BY expiry, event_id LIMIT ?)",
            (model_id, kind, model_id, kind, count - bound),
        )
        count = bound
    db.execute("INSERT OR REPLACE INTO id_counts VALUES (?, ?, ?)", (model_id, kind, max(count, 0)))


class SQLiteStore:
    name = "sqlite"
    #: disk I/O (a commit waits for fsync): the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, database: Database, max_known_models: int = DEFAULT_KNOWN_MODELS) -> None:
        self.database = database
        #: model id -> (incarnation, version, fields, layouts) this process knows are stored,
        #: for the models it uses: the base of a commit that writes only the changed chunks
        self._written: KnownStates[tuple[str, int, Encoded]] = KnownStates(max_known_models)
        #: the epoch marker's checks: a file replaced by an older copy answers 503
        self.loss = SQLiteLossWatch(database)
        self.watch = self.loss.watch

    @classmethod
    def open(
        cls,
        data_dir: str | Path,
        synchronous: Literal["full", "normal"] = "full",
        max_known_models: int = DEFAULT_KNOWN_MODELS,
    ) -> SQLiteStore:
        """The store in ``data_dir`` (created if needed); :class:`StoreOpenError` naming the
        path and the reason when it cannot be used."""
        return cls(Database.open(data_dir, synchronous), max_known_models)

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
        return self.loss.alarms()

    @translated
    def acknowledge_loss(self) -> dict[str, str]:
        """An operator knows what was lost: clear the alarms, start a new epoch."""
        return self.loss.acknowledge()

    def close(self) -> None:
        self.database.close()

    def _remember(self, model_id: str, written: tuple[str, int, Encoded]) -> None:
        """What this process now knows is stored for ``model_id`` (a delta commit's base)."""
        self._written.remember(model_id, written)

    def _unknown(self, model_id: str) -> None:
        """This process no longer knows what is stored: the next commit rewrites it whole."""
        self._written.forget(model_id)

    def forget_cached(self, model_id: str) -> None:
        self._unknown(model_id)

    # ------------------------------------------------------------------ models
    @translated
    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        self.loss.guard()
        changes, encoded = encode_changes(arrays, None)
        self._unknown(model_id)
        with self.database.write() as db:
            row = db.execute("SELECT incarnation FROM models WHERE id = ?", (model_id,)).fetchone()
            if row is not None and not replace:
                raise ModelExists(f"a model with id {model_id!r} already exists", field="id")
            if replaces is not None:  # a reset: only the incarnation it read
                if row is None:
                    raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
                if row[0] != replaces:
                    raise ModelChanged(f"model {model_id!r} was re-created during the reset")
            if row is not None:
                self._delete_rows(db, model_id)
            db.execute(
                "INSERT INTO models (id, config, version, incarnation) VALUES (?, ?, 1, ?)",
                (model_id, orjson.dumps(config).decode(), incarnation),
            )
            db.execute("INSERT INTO meta VALUES (?, 'incarnation', ?)", (model_id, incarnation))
            self._write_fields(db, model_id, changes.fields, changes.layouts)
        self._remember(model_id, (incarnation, 1, encoded))
        self.watch.saw(model_id, incarnation, 1)
        return 1

    @staticmethod
    def _delete_rows(db: sqlite3.Connection, model_id: str) -> int:
        for table in MODEL_TABLES:
            db.execute(f"DELETE FROM {table} WHERE model_id = ?", (model_id,))  # noqa: S608
        return db.execute("DELETE FROM models WHERE id = ?", (model_id,)).rowcount

    @staticmethod
    def _write_fields(
        db: sqlite3.Connection, model_id: str, fields: dict[str, bytes], layouts: dict[str, str]
    ) -> None:
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
        self._unknown(model_id)
        with self.database.write() as db:
            deleted = self._delete_rows(db, model_id)
        if not deleted:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")

    @translated
    def load(self, model_id, known_version=None, known_incarnation=None) -> StoredState:
        """The model's state from one read snapshot; only its version and incarnation when
        they are the caller's (its cached copy is current)."""
        self.loss.guard(model_id)
        with self.database.snapshot() as db:
            row = db.execute(
                "SELECT version, incarnation FROM models WHERE id = ?", (model_id,)
            ).fetchone()
            current = row is not None and tuple(row) == (known_version, known_incarnation)
            if row is not None and not current:
                config = db.execute(
                    "SELECT config FROM models WHERE id = ?", (model_id,)
                ).fetchone()
                raw = dict(
                    db.execute("SELECT field, data FROM state WHERE model_id = ?", (model_id,))
                )
                layouts = dict(
                    db.execute("SELECT name, layout FROM layouts WHERE model_id = ?", (model_id,))
                )
                meta = dict(
                    db.execute("SELECT name, value FROM meta WHERE model_id = ?", (model_id,))
                )
        # the checks of lost data write (an alarm): after the read snapshot
        if row is None:
            self.loss.missing(model_id)
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        version, incarnation = row
        self.loss.saw(model_id, incarnation, version)
        if current:
            return StoredState(version, incarnation)
        arrays = decode_fields(raw, layouts)
        self._remember(model_id, (incarnation, version, Encoded.of(arrays)))
        return StoredState(version, incarnation, orjson.loads(config[0]), arrays, meta)

    @translated
    def commit(self, model_id: str, commit: Commit) -> int:
        """Write ``commit`` in one ``BEGIN IMMEDIATE`` transaction: check the version and
        incarnation (:class:`ModelNotFound`, :class:`StaleVersion`: nothing is written), then
        the changed state chunks, the ids (forgetting those past their expiry), the consumed
        pending records, the checkpoint fields and the new version."""
        if commit.fence is not None:
            raise ValueError("writer leases (queue mode) exist on the Redis store only")
        self.loss.guard(model_id)
        base = self._written.take(model_id)
        known = None
        if base is not None and base[:2] == (commit.incarnation, commit.expected_version):
            known = base[2]
        changes, encoded = encode_changes(commit.arrays, known)
        with self.database.write() as db:
            row = db.execute(
                "SELECT version, incarnation FROM models WHERE id = ?", (model_id,)
            ).fetchone()
            if row is None:
                self._unknown(model_id)
                raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
            if tuple(row) != (commit.expected_version, commit.incarnation):
                self._unknown(model_id)
                raise StaleVersion(model_id)
            if known is not None:
                if changes.dropped_fields:
                    db.executemany(
                        "DELETE FROM state WHERE model_id = ? AND field = ?",
                        [(model_id, f) for f in changes.dropped_fields],
                    )
                if changes.dropped_layouts:
                    db.executemany(
                        "DELETE FROM layouts WHERE model_id = ? AND name = ?",
                        [(model_id, n) for n in changes.dropped_layouts],
                    )
            else:  # this process does not know what is stored: rewrite the state whole
                db.execute("DELETE FROM state WHERE model_id = ?", (model_id,))
                db.execute("DELETE FROM layouts WHERE model_id = ?", (model_id,))
            self._write_fields(db, model_id, changes.fields, changes.layouts)
            for kind, ids in ((_SEEN, commit.learned_ids), (_EXPIRED, commit.expired_ids)):
                if ids:
                    _remember_ids(db, model_id, kind, ids, commit)
            consumed = 0
            if commit.remove_pending:
                consumed = db.executemany(
                    "DELETE FROM pending WHERE model_id = ? AND event_id = ?",
                    [(model_id, event_id) for event_id in commit.remove_pending],
                ).rowcount
            db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?, ?)",
                [(model_id, name, value) for name, value in commit.meta.items()],
            )
            db.execute(
                "UPDATE models SET version = version + 1, pending = pending - ? WHERE id = ?",
                (consumed, model_id),
            )
        version = commit.expected_version + 1
        self._remember(model_id, (commit.incarnation, version, encoded))
        self.watch.saw(model_id, commit.incarnation, version)
        return version

    # ------------------------------------------------------------------ ids and pending labels
    def _alive(self, model_id: str, kind: int, ids: Sequence[str], now: float) -> np.ndarray:
        db = self.database.connection()
        alive: set[str] = set()
        for part in _chunks(ids):
            # '+expiry': a lookup by key per id; without the '+', SQLite may pick the expiry
            # index and scan every remembered id of the model (24 ms at 40,000 ids)
            alive.update(
                row[0]
                for row in db.execute(
                    "SELECT event_id FROM ids WHERE model_id = ? AND kind = ? AND +expiry > ? "
                    f"AND event_id IN ({_marks(len(part))})",  # noqa: S608 - only '?' marks
                    (model_id, kind, now, *part),
                )
            )
        return np.array([event_id in alive for event_id in ids], dtype=bool)

    @translated
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, _SEEN, ids, now)

    @translated
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, _EXPIRED, ids, now)

    @staticmethod
    def _present(db: sqlite3.Connection, model_id: str, ids: Sequence[str]) -> int:
        """How many of ``ids`` have a pending record."""
        return sum(
            db.execute(
                "SELECT COUNT(*) FROM pending WHERE model_id = ? "
                f"AND event_id IN ({_marks(len(part))})",  # noqa: S608 - only '?' marks
                (model_id, *part),
            ).fetchone()[0]
            for part in _chunks(ids)
        )

    @translated
    def put_pending(self, model_id, records, deadline, max_records=None) -> None:
        if not records:
            return
        with self.database.write() as db:
            row = db.execute("SELECT pending FROM models WHERE id = ?", (model_id,)).fetchone()
            if row is None:
                raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
            added = len(records) - self._present(db, model_id, list(records))
            if max_records is not None and row[0] + added > max_records:
                raise InsufficientStorage(pending_full(model_id, max_records))
            db.executemany(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?)",
                [(model_id, event_id, record, deadline) for event_id, record in records.items()],
            )
            db.execute("UPDATE models SET pending = pending + ? WHERE id = ?", (added, model_id))

    @translated
    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
        db = self.database.connection()
        found: dict[str, tuple[bytes, float]] = {}
        for part in _chunks(ids):
            for event_id, record, deadline in db.execute(
                "SELECT event_id, record, deadline FROM pending WHERE model_id = ? "
                f"AND event_id IN ({_marks(len(part))})",  # noqa: S608 - only '?' marks
                (model_id, *part),
            ):
                found[event_id] = (bytes(record), float(deadline))
        return {event_id: found[event_id] for event_id in ids if event_id in found}

    @translated
    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        rows = self.database.connection().execute(
            "SELECT event_id FROM pending WHERE model_id = ? AND deadline <= ? "
            "ORDER BY deadline LIMIT ?",
            (model_id, now, limit),
        )
        return [row[0] for row in rows]
