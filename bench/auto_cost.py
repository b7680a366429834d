"""Ingest and scoring cost of ``auto`` against one default ``spam`` (issue 10 §5: auto >= 1/4
of spam).

Not a test: prints one table.  Usage::

    python bench/auto_cost.py [--events 200000] [--features 50] [--batch 1000] [--repeats 3]

A dense standard-normal stream (5 % positives) larger than the cache (200,000 x 50 float64 =
80 MB) is learned with ``prequential_step`` in batches of ``--batch`` events, as the service
does; each model is compiled on a small batch first (JIT kept out), then the stream is learned
``--repeats`` times from scratch, alternating the models so that a busy machine slows them
alike, and the best run of each is reported.  Times are the thread's CPU time
(``time.thread_time``): on a shared machine wall time also counts the time other processes
hold the core, which moved the ratios by +-30 % between runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402

_OFFSET = {"learner": "logistic", "params": {"base_rate_offset": True}}
_OFFSET_FTRL = {"learner": "logistic", "params": {"base_rate_offset": True, "solver": "ftrl"}}
_FTRL = {"learner": "ftrl_pauc", "params": {"update_every": 2000}}
_FTRL_5K = {"learner": "ftrl_pauc", "params": {"update_every": 5000}}
_TREE_ONCE = {"learner": "logistic", "params": {"base_rate_offset": True, "solver": "ftrl"}}

MODELS = {
    "spam": ("spam", {}),
    "logistic (base-rate offset; Laplace solver up to 128 features)": (
        "logistic",
        {"base_rate_offset": True},
    ),
    "logistic (base-rate offset), FTRL": ("logistic", {"base_rate_offset": True, "solver": "ftrl"}),
    "pmb": ("pmb", {}),
    "ftrl_pauc (update_every 2000)": ("ftrl_pauc", {"update_every": 2000}),
    "ftrl_pauc (update_every 5000: auto's default)": ("ftrl_pauc", {"update_every": 5000}),
    "ftrl_pauc (its default, 500)": ("ftrl_pauc", {}),
    "auto (default: logistic, ftrl_pauc, tree_embedded)": ("auto", {}),
    "auto, the tree fitted once (the default before its refit)": (
        "auto",
        {"candidates": [_OFFSET, _FTRL_5K, {"learner": "tree_embedded", "params": _TREE_ONCE}]},
    ),
    "auto, logistic + ftrl_pauc (the default before the tree)": (
        "auto",
        {"candidates": [_OFFSET, _FTRL]},
    ),
    "auto track_drift (HTTP default: + fast logistic)": ("auto", {"track_drift": True}),
    "auto, temperature 0 (the leader scored alone)": ("auto", {"temperature": 0.0}),
    "auto, logistic by FTRL (the default before the Laplace solver)": (
        "auto",
        {"candidates": [_OFFSET_FTRL, _FTRL]},
    ),
    "auto, logistic + pmb (default above 1,000 features)": (
        "auto",
        {"candidates": [_OFFSET, {"learner": "pmb"}]},
    ),
    "tree_embedded (inner poise)": ("tree_embedded", {}),
    "tree_embedded (logistic, base-rate offset), fitted once": ("tree_embedded", _TREE_ONCE),
    "tree_embedded (the same, relearn, refit at 8,000, depth 8: auto's third)": (
        "tree_embedded",
        {**_TREE_ONCE, "relearn": True, "refit_events": 8000, "max_depth": 8},
    ),
    "auto K=3 (+ pmb)": (
        "auto",
        {"candidates": [_OFFSET, _FTRL, {"learner": "pmb"}]},
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    y = (rng.random(args.events) < 0.05).astype(np.int64)
    X = rng.normal(size=(args.events, args.features)) + 0.3 * y[:, None]
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


if __name__ == "__main__":
    main()
