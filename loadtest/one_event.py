"""One event per request, as fraud pipelines send them: server CPU per event against the HTTP
floor, two checkouts alternated in one run.

    python -m loadtest.one_event --peer before=/work/main --peer after=. [--bare]

Each peer is served by one uvicorn process (``--server-path``: the checkout it imports, the
embedded SQLite store with ``synchronous=full`` in a fresh directory, a model created with
no parameters but its width: learner ``auto``), and measured in turns (``--rounds``):

``healthz``  the HTTP floor: ``GET /healthz`` (a constant body through the same server stack)
             from ``--clients`` concurrent keep-alive connections, closed loop
``events``   one labelled event with a fresh id per ``POST /events``, same clients, closed loop
``score``    one event with an id (kept for a label) per ``POST /score`` at ``--rate``
             requests/s, open loop: latency from the *scheduled* send time

``--bare`` adds a peer ``bare``: a bare ASGI app (``loadtest/bare.py``) under the same uvicorn,
measured on the ``healthz`` phase only (the server's own floor).  ``--phases`` picks phases.

Server CPU is read from ``/proc/<pid>/stat`` of the server process before and after each
phase (its user + system time), so the generator's CPU is never counted.  Prints one line per
peer, phase and round, then the medians; the load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

from loadtest.client import Connection, build_request
from loadtest.local import create_model, free_port, start_uvicorn, stop, wait_ready
from loadtest.run import process_cpu_seconds

MODEL = "one"


def _event_request(host: str, path: str, event: dict) -> bytes:
    body = orjson.dumps({"events": [event]})
    return build_request("POST", path, host, body, "application/json")


async def _closed_loop(url: str, clients: int, seconds: float, make) -> tuple[int, int]:
    """``clients`` connections each sending ``make(client, n)`` back to back for ``seconds``;
    (requests answered 2xx, other answers)."""
    host, port = url.removeprefix("http://").split(":")
    ok = bad = 0
    deadline = time.monotonic() + seconds

    async def client(number: int) -> None:
        nonlocal ok, bad
        connection = await Connection(host, int(port)).open()
        n = 0
        try:
            while time.monotonic() < deadline:
                status, _ = await connection.request(make(number, n))
                n += 1
                if 200 <= status < 300:
                    ok += 1
                else:
                    bad += 1
        finally:
            await connection.close()

    await asyncio.gather(*(client(k) for k in range(clients)))
    return ok, bad


async def _open_loop(
    url: str, rate: float, seconds: float, connections: int, make
) -> tuple[list[float], int]:
    """``rate`` requests/s for ``seconds`` over a pool of ``connections``; each request's
    latency from its scheduled send time (seconds), and the count of non-2xx answers."""
    host, port = url.removeprefix("http://").split(":")
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await Connection(host, int(port)).open())
    latencies: list[float] = []
    bad = 0

    async def one(n: int, scheduled: float) -> None:
        nonlocal bad
        connection = await pool.get()
        try:
            status, _ = await connection.request(make(0, n))
        finally:
            pool.put_nowait(connection)
        latencies.append(time.monotonic() - scheduled)
        bad += not 200 <= status < 300

    start = time.monotonic()
    tasks = []
    for n in range(int(rate * seconds)):
        scheduled = start + n / rate
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(n, scheduled)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        await pool.get_nowait().close()
    return latencies, bad


class Peer:
    """One checkout served by its own uvicorn process."""

    def __init__(
        self,
        name: str,
        path: Path,
        features: int,
        store: str = "sqlite",
        *,
        bare: bool = False,
        settings: dict[str, str] | None = None,
        workers: int = 1,
    ) -> None:
        self.name, self.path, self.features, self.bare = name, path.resolve(), features, bare
        self.data = tempfile.mkdtemp(prefix=f"aucstream-one-{name}-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {
            **os.environ,
            "PYTHONPATH": str(self.path),
            "AUCSTREAM_STORE": store,
            "AUCSTREAM_DATA_DIR": self.data,
            "AUCSTREAM_LOG_LEVEL": "warning",
            **(settings or {}),
        }
        if bare:
            command = [sys.executable, "-m", "uvicorn", "loadtest.bare:app", "--host",
                       "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
                       "--no-access-log"]  # fmt: skip
            self.process = subprocess.Popen(command, env=environment, cwd=self.path)
        else:
            self.process = start_uvicorn(
                self.port, environment, workers, access_log=False, cwd=self.path
            )
        self.sent = 0

    def ready(self) -> None:
        wait_ready(self.url, self.process, timeout=600)
        if self.bare:
            return
        with httpx.Client(base_url=self.url, timeout=60) as http:
            create_model(http, {"id": MODEL, "n_features": self.features})

    def cpu(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def close(self) -> None:
        stop(self.process)
        shutil.rmtree(self.data, ignore_errors=True)


def _events_maker(peer: Peer, x: list[float], host: str):
    path = f"/v1/models/{MODEL}/events"

    def make(client: int, n: int) -> bytes:
        peer.sent += 1
        event = {"id": f"e{peer.sent}", "x": x, "y": 1 if peer.sent % 7 == 0 else -1}
        return _event_request(host, path, event)

    return make


def _score_maker(peer: Peer, x: list[float], host: str):
    path = f"/v1/models/{MODEL}/score"

    def make(client: int, n: int) -> bytes:
        peer.sent += 1
        return _event_request(host, path, {"id": f"s{peer.sent}", "x": x})

    return make


async def measure(peer: Peer, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    host = f"127.0.0.1:{peer.port}"
    x = np.round(np.random.default_rng(0).normal(size=peer.features), 4).tolist()
    healthz = build_request("GET", "/healthz", host)
    phases = {
        "healthz": lambda: _closed_loop(
            peer.url, args.clients, args.seconds, lambda client, n: healthz
        ),
        "events": lambda: _closed_loop(
            peer.url, args.clients, args.seconds, _events_maker(peer, x, host)
        ),
        "score": lambda: _open_loop(
            peer.url, args.rate, args.seconds, args.clients, _score_maker(peer, x, host)
        ),
    }
    figures: dict[str, dict[str, float]] = {}
    for phase, run in phases.items():
        if phase not in args.phases or (peer.bare and phase != "healthz"):
            continue
        cpu, wall = peer.cpu(), time.monotonic()
        outcome = await run()
        cpu, wall = peer.cpu() - cpu, time.monotonic() - wall
        if phase == "score":
            latencies, bad = outcome
            answered = len(latencies)
            ms = np.array(latencies) * 1e3
            figures[phase] = {
                "per_s": answered / wall,
                "cpu_ms": cpu / answered * 1e3,
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "bad": bad,
            }
        else:
            ok, bad = outcome
            figures[phase] = {"per_s": ok / wall, "cpu_ms": cpu / max(ok, 1) * 1e3, "bad": bad}
    return figures


def _line(name: str, phase: str, figures: dict[str, float]) -> str:
    text = f"{name:>8} {phase:>8}: {figures['per_s']:9,.0f}/s  cpu {figures['cpu_ms']:.3f} ms"
    if "p99_ms" in figures:
        text += f"  p50 {figures['p50_ms']:.2f} ms  p99 {figures['p99_ms']:.2f} ms"
    return text + (f"  non-2xx {figures['bad']:.0f}" if figures["bad"] else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--peer", action="append", default=[], help="NAME=CHECKOUT (repeat; default: this one)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rate", type=float, default=1000.0, help="/score requests per second")
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--bare", action="store_true", help="add a bare ASGI app's floor")
    parser.add_argument("--phases", default="healthz,events,score", type=lambda v: v.split(","))
    args = parser.parse_args()
    specs = args.peer or [f"this={Path.cwd()}"]
    peers = []
    for spec in specs:
        name, _, path = spec.partition("=")
        peers.append(Peer(name, Path(path), args.features, args.store))
    if args.bare:
        peers.append(Peer("bare", Path.cwd(), args.features, args.store, bare=True))
    print("load average at start:", open("/proc/loadavg").read().strip())
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for peer in peers:
            peer.ready()
        for peer in peers:  # a short warm-up: caches, the first commits
            if peer.bare:
                continue
            asyncio.run(
                _closed_loop(peer.url, 8, 1.0, _events_maker(peer, [0.0] * args.features, "h"))
            )
        for round_number in range(args.rounds):
            order = peers if round_number % 2 == 0 else peers[::-1]
            for peer in order:
                for phase, figures in asyncio.run(measure(peer, args)).items():
                    print(_line(peer.name, phase, figures), flush=True)
                    results.setdefault((peer.name, phase), []).append(figures)
    finally:
        for peer in peers:
            peer.close()
    print("load average at end:", open("/proc/loadavg").read().strip())
    print("medians over the rounds:")
    for (name, phase), runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(_line(name, phase, median))


if __name__ == "__main__":
    main()
