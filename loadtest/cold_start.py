"""Cold and warm start of ``aucstream serve``: seconds until ``/readyz`` is 200, ``/healthz``
latency while the kernels compile, and the first ``GET /v1/models/{id}/metrics`` (regret
included) once ready::

    python -m loadtest.cold_start                  # one uvicorn worker, cold then warm
    python -m loadtest.cold_start --workers 2 --rounds 2

``cold``: ``NUMBA_CACHE_DIR`` is a new empty directory, so every kernel compiles; ``warm``: the
same directory again, so they load from the cache.  ``NUMBA_CPU_NAME`` is passed through
(``generic`` is what the image uses).  ``/healthz`` is polled every 100 ms on its own
connection from the moment the process starts; "ready" needs ``--workers`` consecutive 200s of
``/readyz`` (each uvicorn worker warms up on its own; with more than one worker the store is
a private redis-server).  Prints one row per start; the
"log total" column is the server's own "all kernels ready in ..." line (the first worker's).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx

from loadtest.local import free_port, private_redis, stop

ROOT = Path(__file__).resolve().parents[1]


def start_serve(
    port: int, workers: int, cache: str, log: Path, redis_url: str | None
) -> subprocess.Popen:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    env.pop("AUCSTREAM_REDIS_URL", None)
    store = ["--redis-url", redis_url] if redis_url else ["--store", "memory"]
    command = [sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main())",
               "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
               *store]  # fmt: skip
    with log.open("wb") as handle:
        return subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)


def poll_health(url: str, stop_event: threading.Event, samples: list[tuple[float, float]]):
    """(time since start, latency) of every answered ``/healthz``; a request that hangs shows
    as its full latency (up to 60 s)."""
    with httpx.Client(timeout=60) as client:
        while not stop_event.is_set():
            started = time.perf_counter()
            try:
                client.get(f"{url}/healthz")
                samples.append((started, time.perf_counter() - started))
            except httpx.TransportError:
                pass
            time.sleep(0.1)


def one_start(kind: str, workers: int, cache: str, timeout: float, redis_url: str | None) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkstemp(prefix="aucstream-cold-", suffix=".log")[1])
    samples: list[tuple[float, float]] = []
    stop_event = threading.Event()
    began = time.perf_counter()
    process = start_serve(port, workers, cache, log, redis_url)
    poller = threading.Thread(target=poll_health, args=(url, stop_event, samples), daemon=True)
    poller.start()
    try:
        consecutive = 0
        while consecutive < workers:
            if process.poll() is not None:
                raise RuntimeError(f"serve exited:\n{log.read_text()[-3000:]}")
            if time.perf_counter() - began > timeout:
                raise RuntimeError(f"not ready after {timeout:.0f} s")
            try:
                status = httpx.get(f"{url}/readyz", timeout=5).status_code
            except httpx.TransportError:
                status = 0
            consecutive = consecutive + 1 if status == 200 else 0
            time.sleep(0.2 if status != 200 else 0.02)
        ready = time.perf_counter() - began
        stop_event.set()
        poller.join()
        during = [latency for at, latency in samples if at - began < ready]
        client = httpx.Client(base_url=url, timeout=300)
        model = f"cold-start-{uuid.uuid4().hex[:8]}"
        client.post("/v1/models", json={"id": model, "learner": "spam", "n_features": 5})
        events = [
            {"id": str(i), "x": [((i * 7919) % 13) / 13.0 - 0.5 + 0.3 * (i % 3 == 0)] * 5,
             "y": int(i % 3 == 0)} for i in range(500)
        ]  # fmt: skip
        client.post(f"/v1/models/{model}/events", json={"events": events})
        started = time.perf_counter()
        report = client.get(f"/v1/models/{model}/metrics").json()
        first_metrics = time.perf_counter() - started
        assert report.get("regret") is not None, report
    finally:
        stop_event.set()
        stop(process)
    text = log.read_text()
    log.unlink()
    total = re.search(r"all kernels ready in ([0-9.]+) s", text)
    first_health = min((at - began for at, _ in samples), default=float("nan"))
    return {
        "start": kind,
        "workers": workers,
        "first healthz s": first_health,
        "ready s": ready,
        "log total s": float(total.group(1)) if total else float("nan"),
        "healthz n": len(during),
        "healthz p50 ms": 1000 * statistics.median(during) if during else float("nan"),
        "healthz max ms": 1000 * max(during) if during else float("nan"),
        "1st metrics ms": 1000 * first_metrics,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    rows = []
    with ExitStack() as stack:
        # several uvicorn workers need a shared store: a private redis-server
        redis_url = stack.enter_context(private_redis())[0] if args.workers > 1 else None
        for _ in range(args.rounds):
            cache = tempfile.mkdtemp(prefix="aucstream-numba-")
            try:
                for kind in ("cold", "warm"):
                    rows.append(one_start(kind, args.workers, cache, args.timeout, redis_url))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    columns = list(rows[0])
    print(f"NUMBA_CPU_NAME={os.environ.get('NUMBA_CPU_NAME', 'host')}  load: {os.getloadavg()}")
    print("  ".join(f"{column:>15s}" for column in columns))
    for row in rows:
        print("  ".join(
            f"{value:>15.2f}" if isinstance(value, float) else f"{value!s:>15s}"
            for value in row.values()
        ))  # fmt: skip


if __name__ == "__main__":
    main()
