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

import contextlib
import io
import os
import re
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from loadtest.local import PrivateRedis, create_model, free_port, start_uvicorn, stop, wait_ready
from service import models
from service.engine import Engine
from service.ingest import Batch
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore
from service.stores.sqlite import SQLiteStore
from tests.service.conftest import CLOCK_ARRAYS, WORKER_ENV

X = [0.5, -1.25, 2.0]
MODEL = {"id": "m", "n_features": len(X), "regret_window": 0}
CLIENTS = 16


class Server:
    def __init__(self, environment: dict[str, str], log) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.environment = {**os.environ, "AUCSTREAM_LOG_LEVEL": "warning", **environment}
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = start_uvicorn(
            self.port, self.environment, access_log=False, stdout=self.log, stderr=self.log
        )
        wait_ready(self.url, self.process, timeout=180, interval=0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


class Senders:
    """``CLIENTS`` threads posting one event each, back to back, for ``seconds`` (client k to
    ``models[k % len(models)]``, its ids starting with the model's): the ids acknowledged (2xx),
    those whose answer never came (the kill), and why each client stopped (for the message
    of a test that finds them all stopped before it killed anything)."""

    def __init__(
        self, url: str, seconds: float, prefix: str = "", models: tuple[str, ...] = ("m",)
    ) -> None:
        self.url = url
        self.acknowledged: list[str] = []
        self.unknown: list[str] = []
        self.ended: list[str] = []
        self.failures: list[str] = []
        #: answers refusing a write for contention (sent again)
        self.contended = 0
        self.started = time.monotonic()
        self.deadline = self.started + seconds
        self.threads = [
            threading.Thread(target=self._client, args=(k, models[k % len(models)], prefix))
            for k in range(CLIENTS)
        ]
        for thread in self.threads:
            thread.start()

    def _client(self, number: int, model: str, prefix: str) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            n = 0
            while time.monotonic() < self.deadline:
                event_id = f"{model}:{prefix}c{number}-{n}"
                try:
                    response = http.post(
                        f"/v1/models/{model}/events",
                        json={"events": [{"id": event_id, "x": X, "y": 1}]},
                    )
                except httpx.TransportError as error:
                    self.unknown.append(event_id)
                    self._end(f"client {number}: {error!r} at {event_id}")
                    return
                if response.status_code == 503 and "contention" in response.json()["type"]:
                    self.contended += 1
                    continue  # refused before anything was written: sent again, same id
                if response.status_code not in (200, 202):
                    self.failures.append(f"{event_id}: {response.status_code} {response.text}")
                    self._end(f"client {number}: answered {response.status_code}")
                    return
                self.acknowledged.append(event_id)
                n += 1
        self._end(f"client {number}: its {self.deadline - self.started:.0f} s were over")

    def _end(self, why: str) -> None:
        self.ended.append(f"{why} ({time.monotonic() - self.started:.1f} s in)")

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def join(self) -> None:
        """Waits for the clients (after the kill); AssertionError if any was answered
        anything but an acknowledgement or a refusal for contention."""
        for thread in self.threads:
            thread.join(timeout=60)
        assert not self.failures, "\n".join(self.failures)

    def wait_for(self, acknowledged: int, *servers: Server) -> None:
        """Until ``acknowledged`` events are (see :meth:`check`)."""
        while len(self.acknowledged) < acknowledged:
            self.check(*servers)
            time.sleep(0.02)

    def check(self, *servers: Server) -> None:
        """AssertionError if every client stopped, saying why each stopped, how many writes
        were refused for contention and whether the servers are still running."""
        if not self.alive():
            processes = [s.process.poll() if s.process else None for s in servers]
            logs = {s.log.name for s in servers}
            raise AssertionError(
                f"every client of {self.url} stopped after {len(self.acknowledged)} "
                f"acknowledged events and {self.contended} refusals for contention "
                f"(exit codes of the servers, None if running: "
                f"{processes}):\n"
                + "\n".join(self.ended)
                + "".join(
                    f"\nthe end of {name}:\n{open(name, errors='replace').read()[-4000:]}"
                    for name in logs
                )
            )


def kill_while_sending(
    server: Server, *others: subprocess.Popen, models: tuple[str, ...] = ("m",)
) -> tuple[list[str], list[str]]:
    senders = Senders(server.url, seconds=60, models=models)
    senders.wait_for(300, server)  # groups are being committed
    server.kill()
    for process in others:
        process.kill()
        process.wait()
    senders.join()
    return list(senders.acknowledged), list(senders.unknown)


def replayed_state(n_events: int) -> dict[str, np.ndarray]:
    engine = Engine(MemoryStore())
    models.create_model(engine, ModelCreate(**MODEL))
    y = np.ones(n_events, dtype=np.int64)
    engine.learn("m", Batch(np.tile(X, (n_events, 1)), y, [f"r{k}" for k in range(n_events)]))
    return engine.state_arrays("m")[2]


def snapshot_arrays(http: httpx.Client, model: str = "m") -> dict[str, np.ndarray]:
    """The state arrays of ``model``'s snapshot."""
    snapshot = http.get(f"/v1/models/{model}/snapshot")
    assert snapshot.status_code == 200
    with zipfile.ZipFile(io.BytesIO(snapshot.content)) as archive:
        return {
            name.removeprefix("arrays/").removesuffix(".npy"): np.load(
                io.BytesIO(archive.read(name)), allow_pickle=False
            )
            for name in archive.namelist()
            if name.startswith("arrays/")
        }


def check_nothing_lost(
    url: str, acknowledged: list[str], unknown: list[str], queue: bool, model: str = "m"
):
    """Every acknowledged event of ``model`` is in it once, none of the others twice, and its
    state is that of the events learned (``acknowledged`` and ``unknown``: its ids only)."""
    with httpx.Client(base_url=url, timeout=60) as http:
        if queue:  # the backlog is learned by the worker
            deadline = time.monotonic() + 120
            while http.get(f"/v1/models/{model}").json()["counts"]["events_learned"] < len(
                acknowledged
            ):
                assert time.monotonic() < deadline, "the queued events were not all learned"
                time.sleep(0.2)
            time.sleep(1.0)  # entries of unknown outcome, if appended, are learned too
        counts = http.get(f"/v1/models/{model}").json()["counts"]
        learned = counts["events_learned"]
        assert len(acknowledged) <= learned <= len(acknowledged) + len(unknown)
        # the model's state is what learning that many events gives, once each
        stored = snapshot_arrays(http, model)
        assert stored
        expected = replayed_state(learned)
        assert stored.keys() == expected.keys()
        for name, value in expected.items():
            if name in CLOCK_ARRAYS:
                continue
            np.testing.assert_array_equal(stored[name], value, err_msg=name)
        if queue:
            return
        # every acknowledged event is in: sent again, each is a duplicate
        for start in range(0, len(acknowledged), 500):
            part = acknowledged[start : start + 500]
            again = http.post(
                f"/v1/models/{model}/events",
                json={"events": [{"id": i, "x": X, "y": 1} for i in part]},
            ).json()
            assert again["learned"] == 0 and again["duplicate_ids"] == part
        # none twice: the unknown ones learned now are exactly those that were not in
        if unknown:
            rest = http.post(
                f"/v1/models/{model}/events",
                json={"events": [{"id": i, "x": X, "y": 1} for i in unknown]},
            ).json()
            assert learned + rest["learned"] == len(acknowledged) + len(unknown)


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


@contextlib.contextmanager
def started_server(
    tmp_path, environment: dict[str, str], models: tuple[dict, ...] = (MODEL,)
) -> Iterator[Server]:
    """A started server on the store of ``environment`` with the ``models`` created, its
    output in ``server.log``; stopped on leaving, whatever happened."""
    with open(tmp_path / "server.log", "ab") as log:
        server = Server(environment, log)
        server.start()
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                for model in models:
                    create_model(http, model)
            yield server
        finally:
            stop(server.process)


def sqlite_server(tmp_path, names: tuple[str, ...] = ("m",)):
    """:func:`started_server` on an SQLite file in ``tmp_path`` with the models ``names`` (of
    ``MODEL``)."""
    environment = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(tmp_path / "data")}
    return started_server(tmp_path, environment, tuple({**MODEL, "id": n} for n in names))


@pytest.fixture
def synced_redis():
    """A private redis-server whose AOF is synced on every write."""
    redis = PrivateRedis("aof", "--appendfsync", "always")
    redis.start()
    yield redis
    redis.close()


def test_redis_kill_during_group_commits(tmp_path, synced_redis):
    environment = {"AUCSTREAM_STORE": "redis", "AUCSTREAM_REDIS_URL": synced_redis.url}
    with started_server(tmp_path, environment) as server:
        acknowledged, unknown = kill_while_sending(server)
        synced_redis.kill()  # Redis too: what it acknowledged is in its AOF
        synced_redis.start()
        server.start()
        check_nothing_lost(server.url, acknowledged, unknown, queue=False)


@contextlib.contextmanager
def two_servers(environment: dict[str, str], tmp_path) -> Iterator[list[Server]]:
    """Two API processes on one store (``environment``), their output in ``server.log``;
    those still running are stopped on leaving, whatever happened."""
    with open(tmp_path / "server.log", "ab") as log:
        servers = [Server(environment, log), Server(environment, log)]
        try:
            for server in servers:
                server.start()
            yield servers
        finally:
            for server in servers:
                if server.process is not None:
                    stop(server.process)


def shared_writes(url: str) -> dict[str, float]:
    """A server's ``aucstream_shared_model_writes`` by outcome."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.findall(r'^aucstream_shared_model_writes\{outcome="(\w+)"\} (\S+)$', text, re.M)
    return {outcome: float(value) for outcome, value in found}


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
    from tests.service.test_log_fits import BOOSTED

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
