"""Three ways a first-order SPAM could close its gap to batch logistic regression, measured on
the real-data suite before any is built into the kernel (bench/README.md "SPAM's
step: AdaGrad, replay, later-weighted averages").

Each variant is a plain loop over the equations of docs/algorithms/spam.md, compiled with numba
for speed (no lazy scale, no CSR: standardised dense input only).  Variant 0 of each family is
SPAM itself (``eta0 / sqrt(t)``, the importance-aware cap (spam.8), uniform average): its
held-out AUC must equal the learner's to the printed digits, which checks the loop.

* ``adagrad``: per-coordinate steps ``eta0 / (1e-8 + sqrt(sum_s g_{s,j}^2))`` (Duchi et al.
  2011; what AdaOAM does in opauc), then the same L2 prox per coordinate, uniform average;
* ``replay``: after each event's step, ``k`` more steps on events drawn uniformly from a
  reservoir of the last-seen stream (1,000 events; Vitter's algorithm R), i.e. about ``k + 1``
  passes over a short stream (``k + 1`` times the learning work);
* ``poly``: the average of the iterates weighted by ``t^gamma`` instead of uniformly (a
  polynomial-decay average, Shamir & Zhang 2013), which forgets the poor early iterates.

Protocol: quality.py's split and stream order per seed, the standardised condition, one pass;
held-out AUC.  Prints one row per set and the mean over sets.

    python bench/spam_variants.py [--seeds 3] [--sets all] [--jobs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets  # noqa: E402
import quality  # noqa: E402

from core.learners import make_learner  # noqa: E402
from core.metrics import auc  # noqa: E402

#: spam's defaults (core.learners.spam)
ETA0 = 8.0
L2 = 0.003
RESERVOIR = 1000


@numba.njit(cache=True)
def spam_loop(X, y, eta0, l2, adagrad, replay, gamma, seed):
    """One pass of SPAM-L2 over the rows of ``X``; returns the served (averaged) weights."""
    # numba's per-thread legacy generator: seeded here, so each run draws the same replays
    np.random.seed(seed)  # noqa: NPY002
    n, d = X.shape
    w = np.zeros(d)
    avg = np.zeros(d)
    grad_sq = np.zeros(d)
    sum_pos = np.zeros(d)
    sum_neg = np.zeros(d)
    reservoir = np.zeros((RESERVOIR, d))
    reservoir_y = np.zeros(RESERVOIR, np.int64)
    n_pos = n_neg = n_steps = 0
    sq_norm_sum = 0.0
    avg_weight = 0.0
    for i in range(n):
        for j in range(d):
            sq_norm_sum += X[i, j] * X[i, j]
        if n_pos > 0 and n_neg > 0:
            p = n_pos / (n_pos + n_neg)
            nu = sq_norm_sum / (i + 1)  # the running mean of ||x||^2, this event included
            for r in range(replay + 1):
                if r == 0:
                    x = X[i]
                    positive = y[i] > 0
                else:
                    k = np.random.randint(min(i, RESERVOIR))  # noqa: NPY002
                    x = reservoir[k]
                    positive = reservoir_y[k] > 0
                wx = 0.0
                w_mean = 0.0
                xx = 0.0
                for j in range(d):
                    wx += w[j] * x[j]
                    xx += x[j] * x[j]
                    w_mean += w[j] * (sum_neg[j] if positive else sum_pos[j])
                if positive:  # (spam.3)
                    coef = 2.0 * (1.0 - p) * (wx - w_mean / n_neg - 1.0)
                    curvature = 2.0 * (1.0 - p)
                else:
                    coef = 2.0 * p * (wx - w_mean / n_pos + 1.0)
                    curvature = 2.0 * p
                n_steps += 1
                eta = eta0 / np.sqrt(n_steps)
                if adagrad:
                    for j in range(d):
                        g = coef * x[j]
                        grad_sq[j] += g * g
                        rate = eta0 / (1e-8 + np.sqrt(grad_sq[j]))
                        w[j] = (w[j] - rate * g) / (1.0 + rate * l2)
                else:
                    rate = eta / nu
                    if rate * curvature * xx > 1.0:  # (spam.8)
                        rate = 1.0 / (curvature * xx)
                    for j in range(d):
                        w[j] = (w[j] - rate * coef * x[j]) / (1.0 + eta * l2)
                weight = float(n_steps) ** gamma
                avg_weight += weight
                for j in range(d):
                    avg[j] += weight * w[j]
        if y[i] > 0:
            n_pos += 1
            sum_pos += X[i]
        else:
            n_neg += 1
            sum_neg += X[i]
        if i < RESERVOIR:
            reservoir[i] = X[i]
            reservoir_y[i] = y[i]
        else:
            k = np.random.randint(i + 1)  # noqa: NPY002
            if k < RESERVOIR:
                reservoir[k] = X[i]
                reservoir_y[k] = y[i]
    return avg / avg_weight if avg_weight > 0.0 else avg


#: name -> (adagrad, replay, gamma, eta0)
VARIANTS = {
    "spam (loop)": (False, 0, 0.0, ETA0),
    "adagrad 0.003": (True, 0, 0.0, 0.003),
    "adagrad 0.01": (True, 0, 0.0, 0.01),
    "adagrad 0.03": (True, 0, 0.0, 0.03),
    "adagrad 0.1": (True, 0, 0.0, 0.1),
    "replay 1": (False, 1, 0.0, ETA0),
    "replay 3": (False, 3, 0.0, ETA0),
    "poly 1": (False, 0, 1.0, ETA0),
    "poly 2": (False, 0, 2.0, ETA0),
}


def run_job(job):
    set_name, seed = job
    X, y, _ = quality.load_set(set_name, None)
    train, test = quality.split(y, seed)
    X_train, X_test = quality.standardise(X[train], X[test])
    y_train, y_test = y[train], y[test]
    row = {"batch LR": auc(y_test, quality.run_logreg(X_train, y_train, X_test)[1])}
    model = make_learner("spam", scaling="none", random_state=seed)
    for rows in quality.batches(len(y_train)):
        model.prequential_step(X_train[rows], y_train[rows])
    row["spam"] = auc(y_test, model.decision_function(X_test))
    X_train = np.ascontiguousarray(X_train)
    for name, (adagrad, replay, gamma, eta0) in VARIANTS.items():
        w = spam_loop(X_train, y_train, eta0, L2, adagrad, replay, gamma, seed)
        row[name] = auc(y_test, X_test @ w)
    return set_name, seed, row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sets", default="all")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    sets = list(datasets.SUITE) if args.sets == "all" else args.sets.split(",")
    jobs = [(name, seed) for name in sets for seed in range(args.seeds)]
    started = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.map(run_job, jobs)
    else:
        results = [run_job(job) for job in jobs]
    per_set: dict[str, dict[str, list[float]]] = {}
    for set_name, _, row in results:
        for column, value in row.items():
            per_set.setdefault(column, {}).setdefault(set_name, []).append(value)
    columns = list(per_set)
    print(f"held-out AUC, standardised, mean over {args.seeds} seeds")
    print(f"{'set':<15}" + "".join(f"{c:>15}" for c in columns))
    for set_name in sets:
        cells = (np.mean(per_set[c][set_name]) for c in columns)
        print(f"{set_name:<15}" + "".join(f"{cell:>15.4f}" for cell in cells))
    means = {c: np.mean([np.mean(per_set[c][s]) for s in sets]) for c in columns}
    print(f"{'mean':<15}" + "".join(f"{means[c]:>15.4f}" for c in columns))
    gaps = (means[c] - means["batch LR"] for c in columns)
    print(f"{'vs batch LR':<15}" + "".join(f"{gap:>+15.4f}" for gap in gaps))
    print(f"wall {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
