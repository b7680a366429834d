"""A study for issue 10, not a learner: online logistic regression (FTRL-Proximal, the
``logistic`` learner's update, plainly in numpy) with and without a base-rate offset.

Why: prequential pAUC pools the scores of a whole stream, and ``logistic``'s intercept falls
from 0 towards the log-odds of a rare class over the first few hundred events, so early
negatives outrank later positives (``bench/README.md``, "auto against its targets").  With the
offset the served score is ``w.x + b + o_t``, ``o_t = log((n_+ + 1/2) / (n_- + 1/2))`` from the
labels seen before the event (the Krichevsky-Trofimov estimate of the log-odds), and the model
learns on ``sigmoid(w.x + b + o_t)``: ``b`` only learns the residual, so the score's scale
settles as fast as the base rate does.

Protocol as ``quality.py`` (stratified 70 / 30 split per seed, standardised on the training
part, one shuffled pass, ``alpha = 0.2``, ``beta = 1``, no penalties); prints prequential
pAUC(0, 0.1) and held-out AUC without and with the offset::

    python bench/intercept_offset.py [--sets yeast4,abalone20,...] [--seeds 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import datasets  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

DEFAULT_SETS = (
    "yeast4,abalone20,car_vgood,flare_f,hypothyroid,wine_r_4,ecoli3,yeast_1_vs_7,segment0,"
    "vehicle0,cm1,spambase,german,page_blocks0,kc1,pc1"
)


def ftrl_pass(X, y, X_test, offset: bool, alpha: float = 0.2, beta: float = 1.0):
    """One prequential pass; returns (pre-update scores, held-out scores without the offset,
    a constant shift that does not change a ranking)."""
    n, d = X.shape
    z = np.zeros(d + 1)  # the last coordinate is the intercept's constant feature
    squares = np.zeros(d + 1)
    n_pos = 0
    scores = np.empty(n)
    for i in range(n):
        x = np.append(X[i], 1.0)
        w = -z * alpha / (beta + np.sqrt(squares))
        prior = np.log((n_pos + 0.5) / (i - n_pos + 0.5)) if offset else 0.0
        scores[i] = w @ x + prior
        gradient = (1.0 / (1.0 + np.exp(-scores[i])) - y[i]) * x
        sigma = (np.sqrt(squares + gradient**2) - np.sqrt(squares)) / alpha
        z += gradient - sigma * w
        squares += gradient**2
        n_pos += y[i]
    w = -z * alpha / (beta + np.sqrt(squares))
    return scores, X_test @ w[:-1]


def main(argv=None) -> None:
    from sklearn.model_selection import train_test_split

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    print("| set | preq pAUC | preq pAUC, offset | test AUC | test AUC, offset |")
    print("|---|---|---|---|---|")
    rows = []
    for name in args.sets.split(","):
        X, y, _ = datasets.load(name)
        X, y = np.asarray(X, dtype=np.float64), (np.asarray(y) > 0).astype(np.int64)
        per_seed = []
        for seed in range(args.seeds):
            X_tr, X_te, y_tr, y_te = train_test_split(
                X, y, test_size=0.3, stratify=y, random_state=seed
            )
            mean, std = X_tr.mean(axis=0), X_tr.std(axis=0)
            std[std == 0] = 1.0
            X_tr, X_te = (X_tr - mean) / std, (X_te - mean) / std
            order = np.random.default_rng(seed).permutation(len(y_tr))
            X_tr, y_tr = X_tr[order], y_tr[order]
            plain, shifted = ftrl_pass(X_tr, y_tr, X_te, False), ftrl_pass(X_tr, y_tr, X_te, True)
            per_seed.append([
                pauc(y_tr, plain[0], 0.0, 0.1), pauc(y_tr, shifted[0], 0.0, 0.1),
                auc(y_te, plain[1]), auc(y_te, shifted[1]),
            ])  # fmt: skip
        row = np.mean(per_seed, axis=0)
        rows.append(row)
        print(f"| {name} | {row[0]:.3f} | {row[1]:.3f} | {row[2]:.4f} | {row[3]:.4f} |")
        sys.stdout.flush()
    mean_row = np.mean(rows, axis=0)
    print("| mean | " + " | ".join(f"{v:.4f}" for v in mean_row) + " |")


if __name__ == "__main__":
    main()
