"""The SQLite store's files: a commit is synced, write-ahead logged, one row of the log and few
pages, a checkpoint writes the state, the files and directories are private, and an unusable
or read-only data directory is one clear line at start-up; SQLite is the default store, refused
in queue mode (tests/service/test_sqlite_store.py: the processes that share the file)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service import cli
from service.app import create_app
from service.engine.entries import Entry
from service.settings import Settings
from service.stores.base import Commit
from service.stores.sqlite import SQLiteStore
from service.stores.sqlite_file import FILE_NAME, StoreOpenError

ROOT = Path(__file__).resolve().parents[2]


def test_commits_are_synced_write_ahead_logged(tmp_path):
    """WAL + synchronous=FULL (the default): a commit is on the disk before it returns."""
    store = SQLiteStore.open(tmp_path)
    connection = store.database.connection()
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()
    relaxed = SQLiteStore.open(tmp_path, synchronous="normal")
    assert relaxed.database.connection().execute("PRAGMA synchronous").fetchone()[0] == 1
    relaxed.close()


def _serve_fails(capsys, data_dir: Path) -> str:
    assert cli.main(["serve", "--data-dir", str(data_dir)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    return error


def test_an_unusable_data_directory_is_one_clear_line_at_start_up(tmp_path, capsys, monkeypatch):
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_DATA_DIR",
                 "AUCSTREAM_WORKERS"):  # fmt: skip
        monkeypatch.setenv(name, "")  # restored after the test (serve sets them)
        monkeypatch.delenv(name)
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("x")
    error = _serve_fails(capsys, not_a_directory)
    assert "cannot create the data directory" in error and str(not_a_directory) in error

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / FILE_NAME).write_bytes(b"these bytes are no SQLite database, " * 200)
    error = _serve_fails(capsys, corrupt)
    assert str(corrupt / FILE_NAME) in error and "not a database" in error

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with contextlib.closing(sqlite3.connect(foreign / FILE_NAME)) as db:
        db.execute("CREATE TABLE invoices (id INTEGER)")
    assert "invoices" in _serve_fails(capsys, foreign)

    newer = tmp_path / "newer"
    SQLiteStore.open(newer).close()
    with contextlib.closing(sqlite3.connect(newer / FILE_NAME)) as db:
        db.execute("PRAGMA user_version = 99")
    assert "newer aucstream" in _serve_fails(capsys, newer)

    # 1: states in another chunk size; 3: the log in other tables; 4: the config in the heads;
    # 5: the log keyed by model
    for schema in (1, 3, 4, 5):
        older = tmp_path / f"older-{schema}"
        SQLiteStore.open(older).close()
        with contextlib.closing(sqlite3.connect(older / FILE_NAME)) as db:
            db.execute(f"PRAGMA user_version = {schema}")
        assert "older aucstream" in _serve_fails(capsys, older)

    # the app started without the CLI (uvicorn --factory) refuses to start the same way
    with pytest.raises(StoreOpenError, match="not a database"):
        with TestClient(create_app(Settings(store="sqlite", data_dir=corrupt, warmup=False))):
            pass


def test_a_read_only_data_directory_is_one_clear_line_at_start_up(tmp_path):
    """A directory the server may not write to, empty or holding a store.  Root ignores
    permissions, so as root the server runs without the capability that lets it
    (CAP_DAC_OVERRIDE)."""
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    SQLiteStore.open(existing).close()
    fresh.mkdir()
    as_user = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUCSTREAM_STORE": "sqlite"}
    for directory, data_dir in ((fresh, fresh / "data"), (existing, existing)):
        for path in (directory, *directory.iterdir()):
            path.chmod(0o500 if path.is_dir() else 0o400)
        try:
            result = subprocess.run(
                [*(as_user if os.geteuid() == 0 else []), sys.executable, "-m", "service.cli",
                 "serve", "--data-dir", str(data_dir)],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        finally:
            for path in (directory, *directory.iterdir()):
                path.chmod(0o700 if path.is_dir() else 0o600)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert str(data_dir) in result.stderr
        assert "writable" in result.stderr or "Permission denied" in result.stderr


def test_sqlite_is_the_default_and_queue_mode_refuses_it(monkeypatch):
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.store == "sqlite" and settings.data_dir == Path("aucstream-data")
    assert Settings(workers=4).workers == 4  # several workers share the file
    with pytest.raises(ValueError, match="needs the Redis store, not the sqlite store"):
        Settings(mode="queue")
    with pytest.raises(ValueError, match="SQLite store"):
        Settings(store="memory", workers=2)


def test_a_commit_is_a_log_row_and_a_checkpoint_writes_the_state(tmp_path):
    """A request's commit appends its entry (one row of ``log``) and leaves the state rows
    alone; a checkpoint writes the state at its version and drops the entries it covers; a
    commit of the whole state rewrites it (arrays that are gone leave no chunk behind)."""
    from service.engine.entries import encode
    from service.stores.fields import CHUNK_BYTES

    per_chunk = CHUNK_BYTES // 8
    scores = np.arange(3 * per_chunk, dtype=np.float64)  # three chunks
    store = SQLiteStore.open(tmp_path)
    store.create_model("m", {}, {"window:scores": scores, "learner:w": np.ones(2)}, "inc")
    entry = Entry(5.0, np.ones((2, 3)), np.array([1, -1]), counts=(("duplicates", 1),))
    assert store.commit("m", Commit(1, "inc", entry=entry, learned_ids=["a"])) == 2
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        assert db.execute("SELECT version, entry FROM log").fetchall() == [(2, encode(entry))]
    loaded = SQLiteStore.open(tmp_path).load("m")
    assert (loaded.version, loaded.saved) == (2, 1)
    np.testing.assert_array_equal(loaded.arrays["window:scores"], scores)
    [(version, read)] = loaded.entries
    assert version == 2 and encode(read) == encode(entry)
    assert store.load("m", 1, "inc").entries[0][0] == 2  # a cache at 1 catches up
    assert store.load("m", 0, "inc").arrays is not None  # before the checkpoint: whole

    changed = scores.copy()
    changed[0] = 42.0
    arrays = {"window:scores": changed, "learner:w": np.ones(2)}
    assert not store.checkpoint("m", "other", 2, arrays)  # another incarnation
    assert not store.checkpoint("m", "inc", 3, arrays)  # beyond the head
    assert store.checkpoint("m", "inc", 2, arrays)
    assert not store.checkpoint("m", "inc", 2, arrays)  # already there
    loaded = SQLiteStore.open(tmp_path).load("m")
    assert (loaded.version, loaded.saved, loaded.entries) == (2, 2, [])
    np.testing.assert_array_equal(loaded.arrays["window:scores"], changed)

    shrunk = {"window:scores": np.zeros(4), "learner:w": np.ones(2)}
    assert store.commit("m", Commit(2, "inc", entry=entry)) == 3
    assert store.checkpoint("m", "inc", 3, shrunk)  # the log dropped
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        fields = sorted(row[0] for row in db.execute("SELECT field FROM state"))
        assert db.execute("SELECT COUNT(*) FROM log").fetchone() == (0,)
    assert fields == ["learner:w", "window:scores"]
    assert SQLiteStore.open(tmp_path).load("m").saved == 3


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_the_sqlite_files_and_the_directories_created_are_private(tmp_path, umask):
    previous = os.umask(umask)
    try:
        data_dir = tmp_path / "new" / "data"
        store = SQLiteStore.open(data_dir)
        store.create_model("m", {"id": "m"}, {"learner:w": np.ones(3)}, "inc")
        store.put_pending("m", {"e1": b"features and score"}, deadline=1e12)
        side_files = [
            store.path.with_name(store.path.name + suffix) for suffix in ("-wal", "-shm", ".epoch")
        ]
        assert all(path.exists() for path in side_files)  # WAL mode, the epoch marker's copy
        for path in (store.path, *side_files):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        for directory in (tmp_path / "new", data_dir):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
        store.close()
    finally:
        os.umask(previous)


def test_files_an_earlier_version_left_readable_are_made_private(tmp_path):
    """A data directory the operator made keeps its mode; the database files in it, written
    before with the umask's 0644, are made private when the store opens them."""
    tmp_path.chmod(0o755)
    SQLiteStore.open(tmp_path).close()
    database = tmp_path / "aucstream.sqlite3"
    wal = tmp_path / "aucstream.sqlite3-wal"
    wal.write_bytes(b"")
    for path in (database, wal):
        path.chmod(0o644)
    store = SQLiteStore.open(tmp_path)
    assert store.list_models() == []
    for path in (database, wal):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
    store.close()


def test_a_one_event_append_writes_few_pages(tmp_path):
    """What a one-event commit syncs is the pages it changes (WAL frames): the model's row,
    the log's leaf and its key, the id's leaf and its expiry index -- under 8 pages on
    average (schema 3: 9.4, an overflow page per entry and a row of ``id_counts``)."""

    store = SQLiteStore.open(tmp_path)
    store.create_model("m", {}, {"learner:w": np.ones(2)}, "inc")
    db = store.database.connection()  # this thread's: the commits below run on it
    db.execute("PRAGMA wal_autocheckpoint=0")
    rng = np.random.default_rng(0)

    def append(k: int) -> None:
        entry = Entry(1e9 + k, rng.normal(size=(1, 20)), np.array([1]))
        commit = Commit(1 + k, "inc", entry=entry, learned_ids=[f"e{k}"],
                        id_expiry=2e9 + k, now=1e9 + k)  # fmt: skip
        assert store.commit("m", commit) == 2 + k

    for k in range(500):  # past the tables' first pages
        append(k)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for k in range(500, 1500):
        append(k)
    frames = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    assert 2 * 1000 < frames < 8 * 1000
    store.close()
