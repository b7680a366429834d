"""sha256 digests of the scores and the stored states that ``auto`` and each of its candidates
learn alone, under several parameters, to show that a change of the learners' code leaves them
bit for bit as they were (issues 36 and 39: the kernel parameters kept between calls).

    PYTHONPATH=/work/wt/B python bench/state_digest.py > before.txt
    PYTHONPATH=. python bench/state_digest.py > after.txt && diff before.txt after.txt

Streams (``--streams``), the first ``--events`` events (22,000) of each:

* ``elec2``: Elec2 in time order, read as bench/streams.py reads it;
* ``stretches``: synthetic, 7 features: normal ones rounded to 0.1 (many values tie), a
  small-integer one and a constant one; 8 % positives from a noisy rule, with a stretch of
  negatives only (events 3,000-5,999) and one of positives only (events 9,000-9,399), and
  the rule's sign flipped from event 15,000 (a drift).

Each (configuration, stream) learns by ``prequential_step`` in calls of a seeded mix of sizes
(mostly one event, some of 2 to 64: the one-event path and the batch paths, cuts and fits
falling inside calls); printed: the digest of the prequential scores (float64 bytes), of the
final state (every array's name, dtype, shape and bytes, in the state's order) and of the
served scores of the last 500 events after learning, 16 hex digits each.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

#: (name, learner, parameters): each candidate of auto's default tournament alone, under its
#: defaults and under the options whose kernel parameters differ, and auto itself
CONFIGS: list[tuple[str, str, dict]] = [
    ("auto", "auto", {}),
    ("logistic laplace", "logistic", {}),
    ("logistic offset+EB", "logistic", {"base_rate_offset": True,
                                        "empirical_prior_per_weight": 2.0}),
    ("logistic columns", "logistic", {"max_columns": 5, "number_prior_variance": 3.0,
                                      "base_rate_offset": True, "scaling": "standard"}),
    ("logistic ftrl", "logistic", {"solver": "ftrl", "base_rate_offset": True, "l1": 0.5,
                                   "l2": 0.1, "alpha": 0.3, "scaling": "standard"}),
    ("logistic ftrl half", "logistic", {"solver": "ftrl", "half_life": 2000.0,
                                        "fit_intercept": False}),
    ("ftrl_pauc", "ftrl_pauc", {"scaling": "standard"}),
    ("ftrl_pauc auto's", "ftrl_pauc", {"update_every": 5000, "scaling": "standard",
                                       "alpha": 0.02, "beta": 0.2}),
    ("ftrl_pauc half+adm", "ftrl_pauc", {"half_life": 3000.0, "admission": 2.0,
                                         "positive_capacity": 300, "negative_capacity": 600}),
    ("boosted", "boosted_embedded", {}),
    ("boosted fused", "boosted_embedded", {"scaling": "standard", "n_trees": 20,
                                           "params": {"base_rate_offset": True,
                                                      "solver": "ftrl"}}),
    ("boosted no delay", "boosted_embedded", {"scaling": "standard", "fit_delay": 0,
                                              "refit_every": 3000, "refit_growth": 2.0,
                                              "first_fit": 400, "n_trees": 10,
                                              "append_margin": False, "buffer_size": 2000,
                                              "params": {"solver": "ftrl"}}),
]  # fmt: skip


def stretches_stream(n: int, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of the synthetic stream with ties, one-class stretches and a drift."""
    rng = np.random.default_rng(seed)
    X = np.empty((n, 7))
    X[:, :5] = np.round(rng.normal(size=(n, 5)), 1)
    X[:, 5] = rng.integers(0, 4, size=n)
    X[:, 6] = 1.0
    margin = X[:, 0] - 0.5 * X[:, 1] * X[:, 2] + 0.3 * X[:, 5] + rng.normal(size=n)
    margin[15_000:] = -margin[15_000:]
    y = (margin > np.quantile(margin, 0.92)).astype(np.int64)
    y[3_000:6_000] = 0
    y[9_000:9_400] = 1
    return np.ascontiguousarray(X), y


def call_sizes(n: int, seed: int = 5) -> list[int]:
    """A seeded mix of call sizes summing to ``n``: three calls in four of one event."""
    rng = np.random.default_rng(seed)
    sizes, total = [], 0
    while total < n:
        size = 1 if rng.random() < 0.75 else int(rng.integers(2, 65))
        size = min(size, n - total)
        sizes.append(size)
        total += size
    return sizes


def state_digest(state: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name, value in state.items():
        array = np.ascontiguousarray(value)
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def _hex(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype=np.float64).tobytes()).hexdigest()[:16]


def learned(learner: str, params: dict, X, y, sizes: list[int]) -> tuple[str, str, str, float]:
    """The digests of the prequential scores, the final state and the served scores of the
    last 500 events, and the CPU seconds of learning."""
    from core.learners import make_learner

    model = make_learner(learner, random_state=0, **params)
    scores = np.empty(len(y))
    start, began = 0, time.process_time()
    for size in sizes:
        scores[start : start + size] = model.prequential_step(
            X[start : start + size], y[start : start + size]
        )
        start += size
    seconds = time.process_time() - began
    served = model.decision_function(X[-500:])
    return _hex(scores), state_digest(model.get_state()), _hex(served), seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="elec2,stretches")
    parser.add_argument("--events", type=int, default=22_000)
    parser.add_argument("--only", default="", help="configurations whose name contains this")
    args = parser.parse_args(argv)
    sys.path.append(str(ROOT))  # after PYTHONPATH: the checkout measured provides core
    import core
    from bench.streams import load_stream

    print(f"# core from {Path(core.__file__).parent}", file=sys.stderr)
    print(f"{'configuration':<20} {'stream':<10} {'scores':<16} {'state':<16} {'served':<16}")
    for stream in args.streams.split(","):
        if stream == "stretches":
            X, y = stretches_stream(args.events)
        else:
            X, y = load_stream(stream)
            X, y = np.ascontiguousarray(X[: args.events]), y[: args.events]
        sizes = call_sizes(len(y))
        for name, learner, params in CONFIGS:
            if args.only not in name:
                continue
            scores, state, served, seconds = learned(learner, params, X, y, sizes)
            print(f"{name:<20} {stream:<10} {scores} {state} {served}", flush=True)
            print(f"#   {name} {stream}: {seconds:.1f} s CPU", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
