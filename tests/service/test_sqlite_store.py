"""The SQLite store beyond the protocol tests every store runs (tests/service/test_stores.py):
a ``kill -9`` loses nothing acknowledged, processes sharing the file never lose or double-apply
a commit, two uvicorn workers learn exactly what one process learns, and a busy database is a
503.  Its files and its data directory: test_sqlite_files.py."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.engine.entries import Entry
from service.errors import InsufficientStorage, StaleVersion, StoreUnavailable
from service.settings import Settings
from service.stores.base import Commit
from service.stores.sqlite import SQLiteStore
from service.stores.sqlite_file import FILE_NAME
from tests.service.conftest import events_json, make_stream
from tests.service.server_helpers import ROOT, served

MODEL = {"id": "fraud", "n_features": 5, "learner": "spam"}


def _state(http: httpx.Client) -> dict:
    """Everything a client can see of the model."""
    metrics = http.get("/v1/models/fraud/metrics").json()
    return {
        "info": http.get("/v1/models/fraud").json(),
        "weights": http.get("/v1/models/fraud/weights").json(),
        "window": metrics["window"],
        "since_start": metrics["since_start"],
        "counts": metrics["counts"],
    }


def test_kill_9_loses_nothing_acknowledged(tmp_path):
    data_dir = tmp_path / "data"
    X, y = make_stream(400, seed=3)
    ids = [f"e{i}" for i in range(300)]
    with served(data_dir) as (url, process), httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/models", json=MODEL).status_code == 201
        for start in range(0, 300, 100):
            rows = slice(start, start + 100)
            body = events_json(X[rows], y[rows], ids[rows])
            assert http.post("/v1/models/fraud/events", json=body).json()["learned"] == 100
        scored_ids = [f"s{i}" for i in range(10)]
        scored = http.post("/v1/models/fraud/score", json=events_json(X[300:310], ids=scored_ids))
        assert scored.json()["kept"] == 10
        labels = [{"id": f"s{i}", "y": int(y[300 + i])} for i in range(3)]
        assert http.post("/v1/models/fraud/labels", json=labels).json()["learned"] == 3
        before = _state(http)
        process.send_signal(signal.SIGKILL)  # no shutdown, no checkpoint
        process.wait(timeout=30)
    assert before["info"]["counts"]["events_learned"] == 303

    with served(data_dir) as (url, _), httpx.Client(base_url=url, timeout=60) as http:
        assert http.get("/v1/models").json()["models"] == ["fraud"]
        assert _state(http) == before  # state, version, metrics: identical
        again = http.post("/v1/models/fraud/events", json=events_json(X[:300], y[:300], ids))
        assert again.json()["learned"] == 0 and again.json()["duplicates"] == 300
        labels = [{"id": f"s{i}", "y": int(y[300 + i])} for i in range(10)]
        results = http.post("/v1/models/fraud/labels", json=labels).json()["results"]
        # the labels joined before the kill are known, the 7 pending records survived it
        assert [r["status"] for r in results] == ["duplicate"] * 3 + ["learned"] * 7
        assert http.get("/v1/models/fraud").json()["counts"]["events_learned"] == 310


def test_two_workers_on_one_file_learn_exactly_what_one_memory_process_learns(tmp_path):
    """Batches sent one after another, each on a new connection (either worker may take it):
    each worker notices the other's commits through the version, so the result is the
    memory store's in one process, bit for bit."""
    X, y = make_stream(600, seed=8)
    bodies = [
        orjson.dumps(events_json(X[s : s + 50], y[s : s + 50], [f"e{i}" for i in range(s, s + 50)]))
        for s in range(0, 600, 50)
    ]
    headers = {"content-type": "application/json"}
    with served(tmp_path / "data", workers=2) as (url, _):
        assert httpx.post(f"{url}/v1/models", json=MODEL, timeout=60).status_code == 201
        for body in bodies:
            response = httpx.post(
                f"{url}/v1/models/fraud/events", content=body, headers=headers, timeout=60
            )
            assert response.json()["learned"] == 50
        with httpx.Client(base_url=url, timeout=60) as http:
            shared = _state(http)

    with TestClient(create_app(Settings(store="memory", warmup=False))) as http:
        http.post("/v1/models", json=MODEL)
        for body in bodies:
            http.post("/v1/models/fraud/events", content=body, headers=headers)
        alone = _state(http)  # type: ignore[arg-type]
    for state in (shared, alone):  # the two models' own identity
        del state["info"]["config"]["created_at"], state["info"]["config"]["incarnation"]
    assert shared == alone
    assert shared["info"]["version"] == 1 + len(bodies)


RACER = textwrap.dedent(
    """
    import sys
    from service.engine.entries import Entry
    from service.errors import StaleVersion
    from service.stores.base import Commit
    from service.stores.sqlite import SQLiteStore

    data_dir, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SQLiteStore.open(data_dir)
    stale = 0
    for number in range(count):
        while True:
            loaded = store.load("counter")
            commit = Commit(loaded.version, loaded.incarnation, Entry(1.0),
                            learned_ids=[f"{name}-{number}"], id_expiry=1e12, now=1.0)
            try:
                store.commit("counter", commit)
                break
            except StaleVersion:
                stale += 1
    print(stale)
    """
)


def test_processes_racing_on_one_file_never_lose_or_repeat_a_commit(tmp_path):
    """Four processes each append an entry 40 times, reloading on a stale version: the
    version check and the write are one transaction (BEGIN IMMEDIATE), so the log ends with
    160 entries exactly, one version per commit, and every id remembered."""
    store = SQLiteStore.open(tmp_path)
    store.create_model("counter", {}, {"n": np.zeros(1, dtype=np.int64)}, "inc")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path), f"p{i}", "40"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(4)
    ]
    for racer in racers:
        assert int(racer.communicate(timeout=300)[0]) >= 0  # it printed its stale commits
        assert racer.returncode == 0
    loaded = store.load("counter")
    assert [version for version, _ in loaded.entries] == list(range(2, 162))
    assert loaded.version == 161
    every_id = [f"p{i}-{n}" for i in range(4) for n in range(40)]
    assert store.seen("counter", every_id, now=2.0).all()
    store.close()


def test_a_stale_commit_of_another_process_writes_nothing(tmp_path):
    first, second = SQLiteStore.open(tmp_path), SQLiteStore.open(tmp_path)  # two "processes"
    arrays = {"w": np.zeros(3)}
    first.create_model("m", {"id": "m"}, arrays, "inc")
    base = second.load("m")
    assert first.commit("m", Commit(1, "inc", Entry(1.0), learned_ids=["a"],
                                    id_expiry=1e12, now=1.0)) == 2  # fmt: skip
    second.put_pending("m", {"p": b"record"}, deadline=5.0)
    refused = Commit(base.version, base.incarnation, Entry(2.0), learned_ids=["b"],
                     remove_pending=["p"], meta={"k": "v"}, id_expiry=1e12, now=1.0)  # fmt: skip
    with pytest.raises(StaleVersion):
        second.commit("m", refused)
    current = second.load("m", base.version, base.incarnation)  # the cache is not current
    assert current.version == 2 and [version for version, _ in current.entries] == [2]
    assert current.entries[0][1].now == 1.0
    assert "k" not in current.meta
    assert second.seen("m", ["a", "b"], now=2.0).tolist() == [True, False]
    assert second.get_pending("m", ["p"]) == {"p": (b"record", 5.0)}
    for store in (first, second):
        store.close()


def test_records_kept_at_a_head_are_written_only_while_it_is_the_models(tmp_path):
    """``put_pending_at``: the records of scores a cached model gave, written by one
    transaction that checks the model's (version, incarnation) is still the one that scored;
    when another process moved it, nothing is written (nor counted), so the scores can be
    given again by the model caught up."""
    first, second = SQLiteStore.open(tmp_path), SQLiteStore.open(tmp_path)  # two "processes"
    first.create_model("m", {"id": "m"}, {"w": np.zeros(3)}, "inc")
    second.put_pending_at("m", (1, "inc"), {"a": b"at 1"}, deadline=5.0)
    assert first.commit("m", Commit(1, "inc", Entry(1.0), id_expiry=1e12, now=1.0)) == 2
    for head in ((1, "inc"), (2, "other"), (3, "inc")):
        with pytest.raises(StaleVersion):
            second.put_pending_at("m", head, {"a": b"stale", "b": b"stale"}, deadline=9.0)
    assert second.get_pending("m", ["a", "b"]) == {"a": (b"at 1", 5.0)}
    second.put_pending_at("m", (2, "inc"), {"b": b"at 2"}, deadline=6.0, max_records=2)
    with pytest.raises(InsufficientStorage):
        second.put_pending_at("m", (2, "inc"), {"c": b"over"}, deadline=7.0, max_records=2)
    assert second.get_pending("m", ["a", "b", "c"]) == {"a": (b"at 1", 5.0), "b": (b"at 2", 6.0)}
    row = sqlite3.connect(tmp_path / FILE_NAME).execute("SELECT pending FROM models").fetchone()
    assert row == (2,)  # the refused writes counted nothing
    first.close()
    second.close()


def test_closing_the_store_while_threads_write_waits_for_them_then_refuses(tmp_path):
    """close() while other threads append entries, keep records and read: the calls in flight
    finish (closing a connection under a running statement crashed the process), every later
    call is a clear 503, and what was acknowledged is exactly what the file holds."""

    store = SQLiteStore.open(tmp_path)
    for model_id in ("a0", "a1", "k"):
        store.create_model(model_id, {}, {"w": np.zeros(3)}, "inc")
    entry = Entry(5.0, np.ones((1, 3)), np.array([1]))
    acknowledged: dict[str, int] = {}
    progress: dict[str, int] = {}  # calls done so far, by thread
    refusals: dict[str, str] = {}
    started = threading.Barrier(4)

    def append(model_id: str) -> None:
        started.wait()
        done = 0
        try:
            while True:
                commit = Commit(1 + done, "inc", entry=entry, learned_ids=[f"e{done}"],
                                id_expiry=1e12, now=1.0)  # fmt: skip
                store.commit(model_id, commit)
                done += 1
                progress[model_id] = done
                store.seen(model_id, [f"e{done - 1}"], now=2.0)
        except StoreUnavailable as error:
            acknowledged[model_id], refusals[model_id] = done, str(error)

    def keep(model_id: str) -> None:
        started.wait()
        done = 0
        try:
            while True:
                store.put_pending(model_id, {f"p{done}": b"record"}, deadline=5.0)
                done += 1
                progress[model_id] = done
                store.get_pending(model_id, [f"p{done - 1}"])
        except StoreUnavailable as error:
            acknowledged[model_id], refusals[model_id] = done, str(error)

    threads = [threading.Thread(target=append, args=(m,)) for m in ("a0", "a1")]
    threads.append(threading.Thread(target=keep, args=("k",)))
    for thread in threads:
        thread.start()
    started.wait()
    # every thread has written, and goes on, when the store closes (waited for: 0.3 s of sleep
    # could pass on a loaded machine before a thread's first write)
    deadline = time.monotonic() + 120
    while len(progress) < 3 or min(progress.values()) < 2:
        assert time.monotonic() < deadline, progress
        time.sleep(0.01)
    store.close()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert sorted(refusals) == ["a0", "a1", "k"]
    assert all("store is closed" in refusal for refusal in refusals.values())
    assert all(acknowledged.values())  # the threads were writing when it closed
    for call in (lambda: store.load("a0"), lambda: store.seen("a0", ["e0"], now=2.0),
                 lambda: store.database.connection()):  # fmt: skip
        with pytest.raises(StoreUnavailable, match="store is closed"):
            call()
    store.close()  # again: nothing to do
    reopened = SQLiteStore.open(tmp_path)
    for model_id in ("a0", "a1"):
        loaded = reopened.load(model_id)
        assert loaded.version == 1 + acknowledged[model_id] == 1 + len(loaded.entries)
    kept = [f"p{n}" for n in range(acknowledged["k"] + 1)]
    assert list(reopened.get_pending("k", kept)) == kept[:-1]
    reopened.close()


def test_a_busy_database_is_a_503_not_a_hang(tmp_path, monkeypatch):
    """Another process holding the write lock longer than the busy timeout: the request
    gets 503 (store unavailable), and the next one succeeds once the lock is released."""
    monkeypatch.setattr("service.stores.sqlite_file.BUSY_TIMEOUT_SECONDS", 0.2)
    settings = Settings(store="sqlite", data_dir=tmp_path, warmup=False)
    with TestClient(create_app(settings)) as http:
        assert http.post("/v1/models", json=MODEL).status_code == 201
        X, y = make_stream(5)
        blocker = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        response = http.post("/v1/models/fraud/events", json=events_json(X, y))
        assert response.status_code == 503, response.text
        assert response.json()["type"].endswith("/store-unavailable")
        assert time.monotonic() - started < 10
        blocker.execute("ROLLBACK")
        blocker.close()
        assert http.post("/v1/models/fraud/events", json=events_json(X, y)).status_code == 200
