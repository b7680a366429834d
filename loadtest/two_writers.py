"""Two API processes writing one hot model (issue 36, item 4): does each get its share?

    python -m loadtest.two_writers --peer before=/work/wt/B --peer after=. \\
        --store redis sqlite --clients 16 --seconds 20 --rounds 2

A peer is ``NAME=CHECKOUT[:SETTING=VALUE,...]``.  For each store and each peer, two separate
API processes (``uvicorn --workers 1`` each, on their own ports, so that every answer is
known to come from one of them) share one store: a ``redis-server`` of the peer's own (AOF,
``appendfsync always``) or one SQLite file in a fresh directory.  A default model (``auto``)
of ``--features`` features is created and warmed by ``--warm-events`` events; then, in turns
(``--rounds``, the peers' order alternated), ``--clients`` keep-alive connections *per
process* send one labelled event with a fresh id per ``POST /events`` to that model, closed
loop, for ``--seconds``.

Printed per process: events acknowledged, 503 answers (``contention``: the request wrote
nothing, and is sent again with the same id, as a client does), server CPU (user + system of
the process tree, from ``/proc``) per acknowledged event (and of both processes per event
acknowledged by either), and per round the fairness ratio, the fewer acknowledgements of the
two processes over the more (1: an even share).  Redis's own CPU is apart.  A Markdown table
of the medians, and the load average at the start and the end of each round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from loadtest.client import Connection
from loadtest.local import (
    PrivateRedis,
    create_model,
    free_port,
    start_uvicorn,
    stop,
    wait_ready,
)
from loadtest.log_path import post_warm_events
from loadtest.one_event import MODEL, _event_request
from loadtest.peer_processes import tree_cpu_seconds


class TwoWriters:
    """A checkout served by two API processes on one store."""

    def __init__(self, spec: str, store: str, features: int) -> None:
        self.name, _, rest = spec.partition("=")
        path, _, extra = rest.partition(":")
        self.path = Path(path).resolve()
        self.features = features
        self.data = tempfile.mkdtemp(prefix=f"aucstream-two-{self.name}-")
        settings = dict(pair.split("=", 1) for pair in extra.split(",") if pair)
        self.redis: PrivateRedis | None = None
        if store == "redis":
            self.redis = PrivateRedis("aof", "--appendfsync", "always")
            self.redis.start()
            settings["AUCSTREAM_REDIS_URL"] = self.redis.url
        environment = {
            **os.environ,
            "PYTHONPATH": str(self.path),
            "AUCSTREAM_STORE": store,
            "AUCSTREAM_DATA_DIR": self.data,
            "AUCSTREAM_LOG_LEVEL": "warning",
            **settings,
        }
        self.ports = [free_port(), free_port()]
        self.processes = [
            start_uvicorn(port, environment, 1, access_log=False, cwd=self.path)
            for port in self.ports
        ]
        self.sent = 0

    def ready(self, warm_events: int) -> None:
        for port, process in zip(self.ports, self.processes, strict=True):
            wait_ready(f"http://127.0.0.1:{port}", process, timeout=900)
        with httpx.Client(base_url=f"http://127.0.0.1:{self.ports[0]}", timeout=300) as http:
            create_model(http, {"id": MODEL, "n_features": self.features})
            post_warm_events(http, MODEL, warm_events, self.features)

    def close(self) -> None:
        for process in self.processes:
            stop(process)
        if self.redis is not None:
            self.redis.close()
        shutil.rmtree(self.data, ignore_errors=True)


async def _closed_loop(peer: TwoWriters, port: int, clients: int, deadline: float, x: list):
    """(events acknowledged, 503 answers) of ``clients`` connections to one process."""
    host = f"127.0.0.1:{port}"
    path = f"/v1/models/{MODEL}/events"
    ok = refused = 0

    async def client() -> None:
        nonlocal ok, refused
        connection = await Connection("127.0.0.1", port).open()
        try:
            while time.monotonic() < deadline:
                peer.sent += 1
                n = peer.sent
                event = {"id": f"e{n}", "x": x, "y": 1 if n % 7 == 0 else -1}
                request = _event_request(host, path, event)
                while True:  # a 503 wrote nothing: the same event again
                    status, _ = await connection.request(request)
                    if status != 503:
                        break
                    refused += 1
                    if time.monotonic() >= deadline:
                        return
                if not 200 <= status < 300:
                    raise RuntimeError(f"{peer.name}: answered {status}")
                ok += 1
        finally:
            await connection.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return ok, refused


async def _both(peer: TwoWriters, clients: int, seconds: float, x: list):
    deadline = time.monotonic() + seconds
    return await asyncio.gather(
        *(_closed_loop(peer, port, clients, deadline, x) for port in peer.ports)
    )


def measure(peer: TwoWriters, args: argparse.Namespace) -> dict[str, float]:
    x = np.round(np.random.default_rng(0).normal(size=peer.features), 4).tolist()
    redis_pid = None if peer.redis is None else peer.redis.process.pid  # type: ignore[union-attr]
    redis_cpu = 0.0 if redis_pid is None else tree_cpu_seconds(redis_pid)
    cpu = [tree_cpu_seconds(process.pid) for process in peer.processes]
    answers = asyncio.run(_both(peer, args.clients, args.seconds, x))
    cpu = [tree_cpu_seconds(p.pid) - c for p, c in zip(peer.processes, cpu, strict=True)]
    figures: dict[str, float] = {}
    for k, ((ok, refused), seconds) in enumerate(zip(answers, cpu, strict=True)):
        figures[f"p{k} acks"] = ok
        figures[f"p{k} 503"] = refused
        figures[f"p{k} cpu ms"] = seconds / max(ok, 1) * 1e3
    acks = [ok for ok, _ in answers]
    figures["fairness"] = min(acks) / max(max(acks), 1)
    figures["cpu ms"] = sum(cpu) / max(sum(acks), 1) * 1e3
    figures["per s"] = sum(acks) / args.seconds
    if redis_pid is not None:
        figures["redis ms"] = (tree_cpu_seconds(redis_pid) - redis_cpu) / max(sum(acks), 1) * 1e3
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="NAME=CHECKOUT[:K=V,...]")
    parser.add_argument("--store", nargs="+", default=["redis", "sqlite"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16, help="per process")
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--warm-events", type=int, default=3000)
    args = parser.parse_args()
    print("load average at start:", open("/proc/loadavg").read().strip(), flush=True)
    results: dict[tuple[str, str, str], list[float]] = {}
    for store in args.store:
        peers = [TwoWriters(spec, store, args.features) for spec in args.peer]
        try:
            for peer in peers:
                peer.ready(args.warm_events)
            for round_number in range(args.rounds):
                for peer in peers if round_number % 2 == 0 else peers[::-1]:
                    figures = measure(peer, args)
                    print(
                        f"{store} {peer.name:>8} round {round_number}: "
                        + ", ".join(f"{key} {value:.3f}" for key, value in figures.items()),
                        "| load", open("/proc/loadavg").read().strip(),
                        flush=True,
                    )  # fmt: skip
                    for key, value in figures.items():
                        results.setdefault((store, peer.name, key), []).append(value)
        finally:
            for peer in peers:
                peer.close()
    print("load average at end:", open("/proc/loadavg").read().strip())
    print(
        "\n| store | peer | acks p0 / p1 (rounds) | 503 p0 / p1 | fairness min/max, median "
        "(rounds) | server CPU ms/ack p0 / p1 | both | Redis CPU ms/ack | acks/s |"
        "\n|---|---|---|---|---|---|---|---|---|"
    )
    for store in args.store:
        for spec in args.peer:
            name = spec.partition("=")[0]

            def of(key: str, store: str = store, name: str = name) -> list[float]:
                return results.get((store, name, key), [])

            acks = ", ".join(
                f"{a:.0f}/{b:.0f}" for a, b in zip(of("p0 acks"), of("p1 acks"), strict=True)
            )
            fair = ", ".join(f"{v:.2f}" for v in of("fairness"))
            print(
                f"| {store} | {name} | {acks} | {sum(of('p0 503')):.0f} / "
                f"{sum(of('p1 503')):.0f} | **{_median(of('fairness')):.2f}** ({fair}) | "
                f"{_median(of('p0 cpu ms')):.2f} / {_median(of('p1 cpu ms')):.2f} | "
                f"{_median(of('cpu ms')):.2f} | "
                f"{_median(of('redis ms')):.2f} | {_median(of('per s')):,.0f} |"
            )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    main()
