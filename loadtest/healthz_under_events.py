"""``/healthz`` latency while one-event ``POST /events`` traffic runs, for two checkouts
alternated in one run: does a pass (its learner calls, transaction and fsync) run on the event
loop hold the other requests up?

    python -m loadtest.healthz_under_events --peer before=/work/wt/B --peer after=.

Each checkout is served as :mod:`loadtest.log_path` serves it (one uvicorn process, SQLite
``synchronous=full``, a default model warmed by ``--warm-events``); per round and client count
C, C clients send one labelled event per request back to back (closed loops, keep-alive) for
``--seconds`` while a separate process sends ``GET /healthz`` every ``--every`` ms over its own
connection and times each answer.  Prints, per peer, C and round: events per second, and the
``/healthz`` answers' count, median, 99th percentile and maximum (ms); then the medians over
the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import statistics
import time
from pathlib import Path

import numpy as np

from loadtest.log_path import _events, _warm
from loadtest.one_event import MODEL, Peer, _closed_loop


def _poll(port: int, seconds: float, every: float, out: multiprocessing.Queue) -> None:
    """``GET /healthz`` every ``every`` seconds for ``seconds``; the latencies (s) to ``out``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.perf_counter()
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        latencies.append(time.perf_counter() - began)
        time.sleep(max(0.0, every - (time.perf_counter() - began)))
    connection.close()
    out.put(latencies)


def round_of(peer: Peer, clients: int, args: argparse.Namespace) -> dict[str, float]:
    x = np.round(np.random.default_rng(0).normal(size=peer.features), 4).tolist()
    out: multiprocessing.Queue = multiprocessing.Queue()
    poller = multiprocessing.Process(
        target=_poll, args=(peer.port, args.seconds, args.every / 1e3, out)
    )
    poller.start()
    ok, _ = asyncio.run(_closed_loop(peer.url, clients, args.seconds, _events(peer, x, [MODEL])))
    latencies = sorted(out.get(timeout=120))
    poller.join()
    ms = [value * 1e3 for value in latencies]
    return {
        "events/s": ok / args.seconds,
        "n": len(ms),
        "p50": ms[len(ms) // 2],
        "p99": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
        "max": ms[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="NAME=CHECKOUT (repeat)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--every", type=float, default=10.0, help="ms between two /healthz")
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--warm-events", type=int, default=8000)
    args = parser.parse_args()
    settings = {"AUCSTREAM_CHECKPOINT_SECONDS": "3600"}
    peers = [
        Peer(name, Path(path), args.features, settings=settings)
        for name, _, path in (spec.partition("=") for spec in args.peer or [f"this={Path.cwd()}"])
    ]
    print("load average at start:", open("/proc/loadavg").read().strip(), flush=True)
    results: dict[tuple[str, int, str], list[float]] = {}
    try:
        for peer in peers:
            peer.ready()
            _warm(peer, args)
        for round_number in range(args.rounds):
            for peer in peers if round_number % 2 == 0 else peers[::-1]:
                for clients in args.clients:
                    figures = round_of(peer, clients, args)
                    print(
                        f"{peer.name:>8} events@{clients}: {figures['events/s']:,.0f} events/s; "
                        f"/healthz n {figures['n']:.0f}, p50 {figures['p50']:.2f} ms, "
                        f"p99 {figures['p99']:.2f} ms, max {figures['max']:.2f} ms",
                        flush=True,
                    )
                    for key, value in figures.items():
                        results.setdefault((peer.name, clients, key), []).append(value)
    finally:
        for peer in peers:
            peer.close()
    print("load average at end:", open("/proc/loadavg").read().strip())
    print(
        "\n| peer | events@C | events/s | /healthz p50 | p99 | max |\n|---|---|---:|---:|---:|---:|"
    )
    for peer in peers:
        for clients in args.clients:
            med = {
                key: statistics.median(results[(peer.name, clients, key)])
                for key in ("events/s", "p50", "p99", "max")
            }
            print(
                f"| {peer.name} | events@{clients} | {med['events/s']:,.0f} | {med['p50']:.2f} ms "
                f"| {med['p99']:.2f} ms | {med['max']:.2f} ms |"
            )


if __name__ == "__main__":
    main()
