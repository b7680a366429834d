"""CPU time of ``auto``'s boosted fits on Elec2: the fit (binning and growth) and the inner
learner's relearning of the buffer (``prepare``), per fit, in one or several checkouts.

    python bench/fit_cost.py [--events 13000] [--tree /path/to/before] [--tree .] [--rounds 3]

The fit jobs are those of ``make_learner("auto")`` learning the first ``--events`` events of
Elec2 in time order one event per call (bench/streams.py reads the stream; every fit of both
boosted candidates, as their learner calls hand them over).  They are taken once, with this
checkout, and saved; each ``--tree`` then fits and relearns every job in its own process
(``PYTHONPATH`` set to it), the trees alternated for ``--rounds`` rounds, each process timing
its thread's CPU (``time.thread_time``) after a first pass that compiles or loads the kernels.
Printed per tree: the best round's milliseconds of the fits and of the relearning over all
jobs, per fit, and per event of the stream, and the ratio to the first tree; and whether every
tree gave the same ensembles and relearned inner states (sha256).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def take_jobs(events: int, path: Path) -> int:
    """Save the fit jobs of ``auto`` on Elec2's first ``events`` events to ``path`` (npz)."""
    sys.path.insert(0, str(ROOT))
    from bench.streams import load_stream
    from core.boosted_fits import FitHandle, background_fits
    from core.learners import make_learner

    X, y = load_stream("elec2")
    arrays: dict[str, np.ndarray] = {}
    taken: list = []

    def submit(job, prepare):  # records the job, then fits it at once as the learner would
        taken.append((job, prepare.__self__))
        handle = FitHandle(job, prepare)
        handle.begin()
        handle.run()
        return handle

    model = make_learner("auto")
    with background_fits(submit):
        for i in range(events):
            model.prequential_step(X[i : i + 1], y[i : i + 1])
    for index, (job, learner) in enumerate(taken):
        arrays[f"X{index}"], arrays[f"y{index}"] = job.X, job.y
        if job.sample_weight is not None:
            arrays[f"w{index}"] = job.sample_weight
        for key, value in job.x_scaling.items():
            arrays[f"s{index}:{key}"] = value
        params = {k: v for k, v in learner.get_params().items() if k != "random_state"}
        arrays[f"p{index}"] = np.frombuffer(json.dumps(params).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    return len(taken)


def load_jobs(path: Path) -> list:
    """``(learner, job)`` pairs of the saved jobs, built with the checkout imported."""
    from core.boosted_fits import FitJob
    from core.learners.boosted_embedded import BoostedEmbedded

    saved = np.load(path)
    jobs, index = [], 0
    while f"X{index}" in saved:
        params = json.loads(bytes(saved[f"p{index}"]).decode())
        learner = BoostedEmbedded(**params)
        X = saved[f"X{index}"]
        learner.initialize(X.shape[1])
        prefix = f"s{index}:"
        scaling = {k[len(prefix) :]: saved[k] for k in saved.files if k.startswith(prefix)}
        weights = saved[f"w{index}"] if f"w{index}" in saved.files else None
        job = FitJob(X, saved[f"y{index}"], learner._ensemble_params(), 0, 0, 0, weights,
                     scaling)  # fmt: skip
        jobs.append((learner, job))
        index += 1
    return jobs


def fit_and_prepare(learner, job):
    """The fit and the relearning, as this checkout does them (whatever ``run`` returns)."""
    fitted = job.run()
    started = time.thread_time()
    if isinstance(fitted, tuple):  # the ensemble and the rows' leaves
        return fitted[0], started, learner.prepare(fitted[0], job, fitted[1])
    return fitted, started, learner.prepare(fitted, job)


def child(path: Path) -> None:
    """Time every job (after one pass that loads the kernels); print JSON."""
    jobs = load_jobs(path)
    digest = hashlib.sha256()
    for learner, job in jobs:
        ensemble, _, inner = fit_and_prepare(learner, job)
        for key in sorted(ensemble):
            digest.update(np.ascontiguousarray(ensemble[key]).tobytes())
        state = inner.get_state()
        for key in sorted(state):
            digest.update(np.ascontiguousarray(state[key]).tobytes())
    fit = prepare = 0.0
    for learner, job in jobs:
        begun = time.thread_time()
        _, relearning, _ = fit_and_prepare(learner, job)
        ended = time.thread_time()
        fit += relearning - begun
        prepare += ended - relearning
    print(json.dumps({"fit": fit, "prepare": prepare, "jobs": len(jobs),
                      "digest": digest.hexdigest()}))  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=13_000)
    parser.add_argument("--tree", action="append", help="a checkout (repeat; default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, os.environ["PYTHONPATH"])
        child(Path(args.child))
        return
    trees = [str(Path(tree).resolve()) for tree in (args.tree or [str(ROOT)])]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobs.npz"
        count = take_jobs(args.events, path)
        print(f"{count} fits of auto on Elec2's first {args.events} events; load "
              f"{os.getloadavg()[0]:.1f}")  # fmt: skip
        best: dict[str, dict] = {}
        for round_ in range(args.rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                command = [sys.executable, str(ROOT / "bench" / "fit_cost.py"), "--child",
                           str(path)]  # fmt: skip
                out = subprocess.run(command, check=True, capture_output=True, text=True,
                                     env=dict(os.environ, PYTHONPATH=tree), cwd=tree)  # fmt: skip
                result = json.loads(out.stdout.strip().splitlines()[-1])
                result["total"] = result["fit"] + result["prepare"]
                if tree not in best or result["total"] < best[tree]["total"]:
                    best[tree] = result
    first = best[trees[0]]["total"]
    print(f"load after {os.getloadavg()[0]:.1f}")
    print(f"{'tree':<24} {'fits ms':>8} {'relearn ms':>10} {'ms/fit':>7} {'us/event':>8} "
          f"{'ratio':>6}  digest")  # fmt: skip
    for tree in trees:
        result = best[tree]
        total = result["total"]
        print(f"{tree[-24:]:<24} {result['fit'] * 1e3:8.1f} {result['prepare'] * 1e3:10.1f} "
              f"{total / result['jobs'] * 1e3:7.2f} {total / args.events * 1e6:8.2f} "
              f"{total / first:6.2f}  {result['digest'][:16]}")  # fmt: skip


if __name__ == "__main__":
    main()
