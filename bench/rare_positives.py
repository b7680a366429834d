"""auto on streams of rare positives in a small region that no linear score ranks: how many
positives its boosted candidate's fits see, and how close it comes to batch
HistGradientBoosting.  Not a test: prints one row per seed and learner, then the means.

Usage::

    python bench/rare_positives.py [--seeds 5] [--events 80000] [--test 400000]
                                   [--radius2 0.01] [--learners auto,hgb,logreg,river]
                                   [--code /work/main]

Each seed draws a training stream and a test set of 6 standard-normal features, positive when
``x0^2 + (x1 - 1.5)^2 < radius2`` (0.01: about 0.15 % positives; 0.1: about 1.6 %).  ``auto``
(the default of a model created over HTTP) learns the stream in batches of 500 events and
scores the test set; ``hgb`` is scikit-learn's batch ``HistGradientBoostingClassifier``
(defaults) and ``logreg`` batch ``LogisticRegression`` (standardised, ``C=1``) on the whole
training stream, ``river`` River's ``StandardScaler | LogisticRegression`` one pass.
``--code DIR`` imports ``core`` from another checkout (e.g. ``/work/main``), so that two
versions run the same streams (alternate them in one session: the machine is shared).

Columns: the positive rate; the fits of auto's boosted candidate and the positives and rows
of its fit buffer at the end (``-`` for other learners); held-out AUC and pAUC(0, 0.1)
(unstandardised: the area over FPR [0, 0.1] divided by 0.1); the learner's CPU seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

PEERS = ("hgb", "logreg", "river")


def draw(seed: int, n: int, radius2: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = np.where(X[:, 0] ** 2 + (X[:, 1] - 1.5) ** 2 < radius2, 1, -1)
    return X, y


def run_auto(X, y, X_test, seed):
    from core.learners import make_learner

    model = make_learner("auto", random_state=seed)
    for start in range(0, len(y), 500):
        model.prequential_step(X[start : start + 500], y[start : start + 500])
    specs = model.candidate_specs()
    boosted = [k for k, spec in enumerate(specs) if spec["learner"] == "boosted_embedded"]
    fits = positives = rows = "-"
    if boosted:
        prefix = f"c{boosted[0]}:"
        state = model.state_
        fits = int(state[prefix + "fits"][0])
        fill = int(state[prefix + "buffer_fill"][0])
        labels = state[prefix + "buffer_y"]
        # a buffer filled from slot 0 until full (or a ring of all its slots)
        positives = int((labels[:fill] > 0).sum())
        rows = fill
    return model.decision_function(X_test), fits, positives, rows


def run_peer(name, X, y, X_test, seed):
    if name == "hgb":
        from sklearn.ensemble import HistGradientBoostingClassifier

        model = HistGradientBoostingClassifier(random_state=seed).fit(X, y > 0)
        return model.decision_function(X_test)
    if name == "logreg":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
        return model.fit(X, y > 0).decision_function(X_test)
    from river import linear_model, preprocessing

    stream = preprocessing.StandardScaler() | linear_model.LogisticRegression()
    for row, label in zip(X, y > 0, strict=True):
        stream.learn_one(dict(enumerate(row)), bool(label))
    return np.array([stream.predict_proba_one(dict(enumerate(row)))[True] for row in X_test])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--events", type=int, default=80_000)
    parser.add_argument("--test", type=int, default=400_000)
    parser.add_argument("--radius2", type=float, default=0.01)
    parser.add_argument("--learners", default="auto," + ",".join(PEERS))
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve()))
    from core.metrics import auc, pauc

    learners = [name.strip() for name in args.learners.split(",") if name.strip()]
    print(f"code {Path(args.code).resolve()}, radius2 {args.radius2}, {args.events:,} events")
    print("| seed | learner | positives | fits | buffer positives / rows | held-out AUC | "
          "pAUC(0, 0.1) | CPU s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in learners}
    for seed in range(args.seeds):
        X, y = draw(seed, args.events, args.radius2)
        X_test, y_test = draw(1000 + seed, args.test, args.radius2)
        for name in learners:
            started = time.process_time()
            fits: object = "-"
            buffer = "-"
            if name == "auto":
                scores, fits, positives, rows = run_auto(X, y, X_test, seed)
                buffer = f"{positives} / {rows}"
            else:
                scores = run_peer(name, X, y, X_test, seed)
            seconds = time.process_time() - started
            results[name].append((auc(y_test, scores), pauc(y_test, scores, 0.0, 0.1)))
            print(f"| {seed} | {name} | {(y > 0).mean():.2%} | {fits} | {buffer} | "
                  f"{results[name][-1][0]:.4f} | {results[name][-1][1]:.4f} | "
                  f"{seconds:.1f} |")  # fmt: skip
    for name in learners:
        aucs, paucs = np.array(results[name]).T
        print(f"| mean | {name} | | | | {aucs.mean():.4f} | {paucs.mean():.4f} | |")


if __name__ == "__main__":
    main()
