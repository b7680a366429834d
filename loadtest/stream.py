"""One WebSocket stream connection, one event per message: events learned and scores answered
per second, and the server's CPU per event, on the memory and Redis stores.

Not a test: prints one table.  Usage::

    python -m loadtest.stream                       # 50,000 events, JSON and binary, memory
    python -m loadtest.stream --stores memory redis --events 100000 --rounds 3

Latency: single-event score messages sent at a fixed rate (``--latency-rate``, default
10,000/s) without waiting for replies; each round trip is timed from the send to its reply.

Method: a uvicorn process (warmed up, one worker) per store; a ``spam`` model with 50 dense
features; the package's ``StreamClient`` sends the events pipelined (``learn_events`` /
``score_events``: one message per event, up to ``window`` unanswered), in alternated rounds of
each encoding.  Rates are events over wall time of the call; "server ms/event" is the server
process's CPU time (``/proc/<pid>/stat``) over the events.  The load average is printed: this
machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator

import httpx
import numpy as np

from loadtest.local import create_model, private_redis
from loadtest.run import uvicorn_server
from service.client import StreamClient

N_FEATURES = 50


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def server(store: str) -> Iterator[tuple[str, int]]:
    """A warmed-up uvicorn on ``store`` (a private Redis for ``redis``): ``(url, pid)``."""
    with contextlib.ExitStack() as stack:
        redis_url = stack.enter_context(private_redis())[0] if store == "redis" else None
        yield stack.enter_context(uvicorn_server(store, redis_url))


def measure(url: str, pid: int, model: str, binary: bool, n_events: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    y = (rng.random(n_events) < 0.1).astype(np.int64)
    X = rng.normal(size=(n_events, N_FEATURES)) + 0.5 * y[:, None]
    ids = [f"{model}-{i}" for i in range(n_events)]
    with StreamClient(url, model, binary=binary) as stream:
        before, started = cpu_seconds(pid), time.perf_counter()
        totals = stream.learn_events(X, y, ids)
        learn_wall, learn_cpu = time.perf_counter() - started, cpu_seconds(pid) - before
        assert totals.learned == n_events, totals
        before, started = cpu_seconds(pid), time.perf_counter()
        scores = stream.score_events(X, keep=False)
        score_wall, score_cpu = time.perf_counter() - started, cpu_seconds(pid) - before
        assert len(scores) == n_events
    return {
        "learn/s": n_events / learn_wall,
        "learn ms/event": 1e3 * learn_cpu / n_events,
        "score/s": n_events / score_wall,
        "score ms/event": 1e3 * score_cpu / n_events,
    }


def score_latency(url: str, model: str, rate: float, seconds: float) -> dict[str, float]:
    """Round trips of single-event score messages sent at ``rate`` per second (paced, not
    waiting for replies) for ``seconds``: p50 / p99 / max in ms, and the rate reached."""
    import asyncio

    import orjson
    from websockets.asyncio.client import connect

    from service.client import stream_url

    async def run() -> dict[str, float]:
        row = np.random.default_rng(1).normal(size=N_FEATURES).tolist()
        n = int(rate * seconds)
        sent_at = np.zeros(n)
        latency = np.full(n, np.nan)
        async with connect(stream_url(url, model), max_size=None) as socket:

            async def receive() -> None:
                done = 0
                while done < n:
                    for reply in orjson.loads(await socket.recv()):
                        seq = int(reply["seq"])
                        latency[seq] = time.perf_counter() - sent_at[seq]
                        done += 1

            reader = asyncio.create_task(receive())
            started = time.perf_counter()
            for seq in range(n):
                delay = started + seq / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent_at[seq] = time.perf_counter()
                message = {"seq": seq, "op": "score", "x": row, "keep": False}
                await socket.send(orjson.dumps(message).decode())
            await reader
            elapsed = time.perf_counter() - started
        ms = 1e3 * latency
        return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
                "max": float(ms.max()), "rate": n / elapsed}  # fmt: skip

    return asyncio.run(run())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", nargs="+", default=["memory"], choices=("memory", "redis"))
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency-rate", type=float, default=10_000,
                        help="score messages/s of the latency run (0: none)")  # fmt: skip
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.events:,} events per run")
    print(f"{'store':<8} {'encoding':<8} {'learn/s':>10} {'ms/event':>9} {'score/s':>10} "
          f"{'ms/event':>9}")  # fmt: skip
    for store in args.stores:
        with server(store) as (url, pid), httpx.Client(base_url=url) as http:
            for round_ in range(args.rounds):
                for binary in (False, True):
                    model = f"m{round_}{int(binary)}"
                    body = {"id": model, "n_features": N_FEATURES, "learner": "spam",
                            "regret_window": 0}  # fmt: skip
                    create_model(http, body)
                    rates = measure(url, pid, model, binary, args.events)
                    print(
                        f"{store:<8} {'binary' if binary else 'json':<8} "
                        f"{rates['learn/s']:>10,.0f} {rates['learn ms/event']:>9.4f} "
                        f"{rates['score/s']:>10,.0f} {rates['score ms/event']:>9.4f}"
                    )
            if args.latency_rate:
                model = "latency"
                body = {"id": model, "n_features": N_FEATURES, "learner": "spam",
                        "regret_window": 0}  # fmt: skip
                create_model(http, body)
                got = score_latency(url, model, args.latency_rate, args.latency_seconds)
                print(
                    f"{store}: score round trip at {got['rate']:,.0f} messages/s (one event "
                    f"each, JSON): p50 {got['p50']:.3f} ms, p99 {got['p99']:.3f} ms, "
                    f"max {got['max']:.1f} ms"
                )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
