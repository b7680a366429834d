"""What many server-sent metrics streams cost the other requests: one-event ``/score`` and
``/healthz`` latency through a real uvicorn (memory store, one worker, kernels compiled
before), without streams, then while a second process holds ``--streams`` streams open at
``?interval=--interval`` with read-only API keys (``--keys`` of them, used in turn)::

    python -m loadtest.sse_streams                               # this checkout's service
    python -m loadtest.sse_streams --server-path /path/to/another/checkout   # e.g. before

Prints a table: per phase, the streams opened and refused (429 per key, 503 in total), the
server's CPU seconds per wall second, and the median / p99 latency of ``/score`` and
``/healthz``.  The model learns a batch every second, so that every check of every stream finds
a new version and sends a message.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import threading
import time
from collections import Counter
from typing import Any

from loadtest.local import checkout_parser, checkout_server, create_model, latency_ms

WRITER = "sse-load-writer"
ONE_EVENT = b'{"events": [{"x": [0.1, 0.2, 0.3, 0.4, 0.5]}]}'


def reader_keys(count: int) -> list[str]:
    return [f"sse-load-reader-{index}" for index in range(count)]


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hold_streams(
    url: str, streams: int, keys: list[str], interval: float, report: Any, done: Any
) -> None:
    """In its own process: open ``streams`` streams (keys in turn), report how each opening
    was answered, read them until ``done`` is set."""
    import httpx

    async def main() -> None:
        statuses: Counter[int] = Counter()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as http:

            async def one(index: int) -> None:
                headers = {"X-API-Key": keys[index % len(keys)]}
                path = f"/v1/models/m/metrics/stream?interval={interval}"
                try:
                    async with http.stream("GET", path, headers=headers) as response:
                        statuses[response.status_code] += 1
                        if response.status_code != 200:
                            return
                        async for _ in response.aiter_bytes():
                            if done.is_set():
                                return
                except httpx.HTTPError:
                    statuses[0] += 1

            tasks = [asyncio.create_task(one(index)) for index in range(streams)]
            while sum(statuses.values()) < streams:
                await asyncio.sleep(0.1)
            report.put(dict(statuses))
            while not done.is_set():
                await asyncio.sleep(0.2)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def measure(url: str, seconds: float) -> tuple[list[float], list[float]]:
    """One-event ``/score`` and ``/healthz`` latencies, alternated over one connection."""
    import httpx

    scores, healthz = [], []
    headers = {"X-API-Key": WRITER, "content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=60) as http:
        http.get("/healthz")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            assert http.post("/v1/models/m/score", content=ONE_EVENT, headers=headers).is_success
            scores.append(time.perf_counter() - started)
            started = time.perf_counter()
            http.get("/healthz")
            healthz.append(time.perf_counter() - started)
            time.sleep(0.01)
    return scores, healthz


def main(argv: list[str] | None = None) -> int:
    import httpx
    import numpy as np

    parser = checkout_parser(__doc__)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--keys", type=int, nargs="+", default=[1, 500],
                        help="read-only keys the streams use, one phase each")  # fmt: skip
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=20.0, help="of each measurement")
    args = parser.parse_args(argv)
    keys = reader_keys(max(args.keys))
    settings = {"AUCSTREAM_API_KEYS": WRITER, "AUCSTREAM_READ_ONLY_API_KEYS": ",".join(keys)}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    rows = []
    learning = threading.Event()
    served = checkout_server(args.server_path, settings, access_log=False, **quiet)
    with served as (url, process):
        try:
            writer = {"X-API-Key": WRITER}
            with httpx.Client(base_url=url, timeout=600, headers=writer) as http:
                body = {"id": "m", "learner": "spam", "n_features": 5}
                create_model(http, body)
                rng = np.random.default_rng(0)
                batch = {"events": [{"x": rng.normal(size=5).tolist(), "y": int(index % 2)}
                                    for index in range(20)]}  # fmt: skip
                assert http.post("/v1/models/m/events", json=batch).is_success
                http.get("/v1/models/m/metrics")  # the regret solved once

            def learn() -> None:  # a new version every second
                with httpx.Client(base_url=url, timeout=600, headers=writer) as client:
                    while not learning.wait(1.0):
                        client.post("/v1/models/m/events", json=batch)

            learner = threading.Thread(target=learn)
            learner.start()

            def phase(name: str, statuses: dict[int, int]) -> None:
                cpu = server_cpu_seconds(process.pid)
                started = time.monotonic()
                scores, healthz = measure(url, args.seconds)
                cpu_share = (server_cpu_seconds(process.pid) - cpu) / (time.monotonic() - started)
                rows.append((name, statuses, cpu_share, scores, healthz))

            phase("no streams", {})
            context = multiprocessing.get_context("spawn")
            for n_keys in args.keys:
                report, done = context.Queue(), context.Event()
                holder = context.Process(
                    target=hold_streams,
                    args=(url, args.streams, keys[:n_keys], args.interval, report, done),
                )
                holder.start()
                statuses = report.get(timeout=600)
                time.sleep(2.0)  # every stream past its first message
                phase(f"{args.streams} streams, {n_keys} key{'s' if n_keys > 1 else ''}", statuses)
                done.set()
                holder.join(60)
                if holder.is_alive():
                    holder.terminate()
                time.sleep(3.0)  # the server notices the streams closed
            learning.set()
            learner.join()
        finally:
            learning.set()
    print(f"server code: {args.server_path}   interval: {args.interval} s   "
          f"load: {os.getloadavg()[0]:.1f} (1 min)")  # fmt: skip
    print(f"{'phase':24s} {'open':>5} {'429':>5} {'503':>5} {'cpu/s':>6} "
          f"{'score p50':>10} {'p99 ms':>8} {'healthz p50':>12} {'p99 ms':>8}")  # fmt: skip
    for name, statuses, cpu_share, scores, healthz in rows:
        opened, limited, full = (statuses.get(status, 0) for status in (200, 429, 503))
        score_p50, score_p99, _ = latency_ms(scores)
        healthz_p50, healthz_p99, _ = latency_ms(healthz)
        print(f"{name:24s} {opened:5d} {limited:5d} {full:5d} {cpu_share:6.2f} {score_p50:10.1f} "
              f"{score_p99:8.1f} {healthz_p50:12.1f} {healthz_p99:8.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
