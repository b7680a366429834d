"""Calibrated probabilities: the service's online Platt scaling (docs/algorithms/calibration.md)
against scikit-learn's batch calibration fitted in hindsight.  Not a test: prints a table.

Usage::

    python bench/calibration.py [--learner spam] [--batch 100] [--seed 0]
        [--sets magic,letter_a,sylva,page_blocks0,phoneme] [--drift real:magic,real:letter_a,abrupt]
        [--memories 2000,20000,200000]

Each stream is learned prequentially by ``--learner`` in batches of ``--batch`` events, as the
service learns them; each event's probability is the calibrator's *before* its batch is fed
(what ``/score?probabilities=true`` would have answered then).  The well-specified streams are
real sets of the bench suite (bench/datasets.py) in a random order; the drifting ones are the
scenarios of bench/drift.py (``real:<set>``: half of the features flip sign halfway; ``abrupt``:
a synthetic logistic concept that changes halfway).

Columns, over the events after the first 10 % (every method scored on the same events):

* ``online m=<memory>``: the service's calibrator with that memory (the default is marked *);
* ``sigmoid``: ``sigmoid(score)``, no calibration (the calibrator's starting point);
* ``platt*`` / ``isotonic*``: scikit-learn's sigmoid (``LogisticRegression`` on the score, as
  ``CalibratedClassifierCV(method="sigmoid")`` fits it) and ``IsotonicRegression`` fitted on
  *all* the prequential scores and labels of the stream, then applied to the same scores:
  a hindsight, in-sample fit that no online method can see, the bar to measure against.

Brier score (lower is better) and expected calibration error (ECE: 15 equal-mass bins of the
predicted probability, the mean gap between predicted and observed positive rate weighted by
the bins' sizes).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402
from core.metrics.calibration import DEFAULT_MEMORY, OnlineCalibrator  # noqa: E402

BINS = 15


def brier(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean((p - y) ** 2))


def expected_calibration_error(y: np.ndarray, p: np.ndarray, bins: int = BINS) -> float:
    """Equal-mass bins of ``p`` (sorted, cut into ``bins`` runs of equal length): the weighted
    mean of |mean p - mean y| per bin.  Equal mass, because with rare positives nearly every
    probability falls in the first of equal-width bins."""
    order = np.argsort(p, kind="stable")
    gaps = [
        len(part) * abs(float(p[part].mean()) - float(y[part].mean()))
        for part in np.array_split(order, bins)
        if len(part)
    ]
    return float(sum(gaps) / len(p))


def prequential_scores(learner: str, X, y, batch: int, seed: int) -> np.ndarray:
    model = make_learner(learner, random_state=seed)
    scores = np.empty(len(y))
    for start in range(0, len(y), batch):
        rows = slice(start, start + batch)
        scores[rows] = model.prequential_step(X[rows], y[rows])
    return scores


def online_probabilities(scores, y, batch: int, memory: float) -> np.ndarray:
    """Each batch's probabilities by the calibrator as it was before the batch, then fed."""
    calibrator = OnlineCalibrator(memory)
    probabilities = np.empty(len(y))
    for start in range(0, len(y), batch):
        rows = slice(start, start + batch)
        probabilities[rows] = calibrator.probabilities(scores[rows])
        calibrator.update(scores[rows], 2 * y[rows] - 1)
    return probabilities


def hindsight(scores, y) -> dict[str, np.ndarray]:
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    column = scores.reshape(-1, 1)
    platt = LogisticRegression(C=1e6, max_iter=1000).fit(column, y)
    isotonic = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(scores, y)
    return {
        "platt*": platt.predict_proba(column)[:, 1],
        "isotonic*": isotonic.predict(scores),
    }


def stream(name: str, seed: int, n_drift: int):
    """``(X, y, kind)``: a suite set in random order, or a drift scenario."""
    if name.startswith("real:") or name in ("abrupt", "gradual", "recurring"):
        from bench.drift import make_scenario

        (X, y), _ = make_scenario(name, n_drift, seed)
        return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64), "drifting"
    from bench.datasets import load

    X, y, _ = load(name)
    order = np.random.default_rng(seed).permutation(len(y))
    X = np.asarray(X, dtype=np.float64)[order]
    return X, np.asarray(y, dtype=np.int64)[order], "stationary"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="spam")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", default="magic,letter_a,sylva,page_blocks0,phoneme")
    parser.add_argument("--drift", default="real:magic,real:letter_a,abrupt")
    parser.add_argument("--drift-events", type=int, default=40_000)
    parser.add_argument("--memories", default=f"2000,{DEFAULT_MEMORY},200000")
    args = parser.parse_args(argv)
    memories = [int(m) for m in args.memories.split(",")]
    names = [s for s in args.sets.split(",") if s] + [s for s in args.drift.split(",") if s]
    methods = [f"online m={m}" + ("*" if m == DEFAULT_MEMORY else "") for m in memories]
    methods += ["sigmoid", "platt*", "isotonic*"]
    print(f"learner {args.learner}, batches of {args.batch}, seed {args.seed}; "
          "Brier / ECE over the events after the first 10 %")  # fmt: skip
    header = "| stream | kind | n | pos % | " + " | ".join(methods) + " |"
    print(header)
    print("|" + "---|" * (4 + len(methods)))
    totals: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
    for name in names:
        started = time.perf_counter()
        X, y, kind = stream(name, args.seed, args.drift_events)
        scores = prequential_scores(args.learner, X, y, args.batch, args.seed)
        results = {
            label: online_probabilities(scores, y, args.batch, memory)
            for label, memory in zip(methods, memories, strict=False)
        }
        results["sigmoid"] = 1.0 / (1.0 + np.exp(-np.clip(scores, -700, 700)))
        results.update(hindsight(scores, y))
        tail = slice(len(y) // 10, None)
        cells = []
        for method in methods:
            pair = (brier(y[tail], results[method][tail]),
                    expected_calibration_error(y[tail], results[method][tail]))  # fmt: skip
            totals[method].append(pair)
            cells.append(f"{pair[0]:.4f} / {pair[1]:.4f}")
        row = f"| {name} | {kind} | {len(y):,} | {100 * y.mean():.1f} | " + " | ".join(cells)
        print(row + f" |  ({time.perf_counter() - started:.0f} s)", flush=True)
    means = [
        f"{np.mean([b for b, _ in totals[m]]):.4f} / {np.mean([e for _, e in totals[m]]):.4f}"
        for m in methods
    ]
    print("| mean | | | | " + " | ".join(means) + " |")


if __name__ == "__main__":
    main()
