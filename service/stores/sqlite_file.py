"""The SQLite store's file: its schema, opening it safely, one connection per thread, and the
two kinds of transaction :mod:`service.stores.sqlite` runs.

* :meth:`Database.write`: ``BEGIN IMMEDIATE`` takes the database's write lock before the first
  read, so what a write checks (a model's version) cannot change before it commits, across
  threads and processes.  Another writer waits up to ``BUSY_TIMEOUT_SECONDS``.
* :meth:`Database.snapshot`: several reads of one consistent state; in WAL mode readers never
  wait for the writer, nor the writer for them.
* :meth:`Database.grouped`: a small write that waits for the writes of other threads queued
  meanwhile, all committed by one transaction and one fsync (group commit, below).

Its tables (the table of what each holds, and why its layout: docs/architecture.md, "SQLite
tables") are created by :data:`SCHEMA`, of version :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from service.errors import InsufficientStorage, StoreReplaced, StoreUnavailable
from service.groups import ThreadCombiner

logger = logging.getLogger("aucstream")
T = TypeVar("T")

#: ``PRAGMA user_version`` of the layout below and of the state's chunk size
#: (:data:`service.stores.fields.CHUNK_BYTES`); a file of another one is refused (the product
#: is unreleased: an older file is exported model by model, never upgraded in place)
SCHEMA_VERSION = 6


def _model_table(name: str, columns: str, key: str, *, without_rowid: bool = False) -> str:
    """The statement that creates a table of rows that belong to one model: ``model_id`` then
    ``columns`` (``"name TYPE, ..."``, every one ``NOT NULL``), keyed by ``(model_id, key)``."""
    declared = ", ".join(f"{column} NOT NULL" for column in ("model_id TEXT", *columns.split(", ")))
    options = " WITHOUT ROWID" if without_rowid else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {name} (\n    {declared},\n"
        f"    PRIMARY KEY (model_id, {key})){options}"
    )


#: the ids learned (kind 0) and expired (kind 1), each until its expiry
_IDS = ("ids", "kind INTEGER, event_id TEXT, expiry REAL", "kind, event_id")
#: every statement is idempotent: the schema is run at each open of a file of this version,
#: which so gains the tables added without a new version (transient or created empty: the
#: processes' write turns, the lost-data checks' epoch marker and alarms)
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY, version INTEGER NOT NULL,
    incarnation TEXT NOT NULL, pending INTEGER NOT NULL DEFAULT 0,
    saved INTEGER NOT NULL DEFAULT 0, seen_ids INTEGER NOT NULL DEFAULT 0,
    expired_ids INTEGER NOT NULL DEFAULT 0,
    last_entry INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS configs (model_id TEXT PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log (
    seq INTEGER PRIMARY KEY, model_id TEXT NOT NULL, version INTEGER NOT NULL,
    previous INTEGER NOT NULL, entry BLOB NOT NULL);
{_model_table("meta", "name TEXT, value TEXT", "name")};
{_model_table("state", "field TEXT, data BLOB", "field")};
{_model_table("layouts", "name TEXT, layout TEXT", "name")};
{_model_table(*_IDS, without_rowid=True)};
CREATE INDEX IF NOT EXISTS ids_by_expiry ON ids (model_id, kind, expiry);
{_model_table("pending", "event_id TEXT, record BLOB, deadline REAL", "event_id")};
CREATE INDEX IF NOT EXISTS pending_by_deadline ON pending (model_id, deadline);
CREATE TABLE IF NOT EXISTS turns (
    model_id TEXT PRIMARY KEY, holder TEXT NOT NULL, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS epoch_marker (
    id INTEGER PRIMARY KEY CHECK (id = 1), epoch TEXT NOT NULL, clock INTEGER NOT NULL,
    acknowledged INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS loss_alarms (scope TEXT PRIMARY KEY, cause TEXT NOT NULL)
"""
#: the tables whose rows belong to one model, found by its id (besides its row of ``models``
#: and its entries of ``log``, found by their chain: :data:`CHAIN`)
MODEL_TABLES = ("configs", "meta", "state", "layouts", "ids", "pending")

#: a model's entries of ``log`` after a version, newest first, as ``chain(seq, version)``
#: (parameters: ?1 the model id, ?2 the version): walked from the head's ``last_entry`` back
#: by each entry's ``previous``, one lookup by ``seq`` a step.  ``log`` has no index by model
#: (whose leaf would be one more page each model of a pass dirties), so a step checks that it
#: found the model's entry of the version before: a checkpoint drops the entries it covers,
#: and SQLite may give a dropped ``seq`` (the highest) to the next entry of any model
CHAIN = """WITH RECURSIVE chain(seq, version, previous) AS (
    SELECT log.seq, log.version, log.previous FROM models JOIN log ON log.seq = models.last_entry
    WHERE models.id = ?1 AND log.model_id = ?1 AND log.version > ?2
    UNION ALL
    SELECT log.seq, log.version, log.previous FROM chain JOIN log ON log.seq = chain.previous
    WHERE log.model_id = ?1 AND log.version = chain.version - 1 AND log.version > ?2)
"""

#: the database file inside the data directory
FILE_NAME = "aucstream.sqlite3"
#: the page size of a new file: a commit writes every page it changes to the WAL (a
#: one-event append changes ~7.5: the heads' leaf, the log's and the ids' leaves and index),
#: and 4 KiB pages, though fewer, cost more CPU per commit (loadtest/README.md, "One sender
#: on SQLite"); a page is also about a state chunk (:data:`service.stores.fields.CHUNK_BYTES`)
PAGE_SIZE = 1024
#: pages of WAL after which a commit checkpoints it: SQLite's default of 1,000 pages was 4 MiB
#: of 4 KiB pages, kept at 4 MiB (a checkpoint syncs the database file: not four times as often)
WAL_AUTOCHECKPOINT_PAGES = 4 * 2**20 // PAGE_SIZE
#: how long a write waits for another process's transaction before the request gets 503
BUSY_TIMEOUT_SECONDS = 10.0
#: the WAL file is truncated back to this size after a checkpoint
WAL_SIZE_LIMIT = 64 * 2**20
#: how long :meth:`Database.close` waits for the calls in flight (a write waits at most
#: ``BUSY_TIMEOUT_SECONDS`` for the lock, then syncs)
CLOSE_TIMEOUT_SECONDS = 2 * BUSY_TIMEOUT_SECONDS
#: the answer to a call made once the store is closed
CLOSED = "the SQLite store is closed (the service is stopping); retry later"

#: the files SQLite keeps beside the database (the WAL, its shared-memory index, a journal)
_SIDE_FILES = ("-wal", "-shm", "-journal")
#: the database and its side files hold model state, raw feature rows and pending records:
#: readable by their owner only (SQLite gives the side files the database file's mode)
PRIVATE_FILE_MODE = 0o600
#: data directories the server creates
PRIVATE_DIRECTORY_MODE = 0o700


def _make_private_directories(directory: Path) -> None:
    """Create ``directory`` and its missing parents as ``PRIVATE_DIRECTORY_MODE``; a directory
    that exists keeps its mode (the operator chose it)."""
    missing = []
    ancestor = directory
    while not ancestor.exists():
        missing.append(ancestor)
        ancestor = ancestor.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=PRIVATE_DIRECTORY_MODE)
        except FileExistsError:  # another process created it meanwhile
            continue
        os.chmod(path, PRIVATE_DIRECTORY_MODE)  # the umask may have taken bits away
    if not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))


def _make_private_file(path: Path, *, create: bool = True) -> None:
    """Create ``path`` as ``PRIVATE_FILE_MODE`` (before SQLite would create it following the
    umask), or take the group's and others' access away from one that exists."""
    if create:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
            return
        except FileExistsError:
            pass
    try:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            os.chmod(path, mode & 0o700)
    except FileNotFoundError:
        return
    except PermissionError:  # another user's file: opening it says whether it can be used
        logger.warning("cannot make %s private (owned by another user)", path)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, None when there is none."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


class StoreOpenError(RuntimeError):
    """The data directory or its database cannot be used (raised at start-up)."""


#: SQLite's names of a write that found no space: the database or WAL file could not grow
#: (``SQLITE_FULL``, what SQLite makes of ``ENOSPC``), or the WAL's shared-memory index could
#: not (``SQLITE_IOERR_SHMSIZE``: SQLite writes into each new page of ``-shm`` before mapping
#: it, and on a full file system that write is what fails)
_DISK_FULL = ("SQLITE_FULL", "SQLITE_IOERR_SHMSIZE")
#: the answer to a write when the disk is full (reads go on: they need no space)
DISK_FULL = "the SQLite store's disk is full: nothing was written; retry once space is freed"


def is_disk_full(error: sqlite3.Error) -> bool:
    return str(getattr(error, "sqlite_errorname", "")).startswith(_DISK_FULL)


def translated(method: Callable[..., T]) -> Callable[..., T]:
    """A call of the store's (a method of an object with a ``database``), made while the
    database is open (:meth:`Database.close` waits for it; a call after raises
    :class:`StoreUnavailable`); SQLite failures at request time -> 503 (busy past the
    timeout, I/O) or 507 (disk full), the details going to the log."""

    @functools.wraps(method)
    def wrapper(store: Any, *args: Any, **kwargs: Any) -> T:
        database = store.database
        database.enter()
        try:
            return method(store, *args, **kwargs)
        except sqlite3.Error as error:
            name = getattr(error, "sqlite_errorname", type(error).__name__)
            logger.warning("the SQLite store failed: %s (%s)", error, name)
            if is_disk_full(error):
                raise InsufficientStorage(DISK_FULL) from None
            raise StoreUnavailable(f"the store (SQLite) failed ({name}); retry later") from None
        except OSError as error:  # a file of the store's beside the database
            logger.warning("the SQLite store failed: %s", error)
            if error.errno == errno.ENOSPC:
                raise InsufficientStorage(DISK_FULL) from None
            raise StoreUnavailable(
                f"the store (SQLite) failed ({error.strerror or error}); retry later"
            ) from None
        finally:
            database.leave()

    return wrapper


class Database:
    """One SQLite file in WAL mode, used by any number of threads and processes."""

    def __init__(self, path: Path, synchronous: Literal["full", "normal"] = "full") -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        #: (device, inode) of the file opened: another one at the path is not the store
        self._identity: tuple[int, int] | None = None
        #: why the file at the path is no longer the one opened (then every call is refused)
        self.replaced: str | None = None
        #: the writes of threads that arrive while one commits: the next group (:meth:`grouped`)
        self._group: ThreadCombiner[Callable[[sqlite3.Connection], Any], Any] = ThreadCombiner(
            self._commit_group
        )
        #: calls in flight (:meth:`enter`), and whether :meth:`close` was called: closing a
        #: connection while another thread runs a statement on it crashes the process
        self._users = 0
        self._closed = False
        self._use = threading.Condition(threading.Lock())

    @classmethod
    def open(
        cls, data_dir: str | Path, synchronous: Literal["full", "normal"] = "full"
    ) -> Database:
        """Open (creating if needed) ``<data_dir>/aucstream.sqlite3``; :class:`StoreOpenError`
        naming the path and the reason when the directory cannot be created or written, or the
        file is not an aucstream database."""
        directory = Path(data_dir).expanduser().resolve()
        try:
            _make_private_directories(directory)
        except OSError as error:
            raise StoreOpenError(
                f"cannot create the data directory {str(directory)!r} "
                f"({error.strerror or error}); set --data-dir / AUCSTREAM_DATA_DIR to a "
                "writable directory"
            ) from None
        database = cls(directory / FILE_NAME, synchronous)
        try:
            _make_private_file(database.path)
            database._identity = _identity(database.path)
            database._initialise()
        except (sqlite3.Error, OSError) as error:
            database.close()
            raise StoreOpenError(
                f"cannot use the SQLite store {str(database.path)!r}: {error}; check that the "
                "directory is writable and the file is an aucstream database (set --data-dir / "
                "AUCSTREAM_DATA_DIR to another directory to start afresh)"
            ) from None
        for suffix in _SIDE_FILES:  # SQLite makes them with the umask: made private
            _make_private_file(database.path.with_name(FILE_NAME + suffix), create=False)
        return database

    def _initialise(self) -> None:
        # a new file only (a database's page size is fixed once it holds a table or is in WAL)
        self.connection().execute(f"PRAGMA page_size={PAGE_SIZE}")
        mode = self.connection().execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"the file system refused WAL mode (got {mode!r})")
        with self.write() as db:  # takes the write lock: also proves the file is writable
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if version == 0 and tables:
                raise sqlite3.DatabaseError(
                    f"the file holds other tables ({', '.join(sorted(tables))}), not aucstream's"
                )
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"written by a newer aucstream (schema {version}; this one reads "
                    f"{SCHEMA_VERSION})"
                )
            if 0 < version < SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"written by an older aucstream (schema {version}; this one reads "
                    f"{SCHEMA_VERSION}): export each model (GET .../snapshot) with that "
                    "version and import it into an empty one"
                )
            for statement in SCHEMA.split(";"):
                db.execute(statement)
            if version == 0:
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def verify_file(self) -> None:
        """:class:`StoreReplaced` once the path names another file than the one opened (a
        file renamed over it, or none): SQLite would go on writing into the file it has open,
        which nobody will read again.  Reopening at the new file is not safe while connections
        to the old one are in use: both would share the ``-wal`` and ``-shm`` files at the
        path, and a WAL applied to another database corrupts it; a restart opens it cleanly
        and checks its epoch marker."""
        if self.replaced is None and _identity(self.path) != self._identity:
            self.replaced = (
                f"the SQLite file {str(self.path)!r} was replaced or removed while the service "
                "ran (the path names another file than the one opened): nothing more is "
                "written to or read from the old file; restart the service to open the new one"
            )
            logger.error("%s", self.replaced, extra={"fields": {"store_replaced": True}})
        if self.replaced is not None:
            raise StoreReplaced(self.replaced)

    def enter(self) -> None:
        """A call begins: :meth:`close` waits until it has left (:meth:`leave`);
        :class:`StoreUnavailable` once the database is closed."""
        with self._use:
            if self._closed:
                raise StoreUnavailable(CLOSED)
            self._users += 1

    def leave(self) -> None:
        with self._use:
            self._users -= 1
            if self._closed and not self._users:
                self._use.notify_all()

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (an SQLite connection must not be used by two threads at
        the same time); :class:`StoreUnavailable` once the database is closed."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            if self._closed:
                raise StoreUnavailable(CLOSED)
            connection = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_SECONDS,
                isolation_level=None,  # transactions are explicit: BEGIN IMMEDIATE / BEGIN
                check_same_thread=False,  # close() runs on another thread
            )
            connection.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            connection.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            connection.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    def read(self, statement: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        """``statement`` run by this thread's connection outside a transaction: its own read
        snapshot (one statement, not a read transaction of several)."""
        return self.connection().execute(statement, parameters)

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, all or nothing; the write lock is taken at ``BEGIN
        IMMEDIATE``, before the first read, so what it checks cannot change before it commits."""
        self.enter()
        try:
            connection = self.connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                # under the write lock, so nothing is acknowledged into a file no longer the
                # store
                self.verify_file()
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        finally:
            self.leave()

    def grouped(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """``write(db)`` inside a write transaction shared with the writes other threads queue
        meanwhile (group commit: one ``BEGIN IMMEDIATE``, one fsync for them all); returns
        its result or raises its error.  Each write runs inside a savepoint, so one that
        raises is undone alone; a failure of the transaction itself fails them all.  The
        first thread to arrive leads (:class:`~service.groups.ThreadCombiner`): a write alone
        pays no hand-off."""
        return self._group("", write)

    @property
    def groups(self) -> int:
        """Transactions :meth:`grouped` committed."""
        return self._group.groups

    @property
    def grouped_writes(self) -> int:
        """Writes those transactions held."""
        return self._group.calls

    def _commit_group(self, _: str, writes: list[Callable[[sqlite3.Connection], Any]]) -> list:
        outcomes: list[Any] = [None] * len(writes)
        try:
            with self.write() as db:
                if len(writes) == 1:  # no savepoint: an error rolls the transaction back
                    return [writes[0](db)]
                for k, write in enumerate(writes):
                    db.execute("SAVEPOINT one")
                    try:
                        outcomes[k] = write(db)
                    except Exception as error:  # noqa: BLE001 - handed to its own thread
                        db.execute("ROLLBACK TO one")
                        outcomes[k] = error
                    db.execute("RELEASE one")
        except BaseException as error:  # noqa: BLE001 - the writes without an error of their own
            return [own if isinstance(own, Exception) else error for own in outcomes]
        return outcomes

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """Several reads of one consistent state (a WAL read transaction)."""
        self.enter()
        try:
            connection = self.connection()
            connection.execute("BEGIN")
            try:
                yield connection
            finally:
                connection.execute("COMMIT")
        finally:
            self.leave()

    def close(self) -> None:
        """Refuse new calls, wait for those in flight, then close every thread's connection.
        A call still running after ``CLOSE_TIMEOUT_SECONDS`` (stuck in the file system) keeps
        the connections open: closing one under a running statement crashes the process."""
        with self._use:
            self._closed = True
            idle = self._use.wait_for(lambda: not self._users, CLOSE_TIMEOUT_SECONDS)
        if not idle:
            logger.error("the SQLite store was closed with calls still running: left open")
            return
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
        self._local = threading.local()
