"""A full disk under the SQLite store is a 507 for writes and nothing else: reads go on, no
acknowledged event is lost, and once space is back the service serves again by itself (no
``store-lost-data``, ``/readyz`` 200), also after a ``kill -9`` while full.  Run on a real
20 MiB tmpfs filled to the last byte (skipped only where mounting one is impossible), and with
the failure injected in-process (a commit that fails with ``SQLITE_FULL``, an epoch copy that
cannot be written) so that the path is exercised everywhere.  A database file renamed over
under the running service stops it writing into the old file (503 ``store-replaced``), and the
store-loss gauge is the store's own after an acknowledgement with two workers."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtest.local import free_port, stop
from service.stores.epoch import CHECK_SECONDS
from service.stores.sqlite_file import FILE_NAME, Database
from tests.service.conftest import create_model, events_json, make_stream, started_apps
from tests.service.server_helpers import ROOT, served

FULL = "https://aucstream.dev/problems/insufficient-storage"
REPLACED = "https://aucstream.dev/problems/store-replaced"
MODEL = {"id": "m", "n_features": 3, "learner": "spam"}


def batch(number: int, size: int = 50) -> dict:
    X, y = make_stream(size, n_features=3, seed=number)
    return events_json(X, y, [f"e{number}-{i}" for i in range(size)])


def assert_reads_serve(http) -> None:
    """Every read a client makes of the model answers 200 (none needs space)."""
    for path in ("/v1/models/m", "/v1/models/m/metrics", "/v1/models", "/v1/models/m/snapshot",
                 "/v1/models/m/weights", "/readyz"):  # fmt: skip
        response = http.get(path)
        assert response.status_code == 200, (path, response.text)
    X, _ = make_stream(5, n_features=3, seed=99)
    scored = http.post("/v1/models/m/score", json=events_json(X))  # no ids: nothing kept
    assert scored.status_code == 200, scored.text


def post_while_full(http, first: int, count: int, refused: list[int] | None = None) -> int:
    """``count`` batches: each learned (200) or refused whole (507, its number appended to
    ``refused``); the events acknowledged."""
    acknowledged = 0
    for number in range(first, first + count):
        response = http.post("/v1/models/m/events", json=batch(number))
        assert response.status_code in (200, 507), response.text
        if response.status_code == 507:
            assert response.json()["type"] == FULL
            if refused is not None:
                refused.append(number)
        else:
            acknowledged += response.json()["learned"]
    return acknowledged


# ---------------------------------------------------------------------- a real full disk
@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 20 MiB tmpfs of this test's own (skipped only where it cannot be mounted)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to its last byte with one file."""
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (2**20, 2**14, 2**10, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\xff" * size)
    finally:
        os.close(descriptor)
    with pytest.raises(OSError) as refused:
        (directory / "probe").write_bytes(b"x")
    assert refused.value.errno == errno.ENOSPC
    return filler


def test_a_full_tmpfs_is_a_507_for_writes_and_the_service_recovers_by_itself(small_disk):
    data_dir = small_disk / "data"
    with served(data_dir) as (url, server), httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/models", json=MODEL).status_code == 201
        acknowledged = post_while_full(http, 0, 20)
        assert acknowledged == 1000
        filler = fill(small_disk)
        refused: list[int] = []
        acknowledged += post_while_full(http, 20, 10, refused)
        time.sleep(CHECK_SECONDS + 0.2)  # the periodic check runs while full
        assert_reads_serve(http)
        acknowledged += post_while_full(http, 30, 10, refused)
        assert_reads_serve(http)
        assert refused  # the disk was full for SQLite too (it may reuse its WAL's space)

        filler.unlink()
        time.sleep(CHECK_SECONDS + 0.2)
        assert http.get("/readyz").status_code == 200
        assert_reads_serve(http)
        for number in range(40, 44):
            learned = http.post("/v1/models/m/events", json=batch(number))
            assert learned.status_code == 200, learned.text
            acknowledged += learned.json()["learned"]
        assert http.get("/v1/models/m").json()["counts"]["events_learned"] == acknowledged

        # full again, then killed: nothing acknowledged is lost, and it starts ready
        filler = fill(small_disk)
        acknowledged += post_while_full(http, 44, 10, refused)
        time.sleep(CHECK_SECONDS + 0.2)
        acknowledged += post_while_full(http, 54, 5, refused)
        print(f"refused while full: {len(refused)} of 35 batches")
        assert http.get("/v1/models/m").json()["counts"]["events_learned"] == acknowledged
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
    filler.unlink()
    with served(data_dir) as (url, _), httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/readyz").status_code == 200
        assert_reads_serve(http)
        assert http.get("/v1/models/m").json()["counts"]["events_learned"] == acknowledged
        # every event acknowledged is remembered: re-sent, each is a duplicate
        again = [http.post("/v1/models/m/events", json=batch(n)).json() for n in range(59)]
        assert sum(answer["duplicates"] for answer in again) == acknowledged
    with sqlite3.connect(data_dir / FILE_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# ---------------------------------------------------------------------- injected failures
@contextlib.contextmanager
def commits_fail_disk_full(monkeypatch) -> Iterator[None]:
    """Every write transaction of the store fails at its COMMIT with SQLite's SQLITE_FULL (its
    statements ran: a clock moved inside it must not count), and the epoch copy's sync with
    ENOSPC, until the block ends."""
    real_write = Database.write

    @contextlib.contextmanager
    def failing_write(self):
        connection = self.connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            self.verify_file()
            yield connection
        finally:
            connection.execute("ROLLBACK")
        error = sqlite3.OperationalError("database or disk is full")
        error.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
        raise error

    real_fsync = os.fsync

    def failing_fsync(descriptor: int) -> None:
        if os.readlink(f"/proc/self/fd/{descriptor}").endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(descriptor)

    monkeypatch.setattr(Database, "write", failing_write)
    monkeypatch.setattr(os, "fsync", failing_fsync)
    try:
        yield
    finally:
        monkeypatch.setattr(Database, "write", real_write)
        monkeypatch.setattr(os, "fsync", real_fsync)


def test_failed_commits_never_move_the_epoch_and_reads_serve_while_full(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    copy = data_dir / f"{FILE_NAME}.epoch"
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        app = build()
        create_model(app, "m", n_features=3)
        for number in range(3):
            assert app.post("/v1/models/m/events", json=batch(number)).status_code == 200
        time.sleep(CHECK_SECONDS + 0.1)
        assert app.get("/readyz").status_code == 200
        saved = json.loads(copy.read_text())
        with commits_fail_disk_full(monkeypatch):
            time.sleep(CHECK_SECONDS + 0.1)
            assert_reads_serve(app)  # the check ran and could not write: reads serve
            refused = app.post("/v1/models/m/events", json=batch(3))
            assert refused.status_code == 507 and refused.json()["type"] == FULL
            assert "retry once space is freed" in refused.json()["detail"]
            created = app.post("/v1/models", json={**MODEL, "id": "other"})
            assert created.status_code == 507, created.text
            assert app.get("/v1/models").json()["models"] == ["m"]
            assert json.loads(copy.read_text()) == saved  # nothing of the failed checks
        assert not list(data_dir.glob("*.tmp"))
        time.sleep(CHECK_SECONDS + 0.1)
        assert app.get("/readyz").status_code == 200
        assert_reads_serve(app)
        assert app.post("/v1/models/m/events", json=batch(3)).json()["learned"] == 50
        assert app.get("/v1/models/m").json()["counts"]["events_learned"] == 200
        assert json.loads(copy.read_text())["clock"] > saved["clock"]  # saved again
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        app = build()
        assert app.get("/readyz").status_code == 200
        assert app.get("/v1/models/m").json()["counts"]["events_learned"] == 200


def test_an_epoch_copy_that_cannot_be_written_fails_no_request(tmp_path, monkeypatch, caplog):
    real_fsync = os.fsync

    def failing_fsync(descriptor: int) -> None:
        if os.readlink(f"/proc/self/fd/{descriptor}").endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(descriptor)

    with started_apps(store="sqlite", data_dir=tmp_path / "data") as build:
        app = build()
        create_model(app, "m", n_features=3)
        monkeypatch.setattr(os, "fsync", failing_fsync)
        for number in range(3):
            time.sleep(CHECK_SECONDS / 2)
            assert app.post("/v1/models/m/events", json=batch(number)).status_code == 200
            assert app.get("/v1/models").status_code == 200
        assert "cannot save the epoch marker's copy" in caplog.text
        assert "disk full" in caplog.text
        assert not list((tmp_path / "data").glob("*.tmp"))


# ---------------------------------------------------------------------- a replaced file
def test_a_database_file_renamed_over_is_noticed_and_nothing_is_written_into_the_old_one(
    tmp_path,
):
    data_dir = tmp_path / "data"
    path = data_dir / FILE_NAME
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        app = build()
        create_model(app, "m", n_features=3)
        assert app.post("/v1/models/m/events", json=batch(0)).status_code == 200
        copy = tmp_path / "copy.sqlite3"
        with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
            source.backup(target)
        copy.rename(path)  # what an operator restoring a file in place does
        refused = app.post("/v1/models/m/events", json=batch(1))
        assert refused.status_code == 503 and refused.json()["type"] == REPLACED
        assert "restart the service" in refused.json()["detail"]
        for path_read in ("/v1/models/m", "/v1/models"):
            assert app.get(path_read).json()["type"] == REPLACED
        ready = app.get("/readyz")
        assert ready.status_code == 503
        assert "was replaced or removed" in ready.json()["checks"]["store_detail"]
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        app = build()  # a restart opens the new file, whose marker is the copy's
        assert app.get("/readyz").status_code == 200
        assert app.get("/v1/models/m").json()["counts"]["events_learned"] == 50
        assert app.post("/v1/models/m/events", json=batch(1)).json()["learned"] == 50


# ---------------------------------------------------------------------- the gauge
def store_loss_gauge(url: str) -> float:
    metrics = httpx.get(f"{url}/metrics", timeout=60)  # a new connection: any worker
    for line in metrics.text.splitlines():
        if line.startswith("aucstream_store_data_lost "):
            return float(line.split()[1])
    raise AssertionError("no aucstream_store_data_lost in /metrics")


@contextlib.contextmanager
def served_with_a_loss(data_dir: Path, workers: int) -> Iterator[str]:
    """``aucstream serve`` on a store that lost data: up once ``/readyz`` says so, several
    times (each answer on a new connection: any worker)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUCSTREAM_WARMUP": "false"}
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_DATA_DIR"):
        env.pop(name, None)
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--data-dir",
               str(data_dir), "--workers", str(workers), "--log-level", "error"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, lost = time.monotonic() + 120, 0
        while lost < 4 * workers:
            assert process.poll() is None and time.monotonic() < deadline
            with contextlib.suppress(httpx.TransportError):
                ready = httpx.get(f"{url}/readyz", timeout=60).json()
                lost += ready["checks"]["store"] == "data lost"
            time.sleep(0.1)
        yield url
    finally:
        stop(process)


def test_the_store_loss_gauge_is_0_on_every_scrape_after_an_acknowledgement(tmp_path):
    data_dir = tmp_path / "data"
    with served(data_dir) as (url, _):
        assert httpx.post(f"{url}/v1/models", json=MODEL, timeout=60).status_code == 201
    with sqlite3.connect(data_dir / FILE_NAME) as db:  # as if restored from a minute-old copy
        db.execute("UPDATE epoch_marker SET clock = clock - 60000")
    with served_with_a_loss(data_dir, workers=2) as url:
        assert [store_loss_gauge(url) for _ in range(12)] == [1.0] * 12
        answer = httpx.post(f"{url}/v1/store/acknowledge-loss", timeout=60)
        acknowledged = answer.json()["acknowledged"]
        assert "went back in time" in acknowledged["store"]
        assert [store_loss_gauge(url) for _ in range(12)] == [0.0] * 12
