"""POISE's setting on the suite's data sets: pAUC over FPR [0.02, 0.05] (the paper's UCI range)
and [0, 0.1] (its LETOR range), POISE against pmb / ftrl_pauc / svm_pauc / batch logistic
regression, each with and without the tree-path embedding (docs/algorithms/poise.md).

Protocol (the paper's §6.1 where it says one): a stratified random 75:25 split per seed,
features standardised on the training part; each learner trained on the training part with
``fit`` (pAUC learners on the evaluated range), ``tree_embedded`` with ``fit_history`` (the tree
on the training part, then the inner learner); batch logistic regression is scikit-learn's (C =
1) on the raw features and on the embedded ``[x, s, t]`` of a ``tree_embedded`` fitted on the
training part.  Test pAUC is width-normalised (the average TPR over the range).

    python bench/poise.py [--seeds 3] [--sets a,b] [--max-n 10000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets  # noqa: E402

from core.learners import make_learner  # noqa: E402
from core.metrics import pauc  # noqa: E402

RANGES = ((0.02, 0.05), (0.0, 0.1))
#: the suite's sets with at most 16 % positives, and two balanced non-linear ones
SETS = ("abalone19", "wine_r_4", "yeast4", "car_vgood", "letter_a", "flare_f", "hypothyroid",
        "abalone9_18", "pc1", "shuttle", "vowel0", "satimage_4", "page_blocks0", "ecoli3",
        "segment0", "phoneme", "magic")  # fmt: skip
PAUC_LEARNERS = ("poise", "pmb", "ftrl_pauc", "svm_pauc")
COLUMNS = ("poise", "poise+tree", "pmb", "pmb+tree", "ftrl_pauc", "svm_pauc", "LR", "LR+tree")


def split(y, seed, test_share=0.25):
    rng = np.random.default_rng(seed)
    test = []
    for label in (0, 1):
        members = rng.permutation(np.flatnonzero(y == label))
        test.extend(members[: max(1, int(round(test_share * len(members))))])
    test = np.sort(np.array(test))
    return np.setdiff1d(np.arange(len(y)), test), test


def scores_for(column, pauc_range, X_train, y_train, X_test, seed):
    from sklearn.linear_model import LogisticRegression

    alpha, beta = pauc_range
    if column in ("LR", "LR+tree"):
        if column == "LR+tree":
            embedder = make_learner("tree_embedded", learner="spam", random_state=seed)
            embedder.fit_history(X_train, y_train)
            X_train = embedder.transform(X_train).toarray()
            X_test = embedder.transform(X_test).toarray()
        model = LogisticRegression(max_iter=5000).fit(X_train, y_train)
        return model.decision_function(X_test)
    name, embedded = column.removesuffix("+tree"), column.endswith("+tree")
    params = {"alpha": alpha, "beta": beta, "random_state": seed}
    if embedded:
        model = make_learner("tree_embedded", learner=name, pauc_range=[alpha, beta],
                             random_state=seed)  # fmt: skip
        return model.fit_history(X_train, y_train).decision_function(X_test)
    return make_learner(name, **params).fit(X_train, y_train).decision_function(X_test)


def run_job(job):
    set_name, seed, max_n = job
    warnings.filterwarnings("ignore")
    X, y, _ = datasets.load(set_name, max_n)
    X = np.asarray(X, dtype=np.float64)
    train, test = split(y, seed)
    mean, std = X[train].mean(axis=0), X[train].std(axis=0)
    X = (X - mean) / np.where(std > 0, std, 1.0)
    rows = []
    for pauc_range in RANGES:
        for column in COLUMNS:
            started = time.perf_counter()
            scores = scores_for(column, pauc_range, X[train], y[train], X[test], seed)
            rows.append({"set": set_name, "seed": seed, "range": pauc_range, "column": column,
                         "pauc": pauc(y[test], scores, *pauc_range),
                         "seconds": time.perf_counter() - started})  # fmt: skip
    return rows


def report(rows, sets):
    for pauc_range in RANGES:
        print(f"\ntest pAUC [{pauc_range[0]:g}, {pauc_range[1]:g}] (width-normalised), mean over "
              "seeds")  # fmt: skip
        print(f"{'set':<13} {'pos %':>6} " + " ".join(f"{c:>10}" for c in COLUMNS))
        wins = {"tree": 0, "lr": 0, "n": 0, "rare": 0}
        for set_name in sets:
            mine = [r for r in rows if r["set"] == set_name and r["range"] == pauc_range]
            if not mine:
                continue
            _, y, _ = datasets.load(set_name)
            means = {c: np.mean([r["pauc"] for r in mine if r["column"] == c]) for c in COLUMNS}
            print(f"{set_name:<13} {100 * np.mean(y):>6.1f} "
                  + " ".join(f"{means[c]:>10.4f}" for c in COLUMNS))  # fmt: skip
            wins["n"] += 1
            wins["tree"] += means["poise+tree"] > means["poise"]
            if np.mean(y) <= 0.10:
                wins["rare"] += 1
                wins["lr"] += means["poise+tree"] > means["LR"]
        print(f"poise+tree > poise on {wins['tree']} of {wins['n']} sets; poise+tree > LR on "
              f"{wins['lr']} of the {wins['rare']} sets with <= 10 % positives")  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--max-n", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    sets = args.sets.split(",")
    work = [(s, seed, args.max_n) for s in sets for seed in range(args.seeds)]
    started = time.perf_counter()
    rows = []
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            for result in pool.imap_unordered(run_job, work):
                rows.extend(result)
                print(f"[{time.perf_counter() - started:5.0f}s] {result[0]['set']} seed "
                      f"{result[0]['seed']}", file=sys.stderr, flush=True)  # fmt: skip
    else:
        for job in work:
            rows.extend(run_job(job))
            print(f"[{time.perf_counter() - started:5.0f}s] {job[0]} seed {job[1]}",
                  file=sys.stderr, flush=True)  # fmt: skip
    report(rows, sets)
    print(
        f"\nwall {time.perf_counter() - started:.0f}s, {args.seeds} seeds, 75:25 stratified split"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
