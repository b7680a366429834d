"""CPU an idle server burns with many cached default models, checkouts side by side
(loadtest/README.md, "Idle CPU with 1,000 cached models").

For each checkout (this one and ``--against``, alternated over ``--rounds``): one uvicorn
process (memory store, no warm-up), ``--models`` models created with the defaults (``auto``, so
each has the boosted candidate) and fed ``--events`` labelled events each in one request (the
candidate's first fit falls due at 250); then, once the fits are done (the fitting child process
has used no CPU for 5 s), ``--idle`` seconds without a request.  The CPU of the server and its
children over that time is read from ``/proc/<pid>/stat`` (utime + stime).

    python -m loadtest.idle_cpu [--models 1000] [--events 300] [--idle 60] [--against /work/main]
                                [--store memory|sqlite] [--kept 0]

``--kept``: each model then scores that many events with ids (kept for a label due in a day,
so the label sweep finds nothing due); ``--store sqlite``: in a temporary data directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtest.local import free_port, start_uvicorn, stop, wait_ready  # noqa: E402

N_FEATURES = 10
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                found += [int(child) for child in listed.read().split()]
        except FileNotFoundError:
            continue
    return found


def tree_cpu(pid: int) -> float:
    total = cpu_seconds(pid)
    for child in children(pid):
        try:
            total += cpu_seconds(child)
        except FileNotFoundError:
            continue
    return total


def feed(url: str, models: int, events: int, kept: int = 0) -> None:
    import httpx

    rng = np.random.default_rng(0)
    X = rng.normal(size=(events, N_FEATURES))
    y = (X[:, 0] * X[:, 1] + X[:, 2] + 0.5 * rng.normal(size=events) > 1.0).astype(int)
    body = {"events": [{"x": row.tolist(), "y": int(label)}
                       for row, label in zip(X, y, strict=True)]}  # fmt: skip

    def one(i: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            created = client.post("/v1/models", json={"id": f"m{i}", "n_features": N_FEATURES})
            assert created.status_code == 201, created.text
            learned = client.post(f"/v1/models/m{i}/events", json=body)
            assert learned.status_code == 200, learned.text
            if kept:  # scores kept for a label (due in a day: the sweep has nothing to do)
                scored = {"events": [{"x": row, "id": f"k{k}"}
                                     for k, row in enumerate(X[:kept].tolist())]}  # fmt: skip
                response = client.post(f"/v1/models/m{i}/score", json=scored)
                assert response.status_code == 200, response.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(models)))


def settle(pid: int, quiet: float = 5.0, limit: float = 900.0) -> float:
    """Wait until the server's children (the fitting process) used no CPU for ``quiet``
    seconds; the seconds waited."""
    started = time.monotonic()
    last, since = None, time.monotonic()
    while time.monotonic() - started < limit:
        now = sum(cpu_seconds(child) for child in children(pid))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def measure(checkout: Path, args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(checkout), "AUCSTREAM_STORE": args.store,
           "AUCSTREAM_WARMUP": "false", "NUMBA_NUM_THREADS": "1"}  # fmt: skip
    data_dir = tempfile.TemporaryDirectory(prefix="aucstream-idle-")
    env["AUCSTREAM_DATA_DIR"] = data_dir.name
    process = start_uvicorn(port, env, access_log=False, cwd=checkout)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, 300)
        started = time.monotonic()
        feed(url, args.models, args.events, args.kept)
        fed = time.monotonic() - started
        settled = settle(process.pid)
        windows = []
        for _ in range(args.windows):
            before, wall = tree_cpu(process.pid), time.monotonic()
            time.sleep(args.idle)
            used, wall = tree_cpu(process.pid) - before, time.monotonic() - wall
            windows.append((used, 1000 * used / wall))
        return {"feed_s": fed, "settle_s": settled, "idle_cpu_s": windows[0][0],
                "ms_per_s": windows[0][1], "load": os.getloadavg()[0],
                "later": windows[1:]}  # fmt: skip
    finally:
        stop(process)
        data_dir.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--kept", type=int, default=0, help="scores kept per model (ids)")
    parser.add_argument(
        "--windows",
        type=int,
        default=1,
        help="idle windows one after another (the first "
        "holds the checkpoints and history points the feed made due)",
    )
    parser.add_argument("--against", type=Path, default=Path("/work/main"))
    args = parser.parse_args(argv)
    checkouts = {"this checkout": ROOT, str(args.against): args.against}
    print(
        f"{args.models} default models x {args.events} events ({args.kept} scores kept), "
        f"{args.store} store, idle {args.idle:.0f} s"
    )
    print("| round | checkout | feed s | settle s | idle CPU s | CPU ms per s | load (1 min) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for round_ in range(args.rounds):
        order = list(checkouts.items())
        for name, checkout in order if round_ % 2 == 0 else order[::-1]:
            row = measure(checkout, args)
            later = "".join(f" then {cpu:.2f} s, {rate:.1f} ms/s" for cpu, rate in row["later"])
            print(f"| {round_ + 1} | {name} | {row['feed_s']:.0f} | {row['settle_s']:.0f} | "
                  f"{row['idle_cpu_s']:.2f} | {row['ms_per_s']:.1f}{later} | {row['load']:.2f} |",
                  flush=True)  # fmt: skip
    subprocess.run(["uptime"], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
