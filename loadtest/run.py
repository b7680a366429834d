"""Load test: ingest throughput and single-event scoring latency, on a live server.

Run (spawns its own uvicorn worker, and a private redis-server for the Redis rows)::

    python -m loadtest.run                       # memory and redis, 50 features, batches of 1,000
    python -m loadtest.run --stores memory sqlite --scenarios ingest-npz
    python -m loadtest.run --stores memory --seconds 10
    python -m loadtest.run --stores redis redis_cluster  # a private 3-master Redis Cluster
    python -m loadtest.run --url http://127.0.0.1:8000 --stores memory   # an existing server

Scenarios (per store):

``ingest-json`` / ``ingest-npz``
    closed loop: ``--connections`` clients post pre-encoded batches of ``--batch`` labelled
    events (``--features`` dense features) back to back for ``--seconds``; events/s learned.
``score``
    open loop: single-event ``/score`` requests (each with a fresh event id, so the features
    are kept for a later label) issued at ``--score-rate`` per second on a pool of keep-alive
    connections; latency is measured from the *scheduled* send time, so a stalled server is
    not hidden by the generator waiting for it (no coordinated omission).
``events``
    the same open loop for single-event ``/events``: one labelled event per request, each with
    a fresh id (learned, remembered for deduplication), at ``--score-rate`` per second.

``--server-path DIR`` serves another checkout (e.g. the code before a change, from
``git archive``), so that two versions can be measured alternately with this generator.

Besides throughput, each row reports the CPU seconds the server process (and Redis) spent,
per request, and the generator's own CPU, so a reader can see where the time goes on a
shared machine.  Loops are bounded in time and in count; only loopback addresses are used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import orjson

from loadtest.client import Connection, build_request, check_loopback
from loadtest.local import (
    free_port,
    private_redis,
    private_redis_cluster,
    start_uvicorn,
    stop,
    wait_ready,
)

TARGETS = {  # memory store; Redis (a cluster too) must reach half of the ingest figures
    "ingest-json": 200_000.0,
    "ingest-npz": 1_000_000.0,
}
SCORE_P99_MS = 5.0
#: the single-event scenarios (open loop at ``--score-rate``)
OPEN_LOOP = ("score", "events")
MAX_REQUESTS = 1_000_000  # hard bound on any loop


@dataclass
class Row:
    store: str
    scenario: str
    requests: int
    events: int
    errors: int
    seconds: float
    server_cpu: float
    redis_cpu: float
    client_cpu: float
    latencies_ms: np.ndarray | None = None
    target: str = ""

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if self.latencies_ms is None or not len(self.latencies_ms):
            return float("nan")
        return float(np.percentile(self.latencies_ms, q))


# ---------------------------------------------------------------------------- processes
def process_cpu_seconds(pid: int | list[int] | None) -> float:
    """utime + stime of a process (summed over a list: the masters of a Redis Cluster) and
    its reaped children, from /proc (Linux)."""
    if pid is None:
        return float("nan")
    if isinstance(pid, list):
        return sum(process_cpu_seconds(each) for each in pid)
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(value) for value in fields[11:15]) / ticks


@contextlib.contextmanager
def uvicorn_server(
    store: str, redis_url: str | None, server_path: str | None = None
) -> Iterator[tuple[str, int]]:
    """A uvicorn worker on ``store``; ``server_path``: serve that checkout's code."""
    import tempfile

    port = free_port()
    data_dir = tempfile.TemporaryDirectory(prefix="aucstream-loadtest-")  # the SQLite store's
    env = {
        **os.environ,
        "AUCSTREAM_STORE": "redis" if store == "redis_cluster" else store,
        "AUCSTREAM_DATA_DIR": data_dir.name,
    }
    if redis_url:
        env["AUCSTREAM_REDIS_URL"] = redis_url
    if server_path:  # cwd too: ``python -m`` puts the working directory first on the path
        env["PYTHONPATH"] = server_path
    process = start_uvicorn(port, env, access_log=False, cwd=server_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, timeout=180)
        yield url, process.pid
    finally:
        stop(process)
        data_dir.cleanup()


# ---------------------------------------------------------------------------- payloads
def make_batches(n_batches: int, batch: int, n_features: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n_batches):
        y = (rng.random(batch) < 0.05).astype(np.int64)
        X = rng.normal(size=(batch, n_features)) * 100.0 + y[:, None] * 50.0
        yield X, y


def json_body(X: np.ndarray, y: np.ndarray) -> bytes:
    return orjson.dumps(
        {"events": [{"x": row, "y": int(label)} for row, label in zip(X.tolist(), y, strict=True)]}
    )


def npz_body(X: np.ndarray, y: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, X=X, y=y)
    return buffer.getvalue()


# ---------------------------------------------------------------------------- scenarios
async def create_model(
    host: str, port: int, model: str, n_features: int, settings: dict | None = None
) -> None:
    connection = await Connection(host, port).open()
    try:
        await connection.request(build_request("DELETE", f"/v1/models/{model}", host))
        # the speed targets are a ``spam`` model's (``auto``, the API's default, runs two learners)
        body = orjson.dumps(
            {"learner": "spam", **(settings or {}), "id": model, "n_features": n_features}
        )
        status, text = await connection.request(
            build_request("POST", "/v1/models", host, body, "application/json")
        )
        if status != 201:
            raise SystemExit(f"loadtest: could not create model {model}: {status} {text!r}")
    finally:
        await connection.close()


async def closed_loop(
    host: str,
    port: int,
    requests: list[bytes],
    events_per_request: int,
    connections: int,
    seconds: float,
) -> tuple[int, int, int, float]:
    """Each connection posts the pre-encoded requests back to back until time is up."""
    deadline = time.perf_counter() + seconds
    counts = {"requests": 0, "errors": 0}

    async def client(index: int) -> None:
        connection = await Connection(host, port).open()
        try:
            position = index
            while time.perf_counter() < deadline and counts["requests"] < MAX_REQUESTS:
                status, _ = await connection.request(requests[position % len(requests)])
                position += connections
                counts["requests"] += 1
                if status != 200:
                    counts["errors"] += 1
        finally:
            await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(connections)))
    elapsed = time.perf_counter() - started
    good = counts["requests"] - counts["errors"]
    return counts["requests"], good * events_per_request, counts["errors"], elapsed


async def open_loop_score(
    host: str,
    port: int,
    model: str,
    n_features: int,
    rate: float,
    seconds: float,
    *,
    labelled: bool = False,
) -> tuple[int, int, float, np.ndarray]:
    """Single-event /score (``labelled``: /events) at ``rate`` per second; latency from the
    scheduled send time."""
    rng = np.random.default_rng(1)
    rows = rng.normal(size=(256, n_features)) * 100.0
    labels = (rng.random(256) < 0.1).astype(np.int64)
    route = "events" if labelled else "score"
    prefix = f"POST /v1/models/{model}/{route} HTTP/1.1\r\nHost: {host}\r\n".encode()
    bodies = [
        orjson.dumps(row.tolist()) + (b', "y": %d' % label if labelled else b"")
        for row, label in zip(rows, labels, strict=True)
    ]
    n_requests = min(int(rate * seconds), MAX_REQUESTS)
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(4):
        idle.put_nowait(await Connection(host, port).open())
    opened = 4
    latencies = np.empty(n_requests)
    errors = 0
    tasks = []
    start = time.perf_counter() + 0.05

    async def one(number: int, scheduled: float) -> None:
        nonlocal errors, opened
        if idle.empty() and opened < 64:
            opened += 1
            idle.put_nowait(await Connection(host, port).open())
        connection = await idle.get()
        body = (
            b'{"events": [{"id": "s'
            + str(number).encode()
            + b'", "x": '
            + bodies[number % len(bodies)]
            + b"}]}"
        )
        raw = (
            prefix
            + b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        status, _ = await connection.request(raw)
        latencies[number] = (time.perf_counter() - scheduled) * 1e3
        if status != 200:
            errors += 1
        idle.put_nowait(connection)

    for number in range(n_requests):
        scheduled = start + number / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(number, scheduled)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    while not idle.empty():
        await idle.get_nowait().close()
    return n_requests, errors, elapsed, latencies


async def run_store(
    store: str,
    url: str,
    server_pid: int | None,
    redis_pid: int | list[int] | None,
    args: argparse.Namespace,
) -> list[Row]:
    host, port = check_loopback(url)
    rows: list[Row] = []
    batches = list(make_batches(8, args.batch, args.features))
    payloads = {
        "ingest-json": [json_body(X, y) for X, y in batches],
        "ingest-npz": [npz_body(X, y) for X, y in batches],
    }
    content_types = {"ingest-json": "application/json", "ingest-npz": "application/x-npz"}
    for scenario in args.scenarios:
        model = f"loadtest-{scenario}"
        await create_model(host, port, model, args.features, args.model)
        server_before = process_cpu_seconds(server_pid)
        redis_before = process_cpu_seconds(redis_pid)
        client_before = time.process_time()
        if scenario in payloads:
            requests = [
                build_request(
                    "POST", f"/v1/models/{model}/events", host, body, content_types[scenario]
                )
                for body in payloads[scenario]
            ]
            # warm-up: first requests of a model compile nothing, but fill caches
            await closed_loop(host, port, requests, args.batch, 1, 0.5)
            server_before = process_cpu_seconds(server_pid)
            redis_before = process_cpu_seconds(redis_pid)
            client_before = time.process_time()
            n_requests, n_events, errors, elapsed = await closed_loop(
                host, port, requests, args.batch, args.connections, args.seconds
            )
            latencies = None
            target = TARGETS[scenario] * (0.5 if store.startswith("redis") else 1.0)
            target_text = f">= {target:,.0f} ev/s"
        else:
            n_requests, errors, elapsed, latencies = await open_loop_score(
                host,
                port,
                model,
                args.features,
                args.score_rate,
                args.seconds,
                labelled=scenario == "events",
            )
            n_events = n_requests - errors
            target_text = f"p99 <= {SCORE_P99_MS:g} ms"
        rows.append(
            Row(
                store=store,
                scenario=scenario,
                requests=n_requests,
                events=n_events,
                errors=errors,
                seconds=elapsed,
                server_cpu=process_cpu_seconds(server_pid) - server_before,
                redis_cpu=process_cpu_seconds(redis_pid) - redis_before,
                client_cpu=time.process_time() - client_before,
                latencies_ms=latencies,
                target=target_text,
            )
        )
    return rows


# ---------------------------------------------------------------------------- report
def verdict(row: Row) -> str:
    if row.errors:
        return "ERRORS"
    if row.scenario in OPEN_LOOP:
        return "ok" if row.percentile(99) <= SCORE_P99_MS else "MISS"
    target = TARGETS[row.scenario] * (0.5 if row.store.startswith("redis") else 1.0)
    return "ok" if row.events_per_second >= target else "MISS"


def table(rows: list[Row]) -> str:
    header = (
        "store",
        "scenario",
        "requests",
        "events/s",
        "req/s",
        "p50 ms",
        "p99 ms",
        "srv cpu ms/req",
        "redis cpu ms/req",
        "gen cpu ms/req",
        "errors",
        "target",
        "",
    )
    lines = [header]
    for row in rows:
        per_request = 1e3 / row.requests if row.requests else float("nan")
        lines.append(
            (
                row.store,
                row.scenario,
                f"{row.requests:,}",
                f"{row.events_per_second:,.0f}",
                f"{row.requests / row.seconds:,.0f}" if row.seconds else "-",
                "-" if row.latencies_ms is None else f"{row.percentile(50):.2f}",
                "-" if row.latencies_ms is None else f"{row.percentile(99):.2f}",
                f"{row.server_cpu * per_request:.3f}",
                "-" if np.isnan(row.redis_cpu) else f"{row.redis_cpu * per_request:.3f}",
                f"{row.client_cpu * per_request:.3f}",
                str(row.errors),
                row.target,
                verdict(row),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for number, line in enumerate(lines):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if number == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"(1/5/15 min), Python {sys.version.split()[0]}"
    )


MODEL_HELP = (
    "extra model settings as JSON, e.g. '{\"regret_window\": 0}' (default: the server's defaults)"
)


def model_settings(text: str) -> dict:
    settings = orjson.loads(text)
    if not isinstance(settings, dict):
        raise argparse.ArgumentTypeError("--model takes a JSON object")
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=None, help="an existing server (loopback only)")
    parser.add_argument(
        "--stores",
        nargs="+",
        default=["memory", "redis"],
        choices=("memory", "sqlite", "redis", "redis_cluster"),  # redis_cluster: a private one
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["ingest-json", "ingest-npz", "score"],
        choices=("ingest-json", "ingest-npz", *OPEN_LOOP),
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="per scenario (<= 120)")
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--score-rate", type=float, default=1000.0)
    parser.add_argument("--model", type=model_settings, default={}, help=MODEL_HELP)
    parser.add_argument(
        "--server-path", default=None, help="serve this checkout's code (PYTHONPATH and cwd)"
    )
    args = parser.parse_args(argv)
    args.seconds = min(args.seconds, 120.0)
    rows: list[Row] = []
    print(f"machine: {machine()}", flush=True)
    if args.url:
        if len(args.stores) != 1:
            raise SystemExit("loadtest: with --url name the server's one store in --stores")
        rows += asyncio.run(run_store(args.stores[0], args.url, None, None, args))
    else:
        for store in args.stores:
            with contextlib.ExitStack() as stack:
                redis_url: str | None = None
                redis_pid: int | list[int] | None = None
                if store == "redis":
                    redis_url, redis_pid = stack.enter_context(private_redis())
                elif store == "redis_cluster":
                    redis_url, pids = stack.enter_context(private_redis_cluster())
                    redis_pid = list(pids.values())
                url, server_pid = stack.enter_context(
                    uvicorn_server(store, redis_url, args.server_path)
                )
                print(f"{store}: server {url} (pid {server_pid}) ready", flush=True)
                rows += asyncio.run(run_store(store, url, server_pid, redis_pid, args))
    print()
    print(table(rows))
    print(f"\nmachine after: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
