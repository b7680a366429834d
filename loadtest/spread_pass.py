"""The learning pass in process (no HTTP): one event on each of 16 models against one model's
group of 16 one-event requests, thread CPU per event, two checkouts alternated in one run.

    python -m loadtest.spread_pass --peer before=/work/wt/B --peer after=. [--models 200]

Each peer runs in a process of its own (``PYTHONPATH`` = its checkout) on an embedded SQLite
store in a fresh directory: ``--models`` default models (``auto``, ``--features`` features)
each fed ``--warm`` events one request at a time, and one model fed ``--hot-warm`` events.
Then, in turns, ``spread``: a pass (``service.engine.passes.learn_pass``; a group it leaves
is learned after it, ``learn_merged``) of ``--width`` models (round-robin over the
models) with one one-event request each; ``one``: a pass of the one model with
``--width`` one-event requests (merged into one learner call).  CPU is the calling thread's
(``time.thread_time``): the boosted candidates' fits run in threads of their own and are not
counted, their installs are.  Prints each peer's per-event CPU of each phase (best of
``--rounds``) and the ratios; the load average at the start and the end.  ``--parts`` also
times the parts of a pass (:data:`PARTS`: the thread CPU of each one's calls, per event, in
the phases' best repeat), so that what a spread event pays beyond one model's event can be
read part by part; its wrappers cost a few microseconds an event of their own.
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

#: the parts of a pass ``--parts`` times: (label, module, attribute path); a part a checkout
#: lacks is left out.  They nest: ``learn_pass`` holds the rest, ``Pass.commit`` holds
#: ``commit_many`` which holds the transaction (``grouped``: its statements and its sync)
PARTS = (
    ("learn_pass", "service.engine.passes", "learn_pass"),
    ("read_heads: heads, ids", "service.engine.passes", "Pass.read_heads"),
    ("load_with_point", "service.engine.passes", "load_with_point"),
    ("duplicates", "service.engine.learning", "Learning.duplicates"),
    ("learn_rows: the learner", "service.engine.learning", "learn_rows"),
    ("after_learning: metrics", "service.engine.learning", "after_learning"),
    ("repository.commit (kept)", "service.engine.repository", "ModelRepository.commit"),
    ("Pass.commit", "service.engine.passes", "Pass.commit"),
    ("commit_many", "service.stores.sqlite", "SQLiteStore.commit_many"),
    ("_prepared: entry encoded", "service.stores.sqlite", "SQLiteStore._prepared"),
    ("grouped: transaction, sync", "service.stores.sqlite_file", "Database.grouped"),
    ("after_commit", "service.engine.repository", "ModelRepository.after_commit"),
)


def _timed_parts(spent: dict[str, float], timing: list[bool]) -> None:
    """Wrap each of :data:`PARTS` to add its calls' thread CPU to ``spent`` while
    ``timing[0]``."""
    import importlib

    for label, module_name, path in PARTS:
        owner: object = importlib.import_module(module_name)
        *outer, name = path.split(".")
        for attribute in outer:
            owner = getattr(owner, attribute, None)
        function = getattr(owner, name, None) if owner is not None else None
        if function is None:
            continue

        def timed(*args, _function=function, _label=label, **kwargs):
            if not timing[0]:
                return _function(*args, **kwargs)
            begun = time.thread_time()
            try:
                return _function(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.thread_time() - begun

        setattr(owner, name, timed)


def _batch(rng: np.random.Generator, n_events: int, width: int, serial: list[int]):
    from service.ingest import Batch

    y = np.where(rng.random(n_events) < 0.2, 1, -1).astype(np.int64)
    X = rng.normal(size=(n_events, width)) + 0.8 * (y > 0)[:, None]
    ids = []
    for _ in range(n_events):
        serial[0] += 1
        ids.append(f"e{serial[0]}")
    return Batch(X, y, ids)


def worker(args: argparse.Namespace) -> None:
    """One peer: build the models, then time the phases; prints a JSON line."""
    from service.engine import Engine
    from service.engine import passes as pass_module
    from service.models import create_model
    from service.schemas import ModelCreate
    from service.stores.sqlite import SQLiteStore

    rng = np.random.default_rng(0)
    serial = [0]
    spent: dict[str, float] = {}
    timing = [False]
    if args.parts:
        _timed_parts(spent, timing)
    with tempfile.TemporaryDirectory() as directory:
        engine = Engine(
            SQLiteStore.open(Path(directory) / "models.db"),
            checkpoint_seconds=3600.0,
            max_cached_models=args.models + 10,
        )
        models = [f"m{k}" for k in range(args.models)]
        for model_id in [*models, "hot"]:
            create_model(engine, ModelCreate(id=model_id, n_features=args.features))

        def one_pass(items: list[tuple[str, int]]) -> None:
            groups = [
                (model_id, [(_batch(rng, 1, args.features, serial), False) for _ in range(count)])
                for model_id, count in items
            ]
            # looked up at each call: the one ``--parts`` wraps
            passed = zip(groups, pass_module.learn_pass(engine, groups), strict=True)
            for group, done in passed:
                for outcome in pass_module.learn_merged(engine, *group) if done is None else done:
                    if isinstance(outcome, BaseException):
                        raise outcome

        for _ in range(args.warm):
            for start in range(0, len(models), args.width):
                one_pass([(m, 1) for m in models[start : start + args.width]])
        for _ in range(args.hot_warm // args.width):
            one_pass([("hot", args.width)])
        best = {"spread": np.inf, "one": np.inf}
        parts: dict[str, dict[str, float]] = {"spread": {}, "one": {}}
        cursor = 0
        for _ in range(args.repeats):
            for phase in ("spread", "one"):
                passes = []
                for _ in range(args.passes):
                    if phase == "spread":
                        chosen = [models[(cursor + k) % len(models)] for k in range(args.width)]
                        cursor += args.width
                        passes.append([(m, 1) for m in chosen])
                    else:
                        passes.append([("hot", args.width)])
                spent.clear()
                timing[0] = True
                begun = time.thread_time()
                for items in passes:
                    one_pass(items)
                cpu = (time.thread_time() - begun) / (args.passes * args.width)
                timing[0] = False
                if cpu < best[phase]:
                    best[phase] = cpu
                    parts[phase] = {k: v / (args.passes * args.width) for k, v in spent.items()}
        engine.close()
    print(json.dumps({**best, "parts": parts}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="name=checkout (repeatable)")
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--width", type=int, default=16, help="groups (or requests) per pass")
    parser.add_argument("--warm", type=int, default=50, help="events per spread model first")
    parser.add_argument("--hot-warm", type=int, default=1600)
    parser.add_argument("--passes", type=int, default=100, help="passes per phase and repeat")
    parser.add_argument("--repeats", type=int, default=3, help="phases per process (best)")
    parser.add_argument("--rounds", type=int, default=2, help="alternated processes per peer")
    parser.add_argument("--parts", action="store_true", help="also the parts of a pass (PARTS)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    peers = [tuple(peer.split("=", 1)) for peer in args.peer] or [("here", ".")]
    loads = [open("/proc/loadavg").read().split()[0]]
    results: dict[str, list[dict]] = {name: [] for name, _ in peers}
    for round_ in range(args.rounds):
        order = peers if round_ % 2 == 0 else peers[::-1]
        for name, path in order:
            checkout = str(Path(path).resolve())
            # this file run by path: its checkout's own code is what the worker imports
            command = [sys.executable, str(Path(__file__).resolve()), "--worker",
                       *(f"--{key.replace('_', '-')}={getattr(args, key)}"
                         for key in ("models", "features", "width", "warm", "hot_warm",
                                     "passes", "repeats")),
                       *(["--parts"] if args.parts else [])]  # fmt: skip
            env = dict(os.environ, PYTHONPATH=checkout)
            done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            results[name].append(figures)
            print(f"round {round_} {name}: " + ", ".join(
                f"{phase} {figures[phase] * 1e6:.1f} us/event" for phase in ("spread", "one")
            ), flush=True)  # fmt: skip
        loads.append(open("/proc/loadavg").read().split()[0])
    print(f"load average (1 min) {', '.join(loads)}")
    first = peers[0][0]
    for name, _ in peers:
        best = {phase: min(r[phase] for r in results[name]) for phase in ("spread", "one")}
        line = (f"{name}: spread {best['spread'] * 1e6:.1f} us/event, one {best['one'] * 1e6:.1f}"
                f" us/event, spread / one {best['spread'] / best['one']:.2f}x")  # fmt: skip
        if name != first:
            base = {phase: min(r[phase] for r in results[first]) for phase in ("spread", "one")}
            line += (f"; against {first}: spread {best['spread'] / base['spread']:.2f}, one "
                     f"{best['one'] / base['one']:.2f}")  # fmt: skip
        print(line)
    if args.parts:
        _print_parts(peers, results)


def _print_parts(peers: list, results: dict[str, list[dict]]) -> None:
    """A table of each part's thread CPU per event, medians of the rounds (each round's
    figures from its phase's best repeat), spread against one, per peer."""
    print("| peer | part | spread us/event | one us/event | spread - one |")
    print("|---|---|---:|---:|---:|")
    for name, _ in peers:
        labels = [label for label, _, _ in PARTS if label in results[name][0]["parts"]["spread"]]
        for label in labels:
            spread, one = (
                float(np.median([r["parts"][phase].get(label, 0.0) for r in results[name]])) * 1e6
                for phase in ("spread", "one")
            )
            print(f"| {name} | {label} | {spread:.1f} | {one:.1f} | {spread - one:.1f} |")


if __name__ == "__main__":
    main()
