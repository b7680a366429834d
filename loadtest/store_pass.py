"""What the SQLite store's transaction of a pass costs per event: one event on each of 16
models against one model's 16 events, WAL bytes and thread CPU, two checkouts alternated.

    python -m loadtest.store_pass --peer before=/work/wt/B --peer after=. [--models 200]

Each peer runs this file in a process of its own (``PYTHONPATH`` = its checkout) on a SQLite
store in a fresh directory: ``--models`` default models (``auto``, ``--features`` features,
created by the engine so their rows are the service's) and one more.  Then, in turns, ``spread``:
``commit_many`` of ``--width`` commits of one one-event entry and one new id each, round-robin
over the models (a pass of the coalescer over many models); ``one``: ``commit_many`` of the
one model's entry of ``--width`` events and ids (a pass merged into one commit).  The WAL's
automatic checkpoint is off while a phase runs and the WAL truncated before it, so its growth
is every page the phase's transactions wrote.  Prints each peer's per-event WAL bytes and CPU
(``time.thread_time``, best of ``--rounds``) and the ratios; the load at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def worker(args: argparse.Namespace) -> None:
    """One peer: build the models, then measure the phases; prints a JSON line."""
    from service.engine import Engine
    from service.engine.entries import Entry
    from service.models import create_model
    from service.schemas import ModelCreate
    from service.stores.base import Commit
    from service.stores.sqlite import SQLiteStore

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteStore.open(Path(directory))
        engine = Engine(store, checkpoint_seconds=3600.0)
        models = [f"m{k}" for k in range(args.models)]
        for model_id in [*models, "hot"]:
            create_model(engine, ModelCreate(id=model_id, n_features=args.features))
        heads = store.heads([*models, "hot"])
        versions = {model_id: head[0] for model_id, head in heads.items()}
        serial = 0
        cursor = 0
        # an older checkout's commit carries the whole state or None beside the entry
        older = {"arrays": None} if "arrays" in Commit.__dataclass_fields__ else {}

        def commit(model_id: str, n_events: int) -> tuple[str, Commit]:
            nonlocal serial
            now = time.time()
            y = np.where(rng.random(n_events) < 0.2, 1, -1).astype(np.int64)
            ids = [f"e{serial + k}" for k in range(n_events)]
            serial += n_events
            entry = Entry(now, rng.normal(size=(n_events, args.features)), y)
            return model_id, Commit(
                expected_version=versions[model_id], incarnation=heads[model_id][1],
                entry=entry, learned_ids=ids, id_expiry=now + 86400.0, now=now,
                max_remembered_ids=1_000_000, **older,
            )  # fmt: skip

        def one_pass(phase: str) -> None:
            nonlocal cursor
            if phase == "one":
                commits = [commit("hot", args.width)]
            else:
                commits = []
                for _ in range(args.width):
                    commits.append(commit(models[cursor % len(models)], 1))
                    cursor += 1
            for (model_id, _), outcome in zip(commits, store.commit_many(commits), strict=True):
                assert isinstance(outcome, int), outcome
                versions[model_id] = outcome

        db = store.database.connection()
        wal = Path(f"{store.path}-wal")
        for _ in range(args.warm):  # every model's pages of the log and ids exist
            one_pass("spread")
            one_pass("one")
        figures: dict[str, dict[str, list[float]]] = {
            phase: {"cpu": [], "wal": []} for phase in ("spread", "one")
        }
        for round_number in range(args.rounds):
            phases = ["spread", "one"] if round_number % 2 == 0 else ["one", "spread"]
            for phase in phases:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                db.execute("PRAGMA wal_autocheckpoint=0").fetchall()
                cpu = time.thread_time()
                for _ in range(args.passes):
                    one_pass(phase)
                cpu = time.thread_time() - cpu
                events = args.passes * args.width
                figures[phase]["cpu"].append(cpu / events * 1e6)
                figures[phase]["wal"].append(wal.stat().st_size / events)
        store.close()
    print(json.dumps(figures))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="name=checkout")
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--warm", type=int, default=30, help="passes before measuring")
    parser.add_argument("--passes", type=int, default=100, help="passes a measured phase")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=2, help="runs of each peer, alternated")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    peers = dict(peer.split("=", 1) for peer in args.peer) or {"here": "."}
    print(f"load at start: {os.getloadavg()}", flush=True)
    forwarded = [
        f"--models={args.models}", f"--features={args.features}", f"--width={args.width}",
        f"--warm={args.warm}", f"--passes={args.passes}", f"--rounds={args.rounds}",
    ]  # fmt: skip
    best: dict[str, dict[str, list[tuple[float, float]]]] = {name: {} for name in peers}
    for turn in range(args.turns):
        names = list(peers) if turn % 2 == 0 else list(reversed(peers))
        for name in names:
            checkout = str(Path(peers[name]).resolve())
            output = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker", *forwarded],
                cwd=checkout, env={**os.environ, "PYTHONPATH": checkout},
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            figures = json.loads(output.strip().splitlines()[-1])
            for phase, measured in figures.items():
                best[name].setdefault(phase, []).append(
                    (min(measured["cpu"]), float(np.median(measured["wal"])))
                )
                print(
                    f"turn {turn} {name:>8} {phase:>6}: CPU {min(measured['cpu']):7.1f} us, "
                    f"WAL {np.median(measured['wal']):7.0f} B an event",
                    flush=True,
                )
    print(f"load at end: {os.getloadavg()}")
    for name, phases in best.items():
        cpu = {phase: float(np.median([c for c, _ in runs])) for phase, runs in phases.items()}
        wal = {phase: float(np.median([w for _, w in runs])) for phase, runs in phases.items()}
        print(
            f"{name}: spread {cpu['spread']:.1f} us {wal['spread']:.0f} B, one {cpu['one']:.1f} "
            f"us {wal['one']:.0f} B, spread / one CPU {cpu['spread'] / cpu['one']:.2f}"
        )
    if len(best) == 2:
        first, second = best
        for phase in ("spread", "one"):
            ratio = [
                b[0] / a[0] for a, b in zip(best[first][phase], best[second][phase], strict=True)
            ]
            turns = ", ".join(f"{r:.2f}" for r in ratio)
            print(f"{phase}: CPU {second} / {first} by turn {turns}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
