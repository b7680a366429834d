"""Per-event cost of ``auto`` with the boosted candidate against the tree candidate before it,
on the request path (the fits left to a background fitter, as in the service) and in all (the
fits run inline, as in a library).

    python bench/boosted_cost.py [--events 100000] [--features 50] [--batch 1000] [--repeats 3]

A dense standard-normal stream (5 % positives, a non-linear rule) is learned with
``prequential_step`` in batches of ``--batch`` events; then the same events are scored.  Times
are the thread's CPU time, best of ``--repeats`` runs alternated between the models.  With
``off path`` the fits are left to a background fitter, as in the service: its part (the fit and
the inner learner's relearning of the job's buffer) is not counted, taking the job and
installing it are.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.boosted_fits import FitHandle, background_fits  # noqa: E402
from core.learners import make_learner  # noqa: E402
from core.learners._candidates import (  # noqa: E402
    DEFAULT_CANDIDATES,
    FAST_CANDIDATES,
    TREE_CANDIDATE,
)

MODELS = {
    "auto (the default before: logistic, ftrl_pauc, tree_embedded)": {
        "candidates": [*DEFAULT_CANDIDATES[:2], TREE_CANDIDATE]
    },
    "auto (the default before: the fast candidate logistic)": {
        "candidates": [*DEFAULT_CANDIDATES, *FAST_CANDIDATES]
    },
    "auto (default: logistic, ftrl_pauc, boosted, fast boosted)": {},
}


def learn(params, X, y, batch, deferred):
    """Thread CPU of learning (less the background fitter's part when ``deferred``: the fit
    and the inner learner's relearning of the job's buffer, done here when the fit is handed
    over; taking the job and installing it stay on the path) and of scoring."""
    model = make_learner("auto", **params)
    off_path = [0.0]

    def submit(job, prepare):  # a fitter that finishes each job as soon as it is handed over
        handle = FitHandle(job, prepare)
        begun = time.thread_time()
        handle.begin()
        handle.run()
        off_path[0] += time.thread_time() - begun
        return handle

    start = time.thread_time()
    with background_fits(submit) if deferred else contextlib.nullcontext():
        for first in range(0, len(y), batch):
            model.prequential_step(X[first : first + batch], y[first : first + batch])
    learned = time.thread_time() - start - off_path[0]
    start = time.thread_time()
    for first in range(0, len(y), batch):
        model.decision_function(X[first : first + batch])
    return model, learned, time.thread_time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.events, args.features))
    y = ((X[:, 0] * X[:, 1] + 0.5 * X[:, 2] + 0.5 * rng.normal(size=args.events)) > 1.9).astype(
        np.int64
    )
    for params in MODELS.values():
        learn(params, X[:3000], y[:3000], args.batch, False)  # compile
    best: dict[tuple[str, bool], tuple[float, float]] = {}
    for _ in range(args.repeats):
        for label, params in MODELS.items():
            for deferred in (True, False):
                _, learned, scored = learn(params, X, y, args.batch, deferred)
                old = best.get((label, deferred), (np.inf, np.inf))
                best[(label, deferred)] = (min(old[0], learned), min(old[1], scored))
    print(f"{args.events} events, {args.features} features, batches of {args.batch}, "
          f"best of {args.repeats} (thread CPU)")  # fmt: skip
    print(f"{'model':<62} {'fits':<10} {'learn us/ev':>11} {'score us/ev':>11}")
    for (label, deferred), (learned, scored) in best.items():
        where = "off path" if deferred else "inline"
        print(f"{label:<62} {where:<10} {1e6 * learned / args.events:>11.2f} "
              f"{1e6 * scored / args.events:>11.2f}")  # fmt: skip
    print("load average:", open("/proc/loadavg").read().strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
