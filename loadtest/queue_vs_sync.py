"""Ingest throughput of queue mode (API + 1 worker, Redis on loopback) against sync mode.

Run (starts its own redis-server, uvicorn API and worker; loopback only)::

    python -m loadtest.queue_vs_sync                      # JSON and NPZ, 5 s each, both modes
    python -m loadtest.queue_vs_sync --seconds 10 --formats npz

For each mode and body format, ``--connections`` clients post pre-encoded batches of
``--batch`` labelled events (``--features`` dense features) back to back for ``--seconds``
(closed loop; a 429 is retried after 20 ms).  Reported per row:

``accepted/s``   events answered 200 (sync: learned) or 202 (queue: appended) per second
``learned/s``    events learned per second from the first request until the model has learned
                 everything that was accepted (queue mode: until the worker has drained the
                 backlog) — the end-to-end figure to compare
``backlog``      queue mode: events accepted and not yet learned when the clients stopped
``p50 / p99``    request latency (ms)
CPU seconds of each process (API, worker, Redis) over the row, and the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass

import httpx
import numpy as np

from loadtest.client import Connection, build_request, check_loopback
from loadtest.local import create_model
from loadtest.run import MAX_REQUESTS, json_body, make_batches, npz_body
from loadtest.stack import stack

CONTENT_TYPES = {"json": "application/json", "npz": "application/x-npz"}


@dataclass
class Row:
    mode: str
    body: str
    accepted: int
    learned: int
    rejected_429: int
    errors: int
    post_seconds: float
    learn_seconds: float
    backlog: int
    latencies_ms: np.ndarray
    cpu: dict[str, float]


async def post_loop(
    url: str, requests: list[bytes], batch: int, connections: int, seconds: float
) -> tuple[int, int, int, list[float]]:
    host, port = check_loopback(url)
    deadline = time.perf_counter() + seconds
    counts = {"accepted": 0, "429": 0, "errors": 0, "requests": 0}
    latencies: list[float] = []

    async def client(index: int) -> None:
        connection = await Connection(host, port).open()
        try:
            position = index
            while time.perf_counter() < deadline and counts["requests"] < MAX_REQUESTS:
                started = time.perf_counter()
                status, _ = await connection.request(requests[position % len(requests)])
                latencies.append((time.perf_counter() - started) * 1000.0)
                counts["requests"] += 1
                if status in (200, 202):
                    counts["accepted"] += batch
                    position += connections
                elif status == 429:
                    counts["429"] += 1
                    await asyncio.sleep(0.02)  # backpressure: the same batch again
                else:
                    counts["errors"] += 1
                    position += connections
        finally:
            await connection.close()

    await asyncio.gather(*(client(i) for i in range(connections)))
    return counts["accepted"], counts["429"], counts["errors"], latencies


def run_mode(mode: str, args: argparse.Namespace) -> list[Row]:
    rows = []
    batches = list(make_batches(20, args.batch, args.features, seed=1))
    with stack(mode, 1) as running:
        http = httpx.Client(base_url=running.url, timeout=60)
        for body_format in args.formats:
            model = f"tput-{body_format}"
            http.delete(f"/v1/models/{model}")
            # a 503 warming-up (the learner's kernels still compiling) is sent again
            create_model(http, {"id": model, "n_features": args.features, "learner": "spam"})
            if mode == "queue":  # the worker has started and taken the model
                import redis

                client = redis.Redis.from_url(running.redis_url)
                deadline = time.monotonic() + 120
                while client.get(f"aucs:{{{model}}}:lease") is None:
                    if time.monotonic() > deadline:
                        raise SystemExit("loadtest: no worker took the model")
                    time.sleep(0.1)
                client.close()
            encode = json_body if body_format == "json" else npz_body
            host, _ = check_loopback(running.url)
            requests = [
                build_request(
                    "POST",
                    f"/v1/models/{model}/events",
                    host,
                    encode(X, y),
                    CONTENT_TYPES[body_format],
                )
                for X, y in batches
            ]
            cpu_before = running.cpu()
            started = time.perf_counter()
            accepted, rejected, errors, latencies = asyncio.run(
                post_loop(running.url, requests, args.batch, args.connections, args.seconds)
            )
            posted = time.perf_counter() - started
            metrics = http.get(f"/v1/models/{model}/metrics").json()
            backlog = metrics.get("queue", {}).get("events", 0)
            deadline = time.monotonic() + 300
            while metrics.get("queue", {}).get("events", 0) > 0 and time.monotonic() < deadline:
                time.sleep(0.05)
                metrics = http.get(f"/v1/models/{model}/metrics").json()
            learn_seconds = time.perf_counter() - started
            cpu_after = running.cpu()
            rows.append(
                Row(
                    mode,
                    body_format,
                    accepted,
                    metrics["counts"]["events_learned"],
                    rejected,
                    errors,
                    posted,
                    learn_seconds,
                    backlog,
                    np.asarray(latencies),
                    {k: cpu_after[k] - cpu_before[k] for k in cpu_after},
                )
            )
        http.close()
    return rows


def table(rows: list[Row]) -> str:
    header = (
        f"{'mode':<6} {'body':<5} {'accepted/s':>11} {'learned/s':>10} {'backlog':>8} "
        f"{'429':>5} {'err':>4} {'p50 ms':>7} {'p99 ms':>7}  CPU s (api / worker / redis)"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        cpu = row.cpu
        lines.append(
            f"{row.mode:<6} {row.body:<5} {row.accepted / row.post_seconds:>11,.0f} "
            f"{row.learned / row.learn_seconds:>10,.0f} {row.backlog:>8,} "
            f"{row.rejected_429:>5} {row.errors:>4} "
            f"{np.percentile(row.latencies_ms, 50):>7.1f} "
            f"{np.percentile(row.latencies_ms, 99):>7.1f}  "
            f"{cpu.get('api', 0):.1f} / {cpu.get('worker-0', 0):.1f} / {cpu.get('redis', 0):.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", nargs="+", choices=("sync", "queue"), default=["sync", "queue"])
    parser.add_argument("--formats", nargs="+", choices=("json", "npz"), default=["json", "npz"])
    parser.add_argument("--seconds", type=float, default=5.0, help="per row (<= 120)")
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args(argv)
    args.seconds = min(args.seconds, 120.0)
    load_before = os.getloadavg()
    rows = []
    for mode in args.modes:
        rows.extend(run_mode(mode, args))
    print(table(rows))
    print(
        f"\n{os.cpu_count()} CPUs; load average before {load_before[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f}; {args.connections} connections, batches of "
        f"{args.batch} x {args.features} features, {args.seconds:g} s per row"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
