"""auto on a stream of rare positives (about 0.15 %) in a small region that no linear score
ranks: does its tree candidate get its fit?  Not a test: prints one row per seed and the means.

Usage::

    python bench/rare_positives.py [--seeds 8] [--events 80000] [--test 400000]

Each seed draws a training stream and a test set of 6 standard-normal features, positive when
``x0^2 + (x1 - 1.5)^2 < 0.01``; the default ``auto`` learns the stream in batches of 500
events, and the test set is scored by the learned model.  The columns: the positive rate, the
positives among the first 2,000 events (the tree candidate's first fit needs two), the fits
its tree got (``tree_fitted``: 0, 1, or 2 with the refit), held-out AUC and pAUC(0, 0.1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402


def draw(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = np.where(X[:, 0] ** 2 + (X[:, 1] - 1.5) ** 2 < 0.01, 1, -1)
    return X, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--events", type=int, default=80_000)
    parser.add_argument("--test", type=int, default=400_000)
    args = parser.parse_args()
    print("| seed | positives | in the first 2,000 | tree fits | held-out AUC | pAUC(0, 0.1) |")
    print("|---|---|---|---|---|---|")
    results = []
    for seed in range(args.seeds):
        X, y = draw(seed, args.events)
        X_test, y_test = draw(1000 + seed, args.test)
        model = make_learner("auto", random_state=seed)
        for start in range(0, len(y), 500):
            model.prequential_step(X[start : start + 500], y[start : start + 500])
        tree = next(c for c in model.candidate_specs() if c["learner"] == "tree_embedded")
        fits = int(model.state_[f"c{model.candidate_specs().index(tree)}:tree_fitted"][0])
        scores = model.decision_function(X_test)
        results.append((fits, auc(y_test, scores), pauc(y_test, scores, 0.0, 0.1)))
        print(f"| {seed} | {(y > 0).mean():.2%} | {int((y[:2000] > 0).sum())} | {fits} | "
              f"{results[-1][1]:.4f} | {results[-1][2]:.4f} |")  # fmt: skip
    fits, aucs, paucs = np.array(results).T
    print(f"| mean | | | {fits.mean():.2f} | {aucs.mean():.4f} | {paucs.mean():.4f} |")


if __name__ == "__main__":
    main()
