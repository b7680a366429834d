"""Ingest and scoring cost of ``auto`` against one ``spam``, per event.

Not a test: prints tables.  Two modes.

``--ratios`` (the default): ``auto`` and ``spam`` as a model created over HTTP runs them (dense
features: ``scaling="standard"``; auto's defaults: drift tracking and its fast candidate) learn
a dense standard-normal stream (5 % positives, ``--features`` 50) in one-event batches and in
batches of 1,000, and the table gives auto's CPU time per event over spam's.  The stream is
larger than the cache (``--events`` rows of 50 float64: 80 MB at 200,000); the one-event run
learns its first ``--single-events`` events (a cold start with both tree fits, then the steady
state).  ``--tree PATH`` (repeatable) measures the same in another checkout (``/work/main``:
before / after), each round running every tree in turn in a fresh process, so that a busy
machine slows them alike; the best round of each is reported.  Times are the thread's CPU time
(``time.thread_time``): wall time also counts the time other processes hold the core.

``--models``: the older table of every candidate and tournament, in batches of ``--batch``.

``--request-path``: the learning cost on a service's request path, the boosted fits handed to
a background fitter as the service hands them (its part, the fit and the inner learner's
relearning of the job's buffer, not counted; taking the job and installing it counted), of
the default tournament against the one before the fast boosted candidate (docs/algorithms/
auto.md, "The fast candidates"), in batches of ``--batch``, alternated, best of ``--repeats``.

Usage::

    python bench/auto_cost.py [--events 200000] [--single-events 40000] [--rounds 3]
                              [--tree /work/main] [--tree .]
    python bench/auto_cost.py --models [--events 200000] [--batch 1000] [--repeats 3]
    python bench/auto_cost.py --request-path [--events 30000] [--batch 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

_OFFSET = {"learner": "logistic", "params": {"base_rate_offset": True}}
_FTRL = {"learner": "ftrl_pauc", "params": {"update_every": 2000}}
_TREE_ONCE = {"learner": "logistic", "params": {"base_rate_offset": True, "solver": "ftrl"}}

MODELS = {
    "spam": ("spam", {}),
    "logistic (base-rate offset; Laplace solver up to 128 features)": (
        "logistic",
        {"base_rate_offset": True},
    ),
    "logistic (base-rate offset), FTRL": ("logistic", {"base_rate_offset": True, "solver": "ftrl"}),
    "pmb": ("pmb", {}),
    "ftrl_pauc (update_every 5000: auto's default)": ("ftrl_pauc", {"update_every": 5000}),
    "ftrl_pauc (its default, 500)": ("ftrl_pauc", {}),
    "auto (default: + fast logistic, drift tracking)": ("auto", {}),
    "auto, no drift tracking": ("auto", {"track_drift": False}),
    "auto, temperature 0 (the leader scored alone)": ("auto", {"temperature": 0.0}),
    "auto, logistic + ftrl_pauc": ("auto", {"candidates": [_OFFSET, _FTRL]}),
    "auto, logistic + pmb (default above 1,000 features)": (
        "auto",
        {"candidates": [_OFFSET, {"learner": "pmb"}]},
    ),
    "tree_embedded (logistic, relearn, refit at 8,000, depth 8: auto's third)": (
        "tree_embedded",
        {**_TREE_ONCE, "relearn": True, "refit_events": 8000, "max_depth": 8},
    ),
}

#: the two models of the ratio table, as the service builds them for dense features
HTTP = {"spam": ("spam", {"scaling": "standard"}),
        "auto": ("auto", {"scaling": "standard", "track_drift": True})}  # fmt: skip


def stream(events: int, features: int):
    rng = np.random.default_rng(0)
    y = (rng.random(events) < 0.05).astype(np.int64)
    X = rng.normal(size=(events, features)) + 0.3 * y[:, None]
    return X, y


def learn_seconds(name: str, params: dict, X, y, batch: int) -> float:
    from core.learners import make_learner

    model = make_learner(name, **params)
    start = time.thread_time()
    for first in range(0, len(y), batch):
        model.prequential_step(X[first : first + batch], y[first : first + batch])
    return time.thread_time() - start


def worker(args) -> None:
    """One round in this process (its checkout on sys.path): CPU seconds per event of each
    HTTP model and batch size, the models alternated."""
    sys.path.insert(0, str(Path.cwd()))
    X, y = stream(args.events, args.features)
    for name, params in HTTP.values():
        learn_seconds(name, params, X[:3000], y[:3000], 1000)  # compile (or load the cache)
        learn_seconds(name, params, X[:20], y[:20], 1)
    out = {}
    for batch, events in ((1, args.single_events), (1000, args.events)):
        for label, (name, params) in HTTP.items():
            seconds = learn_seconds(name, params, X[:events], y[:events], batch)
            out[f"{label}@{batch}"] = seconds / events
    print(json.dumps(out))


def ratios(args) -> None:
    trees = [str(Path(tree).resolve()) for tree in (args.tree or [str(ROOT)])]
    best: dict[str, dict[str, float]] = {tree: {} for tree in trees}
    loads = [open("/proc/loadavg").read().split()[0]]
    for _ in range(args.rounds):
        for tree in trees:
            command = [sys.executable, str(ROOT / "bench" / "auto_cost.py"), "--worker",
                       "--events", str(args.events), "--single-events", str(args.single_events),
                       "--features", str(args.features)]  # fmt: skip
            # each checkout compiles into a cache of its own, outside the checkouts
            cache = Path("/tmp/aucstream-auto-cost") / tree.strip("/").replace("/", "_")
            env = dict(os.environ, PYTHONPATH=tree, NUMBA_CACHE_DIR=str(cache))
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr)
            for key, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
                best[tree][key] = min(best[tree].get(key, np.inf), value)
        loads.append(open("/proc/loadavg").read().split()[0])
    print(f"dense {args.features} features; one-event batches: the first {args.single_events:,} "
          f"events; batches of 1,000: {args.events:,} events; best of {args.rounds} alternated "
          f"rounds; load average (1 min) {', '.join(loads)}")  # fmt: skip
    print(f"{'checkout':24s} {'batch':>6s} {'spam us/event':>14s} {'auto us/event':>14s} "
          f"{'auto / spam':>12s}")  # fmt: skip
    for tree, times in best.items():
        for batch in (1, 1000):
            spam, auto = times[f"spam@{batch}"] * 1e6, times[f"auto@{batch}"] * 1e6
            print(f"{tree:24s} {batch:6d} {spam:14.2f} {auto:14.2f} {auto / spam:12.2f}")


def models(args) -> None:
    sys.path.insert(0, str(ROOT))
    from core.learners import make_learner

    X, y = stream(args.events, args.features)
    for name, params in MODELS.values():
        make_learner(name, **params).prequential_step(X[:2000], y[:2000])  # compile
    best = dict.fromkeys(MODELS, np.inf)
    best_scoring = dict.fromkeys(MODELS, np.inf)
    for _ in range(args.repeats):
        for label, (name, params) in MODELS.items():
            model = make_learner(name, **params)
            start = time.thread_time()
            for first in range(0, args.events, args.batch):
                stop = first + args.batch
                model.prequential_step(X[first:stop], y[first:stop])
            best[label] = min(best[label], time.thread_time() - start)
            # scoring new rows with the learned model (auto: the candidates with a share)
            start = time.thread_time()
            for first in range(0, args.events, args.batch):
                model.decision_function(X[first : first + args.batch])
            best_scoring[label] = min(best_scoring[label], time.thread_time() - start)
    spam_rate = args.events / best["spam"]
    spam_scoring = args.events / best_scoring["spam"]
    print(f"{args.events} events x {args.features} dense features, batches of {args.batch}")
    print(f"{'model':52s} {'learned/s':>12s} {'vs spam':>8s} {'scored/s':>12s} {'vs spam':>8s}")
    for label, seconds in best.items():
        rate = args.events / seconds
        scoring = args.events / best_scoring[label]
        print(
            f"{label:52s} {rate:12,.0f} {rate / spam_rate:8.2f} {scoring:12,.0f} "
            f"{scoring / spam_scoring:8.2f}"
        )


def request_path(args) -> None:
    sys.path.insert(0, str(ROOT))
    from core.boosted_fits import FitHandle, background_fits
    from core.learners import make_learner
    from core.learners._candidates import DEFAULT_CANDIDATES, FAST_CANDIDATES

    X, y = stream(args.events, args.features)
    tournaments = {
        "before the fast boosted candidate": {"candidates": [*DEFAULT_CANDIDATES,
                                                             *FAST_CANDIDATES]},
        "default": {},
    }  # fmt: skip

    def learned(params: dict, events: int) -> float:
        model = make_learner("auto", scaling="standard", **params)
        off_path = [0.0]

        def submit(job, prepare):  # a fitter that finishes each job as it is handed over
            handle, begun = FitHandle(job, prepare), time.thread_time()
            handle.begin()
            handle.run()
            off_path[0] += time.thread_time() - begun
            return handle

        start = time.thread_time()
        with background_fits(submit):
            for first in range(0, events, args.batch):
                model.prequential_step(X[first : first + args.batch], y[first : first + args.batch])
        return (time.thread_time() - start - off_path[0]) / events

    for params in tournaments.values():
        learned(params, 3000)  # compile (or load the cache)
    best = dict.fromkeys(tournaments, np.inf)
    for _ in range(args.repeats):
        for label, params in tournaments.items():
            best[label] = min(best[label], learned(params, args.events))
    load = os.getloadavg()[0]
    print(f"{args.events:,} events x {args.features} dense features, batches of {args.batch}, "
          f"fits off the request path, best of {args.repeats}; load {load:.1f}")  # fmt: skip
    before = best["before the fast boosted candidate"]
    for label, seconds in best.items():
        print(f"{label:36s} {1e6 * seconds:8.2f} us/event {seconds / before:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="store_true", help="the table of every model")
    parser.add_argument("--request-path", action="store_true",
                        help="the default against the tournament before its fast boosted one, "
                        "fits off the request path")  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", help="a checkout to measure (repeatable)")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--single-events", type=int, default=40_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    elif args.models:
        models(args)
    elif args.request_path:
        request_path(args)
    else:
        ratios(args)


if __name__ == "__main__":
    main()
