"""What the SQLite store costs per learned batch, against the memory store, in-process.

::

    python -m loadtest.store_commit                  # 12 rounds x 10 requests per store
    python -m loadtest.store_commit --rounds 4 --features 50 --batch 1000

Each request is ``POST /v1/models/<m>/events`` of an NPZ body of ``--batch`` labelled events
with fresh event ids (so every commit also remembers ``--batch`` ids), sent through the whole
ASGI app (routing, parsing, learning, commit) without sockets.  The stores take turns: a round
sends ``--per-round`` requests to each store in an order rotated every round, so a change in
the machine's load (it is shared) falls on all of them alike.

Columns: wall-clock milliseconds per request (median and 90th percentile: the SQLite commit
waits for ``fsync``, which costs wall time, not CPU), CPU milliseconds of this process per
request (every thread: the SQLite store runs in the thread pool), and the median's ratio to
the memory store's.  ``sqlite (full)`` is the default (``AUCSTREAM_SQLITE_SYNCHRONOUS=full``:
synced before the answer), ``sqlite (normal)`` syncs at checkpoints only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from loadtest.breakdown import asgi_call
from loadtest.run import machine, make_batches

STORES = {
    "memory": {"store": "memory"},
    "sqlite (full)": {"store": "sqlite", "sqlite_synchronous": "full"},
    "sqlite (normal)": {"store": "sqlite", "sqlite_synchronous": "normal"},
}


def npz_with_ids(X: np.ndarray, y: np.ndarray, first_id: int) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, X=X, y=y, ids=np.arange(first_id, first_id + len(y)))
    return buffer.getvalue()


async def measure(args: argparse.Namespace, data_root: Path) -> dict[str, dict[str, list]]:
    from service.app import create_app
    from service.settings import Settings

    X, y = next(make_batches(1, args.batch, args.features))
    create = orjson.dumps({"learner": "spam", "id": "m", "n_features": args.features})
    results: dict[str, dict[str, list]] = {name: {"wall": [], "cpu": []} for name in STORES}
    async with contextlib.AsyncExitStack() as stack:
        apps = {}
        for number, (name, settings) in enumerate(STORES.items()):
            app = create_app(
                Settings(**settings, data_dir=data_root / str(number), warmup=False)  # type: ignore[arg-type]
            )
            await stack.enter_async_context(app.router.lifespan_context(app))
            assert await asgi_call(app, "POST", "/v1/models", create, b"application/json") == 201
            apps[name] = app
        names = list(STORES)
        next_id = 0

        async def post(app, body: bytes) -> int:
            return await asgi_call(app, "POST", "/v1/models/m/events", body, b"application/x-npz")

        for name in names:  # warm-up: kernels compiled, caches and files filled
            for _ in range(3):
                next_id += args.batch
                assert await post(apps[name], npz_with_ids(X, y, next_id)) == 200
        for round_number in range(args.rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                for _ in range(args.per_round):
                    next_id += args.batch
                    body = npz_with_ids(X, y, next_id)
                    wall, cpu = time.perf_counter(), time.process_time()
                    assert await post(apps[name], body) == 200
                    results[name]["wall"].append(time.perf_counter() - wall)
                    results[name]["cpu"].append(time.process_time() - cpu)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="aucstream-bench-") as root:
        results = asyncio.run(measure(args, Path(root)))
        sizes = {
            number: sum(path.stat().st_size for path in (Path(root) / str(number)).glob("*"))
            for number in range(len(STORES))
        }
    base = float(np.median(results["memory"]["wall"]))
    header = ("store", "requests", "wall ms p50", "wall ms p90", "CPU ms p50", "x memory (p50)",
              "files MB")  # fmt: skip
    lines = [header]
    for number, (name, measured) in enumerate(results.items()):
        wall = np.array(measured["wall"]) * 1e3
        cpu = np.array(measured["cpu"]) * 1e3
        lines.append((
            name, str(len(wall)), f"{np.median(wall):.2f}", f"{np.percentile(wall, 90):.2f}",
            f"{np.median(cpu):.2f}", f"{np.median(wall) / (base * 1e3):.2f}",
            "-" if name == "memory" else f"{sizes[number] / 2**20:.1f}",
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print(f"\nPOST .../events, NPZ, {args.batch} events x {args.features} features with ids, "
          f"spam, default window; {args.rounds} alternated rounds")  # fmt: skip
    for number, line in enumerate(lines):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if number == 0:
            print("  ".join("-" * width for width in widths))
    print(f"\nmachine after: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
