"""sha256 digests of what ``make_learner("auto", random_state=0)`` learns, to show that a change
of the learners' code leaves the served scores and the state bit for bit as they were.

    PYTHONPATH=. python bench/auto_digest.py [--streams elec2,ties] [--batches 1,100]

Streams: ``elec2`` (Elec2 in time order, read as bench/streams.py reads it) and ``ties`` (20,000
synthetic events: 8 normal features rounded to 0.1, so many values tie, 5 % of them set to 0 as
a filled missing value reaches the learner, labels from a noisy nonlinear rule whose sign flips
at event 12,000, a drift).  Each stream is learned by ``prequential_step`` in batches of each
size of ``--batches``.  Printed per (stream, batch): the digest of the served scores (their
float64 bytes) and of the final state (every array's name, dtype, shape and bytes, in name
order), 16 hex digits each.  Run it in two checkouts (``PYTHONPATH`` set to each) and compare.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def ties_stream(n: int = 20_000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of the synthetic stream with ties, missing values and a drift."""
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 8)), 1)
    X[rng.random(X.shape) < 0.05] = 0.0
    margin = X[:, 0] * X[:, 1] + np.abs(X[:, 2]) - 0.8 + 0.5 * rng.normal(size=n)
    margin[12_000:] = -margin[12_000:]
    return np.ascontiguousarray(X), (margin > 0).astype(np.int64)


def state_digest(state: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(state):
        array = np.ascontiguousarray(state[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def learned_digests(X: np.ndarray, y: np.ndarray, batch: int) -> tuple[str, str]:
    """The digests of the served scores and of the final state, learning ``batch`` events a
    call."""
    from core.learners import make_learner

    model = make_learner("auto", random_state=0)
    scores = np.empty(len(y))
    for start in range(0, len(y), batch):
        scores[start : start + batch] = model.prequential_step(
            X[start : start + batch], y[start : start + batch]
        )
    return hashlib.sha256(scores.tobytes()).hexdigest()[:16], state_digest(model.get_state())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="elec2,ties")
    parser.add_argument("--batches", default="1,100", help="events per call, comma-separated")
    args = parser.parse_args(argv)
    sys.path.append(str(ROOT))  # after PYTHONPATH: the checkout measured provides core
    import core
    from bench.streams import load_stream

    print(f"core from {Path(core.__file__).parent}")

    for name in args.streams.split(","):
        X, y = ties_stream() if name == "ties" else load_stream(name)
        for batch in (int(size) for size in args.batches.split(",")):
            scores, state = learned_digests(X, y, batch)
            print(f"{name} batch {batch}: scores {scores} state {state}", flush=True)


if __name__ == "__main__":
    main()
