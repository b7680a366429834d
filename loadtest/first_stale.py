"""Two writers on one model: the CPU of a stale append, the first one of a process and a later
one, and of the writes around them, on checkouts side by side.

    python -m loadtest.first_stale --peer before=/work/wt/B --peer after=. [--tail 2000]

Each peer runs in a fresh process of its own checkout (alternated over ``--rounds``): one
SQLite file, one default model (``auto``, ``--features`` features) with ``--tail`` one-event
entries in its log after its checkpoint, and two engines on the file, the two processes of
``--workers 2`` (one process here, so that the race is made, not waited for: the other engine
appends inside this one's commit).  The writer engine loads the model whole (not measured),
makes ``--writes`` one-event writes alone, then a write whose append the other engine makes
stale (the *first* stale append), a write alone, and a second raced write (a *later* one: the
model is contended by then).  A fresh writer then alternates one-event writes with the other
engine's (each write catching up on one entry) for ``--alternate`` rounds.  Figures are this
thread's CPU (``time.thread_time``), the other engine's appends subtracted; medians over
``--repeats`` fresh writers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _measure(args: argparse.Namespace) -> dict[str, float]:
    from core.validation import as_labels
    from service.engine import Engine
    from service.ingest import Batch
    from service.models import create_model
    from service.schemas import ModelCreate
    from service.stores.sqlite import SQLiteStore

    data = tempfile.mkdtemp(prefix="aucstream-first-stale-")
    rng = np.random.default_rng(0)
    counter = iter(range(10**9))

    def event() -> Batch:
        k = next(counter)
        return Batch(rng.normal(size=(1, args.features)), as_labels(rng.random(1) < 0.3), [f"e{k}"])

    def engine() -> Engine:
        store = SQLiteStore.open(data, synchronous="normal")
        return Engine(store, checkpoint_events=10**9, checkpoint_seconds=1e9)

    other = engine()
    create_model(other, ModelCreate(id="m", n_features=args.features))
    for _ in range(args.tail):
        other.learn("m", event())
    other_cpu = [0.0]

    def raced(writer: Engine) -> float:
        """CPU of one write of ``writer`` whose append ``other`` makes stale."""
        commit = writer.store.commit

        def racing(model_id, pending):
            writer.store.commit = commit  # type: ignore[method-assign]
            started = time.thread_time()
            other.learn(model_id, event())
            other_cpu[0] += time.thread_time() - started
            return commit(model_id, pending)

        writer.store.commit = racing  # type: ignore[method-assign]
        other_cpu[0] = 0.0
        started = time.thread_time()
        writer.learn("m", event())
        return time.thread_time() - started - other_cpu[0]

    def alone(writer: Engine) -> float:
        started = time.thread_time()
        writer.learn("m", event())
        return time.thread_time() - started

    figures: dict[str, list[float]] = {"first": [], "later": [], "alone": [], "alternate": []}
    for _ in range(args.repeats):
        writer = engine()
        writer.info("m")  # loaded whole: the process's first use of the model
        figures["alone"] += [alone(writer) for _ in range(args.writes)]
        first = raced(writer)
        reloaded = writer.repository.writes_reloaded
        alone(writer)
        figures["first"].append(first)
        figures["later"].append(raced(writer))
        assert writer.repository.writes_retried == 2, writer.repository.writes_retried
        fresh = engine()
        fresh.info("m")
        costs = []
        for _ in range(args.alternate):
            other.learn("m", event())
            costs.append(alone(fresh))
        figures["alternate"].append(statistics.mean(costs))
    result = {name: statistics.median(values) * 1e3 for name, values in figures.items()}
    result["first_reloaded"] = float(reloaded)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="append", required=True, help="name=checkout path")
    parser.add_argument("--tail", type=int, default=2000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--alternate", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args)))
        return
    peers = [peer.split("=", 1) for peer in args.peer]
    options = [f"--{name}={getattr(args, name)}" for name in ("tail", "features", "writes")]
    options += [f"--alternate={args.alternate}", f"--repeats={args.repeats}"]
    rows = []
    for round_ in range(args.rounds):
        for name, path in peers if round_ % 2 == 0 else peers[::-1]:
            path = os.path.abspath(path)
            load = os.getloadavg()[0]
            command = [sys.executable, os.path.abspath(__file__), "--peer", "x", "--measure"]
            done = subprocess.run(
                [*command, *options],
                cwd=path,
                env={**os.environ, "PYTHONPATH": path},
                capture_output=True,
                text=True,
            )
            if done.returncode:
                sys.exit(f"{name} failed:\n{done.stderr}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append((round_ + 1, name, figures, load, os.getloadavg()[0]))
            print(rows[-1], flush=True)
    print(
        "\n| round | peer | first stale write | later stale write | write alone "
        "| write after another's | load |\n|---|---|---:|---:|---:|---:|---|"
    )
    for round_, name, figures, before, after in rows:
        rebuilt = " (rebuilt)" if figures["first_reloaded"] else ""
        print(
            f"| {round_} | {name} | {figures['first']:.1f} ms{rebuilt} | {figures['later']:.1f} ms"
            f" | {figures['alone']:.2f} ms | {figures['alternate']:.2f} ms "
            f"| {before:.1f} -> {after:.1f} |"
        )


if __name__ == "__main__":
    main()
