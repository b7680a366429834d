"""Early probabilities: the Brier score of `/score?probabilities=true` over the first events of
real streams, the calibrator shrunk toward the base rate (docs/algorithms/calibration.md
(calibration.6)-(calibration.8)) against the unshrunk Platt calibrator it replaced and against
base rates.  Not a test: prints a table.

Usage::

    python bench/early_probabilities.py [--learner auto] [--batch 10] [--seeds 5] [--first 250]
        [--sets german,australian,crx,...] [--strengths 10,20,50]

Each set of the bench suite (bench/datasets.py) is streamed in ``--seeds`` random orders; the
learner learns it prequentially in batches of ``--batch`` events, as the service does.  Each
event's probability is the calibrator's as it was before the event was fed (what
``/score?probabilities=true`` answered just before the event's label arrived): the
calibrators are fed event by event.

Columns (Brier score, lower is better, the mean over the seeds):

* ``const*``: the stream's positive rate over the first ``--first`` events, constant: known
  only in hindsight (the bar the issue measured against);
* ``running``: the running base rate ``(n+ + 1/2) / (n + 1)`` of the labels seen so far
  (calibration.6), what the shrunk calibrator starts from;
* ``old``: the Platt calibrator unshrunk (``prior_strength=0``: the service before the
  shrinkage, ``sigmoid(score)`` before its first label);
* ``k=<kappa>``: shrunk with that prior strength (the default is marked *);

first over the first ``--first`` events, then (``all:``) over the whole stream.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402
from core.metrics.calibration import PRIOR_STRENGTH, OnlineCalibrator  # noqa: E402

DEFAULT_SETS = (
    "german,crx,haberman,magic,phoneme,page_blocks0,letter_a,hypothyroid,yeast4,pc1,kc1,"
    "wine_r_4,car_vgood,abalone19"
)


def prequential_scores(learner: str, X, y, batch: int, seed: int) -> np.ndarray:
    model = make_learner(learner, random_state=seed)
    scores = np.empty(len(y))
    for start in range(0, len(y), batch):
        rows = slice(start, start + batch)
        scores[rows] = model.prequential_step(X[rows], y[rows])
    return scores


def served_probabilities(scores: np.ndarray, y: np.ndarray, prior_strength: float) -> np.ndarray:
    """Each event's probability by the calibrator before the event, then the event fed."""
    calibrator = OnlineCalibrator(prior_strength=prior_strength)
    signs = 2 * y - 1
    probabilities = np.empty(len(y))
    for i in range(len(y)):
        probabilities[i] = calibrator.probabilities(scores[i : i + 1])[0]
        calibrator.update(scores[i : i + 1], signs[i : i + 1], validated=True)
    return probabilities


def running_base_rate(y: np.ndarray) -> np.ndarray:
    """(calibration.6) before each event."""
    positives = np.concatenate([[0], np.cumsum(y)[:-1]])
    return (positives + 0.5) / (np.arange(len(y)) + 1.0)


def brier(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean((p - y) ** 2))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="auto")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first", type=int, default=250)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--strengths", default=f"10,{PRIOR_STRENGTH:g},50")
    args = parser.parse_args(argv)
    from bench.datasets import load

    strengths = [float(k) for k in args.strengths.split(",")]
    shrunk = [f"k={k:g}" + ("*" if k == PRIOR_STRENGTH else "") for k in strengths]
    first_columns = ["const*", "running", "old", *shrunk]
    all_columns = ["old", *shrunk]
    print(f"learner {args.learner}, batches of {args.batch}, {args.seeds} orders; Brier over "
          f"the first {args.first} events | over the whole stream")  # fmt: skip
    header = [f"first: {c}" for c in first_columns] + [f"all: {c}" for c in all_columns]
    print("| set | n | pos % | " + " | ".join(header) + " |")
    print("|" + "---|" * (3 + len(header)))
    totals: list[list[float]] = []
    for name in args.sets.split(","):
        started = time.perf_counter()
        X, y, _ = load(name)
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)
        rows: list[list[float]] = []
        for seed in range(args.seeds):
            order = np.random.default_rng(seed).permutation(len(y))
            Xs, ys = X[order], y[order]
            scores = prequential_scores(args.learner, Xs, ys, args.batch, seed)
            old = served_probabilities(scores, ys, 0.0)
            new = [served_probabilities(scores, ys, k) for k in strengths]
            head = slice(0, args.first)
            constant = np.full(args.first, ys[head].mean())
            rows.append(
                [brier(ys[head], constant), brier(ys[head], running_base_rate(ys)[head])]
                + [brier(ys[head], p[head]) for p in (old, *new)]
                + [brier(ys, p) for p in (old, *new)]
            )
        means = np.mean(rows, axis=0)
        totals.append(list(means))
        cells = " | ".join(f"{value:.4f}" for value in means)
        print(f"| {name} | {len(y):,} | {100 * y.mean():.1f} | {cells} |  "
              f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
    cells = " | ".join(f"**{value:.4f}**" for value in np.mean(totals, axis=0))
    print(f"| **mean** | | | {cells} |")


if __name__ == "__main__":
    main()
