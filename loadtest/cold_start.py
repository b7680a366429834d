"""Start-up of ``aucstream serve``: seconds until every worker is ready (the default path's
kernels, the metrics and the regret window: ``/readyz`` 200) and until every kernel group is,
``/healthz`` latency meanwhile, the first metrics report of a default model, and how soon a
``kill -9``'d server answers again once restarted::

    python -m loadtest.cold_start                          # cold, warm, with one worker
    python -m loadtest.cold_start --workers 4 --starts warm,kill
    python -m loadtest.cold_start --workers 4 --starts cold

Starts (each on the SQLite store, in a new data directory):

* ``cold``: ``NUMBA_CACHE_DIR`` is a new empty directory, so every kernel compiles;
* ``warm``: the directory the cold start filled (or, without a cold start before it, the
  cache ``python -m core.warmup`` fills first, or ``--warm-cache``), so they load from it;
* ``kill``: a warm server is started, ``kill -9``'d (its main process, as a crash or the OOM
  killer would), and started again at once and again every 0.5 s while it cannot listen (a
  supervisor's restart): "ready s" counts from the kill.

``NUMBA_CPU_NAME`` is passed through.  ``/healthz`` is polled every 100 ms on its own
connection from the moment the process starts.  A worker is ready when it logged "ready
after"; "ready s" is when all had and ``/readyz`` answered 200, "all kernels s" when all had
logged "all kernels ready"; "CPU s to ready" is the CPU time the server's processes had
used when it was ready (of the restarted server, for ``kill``): on a busy machine the part of
the figures that does not depend on the load.  The first ``GET /v1/models/{id}/metrics``
(regret included) is that of a model created with every default (``auto``), after 500
events.  Each row gives the
load average (1 min) at its end: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from loadtest.local import free_port, stop

ROOT = Path(__file__).resolve().parents[1]


def start_serve(port: int, workers: int, cache: str, log: Path, data: str) -> subprocess.Popen:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    for name in ("AUCSTREAM_REDIS_URL", "AUCSTREAM_STORE", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    if not cache:  # numba's own place: __pycache__ next to the sources
        env.pop("NUMBA_CACHE_DIR")
    command = [sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main())",
               "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
               "--data-dir", data]  # fmt: skip
    with log.open("ab") as handle:
        return subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)


def poll_health(url: str, stop_event: threading.Event, samples: list[tuple[float, float]]):
    """(time, latency) of every answered ``/healthz``; a request that hangs shows as its full
    latency (up to 60 s)."""
    with httpx.Client(timeout=60) as client:
        while not stop_event.is_set():
            started = time.perf_counter()
            try:
                client.get(f"{url}/healthz")
                samples.append((started, time.perf_counter() - started))
            except httpx.TransportError:
                pass
            time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` and its descendants still running."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:  # ended meanwhile
            continue
        pending.extend(int(child) for child in children)
    return total


def logged(log: Path, text: str) -> int:
    return log.read_text(errors="replace").count(text) if log.exists() else 0


def wait_workers(
    url: str, process: subprocess.Popen, log: Path, workers: int, deadline: float
) -> tuple[float, float, float]:
    """Until every worker logged "ready after" and ``/readyz`` is 200, then until every one
    logged "all kernels ready": the two ``perf_counter`` times, and the CPU seconds the
    server's processes had used when it was ready."""
    ready = None
    cpu = 0.0
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited:\n{log.read_text()[-3000:]}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"not ready in time:\n{log.read_text()[-3000:]}")
        if ready is None and logged(log, "aucstream: ready after") >= workers:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    ready = time.perf_counter()
                    cpu = cpu_seconds(process.pid)
            except httpx.TransportError:
                pass
        if ready is not None and logged(log, "all kernels ready in") >= workers:
            return ready, time.perf_counter(), cpu
        time.sleep(0.05)


def first_metrics(url: str) -> float:
    """Seconds of the first metrics report (regret included) of a default model."""
    with httpx.Client(base_url=url, timeout=300) as client:
        model = f"cold-start-{uuid.uuid4().hex[:8]}"
        created = client.post("/v1/models", json={"id": model, "n_features": 5})
        assert created.status_code == 201, created.text
        events = [
            {"id": str(i), "x": [((i * 7919) % 13) / 13.0 - 0.5 + 0.3 * (i % 3 == 0)] * 5,
             "y": int(i % 3 == 0)} for i in range(500)
        ]  # fmt: skip
        assert client.post(f"/v1/models/{model}/events", json={"events": events}).is_success
        started = time.perf_counter()
        report = client.get(f"/v1/models/{model}/metrics").json()
        assert report.get("regret") is not None, report
        return time.perf_counter() - started


def one_start(
    kind: str, workers: int, cache: str, timeout: float, keep_logs: str | None = None
) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    work = Path(tempfile.mkdtemp(prefix="aucstream-start-"))
    log = work / "serve.log"
    samples: list[tuple[float, float]] = []
    stop_event = threading.Event()
    began = time.perf_counter()
    process = start_serve(port, workers, cache, log, str(work / "data"))
    processes = [process]
    poller = threading.Thread(target=poll_health, args=(url, stop_event, samples), daemon=True)
    poller.start()
    try:
        deadline = began + timeout
        ready, everything, cpu = wait_workers(url, process, log, workers, deadline)
        if kind == "kill":
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            began = time.perf_counter()
            samples.clear()
            log = work / "restarted.log"
            while True:  # a supervisor's restart: again while the old workers hold the port
                listening = logged(log, "Uvicorn running on")
                process = start_serve(port, workers, cache, log, str(work / "data"))
                processes.append(process)
                while process.poll() is None and logged(log, "Uvicorn running on") == listening:
                    time.sleep(0.05)
                if process.poll() is None:
                    break
                time.sleep(0.5)
            ready, everything, cpu = wait_workers(url, process, log, workers, began + timeout)
        stop_event.set()
        poller.join()
        during = [latency for at, latency in samples if at - began < ready - began]
        metrics_seconds = first_metrics(url)
    finally:
        stop_event.set()
        for each in processes:
            stop(each)
    if keep_logs:
        for each in work.glob("*.log"):
            shutil.copy(each, Path(keep_logs) / f"{kind}-{workers}-{each.name}")
    shutil.rmtree(work, ignore_errors=True)
    return {
        "start": kind,
        "workers": workers,
        "ready s": ready - began,
        "CPU s to ready": cpu,
        "all kernels s": everything - began,
        "healthz p50 ms": 1000 * statistics.median(during) if during else float("nan"),
        "healthz max ms": 1000 * max(during) if during else float("nan"),
        "1st metrics ms": 1000 * metrics_seconds,
        "load 1 min": os.getloadavg()[0],
    }


def fill_cache(cache: str) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "core.warmup"], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--starts", default="cold,warm", help="comma-separated: cold, warm, kill (in order)"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--warm-cache",
        default=None,
        help="without a cold start first, the warm starts use this numba cache as it is ('' for "
        "the one next to the sources) instead of one python -m core.warmup fills",
    )
    parser.add_argument("--keep-logs", default=None, help="copy the servers' logs here")
    args = parser.parse_args()
    starts = args.starts.split(",")
    rows = []
    for _ in range(args.rounds):
        own = starts[0] == "cold" or args.warm_cache is None
        cache = tempfile.mkdtemp(prefix="aucstream-numba-") if own else args.warm_cache
        try:
            if own and starts[0] != "cold":
                fill_cache(cache)
            for kind in starts:
                rows.append(one_start(kind, args.workers, cache, args.timeout, args.keep_logs))
                print(rows[-1], flush=True)
        finally:
            if own:
                shutil.rmtree(cache, ignore_errors=True)
    columns = list(rows[0])
    print(f"NUMBA_CPU_NAME={os.environ.get('NUMBA_CPU_NAME', 'host')}  cores: {os.cpu_count()}")
    print("  ".join(f"{column:>14s}" for column in columns))
    for row in rows:
        print("  ".join(
            f"{value:>14.2f}" if isinstance(value, float) else f"{value!s:>14s}"
            for value in row.values()
        ))  # fmt: skip


if __name__ == "__main__":
    main()
