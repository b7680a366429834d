"""How ``auto`` could serve its candidates, replayed on their recorded prequential scores, and
how near the best candidate alone each serving rule, and an oracle, can come (the
target: auto's prequential pAUC(0, 0.1) within 0.005 of its best candidate alone on 90 % of the
sets).

Not a test: prints one table.  Usage::

    python bench/auto_serving.py --sets holdout --seeds 5 --jobs 2
    python bench/auto_serving.py --sets all --seeds 5 --jobs 2

Per data set, seed and input condition (``quality.py``'s protocol and split), auto's default
candidates learn the training stream alone, one pass, and their prequential scores are
recorded; ``auto`` itself learns the same stream.  Serving rules are then replayed on the
recorded scores: the candidates' scores do not depend on how auto serves them, so a rule's
served scores are what auto would serve with it.  The replay of auto's own rule
(docs/algorithms/auto.md (auto.2), (auto.3), (auto.9), (auto.10)) is written here again from
the equations and checked against auto's served scores (the ``replay of auto`` column must be
0).

Rules (each candidate's score ``s_k``, with ``m_k`` / ``sd_k`` the mean and spread of its
prequential scores before the event):

* ``z`` — auto's mix: ``sum_k w_k (s_k - m_k) / sd_k``, the weights a softmax of the windowed
  pAUCs at temperature 0.1, equal until the window decides;
* ``centred`` — ``sum_k w_k (s_k - m_k)``: each candidate on its own scale;
* ``first-scale`` — ``sum_k w_k (s_k - m_k) sd_0 / sd_k``: every candidate on the first one's;
* ``raw`` — ``sum_k w_k s_k``;
* ``oracle ...`` — the candidate that is best on the whole stream (in hindsight, per set and
  condition), served alone through the rule's transform from the first event, or from the first
  evaluation that may decide (the equal mix before it): an upper bound of what choosing the
  weights well could give each transform.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets  # noqa: E402
import quality  # noqa: E402
from numba import njit  # noqa: E402

from core.learners import make_learner  # noqa: E402
from core.learners._candidates import default_candidates  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

MARGIN = 0.005
BETA = 0.1
TRANSFORMS = {"z": 0, "centred": 1, "first-scale": 2, "raw": 3}


@njit(cache=True)
def _serve(scores, weights, segment_ends, transform, served):
    """Served scores, event by event: segment ``j`` (events before ``segment_ends[j]``) uses
    ``weights[j]``; the running statistics take every event after it is served."""
    n_candidates, n_events = scores.shape
    mean = np.zeros(n_candidates)
    m2 = np.zeros(n_candidates)
    segment = 0
    for i in range(n_events):
        while segment < segment_ends.shape[0] and i >= segment_ends[segment]:
            segment += 1
        total = 0.0
        for k in range(n_candidates):
            score = scores[k, i]
            weight = weights[segment, k]
            if weight > 0.0 and i > 1:
                spread = np.sqrt(m2[k] / i)
                if spread > 0.0:
                    if transform == 0:
                        total += weight * (score - mean[k]) / spread
                    elif transform == 1:
                        total += weight * (score - mean[k])
                    elif transform == 2:
                        total += weight * (score - mean[k]) * np.sqrt(m2[0] / i) / spread
                    else:
                        total += weight * score
            delta = score - mean[k]
            mean[k] += delta / (i + 1)
            m2[k] += delta * (score - mean[k])
        served[i] = total


def evaluations(n_events: int, auto) -> list[int]:
    """(auto.2): first_evaluation, twice that, ... below evaluate_every, then its multiples."""
    points, early = [], auto.first_evaluation
    while early < auto.evaluate_every:
        points.append(early)
        early *= 2
    points += range(auto.evaluate_every, n_events + 1, auto.evaluate_every)
    return [p for p in points if p <= n_events]


def deciding_weights(scores, labels, auto, oracle=None):
    """The weights of every segment: (auto.3)'s guard, (auto.10)'s softmax; with ``oracle``
    (a candidate index), that candidate alone from the first deciding evaluation on."""
    n_candidates, n_events = scores.shape
    points = evaluations(n_events, auto)
    current = np.full(n_candidates, 1.0 / n_candidates)
    weights = [current]
    for point in points:
        window_labels = labels[max(0, point - auto.window) : point]
        positives = int(window_labels.sum())
        negatives = window_labels.size - positives
        if positives >= auto.min_positives and BETA * negatives >= auto.min_negatives:
            if oracle is not None:
                current = np.eye(n_candidates)[oracle]
            else:
                window = scores[:, max(0, point - auto.window) : point]
                paucs = np.array([pauc(window_labels, row, 0.0, BETA) for row in window])
                shares = np.exp((paucs - paucs.max()) / auto.temperature)
                shares /= shares.sum()
                shares[shares < 1e-3] = 0.0
                current = shares / shares.sum()
        weights.append(current)
    return np.array(weights), np.array(points, dtype=np.int64)


def serve(scores, weights, points, transform):
    served = np.empty(scores.shape[1])
    _serve(scores, weights, points, TRANSFORMS[transform], served)
    return served


def held_out(scores, test_scores, weights, transform):
    """Served scores of the test rows: the final weights, and each candidate's statistics over
    all its prequential scores (as auto's decision_function serves)."""
    mean = scores.mean(axis=1)[:, None]
    spread = scores.std(axis=1)[:, None]
    if transform == "z":
        terms = (test_scores - mean) / spread
    elif transform == "centred":
        terms = test_scores - mean
    elif transform == "first-scale":
        terms = (test_scores - mean) * spread[0] / spread
    else:
        terms = test_scores
    return (weights[:, None] * terms).sum(axis=0)


def run_job(job):
    """Record the candidates and auto on one (set, seed), both conditions; replay the rules."""
    set_name, seed = job
    warnings.filterwarnings("ignore")
    X, y, _ = quality.load_set(set_name, quality.DEFAULT_MAX_N)
    train, test = quality.split(y, seed)
    X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
    X_std, X_test_std = quality.standardise(X_train, X_test)
    # the default tournament of this width (a model wider than 1,000 features has pmb second)
    auto = make_learner("auto", candidates=list(default_candidates(X.shape[1], track_drift=False)))
    # each candidate alone as auto runs it, except that it scales the features itself (auto
    # scales them once for all) and takes the run's seed
    own = ("scaling", "random_state")
    specs = [
        (spec["learner"], {k: v for k, v in spec["params"].items() if k not in own})
        for spec in auto.candidate_specs()
    ]
    rows = []
    for condition, (X_tr, X_te) in {
        "raw": (X_train, X_test),
        "standardised": (X_std, X_test_std),
    }.items():
        runs = [quality.run_aucstream(n, p, condition, X_tr, y_train, X_te, seed) for n, p in specs]
        scores = np.vstack([preq for preq, _ in runs])
        test_scores = np.vstack([test for _, test in runs])
        auto_scores, auto_test = quality.run_aucstream(
            "auto", {}, condition, X_tr, y_train, X_te, seed
        )
        alone = [pauc(y_train, row, 0.0, BETA) for row in scores]
        weights, points = deciding_weights(scores, y_train, auto)
        row = {"set": set_name, "seed": seed, "condition": condition, "alone": alone}
        replayed = serve(scores, weights, points, "z")
        row["replay of auto"] = float(np.max(np.abs(replayed - auto_scores)))
        row["replay of auto, held out"] = float(
            np.max(np.abs(held_out(scores, test_scores, weights[-1], "z") - auto_test))
        )
        for transform in TRANSFORMS:
            row[transform] = pauc(y_train, serve(scores, weights, points, transform), 0.0, BETA)
            row[f"held-out AUC, {transform}"] = auc(
                y_test, held_out(scores, test_scores, weights[-1], transform)
            )
        rows.append((row, scores, y_train))
    return rows


def oracle_rows(recorded):
    """The oracle columns need the hindsight-best candidate over the seeds of a (set,
    condition): added once every job is in."""
    alone = {}
    for row, _, _ in recorded:
        alone.setdefault((row["set"], row["condition"]), []).append(row["alone"])
    best = {key: int(np.argmax(np.mean(values, axis=0))) for key, values in alone.items()}
    auto = make_learner("auto")
    for row, scores, labels in recorded:
        k = best[(row["set"], row["condition"])]
        from_start = np.eye(scores.shape[0])[k][None, :]
        after, points = deciding_weights(scores, labels, auto, oracle=k)
        for transform in ("z", "centred", "first-scale"):
            served = serve(scores, from_start, np.zeros(0, dtype=np.int64), transform)
            row[f"oracle {transform}"] = pauc(labels, served, 0.0, BETA)
            served = serve(scores, after, points, transform)
            row[f"oracle {transform}, deciding"] = pauc(labels, served, 0.0, BETA)
    return [row for row, _, _ in recorded]


def report(rows):
    columns = [c for c in rows[0] if c not in ("set", "seed", "condition", "alone")]
    for condition in ("raw", "standardised"):
        per_set = {}
        for row in rows:
            if row["condition"] == condition:
                per_set.setdefault(row["set"], []).append(row)
        print(f"\n{condition}: {len(per_set)} sets; per rule, sets within {MARGIN} of the best "
              "candidate alone (means over seeds) and the mean prequential pAUC")  # fmt: skip
        best = {s: max(np.mean([r["alone"] for r in rs], axis=0)) for s, rs in per_set.items()}
        print(f"  {'best candidate alone':<28} {'':>8} {np.mean(list(best.values())):.4f}")
        for column in columns:
            means = {s: np.mean([r[column] for r in rs]) for s, rs in per_set.items()}
            if column.startswith("replay of auto"):
                print(f"  {column:<28} max |served - auto| = {max(means.values()):.2e}")
                continue
            if column.startswith("held-out"):
                print(f"  {column:<28} {'':>8} {np.mean(list(means.values())):.4f}")
                continue
            near = sum(means[s] >= best[s] - MARGIN for s in per_set)
            print(f"  {column:<28} {near:>3}/{len(per_set):<4} {np.mean(list(means.values())):.4f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="holdout", help="'all' (the suite), 'holdout' or names")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    registry = {"all": datasets.SUITE, "holdout": datasets.HOLDOUT}
    sets = list(registry[args.sets]) if args.sets in registry else args.sets.split(",")
    jobs = [(s, seed) for s in sets for seed in range(args.seeds)]
    with multiprocessing.Pool(args.jobs) as pool:
        recorded = [r for rows in pool.imap_unordered(run_job, jobs) for r in rows]
    report(oracle_rows(recorded))


if __name__ == "__main__":
    main()
