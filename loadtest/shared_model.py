"""Several processes writing one store (issue 36, item 4): server CPU per event, 503 answers and
p99 latency, with checkouts (or settings of one checkout) alternated in one run.

    python -m loadtest.shared_model --peer before=/work/wt/B --peer catch-up=. \\
        --peer lease=.:AUCSTREAM_PROTO_LEASE=1 --store sqlite redis --workers 2 4

A peer is ``NAME=CHECKOUT[:SETTING=VALUE,...]``.  For each store and each ``--workers N``, each
peer is served by ``uvicorn --workers N`` (N processes on one SQLite file in a fresh directory,
or on a ``redis-server`` of its own with AOF and ``appendfsync always``), with a default model
(``auto``) of ``--features`` features warmed by ``--warm-events`` events and ``--models`` more;
the ``--models`` cached by each process (``--warm-seconds`` of the ``spread`` traffic); then,
in turns (``--rounds``, the peers' order alternated), closed loops of ``--clients``
keep-alive connections sending one labelled event with a fresh id per ``POST /events``:

``one``     every request to the one warmed model (every process writes it: contention)
``spread``  round-robin over the ``--models`` models

Server CPU is user + system of the server's process tree (``/proc``), Redis's CPU apart (it is
printed as ``redis``); the generator's CPU is never counted.  A request answered 503 (the
``contention`` problem) is counted and sent again with the same id, as a client does; p99 is
over the 2xx answers, from send to answer.  Prints one line per peer, phase and round, a
Markdown table of the medians, and the load average at the start and the end.  (The stale
appends are not counted: a process sets its Prometheus figure only when it answers a scrape,
and the kernel, not the client, picks the worker that answers.)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import httpx
import numpy as np

from loadtest.client import Connection
from loadtest.local import PrivateRedis, create_model, wait_ready
from loadtest.log_path import _wait_for_all_kernels, post_warm_events
from loadtest.one_event import MODEL, Peer, _event_request
from loadtest.peer_processes import tree_cpu_seconds


class SharedPeer(Peer):
    """A checkout served by ``workers`` uvicorn processes on one store."""

    def __init__(self, spec: str, store: str, workers: int, features: int) -> None:
        name, _, rest = spec.partition("=")
        path, _, extra = rest.partition(":")
        settings = dict(pair.split("=", 1) for pair in extra.split(",") if pair)
        settings["AUCSTREAM_WORKERS"] = str(workers)
        self.redis: PrivateRedis | None = None
        if store == "redis":
            self.redis = PrivateRedis("aof", "--appendfsync", "always")
            self.redis.start()
            settings["AUCSTREAM_REDIS_URL"] = self.redis.url
        super().__init__(name, Path(path), features, store, settings=settings, workers=workers)
        self.workers = workers

    def ready(self) -> None:
        wait_ready(self.url, self.process, timeout=900, answers=4 * self.workers)
        # each worker's background warm-up (kernel groups, tens of seconds of CPU) out of the
        # phases: a fresh connection per check reaches the workers in turn
        for _ in range(4 * self.workers):
            _wait_for_all_kernels(self)

    def close(self) -> None:
        super().close()
        if self.redis is not None:
            self.redis.close()


async def _closed_loop(peer: Peer, clients: int, seconds: float, paths: list[str], x: list):
    """(events acknowledged, 503 answers, latencies of the 2xx answers in seconds)."""
    host = f"127.0.0.1:{peer.port}"
    ok = refused = 0
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def client(number: int) -> None:
        nonlocal ok, refused
        connection = await Connection("127.0.0.1", peer.port).open()
        try:
            while time.monotonic() < deadline:
                peer.sent += 1
                n = peer.sent
                event = {"id": f"e{n}", "x": x, "y": 1 if n % 7 == 0 else -1}
                request = _event_request(host, paths[n % len(paths)], event)
                while True:  # a 503 wrote nothing: the same event again
                    start = time.monotonic()
                    status, _ = await connection.request(request)
                    if status != 503:
                        break
                    refused += 1
                if not 200 <= status < 300:
                    raise RuntimeError(f"{peer.name}: answered {status}")
                latencies.append(time.monotonic() - start)
                ok += 1
        finally:
            await connection.close()

    await asyncio.gather(*(client(k) for k in range(clients)))
    return ok, refused, latencies


def _warm(peer: Peer, args: argparse.Namespace) -> None:
    with httpx.Client(base_url=peer.url, timeout=300) as http:
        for body in [{"id": MODEL}, *({"id": f"r{k}"} for k in range(args.models))]:
            create_model(http, {**body, "n_features": args.features})
        post_warm_events(http, MODEL, args.warm_events, args.features)


def _phases(args: argparse.Namespace) -> dict[str, list[str]]:
    return {
        "one": [f"/v1/models/{MODEL}/events"],
        "spread": [f"/v1/models/r{k}/events" for k in range(args.models)],
    }


def _warm_spread(peer: SharedPeer, args: argparse.Namespace) -> None:
    """The spread's models cached by every process before it is measured: ``--warm-seconds``
    of its traffic (each model loaded by each process it reaches)."""
    x = [0.0] * args.features
    asyncio.run(_closed_loop(peer, args.clients, args.warm_seconds, _phases(args)["spread"], x))


def measure(peer: SharedPeer, args: argparse.Namespace) -> dict[str, float]:
    x = np.round(np.random.default_rng(0).normal(size=peer.features), 4).tolist()
    phases = _phases(args)
    figures = {}
    for phase, paths in phases.items():
        redis_pid = None if peer.redis is None else peer.redis.process.pid  # type: ignore[union-attr]
        redis_cpu = 0.0 if redis_pid is None else tree_cpu_seconds(redis_pid)
        cpu = tree_cpu_seconds(peer.process.pid)
        ok, refused, latencies = asyncio.run(
            _closed_loop(peer, args.clients, args.seconds, paths, x)
        )
        cpu = tree_cpu_seconds(peer.process.pid) - cpu
        figures[f"{phase} cpu ms"] = cpu / max(ok, 1) * 1e3
        if redis_pid is not None:
            figures[f"{phase} redis ms"] = (tree_cpu_seconds(redis_pid) - redis_cpu) / ok * 1e3
        figures[f"{phase} per s"] = ok / args.seconds
        figures[f"{phase} 503"] = refused
        figures[f"{phase} p99 ms"] = float(np.percentile(latencies, 99)) * 1e3
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="NAME=CHECKOUT[:K=V,...]")
    parser.add_argument("--store", nargs="+", default=["sqlite", "redis"])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--warm-events", type=int, default=3000)
    parser.add_argument("--warm-seconds", type=float, default=10.0, help="spread warm-up")
    args = parser.parse_args()
    print("load average at start:", open("/proc/loadavg").read().strip(), flush=True)
    results: dict[tuple[str, int, str, str], list[float]] = {}
    for store in args.store:
        for workers in args.workers:
            peers = [SharedPeer(spec, store, workers, args.features) for spec in args.peer]
            try:
                for peer in peers:
                    peer.ready()
                    _warm(peer, args)
                    _warm_spread(peer, args)
                for round_number in range(args.rounds):
                    order = peers if round_number % 2 == 0 else peers[::-1]
                    for peer in order:
                        for key, value in measure(peer, args).items():
                            print(f"{store} x{workers} {peer.name:>9} {key}: {value:.3f}")
                            results.setdefault((store, workers, peer.name, key), []).append(value)
                    print("load average:", open("/proc/loadavg").read().strip(), flush=True)
            finally:
                for peer in peers:
                    peer.close()
    print("load average at end:", open("/proc/loadavg").read().strip())
    print(
        "\n| store | processes | peer | phase | server CPU ms/event | Redis CPU ms/event "
        "| events/s | 503 answers | p99 ms |\n|---|---|---|---|---|---|---|---|---|"
    )
    names = [spec.partition("=")[0] for spec in args.peer]
    for store in args.store:
        for workers in args.workers:
            for phase in ("one", "spread"):
                for name in names:
                    key = (store, workers, name, phase)
                    print(
                        f"| {store} | {workers} | {name} | {phase} | "
                        f"{_median(results, key, 'cpu ms'):.2f} | "
                        f"{_median(results, key, 'redis ms'):.2f} | "
                        f"{_median(results, key, 'per s'):,.0f} | "
                        f"{sum(results.get((*key[:3], f'{phase} 503'), [])):.0f} | "
                        f"{_median(results, key, 'p99 ms'):.0f} |"
                    )


def _median(results: dict, key: tuple[str, int, str, str], figure: str) -> float:
    values = results.get((*key[:3], f"{key[3]} {figure}"))
    return statistics.median(values) if values else float("nan")


if __name__ == "__main__":
    main()
