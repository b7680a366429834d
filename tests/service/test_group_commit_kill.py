"""Nothing acknowledged is lost when the server is killed (``kill -9``) while groups of
requests are being committed: a real uvicorn process, real HTTP, concurrent one-event clients
(so requests are merged into groups, service.engine.coalesce), on SQLite, Redis (AOF synced on
every write), two API processes appending to one model on either, and in queue mode.

After the kill and a restart: every acknowledged event is in the model (sent again, it is a
duplicate), none is counted twice (sending every event again learns exactly those that were not
in), and the state equals a replay of the events learned.  Every event is the same labelled
event (with its own id), so the replay does not depend on the order of the requests inside a
group, which the clients cannot see."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

from loadtest.local import create_model, stop
from service import models
from service.engine import Engine
from service.ingest import Batch
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore
from service.stores.sqlite import SQLiteStore
from tests.service.conftest import CLOCK_ARRAYS, WORKER_ENV
from tests.service.kill_helpers import (
    MODEL,
    Senders,
    Server,
    check_nothing_lost,
    kill_while_sending,
    shared_writes,
    snapshot_arrays,
    sqlite_server,
    started_server,
    two_servers,
)


@pytest.mark.parametrize("n_models", [1, 8])
def test_sqlite_kill_during_group_commits(tmp_path, n_models):
    """Killed while group commits are written: every model keeps each acknowledged event
    once.  With eight models' clients at once their groups are applied in passes whose one
    transaction holds the entries of several models (service.engine.coalesce)."""
    names = ("m",) if n_models == 1 else tuple(f"m{k}" for k in range(n_models))
    with sqlite_server(tmp_path, names) as server:
        acknowledged, unknown = kill_while_sending(server, models=names)
        server.start()
        for name in names:
            check_nothing_lost(
                server.url,
                [i for i in acknowledged if i.startswith(f"{name}:")],
                [i for i in unknown if i.startswith(f"{name}:")],
                queue=False,
                model=name,
            )


def test_redis_kill_during_group_commits(tmp_path, synced_redis):
    environment = {"AUCSTREAM_STORE": "redis", "AUCSTREAM_REDIS_URL": synced_redis.url}
    with started_server(tmp_path, environment) as server:
        acknowledged, unknown = kill_while_sending(server)
        synced_redis.kill()  # Redis too: what it acknowledged is in its AOF
        synced_redis.start()
        server.start()
        check_nothing_lost(server.url, acknowledged, unknown, queue=False)


#: events acknowledged by the two processes together, counted from each one's
#: :data:`FIRST_ACKS`-th, before the kill: the kill falls while both append.  Each process must
#: have a tenth of them (judged after the durability checks): a stale append takes the model's
#: turn at once, so the other process's appends wait while the stale one goes back and catches
#: up, instead of running free (service/engine/turns.py; loadtest/README.md, "S")
SHARED_ACKS = 1000
FIRST_ACKS = 50


@pytest.mark.parametrize("store", ["redis", "sqlite"])
def test_two_processes_killed_during_appends_to_one_model(tmp_path, request, store):
    """Two API processes on one Redis (or one SQLite file, as ``--workers 2``) append to one
    model, each catching up on the other's entries (a replicated state machine) and taking
    turns when one's append was stale (service/engine/turns.py), so each gets a share of the
    acknowledgements; both killed, Redis too: nothing acknowledged is lost, nothing is in
    twice, and the state is that of the events learned."""
    if store == "redis":
        redis = request.getfixturevalue("synced_redis")
        environment = {"AUCSTREAM_STORE": "redis", "AUCSTREAM_REDIS_URL": redis.url}
    else:
        environment = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(tmp_path / "data")}
    with two_servers(environment, tmp_path) as servers:
        with httpx.Client(base_url=servers[0].url, timeout=60) as http:
            create_model(http, MODEL)
        sending = [
            Senders(server.url, seconds=120, prefix=f"s{number}")
            for number, server in enumerate(servers)
        ]
        for senders in sending:  # counted from here: both are past their start
            senders.wait_for(FIRST_ACKS, *servers)
        first = [len(senders.acknowledged) for senders in sending]
        shares = first
        while sum(shares) < SHARED_ACKS:
            for senders in sending:
                senders.check(*servers)
            time.sleep(0.02)
            shares = [len(s.acknowledged) - n for s, n in zip(sending, first, strict=True)]
        judged = (
            f"acknowledged by each process: {shares} (refused for contention: "
            f"{[senders.contended for senders in sending]}; their shared writes: "
            f"{[shared_writes(server.url) for server in servers]})"
        )
        print(judged)
        for server in servers:
            server.kill()
        for senders in sending:
            senders.join()
        if store == "redis":
            redis.kill()
            redis.start()
        servers[0].start()
        acknowledged = [event_id for senders in sending for event_id in senders.acknowledged]
        unknown = [event_id for senders in sending for event_id in senders.unknown]
        check_nothing_lost(servers[0].url, acknowledged, unknown, queue=False)
    assert min(shares) >= sum(shares) / 10, judged


def test_queue_mode_kill_during_group_commits(tmp_path, synced_redis):
    environment = {
        "AUCSTREAM_STORE": "redis",
        "AUCSTREAM_REDIS_URL": synced_redis.url,
        "AUCSTREAM_MODE": "queue",
    }
    worker_env = {**os.environ, **WORKER_ENV, **environment}

    def worker(name: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--name", name],
            env=worker_env,
            stdout=log,
            stderr=log,
        )

    with open(tmp_path / "server.log", "ab") as log:
        server = Server(environment, log)
        server.start()
        first = worker("w1")
        second = None
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                create_model(http, MODEL)
            acknowledged, unknown = kill_while_sending(server, first)
            synced_redis.kill()
            synced_redis.start()
            server.start()
            second = worker("w2")
            check_nothing_lost(server.url, acknowledged, unknown, queue=True)
        finally:
            stop(server.process)
            for process in (first, second):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()


def test_sqlite_kill_after_logged_fits_recovers_the_fitted_model(tmp_path):
    """Boosted fits are log entries: one client sends labelled events of both classes in order
    to a model whose trees are fitted every few dozen events, the server is killed, and the
    restarted one rebuilds it from the log (fits installed from their logged arrays): its
    state is that of the library learning the events it holds, in order."""
    from tests.service.log_helpers import BOOSTED

    model = {"id": "m", "n_features": 3, "learner": "boosted_embedded", "params": BOOSTED,
             "regret_window": 0}  # fmt: skip
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(20_000, 3))
    labels = np.where(rows[:, 0] * rows[:, 1] > 0, 1, -1)
    acknowledged: list[int] = []

    def client(url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            for k in range(len(labels)):
                event = {"id": f"e{k}", "x": rows[k].tolist(), "y": int(labels[k])}
                try:
                    response = http.post("/v1/models/m/events", json={"events": [event]})
                except httpx.TransportError:
                    return
                assert response.status_code == 200, response.text
                acknowledged.append(k)

    environment = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(tmp_path / "data"),
                   # no checkpoint: the restart replays the whole log
                   "AUCSTREAM_CHECKPOINT_EVENTS": "1000000",
                   "AUCSTREAM_CHECKPOINT_SECONDS": "1000000"}  # fmt: skip
    with started_server(tmp_path, environment, (model,)) as server:
        sender = threading.Thread(target=client, args=(server.url,))
        sender.start()
        while len(acknowledged) < 400:  # several fits installed and logged
            assert sender.is_alive(), "the sender stopped"
            time.sleep(0.02)
        server.kill()
        sender.join(timeout=60)
        store = SQLiteStore.open(tmp_path / "data")
        logged = [fit for _, entry in store.load("m").entries for fit in entry.fits]
        store.close()
        assert len(logged) >= 5  # what the restart installs instead of fitting
        server.start()
        with httpx.Client(base_url=server.url, timeout=60) as http:
            deadline = time.monotonic() + 300
            while (answer := http.get("/v1/models/m")).status_code == 503:
                # the learner's kernels still loading in the new process: sent again
                assert "warming-up" in answer.text and time.monotonic() < deadline, answer.text
                time.sleep(0.5)
            info = answer.json()
            learned = info["counts"]["events_learned"]
            assert len(acknowledged) <= learned <= len(acknowledged) + 1
            assert info["fits"][0]["fits"] >= 5
            stored = snapshot_arrays(http)
    engine = Engine(MemoryStore())
    models.create_model(engine, ModelCreate(**model))
    engine.learn("m", Batch(rows[:learned], labels[:learned], None))
    expected = engine.state_arrays("m")[2]
    assert stored.keys() == expected.keys()
    for name, value in expected.items():
        if name not in CLOCK_ARRAYS:
            np.testing.assert_array_equal(stored[name], value, err_msg=name)
