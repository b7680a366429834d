"""Servers killed with ``kill -9`` while clients send (a real uvicorn process, concurrent
one-event clients) and the check that nothing acknowledged was lost, shared by the kill tests
(test_group_commit_kill.py, test_stream_kill.py, test_kept_score_kill.py,
test_log_processes.py) and test_stream_groups.py."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator

import httpx
import numpy as np

from loadtest.local import create_model, free_port, start_uvicorn, stop, wait_ready
from service import models
from service.engine import Engine
from service.ingest import Batch
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore
from tests.service.conftest import CLOCK_ARRAYS

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
