"""Ranking quality on real imbalanced data: every online aucstream learner with its defaults
beside scikit-learn's batch LogisticRegression, SGDClassifier one pass and River's one-pass
LogisticRegression.  Not a test: prints tables and one summary line per learner.

Usage (``bench/README.md`` has more)::

    python bench/quality.py                                  # the whole suite, both conditions
    python bench/quality.py --sets magic,hiva --learners spam,logreg --seeds 2
    python bench/quality.py --params '{"spam": {"l2": 0.001}}'            # other parameters
    python bench/quality.py --params '{"spam_e": {"learner": "spam", "eta0": 0.3}}'  # a variant
    python bench/quality.py --thesis                         # the thesis protocol (bench/thesis.py)

Protocol, per data set (``bench/datasets.py``) and seed:

* a stratified 70 / 30 train / test split drawn with the seed; the training events are shuffled
  with it (the stream order);
* two input conditions on the same split: ``raw`` (features as users post them; aucstream
  learners with ``scaling="standard"``, which is what the service's default ``auto`` scaling
  resolves to for dense models, ``service.schemas.resolve_scaling``) and ``standardised``
  (z-scored with the training split's mean and standard deviation; ``scaling="none"``);
* online learners make ONE pass over the stream in batches of ``BATCH`` events, each event
  scored before it is learned (aucstream: ``prequential_step``; River: ``predict_proba_one``
  then ``learn_one``; SGD: ``decision_function`` on the batch, then ``partial_fit`` on it);
  ``preq`` metrics are over those scores, ``test`` metrics are the final model's on the test
  split;
* ``hgb`` (scikit-learn's batch ``HistGradientBoostingClassifier``, defaults) learns from the
  raw training split at once: the ceiling of a batch non-linear model;
* ``logreg`` (batch, ``C=1``) always sees standardised input, so it is the same number in both
  conditions: the ceiling a batch user gets.  ``sgd`` and ``river`` on raw input put an online
  standard scaler in front, as their users would (sklearn ``StandardScaler.partial_fit`` per
  batch; River ``preprocessing.StandardScaler() | LogisticRegression()``);
* AUC and pAUC(0, 0.1) from ``core.metrics`` (pAUC unstandardised: the area over FPR [0, 0.1]
  divided by 0.1, so 1 is perfect and a random ranking scores 0.05).

Summary: per learner and condition, the mean over sets of the per-set mean held-out AUC and
pAUC, and wins/ties/losses against each peer on the per-set means, a tie being a difference
below ``TIE`` (0.002).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets  # noqa: E402
from quality_tables import (  # noqa: E402
    PEERS,
    aggregate,
    auto_lines,
    print_tables,
    resolve_learner,
    summary_lines,
    write_csv,
)

from core.learners import available_learners, learner_class, make_learner  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

BATCH = 256
PAUC_BETA = 0.1
TEST_FRACTION = 0.3
#: [CHOICE] the cap on events per set: above it a set is subsampled (stratified, fixed seed,
#: ``datasets.subsample``), so that adding a bigger set cannot blow the budget.  At 50,000 no
#: set of today's suite is cut (the largest, shuttle, has 49,097 events) and the full suite
#: (both conditions, 5 seeds, every learner and peer) takes a few minutes of one core
#: (bench/README.md has the measured time); ``--max-n 10000`` cuts it further.
DEFAULT_MAX_N = 50_000
CONDITIONS = ("raw", "standardised")


# ------------------------------------------------------------------------------ legacy sets
def rare_positives(n=40_000, n_features=20, rate=0.01, seed=1000):
    """1 % positives: Gaussian classes, the positives shifted on 5 features and with twice the
    variance on two more (so no linear model is perfect); features on very different scales."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(np.int64)
    X = rng.normal(size=(n, n_features))
    shift = np.zeros(n_features)
    shift[:5] = [0.9, -0.7, 0.5, 0.4, -0.3]
    X += y[:, None] * shift
    X[:, 5:7] *= np.where(y[:, None] == 1, 2.0, 1.0)
    X = X * rng.uniform(0.5, 20, size=n_features) + rng.normal(scale=5, size=n_features)
    return X, y


def wide_dense(n=6_000, n_features=300, seed=2000):
    """300 correlated features, 10 % positives, 30 informative directions, label noise."""
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=n, n_features=n_features, n_informative=30, n_redundant=30,
        weights=[0.9], flip_y=0.03, class_sep=0.8, random_state=seed,
    )  # fmt: skip
    return X, y.astype(np.int64)


def digits_odd():
    """scikit-learn's digits, odd against even (balanced: not an imbalanced set)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data, (data.target % 2 == 1).astype(np.int64)


#: the dense sets of the first version of this benchmark, which core docstrings cite
#: (``breast_cancer`` is in the suite; the sparse ``sparse_2e20`` is gone: the suite is dense);
#: not in ``--sets all``: ``--sets legacy`` or by name
LEGACY = {"rare_1pct": rare_positives, "wide_dense": wide_dense, "digits_odd": digits_odd}


def load_set(name: str, max_n: int | None):
    if name in LEGACY:
        X, y = LEGACY[name]()
        rows = datasets.subsample(y, max_n) if max_n else np.arange(len(y))
        return X[rows], y[rows], len(y)
    return datasets.load(name, max_n)


# ------------------------------------------------------------------------------ protocol
def split(y: np.ndarray, seed: int):
    """Stratified train / test indices (:data:`TEST_FRACTION` held out); the train indices in
    stream (shuffled) order."""
    return datasets.split(y, seed, TEST_FRACTION)


def standardise(X_train, X_test):
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    std[std == 0] = 1.0
    return (X_train - mean) / std, (X_test - mean) / std


def metrics(y, scores) -> tuple[float, float]:
    return auc(y, scores), pauc(y, scores, 0.0, PAUC_BETA)


def batches(n: int):
    return [slice(start, min(start + BATCH, n)) for start in range(0, n, BATCH)]


def run_aucstream(name, params, condition, X_train, y_train, X_test, seed):
    scaling = "standard" if condition == "raw" else "none"
    model = make_learner(name, **{"scaling": scaling, "random_state": seed, **params})
    preq = np.empty(len(y_train))
    for rows in batches(len(y_train)):
        preq[rows] = model.prequential_step(X_train[rows], y_train[rows])
    return preq, model.decision_function(X_test)


def run_sgd(condition, X_train, y_train, X_test, seed):
    from sklearn.linear_model import SGDClassifier
    from sklearn.preprocessing import StandardScaler

    model = SGDClassifier(loss="log_loss", random_state=seed)
    scaler = StandardScaler() if condition == "raw" else None
    preq = np.zeros(len(y_train))  # the first batch meets a model that knows nothing: ties
    for index, rows in enumerate(batches(len(y_train))):
        X_batch = X_train[rows]
        if index:
            shown = scaler.transform(X_batch) if scaler is not None else X_batch
            preq[rows] = model.decision_function(shown)
        if scaler is not None:
            X_batch = scaler.partial_fit(X_batch).transform(X_batch)
        model.partial_fit(X_batch, y_train[rows], classes=[0, 1])
    shown = scaler.transform(X_test) if scaler is not None else X_test
    return preq, model.decision_function(shown)


def run_river(condition, X_train, y_train, X_test, seed):
    """River's one-pass LogisticRegression, one event at a time (``learn_many`` takes one
    gradient step per mini-batch: a different algorithm from the one a River user streams)."""
    from river import linear_model, preprocessing

    model = linear_model.LogisticRegression()
    if condition == "raw":
        model = preprocessing.StandardScaler() | model
    names = [f"x{i}" for i in range(X_train.shape[1])]
    preq = np.empty(len(y_train))
    for i, (row, label) in enumerate(zip(X_train.tolist(), y_train.tolist(), strict=True)):
        x = dict(zip(names, row, strict=True))
        preq[i] = model.predict_proba_one(x).get(True, 0.0)
        model.learn_one(x, bool(label))
    test = [model.predict_proba_one(dict(zip(names, row, strict=True))).get(True, 0.0)
            for row in X_test.tolist()]  # fmt: skip
    return preq, np.asarray(test)


def libauc_peers() -> dict:
    """LibAUC's linear pAUC learners (bench/libauc_peers.py) when torch and libauc are
    installed: batch peers on standardised input, selectable by name, not in 'all'."""
    import libauc_peers

    return libauc_peers.peers() if libauc_peers.available() else {}


def run_logreg(X_train_std, y_train, X_test_std):
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=10_000).fit(X_train_std, y_train)
    return None, model.decision_function(X_test_std)


def run_hgb(X_train, y_train, X_test, seed):
    """scikit-learn's batch ``HistGradientBoostingClassifier`` with its defaults, on all the
    training data (trees do not care about scaling: one fit serves both conditions)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(random_state=seed).fit(X_train, y_train)
    return None, model.decision_function(X_test)


def run_job(job) -> list[dict]:
    """Every learner on one (data set, seed): both conditions on the same split."""
    set_name, seed, learners, conditions, overrides, max_n = job
    warnings.filterwarnings("ignore")
    X, y, n_full = load_set(set_name, max_n)
    train, test = split(y, seed)
    X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
    X_train_std, X_test_std = standardise(X_train, X_test)
    inputs = {"raw": (X_train, X_test), "standardised": (X_train_std, X_test_std)}
    info = {"set": set_name, "seed": seed, "n": len(y), "n_full": n_full, "d": X.shape[1],
            "pos_rate": float(y.mean())}  # fmt: skip
    rows = []
    logreg = hgb = None
    extra_peers = libauc_peers() if any(name.startswith("sopa") for name in learners) else {}
    for condition in conditions:
        X_tr, X_te = inputs[condition]
        for learner in learners:
            started = time.perf_counter()
            if learner == "logreg":
                if logreg is None:  # the same model in both conditions: fit once
                    logreg = run_logreg(X_train_std, y_train, X_test_std)
                    logreg_seconds = time.perf_counter() - started
                preq, test_scores = logreg
            elif learner == "hgb":
                if hgb is None:  # the same model in both conditions: fit once
                    hgb = run_hgb(X_train, y_train, X_test, seed)
                    hgb_seconds = time.perf_counter() - started
                preq, test_scores = hgb
            elif learner == "sgd":
                preq, test_scores = run_sgd(condition, X_tr, y_train, X_te, seed)
            elif learner == "river":
                preq, test_scores = run_river(condition, X_tr, y_train, X_te, seed)
            elif learner in extra_peers:
                model = extra_peers[learner]["make"](seed).fit(X_train_std, y_train)
                preq, test_scores = None, model.decision_function(X_test_std)
            else:
                base, params = resolve_learner(learner, overrides)
                try:
                    preq, test_scores = run_aucstream(
                        base, params, condition, X_tr, y_train, X_te, seed
                    )
                except ValueError as error:  # the learner refuses this set (e.g. too wide)
                    preq, test_scores = None, None
                    refused = str(error).split(";")[0]
            # logreg's one fit is shown in both conditions' rows
            seconds = time.perf_counter() - started
            if learner in ("logreg", "hgb"):
                seconds = logreg_seconds if learner == "logreg" else hgb_seconds
            row = {**info, "condition": condition, "learner": learner, "seconds": seconds}
            row["preq_auc"], row["preq_pauc"] = (
                metrics(y_train, preq) if preq is not None else (math.nan, math.nan)
            )
            row["test_auc"], row["test_pauc"] = (
                metrics(y_test, test_scores) if test_scores is not None else (math.nan, math.nan)
            )
            row["refused"] = refused if test_scores is None else ""
            rows.append(row)
    return rows


def warm_up(learners, overrides):
    """Compile (or load from numba's cache) every kernel, and import the peers' libraries,
    before anything is timed (River's import alone takes seconds)."""
    import river.linear_model  # noqa: F401
    import river.preprocessing  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.preprocessing  # noqa: F401

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(64, 3)), np.tile([0, 1], 32)
    for learner in learners:
        if learner in PEERS or learner.startswith("sopa"):
            continue
        base, params = resolve_learner(learner, overrides)
        for scaling in ("standard", "none"):
            model = make_learner(base, **{"scaling": scaling, "random_state": 0, **params})
            model.prequential_step(X, y)
            model.decision_function(X)


def progress(done, total, result, started):
    """One line per finished (set, seed) job on stderr, so a long run shows where it is."""
    first = result[0]
    print(f"[{done}/{total} {time.perf_counter() - started:6.0f}s] {first['set']} "
          f"seed {first['seed']}", file=sys.stderr, flush=True)  # fmt: skip


def _init_worker(learners, overrides):
    warnings.filterwarnings("ignore")
    warm_up(learners, overrides)


# ------------------------------------------------------------------------------ reporting
# ------------------------------------------------------------------------------ command line
def online_learners() -> list[str]:
    return [name for name in available_learners() if learner_class(name).online]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sets",
        default="all",
        help="comma-separated names, 'all' (the real suite), 'holdout' (the sets no default was "
        "fitted to) or 'legacy'",
    )
    parser.add_argument(
        "--learners",
        default="all",
        help="comma-separated: registered online learners, variants from "
        "--params, peers (logreg, sgd, river); 'all' = every one",
    )
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. n-1")
    parser.add_argument("--condition", choices=("raw", "standardised", "both"), default="both")
    parser.add_argument(
        "--max-n",
        type=int,
        default=DEFAULT_MAX_N,
        help="subsample sets above this many events (0: never)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="processes over (set, seed) jobs")
    parser.add_argument(
        "--params",
        default="{}",
        help="JSON {learner: {param: value}}; a key that is not a learner "
        "defines a variant and names its base in 'learner' (or in 'base', for a base "
        "with a 'learner' parameter of its own, such as tree_embedded)",
    )
    parser.add_argument("--csv", help="write one row per set, seed, condition and learner")
    parser.add_argument(
        "--thesis", action="store_true", help="run the thesis protocol instead (bench/thesis.py)"
    )
    parser.add_argument("--tuned", action="store_true", help="--thesis: also tune by CV")
    return parser.parse_args(argv)  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    if args.thesis:
        import thesis

        return thesis.main(seeds=args.seeds, tuned=args.tuned, jobs=args.jobs,
                           learners=None if args.learners == "all" else args.learners.split(","),
                           csv_path=args.csv,
                           sets=None if args.sets == "all" else args.sets.split(","))  # fmt: skip
    try:
        overrides = json.loads(args.params)
    except json.JSONDecodeError as error:
        raise SystemExit(f"--params is not JSON: {error}") from None
    registered = online_learners()
    for key, params in overrides.items():
        if key not in registered and "learner" not in params and "base" not in params:
            raise SystemExit(f"--params: {key!r} is not an online learner and names no base")
    variants = [key for key in overrides if key not in registered]
    if args.learners == "all":
        learners = registered + variants + list(PEERS)
    else:
        learners = args.learners.split(",")
    extra = list(libauc_peers()) if any(n.startswith("sopa") for n in learners) else []
    for name in learners:
        if name not in registered + variants + list(PEERS) + extra:
            raise SystemExit(f"unknown learner {name!r}")
    for name in learners:  # bad parameters fail here, before any work
        if name not in PEERS and name not in extra:
            base, params = resolve_learner(name, overrides)
            try:
                make_learner(base, **params)
            except ValueError as error:
                raise SystemExit(f"--params for {name!r}: {error}") from None
    if args.sets == "all":
        sets = list(datasets.SUITE)
    elif args.sets == "legacy":
        sets = list(LEGACY)
    elif args.sets == "holdout":
        sets = list(datasets.HOLDOUT)
    else:
        sets = args.sets.split(",")
    for name in sets:
        if name not in datasets.SUITE and name not in datasets.HOLDOUT and name not in LEGACY:
            raise SystemExit(f"unknown data set {name!r}")
    conditions = CONDITIONS if args.condition == "both" else (args.condition,)
    max_n = args.max_n or None

    jobs = [(s, seed, learners, conditions, overrides, max_n)
            for s in sets for seed in range(args.seeds)]  # fmt: skip
    started = time.perf_counter()
    rows: list[dict] = []
    if args.jobs > 1:
        # the biggest jobs first, so that no process is left with a long one at the end
        sizes = {s: len(load_set(s, max_n)[1]) * load_set(s, max_n)[0].shape[1] for s in sets}
        jobs.sort(key=lambda job: -sizes[job[0]])
        context = multiprocessing.get_context("fork")
        with context.Pool(args.jobs, _init_worker, (learners, overrides)) as pool:
            for done, result in enumerate(pool.imap_unordered(run_job, jobs), 1):
                rows.extend(result)
                progress(done, len(jobs), result, started)
    else:
        _init_worker(learners, overrides)
        for done, job in enumerate(jobs, 1):
            result = run_job(job)
            rows.extend(result)
            progress(done, len(jobs), result, started)
    wall = time.perf_counter() - started

    agg = aggregate(rows)
    print_tables(rows, agg, learners, conditions, sets)
    print()
    for line in summary_lines(agg, learners, conditions, sets, rows):
        print(line)
    for line in auto_lines(agg, learners, overrides, conditions, sets):
        print(line)
    cpu = sum(row["seconds"] for row in rows)
    print(f"\nwall {wall:.0f}s, learner time {cpu:.0f}s, jobs {args.jobs}, "
          f"max_n {max_n}, seeds {args.seeds}, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    if args.csv:
        write_csv(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
