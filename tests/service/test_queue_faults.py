"""Queue mode under faults, with real processes: ``aucstream worker`` processes killed with
SIGKILL and restarted, two workers on one model, and a Redis (append-only file, fsync always)
killed and restarted during ingest through a real uvicorn API.

The reference of "learned exactly once, in order" is a sync-mode model fed the same requests:
its stored arrays must equal the queue-mode model's byte for byte (the wall-clock throughput
counters excepted), which fails if any event is lost, learned twice or learned out of order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import httpx
import numpy as np
import orjson
import pytest
import redis

from loadtest.local import free_port
from service.stores import keys
from tests.service.conftest import (
    ON_REDIS_AND_CLUSTER,
    events_json,
    make_stream,
)
from tests.service.queue_helpers import (
    applied_entries,
    assert_same_state,
    queue_and_sync_models,
    redis_arrays,
    wait_for,
)
from tests.service.server_helpers import uvicorn_server


def wait_drained(client: redis.Redis, model: str, n_entries: int) -> None:
    """Until the workers applied ``n_entries`` entries of ``model`` and acknowledged them all."""
    # (generous: hang detectors, waited out only when something is wrong)
    wait_for(lambda: applied_entries(client, model) == n_entries, 300, "did not finish", 0.02)
    wait_for(
        lambda: client.xpending(keys.stream(model), keys.WORKER_GROUP)["pending"] == 0,
        120,
        "entries left unacknowledged",
        0.02,
    )


@ON_REDIS_AND_CLUSTER
def test_sigkill_mid_batch_and_restart_ends_in_the_uninterrupted_state(
    any_redis, rclient, workers, tmp_path
):
    n_entries = 60
    X, y = make_stream(n_entries * 100, seed=21)
    with queue_and_sync_models(any_redis, 7) as (queued, sync):
        for number in range(n_entries):
            rows = slice(number * 100, (number + 1) * 100)
            body = orjson.dumps(events_json(X[rows], y[rows]))  # no ids: the checkpoint alone
            headers = {"content-type": "application/json"}
            assert (
                queued.post("/v1/models/q/events", content=body, headers=headers).status_code == 202
            )
            assert (
                sync.post("/v1/models/ref/events", content=body, headers=headers).status_code == 200
            )

        kills = []
        for attempt, fraction in enumerate((0.3, 0.6)):
            threshold = int(fraction * n_entries)

            def mid_batch(t: int = threshold) -> bool:
                # past the threshold, with entries read and not yet acknowledged
                return applied_entries(rclient, "q") >= t and bool(
                    rclient.xpending(keys.stream("q"), keys.WORKER_GROUP)["pending"]
                )

            for retry in range(5):  # the signal may land just after an XACK: kill again then
                worker = workers(any_redis, f"doomed-{attempt}-{retry}")
                wait_for(mid_batch, 300, "no progress", 0.0005)
                worker.send_signal(signal.SIGKILL)
                worker.wait(timeout=10)
                pending = rclient.xpending(keys.stream("q"), keys.WORKER_GROUP)["pending"]
                assert applied_entries(rclient, "q") < n_entries, "finished before the kill"
                if pending:  # killed mid-batch: read, maybe committed, not acknowledged
                    kills.append((applied_entries(rclient, "q"), pending, retry))
                    break
            else:
                pytest.fail("could not kill the worker mid-batch in 5 tries")

        # SIGTERM while busy: the worker finishes its read, commits, acknowledges, gives the
        # lease back and exits 0
        polite = workers(any_redis, "polite")
        # it holds the lease only once it runs, its SIGTERM handler installed (on a loaded
        # machine the doomed workers may already have passed the 70 % mark before it started)
        wait_for(lambda: rclient.get(keys.lease("q")) == b"polite", 300, "polite never ran")
        # and has applied entries of its own, so it is past its recovery of the doomed
        # workers' pending entries (a SIGTERM during it leaves what it claimed pending)
        busy = max(int(0.7 * n_entries), applied_entries(rclient, "q") + 2)
        wait_for(lambda: applied_entries(rclient, "q") >= busy, 300, "stuck")
        polite.send_signal(signal.SIGTERM)
        assert polite.wait(timeout=120) == 0
        assert rclient.xpending(keys.stream("q"), keys.WORKER_GROUP)["pending"] == 0
        assert not rclient.exists(keys.lease("q"))
        graceful_at = applied_entries(rclient, "q")
        assert graceful_at < n_entries, "finished before the SIGTERM"

        last = workers(any_redis, "survivor")
        wait_drained(rclient, "q", n_entries)
        last.send_signal(signal.SIGTERM)
        assert last.wait(timeout=120) == 0  # graceful: finishes, releases its lease
        assert not rclient.exists(keys.lease("q"))

        assert queued.get("/v1/models/q").json()["counts"]["events_learned"] == len(X)
        assert_same_state(rclient, "q", "ref")
    log = (tmp_path / "survivor.log").read_bytes()
    print(
        f"killed at (entries applied, pending, retries) {kills}, stopped at {graceful_at} "
        f"of {n_entries} entries"
    )
    assert b"worker survivor stopped" in log


@ON_REDIS_AND_CLUSTER
def test_two_workers_on_one_model_lose_and_repeat_nothing(any_redis, rclient, workers):
    n_posts = 80
    X, y = make_stream(n_posts * 50, seed=22)
    with queue_and_sync_models(any_redis, 3) as (queued, sync):
        first, second = workers(any_redis, "alpha"), workers(any_redis, "beta")
        killed = None
        for number in range(n_posts):
            rows = slice(number * 50, (number + 1) * 50)
            ids = [f"e{i}" for i in range(rows.start, rows.stop)]
            body = orjson.dumps(events_json(X[rows], y[rows], ids))
            headers = {"content-type": "application/json"}
            assert (
                queued.post("/v1/models/q/events", content=body, headers=headers).status_code == 202
            )
            sync.post("/v1/models/ref/events", content=body, headers=headers)
            if number == n_posts // 2:
                # the writer dies mid-stream; the other one takes over after its lease
                wait_for(lambda: rclient.get(keys.lease("q")) is not None, 120, "no writer")
                holder = rclient.get(keys.lease("q")).decode()
                killed = first if holder == "alpha" else second
                killed.send_signal(signal.SIGKILL)
            time.sleep(0.005)
        survivor = second if killed is first else first
        wait_drained(rclient, "q", n_posts)
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=120) == 0
        counts = queued.get("/v1/models/q").json()["counts"]
        assert counts["events_learned"] == len(X) and counts["duplicates"] == 0
        assert rclient.zcard(keys.seen("q")) == len(X)
        assert_same_state(rclient, "q", "ref")


# ---------------------------------------------------------------------------- Redis restart
@contextlib.contextmanager
def durable_redis():
    """A private redis-server with the append-only file on and fsync on every write."""
    port = free_port()
    directory = tempfile.mkdtemp(prefix="aucstream-aof-")
    command = [
        shutil.which("redis-server") or "redis-server",
        "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory,
        "--appendonly", "yes", "--appendfsync", "always",
        "--logfile", os.path.join(directory, "redis.log"),
    ]  # fmt: skip
    processes: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(process)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return process
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, "no redis"
                time.sleep(0.02)

    try:
        start()
        yield f"redis://127.0.0.1:{port}/0", processes, start
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def test_redis_restart_during_ingest_loses_no_acknowledged_event(workers):
    n_clients, n_posts, batch = 4, 30, 40
    X, y = make_stream(n_clients * n_posts * batch, seed=23)
    with durable_redis() as (url, processes, start_redis):
        with uvicorn_server(1, AUCSTREAM_REDIS_URL=url, AUCSTREAM_MODE="queue") as api:
            with httpx.Client(base_url=api, timeout=60) as http:
                created = http.post(
                    "/v1/models",
                    json={"id": "m", "n_features": 5, "scaling": "none", "learner": "spam"},
                )
                assert created.status_code == 201
            workers(url, "w")
            acknowledged: set[str] = set()
            attempts = {"sent": 0, "errors": 0, "resent": 0}
            lock = threading.Lock()
            progress = threading.Event()

            def post(http: httpx.Client, body: bytes, ids: list[str]) -> None:
                deadline = time.monotonic() + 300
                while True:  # a client retries on connection errors, timeouts, 503 and 429
                    assert time.monotonic() < deadline, "could not post for 300 s"
                    with lock:
                        attempts["sent"] += 1
                    try:
                        response = http.post(
                            "/v1/models/m/events",
                            content=body,
                            headers={"content-type": "application/json"},
                        )
                    except httpx.TransportError:
                        response = None
                    if response is not None and response.status_code == 202:
                        with lock:
                            acknowledged.update(ids)
                        return
                    assert response is None or response.status_code in (429, 503), response.text
                    with lock:
                        attempts["errors"] += 1
                    time.sleep(0.05)

            def client(index: int) -> None:
                with httpx.Client(base_url=api, timeout=2.0) as http:
                    for number in range(index, n_clients * n_posts, n_clients):
                        rows = slice(number * batch, (number + 1) * batch)
                        ids = [f"e{i}" for i in range(rows.start, rows.stop)]
                        body = orjson.dumps(events_json(X[rows], y[rows], ids))
                        post(http, body, ids)
                        if number % 7 == 0:  # the answer "timed out": the client sends it again
                            with lock:
                                attempts["resent"] += 1
                            post(http, body, ids)
                        if number > n_clients * n_posts // 3:
                            progress.set()

            threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
            for thread in threads:
                thread.start()
            assert progress.wait(300)
            processes[-1].send_signal(signal.SIGKILL)  # Redis dies mid-ingest ...
            processes[-1].wait(timeout=10)
            time.sleep(0.5)
            start_redis()  # ... and comes back from its append-only file
            for thread in threads:
                thread.join(timeout=120)
            assert len(acknowledged) == len(X)

            store = redis.Redis.from_url(url)
            try:
                appended = lambda: int(store.hget(keys.queue("m"), "events") or 0)  # noqa: E731
                applied = lambda: int(store.hget(keys.meta("m"), "queue:events") or 0)  # noqa: E731
                wait_for(lambda: applied() == appended(), 300, "the worker did not catch up", 0.05)
                with httpx.Client(base_url=api, timeout=60) as http:
                    metrics = http.get("/v1/models/m/metrics").json()
                counts = metrics["counts"]
                assert metrics["queue"]["events"] == 0
                # every acknowledged event learned once; each request appended again holds
                # nothing but duplicates, which change nothing (the model's count included)
                assert counts["events_learned"] == len(X)
                assert appended() - len(X) >= attempts["resent"] * batch
                assert counts["duplicates"] == 0
                assert store.zcard(keys.seen("m")) == len(X)
                arrays = redis_arrays(store, "m")
                assert arrays["learner:n_seen"][0] == len(X)
                np.testing.assert_allclose(
                    arrays["learner:class_sum_pos"], X[y == 1].sum(axis=0), rtol=1e-9
                )
                print(f"posts: {attempts}; appended {appended()} events for {len(X)} distinct")
            finally:
                store.close()
