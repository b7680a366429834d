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

``--one-event``: auto's learning of one event at a time on the request path (issue 36), a
real data set's events (``letter_a``: 16 features; and the same events hashed by name into
2^18 columns, ``scaling="scale"`` as the service picks for hashed models) tiled, shuffled per
copy, into a stream of ``--events`` rows (larger than the cache), the boosted fits handed to
a background fitter as the service hands them (the fits not counted, wherever they run;
their install counted).  The model learns the first 5,000 events in one batch, then
``--single-events`` one at a time, timed; a second pass of as many events times each
component (wrapped: the sum runs a little slower than the plain pass).  Each ``--tree`` runs in
a fresh process in turn, round after round; the best round of each is reported, with the
load.

Usage::

    python bench/auto_cost.py [--events 200000] [--single-events 40000] [--rounds 3]
                              [--tree /work/main] [--tree .]
    python bench/auto_cost.py --models [--events 200000] [--batch 1000] [--repeats 3]
    python bench/auto_cost.py --request-path [--events 30000] [--batch 1000] [--repeats 3]
    python bench/auto_cost.py --one-event [--events 200000] [--single-events 10000]
                              [--rounds 3] [--tree /work/main] [--tree .]
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


#: events the model learns in one batch before its one-event calls are timed
WARM_EVENTS = 5000


def letter_stream(events: int, hashed: bool):
    """``letter_a``'s events tiled into ``events`` rows, each copy shuffled (a fixed seed);
    ``hashed``: each event's features by name (``f0`` ..) hashed into 2^18 columns (CSR)."""
    from bench import datasets  # the checkout's own (on sys.path first)

    X, y, _ = datasets.load("letter_a")
    rng = np.random.default_rng(0)
    order = np.concatenate([rng.permutation(len(y)) for _ in range(-(-events // len(y)))])
    X, y = np.ascontiguousarray(X[order[:events]], dtype=np.float64), y[order[:events]]
    if hashed:
        from core.hashing import FeatureHasher

        names = [f"f{j}" for j in range(X.shape[1])]
        X = FeatureHasher(2**18).transform(dict(zip(names, row, strict=True)) for row in X)
    return X, np.asarray(y, dtype=np.int64)


def component_timers(model, spent: dict[str, float], off_path: list[float]) -> None:
    """Wrap the parts of ``model``'s one-event learning (names both checkouts have) so that
    each adds its thread time to ``spent``, the fits' (``off_path``) taken off; a nested
    part's time is also its caller's."""
    import importlib

    import core.learners.auto as auto_module

    try:  # where auto's segment loop finds them (auto.py itself before it moved)
        auto_module = importlib.import_module("core.learners._auto_learning")
    except ImportError:
        pass

    def timed(name, function):
        def wrapper(*args, **kwargs):
            begun, fits = time.thread_time(), off_path[0]
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.thread_time() - begun - (off_path[0] - fits)
                spent[name] = spent.get(name, 0.0) + elapsed

        return wrapper

    for name in ("serve_and_record", "evaluate", "grow_window", "next_evaluation"):
        setattr(auto_module, name, timed(name, getattr(auto_module, name)))
    model._learn = timed("auto._learn", model._learn)
    model._refresh_view = timed("auto._refresh_view", model._refresh_view)
    model._check_grown_state = timed("grown-state check", model._check_grown_state)
    drift = model._drift()
    if drift is not None:
        drift.watch = timed("drift watch", drift.watch)
        if hasattr(drift, "serve_record_and_watch"):  # the two in one kernel call
            drift.serve_record_and_watch = timed(
                "serve_and_record + drift watch", drift.serve_record_and_watch
            )
    for k, candidate in enumerate(model._candidates):
        label = f"c{k} {candidate.name}"
        candidate._learn = timed(label, candidate._learn)
        if hasattr(candidate, "transform"):
            candidate.transform = timed(f"{label}: embedding", candidate.transform)
            candidate._remember = timed(f"{label}: fit buffer", candidate._remember)
            candidate._refresh_view = timed(f"{label}: view", candidate._refresh_view)


def one_event_worker(args) -> None:
    """One round in this process (its checkout on sys.path): CPU microseconds per one-event
    learn of each case, then each component's, the fits' own time not counted."""
    sys.path.insert(0, str(Path.cwd()))
    from core import boosted_fits
    from core.learners import make_learner
    from core.learners.boosted_embedded import BoostedEmbedded
    from core.validation import row_range

    # a fit (the trees, and the inner learner's relearning of the job's buffer) is not
    # counted wherever it runs: in the fitter, or in the call at an install point that the
    # fitter was not deemed in time for (a stream this fast outruns the fits)
    off_path = [0.0]

    def not_counted(function):
        def wrapper(*args, **kwargs):
            begun = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                off_path[0] += time.thread_time() - begun

        return wrapper

    boosted_fits.FitJob.run = not_counted(boosted_fits.FitJob.run)  # type: ignore[method-assign]
    BoostedEmbedded.prepare = not_counted(BoostedEmbedded.prepare)  # type: ignore[method-assign]

    def submit(job, prepare):  # a fitter that finishes each job as it is handed over
        handle = boosted_fits.FitHandle(job, prepare)
        handle.begin()
        handle.run()
        return handle

    out = {}
    for case, hashed, scaling in (("dense 16", False, "standard"), ("hashed 2^18", True, "scale")):
        X, y = letter_stream(args.events, hashed)
        with boosted_fits.background_fits(submit):
            model = make_learner("auto", scaling=scaling)
            model.prequential_step(row_range(X, 0, WARM_EVENTS), y[:WARM_EVENTS])
            stop = WARM_EVENTS + args.single_events
            off_path[0], start = 0.0, time.thread_time()
            for i in range(WARM_EVENTS, stop):
                model.prequential_step(row_range(X, i, i + 1), y[i : i + 1])
            out[case] = {"total": (time.thread_time() - start - off_path[0]) / args.single_events}
            spent: dict[str, float] = {}
            component_timers(model, spent, off_path)
            off_path[0], start = 0.0, time.thread_time()
            for i in range(stop, stop + args.single_events):
                model.prequential_step(row_range(X, i, i + 1), y[i : i + 1])
            spent["prequential_step"] = time.thread_time() - start - off_path[0]
            spent["(the fits, not counted)"] = off_path[0]
            out[case].update({key: value / args.single_events for key, value in spent.items()})
    print(json.dumps(out))


def one_event(args) -> None:
    trees = [str(Path(tree).resolve()) for tree in (args.tree or [str(ROOT)])]
    best: dict[str, dict] = {tree: {} for tree in trees}
    loads = [open("/proc/loadavg").read().split()[0]]
    for _ in range(args.rounds):
        for tree in trees:
            command = [sys.executable, str(ROOT / "bench" / "auto_cost.py"),
                       "--one-event-worker", "--events", str(args.events),
                       "--single-events", str(args.single_events)]  # fmt: skip
            env = dict(os.environ, PYTHONPATH=tree)
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr)
            for case, times in json.loads(done.stdout.strip().splitlines()[-1]).items():
                if times["total"] < best[tree].get(case, {"total": np.inf})["total"]:
                    best[tree][case] = times
        loads.append(open("/proc/loadavg").read().split()[0])
    print(f"letter_a tiled to {args.events:,} events; {WARM_EVENTS:,} learned in one batch, then "
          f"{args.single_events:,} one at a time; best of {args.rounds} alternated rounds; load "
          f"average (1 min) {', '.join(loads)}")  # fmt: skip
    first = trees[0]
    for case in best[first]:
        print(f"\n{case}: CPU us per one-event learn (components: the wrapped pass)")
        parts = sorted({key for tree in trees for key in best[tree][case]} - {"total"})
        print(f"{'':36s}" + "".join(f"{Path(tree).name:>12s}" for tree in trees) + "  ratio")
        for key in ["total", *parts]:
            values = [best[tree][case].get(key, np.nan) * 1e6 for tree in trees]
            ratio = values[-1] / values[0] if values[0] else np.nan
            print(f"{key:36s}" + "".join(f"{v:12.1f}" for v in values) + f"  {ratio:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="store_true", help="the table of every model")
    parser.add_argument("--request-path", action="store_true",
                        help="the default against the tournament before its fast boosted one, "
                        "fits off the request path")  # fmt: skip
    parser.add_argument("--one-event", action="store_true",
                        help="one-event learning on the request path, per component")  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-event-worker", action="store_true", help=argparse.SUPPRESS)
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
    elif args.one_event_worker:
        one_event_worker(args)
    elif args.one_event:
        one_event(args)
    elif args.models:
        models(args)
    elif args.request_path:
        request_path(args)
    else:
        ratios(args)


if __name__ == "__main__":
    main()
