"""What one model costs in memory on each store: the server process's RSS per model, and for
the Redis store Redis's own ``used_memory`` per model.

::

    python -m loadtest.memory_per_model                       # 2,000 models, cache of 100
    python -m loadtest.memory_per_model --models 10000 --cache 1024
    python -m loadtest.memory_per_model --stores memory --events 0   # empty models only
    python -m loadtest.memory_per_model --events 300 --against /work/main --rounds 2

Each store is measured in a fresh Python process (so one store's garbage does not count for
another), in-process through :class:`service.engine.Engine` as the routes call it (no HTTP:
what is measured is the model cache and the store).  The process first creates, trains and
scores one model, so that the numba kernels are compiled and the imports done, and records its
RSS; then it creates ``--models`` default models (``auto``, ``--features`` features), and in
each learns ``--events`` labelled events with ids (in requests of ``--batch`` events: one
request by default; ``--batch 1`` as the one-event traffic of loadtest.log_path) and scores
``--events`` more (kept for a label, as ``/score`` with ids does), with a model cache of
``--cache`` models (``AUCSTREAM_MAX_CACHED_MODELS``).  The Redis store runs against a
private ``redis-server``.

Columns: RSS of the server process before and after (MB, from ``/proc/self/statm``), the
difference per model (KB), the store's own per-model memory (Redis ``used_memory``, or the
SQLite file's size on disk, per model; KB), the seconds the creation and learning took, and
the number of models whose stored base this process still holds (the stores' delta cache:
at most ``--cache``).  A model the cache holds costs its live arrays (which grow as they fill,
core/learners/_growing.py) and Python objects; a model only the store holds costs what its
stored fields hold (all-zero chunks are not stored).

``--against DIR`` measures another checkout too (e.g. the code before a change), the two
alternated over ``--rounds``: the child is this file run with ``DIR`` first on its path, so
both checkouts are measured by the same script.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loadtest.run import machine

STORES = ("memory", "sqlite", "redis")
ROOT = Path(__file__).resolve().parents[1]
RUN_THIS_FILE = (
    "import runpy, sys; sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"
)
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def measure(args: argparse.Namespace) -> dict:
    """One store, in this process (the child of :func:`main`)."""
    from service.engine import Engine
    from service.ingest import Batch
    from service.models import create_model
    from service.schemas import ModelCreate

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2 * max(args.events, 1), args.features))
    y = (X[:, 0] + rng.normal(size=len(X)) > 0).astype(np.int64)
    redis_client = None
    if args.store == "memory":
        from service.stores.memory import MemoryStore

        store = MemoryStore()
    elif args.store == "sqlite":
        from service.stores.sqlite import SQLiteStore

        store = SQLiteStore.open(args.data_dir, "normal")
    else:
        import redis

        from service.stores.redis import RedisStore

        store = RedisStore.from_url(args.redis_url)
        redis_client = redis.Redis.from_url(args.redis_url)
    engine = Engine(store, max_cached_models=args.cache)

    def one_model(model_id: str) -> None:
        create_model(engine, ModelCreate(id=model_id, n_features=args.features))
        if args.events:
            n = args.events
            ids = [f"{model_id}-{i}" for i in range(2 * n)]
            step = args.batch or n
            for start in range(0, n, step):
                stop = min(start + step, n)
                engine.learn(model_id, Batch(X[start:stop], y[start:stop], ids[start:stop]))
            engine.score(model_id, Batch(X[n:], None, ids[n:]))

    one_model("warm-up")
    engine.delete_model("warm-up")
    gc.collect()
    before = rss_bytes()
    redis_before = int(redis_client.info("memory")["used_memory"]) if redis_client else 0
    started = time.perf_counter()
    for index in range(args.models):
        one_model(f"m{index}")
    seconds = time.perf_counter() - started
    gc.collect()
    after = rss_bytes()
    store_bytes = 0
    if redis_client is not None:
        store_bytes = int(redis_client.info("memory")["used_memory"]) - redis_before
    elif args.store == "sqlite":
        store_bytes = sum(
            path.stat().st_size for path in Path(args.data_dir).iterdir() if path.is_file()
        )
    known = len(getattr(store, "_written", ()))
    return {
        "store": args.store,
        "rss_before": before,
        "rss_after": after,
        "store_bytes": store_bytes,
        "seconds": seconds,
        "known": known,
        "cached": len(engine.repository.cached_ids()),
    }


def run_child(store: str, args: argparse.Namespace, redis_url: str | None, checkout: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="aucstream-memory-") as data_dir:
        # this file run in the checkout (not `-m`, which would import the checkout's copy; not
        # as a script, whose directory would come first on the path)
        command = [
            sys.executable, "-c", RUN_THIS_FILE, __file__, "--child", "--store", store,
            "--models", str(args.models), "--events", str(args.events),
            "--features", str(args.features), "--cache", str(args.cache),
            "--batch", str(args.batch),
            "--data-dir", data_dir, "--redis-url", redis_url or "",
        ]  # fmt: skip
        environment = dict(os.environ, PYTHONPATH=str(checkout))
        output = subprocess.run(
            command, check=True, capture_output=True, text=True, env=environment, cwd=checkout
        ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=2000)
    parser.add_argument("--events", type=int, default=5, help="learned and scored per model")
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument(
        "--batch", type=int, default=0, help="events per learning request (0: all in one)"
    )
    parser.add_argument("--cache", type=int, default=100, help="AUCSTREAM_MAX_CACHED_MODELS")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--against", type=Path, help="another checkout, measured alternately")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args)))
        return

    from loadtest.local import private_redis

    stores = [name.strip() for name in args.stores.split(",") if name.strip()]
    print(machine())
    print(
        f"{args.models:,} default models (auto, {args.features} features), {args.events} events "
        f"learned ({args.batch or args.events} a request) and {args.events} scored in each, "
        f"model cache of {args.cache}\n"
    )
    checkouts = {"this checkout": ROOT}
    if args.against is not None:
        checkouts[str(args.against)] = args.against.resolve()
    print(
        f"{'round':5} {'checkout':24} {'store':8} {'RSS before':>11} {'RSS after':>10} "
        f"{'RSS/model':>10} {'store/model':>12} {'seconds':>8} {'known':>6} {'cached':>7} "
        f"{'load':>5}"
    )
    for round_number in range(1, args.rounds + 1):
        order = list(checkouts.items())
        if round_number % 2 == 0:  # the other checkout first every other round
            order.reverse()
        for store in stores:
            for name, checkout in order:
                if store == "redis":
                    with private_redis() as (url, _pid):
                        result = run_child(store, args, url, checkout)
                else:
                    result = run_child(store, args, None, checkout)
                per_model = (result["rss_after"] - result["rss_before"]) / args.models
                store_per_model = result["store_bytes"] / args.models
                print(
                    f"{round_number:5} {name[-24:]:24} {store:8} "
                    f"{result['rss_before'] / 1e6:9.0f}MB {result['rss_after'] / 1e6:8.0f}MB "
                    f"{per_model / 1e3:8.1f}KB {store_per_model / 1e3:10.1f}KB "
                    f"{result['seconds']:8.1f} {result['known']:6} {result['cached']:7} "
                    f"{os.getloadavg()[0]:5.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
