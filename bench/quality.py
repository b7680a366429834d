"""Learning quality: prequential and held-out AUC / pAUC(0, 0.1) of the online learners, beside
scikit-learn's batch LogisticRegression and SGDClassifier.partial_fit on the same shuffled order.

Not a test: prints one table (mean ± std over seeds).  Usage::

    python bench/quality.py                                   # everything, 5 seeds
    python bench/quality.py --learners spam,logreg --datasets breast_cancer --seeds 3
    python bench/quality.py --set spam.eta0=0.1 --set spam.l2=1e-3   # try other parameters

Protocol, per data set and seed:

* shuffle the events with the seed, split 70 % train / 30 % test (stratified);
* dense features are standardised with the mean and standard deviation of the train split
  (sparse ones are left as they are);
* ``preq``: one pass over the train split in that order, each event scored before it is learned
  (aucstream: ``prequential_step``; SGD: ``decision_function`` then ``partial_fit`` in blocks of
  16 events, because sklearn's per-call overhead makes single events slow; batch learners: —);
* ``test 1 pass``: the model after that pass, on the test split;
* ``test fit``: aucstream learners ``fit`` with their default ``max_iter`` passes; logistic
  regression its batch fit; SGD (online only) repeats its one-pass number.

To add a learner or a data set, add one entry to ``LEARNERS`` or ``DATASETS`` below.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.learners import make_learner  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

PAUC_BETA = 0.1


# ---------------------------------------------------------------------------------- learners
def _aucstream(name, **params):
    """An aucstream learner by registry name: online (prequential_step, fit)."""
    return {"kind": "aucstream", "make": lambda seed, **extra: make_learner(
        name, random_state=seed, **{**params, **extra})}  # fmt: skip


def _logreg(seed, **extra):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=5000, **extra)


def _sgd(seed, **extra):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="log_loss", random_state=seed, **extra)


# name -> {"kind": "aucstream" | "online" | "batch", "make": callable(seed, **params)}
LEARNERS = {
    "spam": _aucstream("spam"),
    "solam": _aucstream("solam"),
    "logreg": {"kind": "batch", "make": _logreg},
    "sgd": {"kind": "online", "make": _sgd},
}


# ---------------------------------------------------------------------------------- data sets
def breast_cancer(seed):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    # malignant (target 0) is the positive class, as a screening service would see it
    return data.data, (data.target == 0).astype(np.int64)


def digits_odd(seed):
    from sklearn.datasets import load_digits

    data = load_digits()
    return data.data, (data.target % 2 == 1).astype(np.int64)


def rare_positives(seed, n=40_000, n_features=20, rate=0.01):
    """1 % positives: Gaussian classes, the positives shifted on 5 features and with twice the
    variance on two more (so no linear model is perfect)."""
    rng = np.random.default_rng(1000 + seed)
    y = (rng.random(n) < rate).astype(np.int64)
    X = rng.normal(size=(n, n_features))
    shift = np.zeros(n_features)
    shift[:5] = [0.9, -0.7, 0.5, 0.4, -0.3]
    X += y[:, None] * shift
    X[:, 5:7] *= np.where(y[:, None] == 1, 2.0, 1.0)
    X = X * rng.uniform(0.5, 20, size=n_features) + rng.normal(scale=5, size=n_features)
    return X, y


def wide_dense(seed, n=6_000, n_features=300):
    """300 correlated features, 10 % positives, 30 informative directions, label noise."""
    from sklearn.datasets import make_classification

    return make_classification(
        n_samples=n, n_features=n_features, n_informative=30, n_redundant=30,
        weights=[0.9], flip_y=0.03, class_sep=0.8, random_state=2000 + seed,
    )  # fmt: skip


def sparse_hashed(seed, n=30_000, n_features=2**20, nnz=20, rate=0.1):
    """Hashed-token-like rows: 20 binary features per event drawn from a Zipf law over 2**20
    columns; the label thresholds a sparse linear score plus noise at the 90th percentile."""
    rng = np.random.default_rng(3000 + seed)
    columns = rng.permutation(n_features)
    true_w = rng.normal(size=n_features) * (rng.random(n_features) < 0.2)
    ranks = np.minimum(rng.zipf(1.15, size=(n, 3 * nnz)), n_features) - 1
    indices = np.empty((n, nnz), dtype=np.int64)
    for i in range(n):  # 20 distinct columns per row
        row = np.unique(columns[ranks[i]])
        if row.size < nnz:
            row = np.union1d(row, rng.choice(n_features, nnz, replace=False))
        indices[i] = rng.choice(row, nnz, replace=False)
    X = sp.csr_matrix(
        (np.ones(n * nnz), indices.ravel(), np.arange(0, n * nnz + 1, nnz)), shape=(n, n_features)
    )
    X.sort_indices()
    score = X @ true_w / np.sqrt(nnz) + rng.normal(scale=0.5, size=n)
    y = (score > np.quantile(score, 1 - rate)).astype(np.int64)
    return X, y


# name -> callable(seed) -> (X, y)
DATASETS = {
    "breast_cancer": breast_cancer,
    "digits_odd": digits_odd,
    "rare_1pct": rare_positives,
    "wide_dense": wide_dense,
    "sparse_2e20": sparse_hashed,
}


# ---------------------------------------------------------------------------------- protocol
def split(X, y, seed):
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in (0, 1):
        members = rng.permutation(np.flatnonzero(y == label))
        cut = int(round(0.7 * members.size))
        train.append(members[:cut])
        test.append(members[cut:])
    train = rng.permutation(np.concatenate(train))  # the shuffled stream order
    test = np.concatenate(test)
    X_train, X_test = X[train], X[test]
    if not sp.issparse(X):
        mean, std = X_train.mean(axis=0), X_train.std(axis=0)
        std[std == 0] = 1.0
        X_train, X_test = (X_train - mean) / std, (X_test - mean) / std
    return X_train, y[train], X_test, y[test]


def metrics(y, scores):
    return auc(y, scores), pauc(y, scores, 0.0, PAUC_BETA)


def run_one(spec, params, X_train, y_train, X_test, y_test, seed, block=16):
    """{metric: value} for one learner on one split."""
    out = {}
    started = time.perf_counter()
    if spec["kind"] == "aucstream":
        model = spec["make"](seed, **params)
        preq = model.prequential_step(X_train, y_train)
        out["preq AUC"], out["preq pAUC"] = metrics(y_train, preq)
        out["test AUC 1p"], _ = metrics(y_test, model.decision_function(X_test))
        fitted = spec["make"](seed, **params).fit(X_train, y_train)
        test_scores = fitted.decision_function(X_test)
    elif spec["kind"] == "online":
        model = spec["make"](seed, **params)
        preq = np.zeros(len(y_train))
        for start in range(0, len(y_train), block):
            rows = slice(start, start + block)
            if start:
                preq[rows] = model.decision_function(X_train[rows])
            model.partial_fit(X_train[rows], y_train[rows], classes=[0, 1])
        out["preq AUC"], out["preq pAUC"] = metrics(y_train, preq)
        out["test AUC 1p"], _ = metrics(y_test, model.decision_function(X_test))
        test_scores = model.decision_function(X_test)
    else:
        model = spec["make"](seed, **params).fit(X_train, y_train)
        test_scores = model.decision_function(X_test)
    out["test AUC"], out["test pAUC"] = metrics(y_test, test_scores)
    out[MID_PAUC] = pauc(y_test, test_scores, *MID_RANGE)
    out["seconds"] = time.perf_counter() - started
    return out


MID_RANGE = (0.02, 0.05)  # the FPR range of Narasimhan & Agarwal's UCI table (notes 000 §6.3)
MID_PAUC = "pAUC.02-.05"
COLUMNS = ["preq AUC", "preq pAUC", "test AUC 1p", "test AUC", "test pAUC", MID_PAUC, "seconds"]


def parse_overrides(items):
    """``--set spam.eta0=0.1`` -> {"spam": {"eta0": 0.1}} (values parsed as Python literals)."""
    import ast

    overrides: dict[str, dict] = {}
    for item in items:
        target, _, value = item.partition("=")
        learner, _, param = target.partition(".")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        overrides.setdefault(learner, {})[param] = parsed
    return overrides


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", default=",".join(LEARNERS))
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (0 .. n-1)")
    parser.add_argument("--set", action="append", default=[], metavar="LEARNER.PARAM=VALUE")
    args = parser.parse_args(argv)
    learners = args.learners.split(",")
    datasets = args.datasets.split(",")
    for name in learners + datasets:
        if name not in LEARNERS and name not in DATASETS:
            parser.error(f"unknown learner or data set {name!r}")
    overrides = parse_overrides(args.set)
    warnings.filterwarnings("ignore", category=UserWarning)

    header = f"{'data set':<14} {'learner':<8} " + " ".join(f"{c:>15}" for c in COLUMNS)
    print(header)
    print("-" * len(header))
    for dataset in datasets:
        results: dict[str, dict[str, list[float]]] = {name: {} for name in learners}
        shape = None
        for seed in range(args.seeds):
            X, y = DATASETS[dataset](seed)
            shape = (X.shape, float(np.mean(y)))
            X_train, y_train, X_test, y_test = split(X, y, seed)
            for name in learners:
                try:
                    row = run_one(LEARNERS[name], overrides.get(name, {}),
                                  X_train, y_train, X_test, y_test, seed)  # fmt: skip
                except ValueError as error:  # the learner refuses this data set: a row of —
                    print(f"  {name} on {dataset}: {error}", file=sys.stderr)
                    row = {}
                for key, value in row.items():
                    results[name].setdefault(key, []).append(value)
        for name in learners:
            cells = []
            for column in COLUMNS:
                values = results[name].get(column)
                if not values:
                    cells.append(f"{'—':>15}")
                elif column == "seconds":
                    cells.append(f"{np.mean(values):>15.2f}")
                else:
                    cells.append(f"{np.mean(values):>8.4f}±{np.std(values):.4f}")
            print(f"{dataset:<14} {name:<8} " + " ".join(cells))
        (n_rows, n_cols), rate = shape
        print(f"{'':<14} ({n_rows} events, {n_cols} features, {rate:.1%} positive)")
    return 0


# ------------------------------------------------------------------- pAUC learners (issue 4)
def _batch(name, **params):
    """An aucstream batch solver (``fit`` only): the ceiling for the online learners."""
    return {"kind": "batch", "make": lambda seed, **extra: make_learner(
        name, random_state=seed, **{**params, **extra})}  # fmt: skip


LEARNERS.update({
    "pmb": _aucstream("pmb"),  # fit: 10 passes
    "pmb1": _aucstream("pmb", max_iter=1),  # fit: 1 pass (to compare with sopa1 / sopas1)
    "pmb2": _aucstream("pmb", passes=2),
    "ftrl": _aucstream("ftrl_pauc"),  # fit: 1 pass
    "ftrl0": _aucstream("ftrl_pauc", min_norm=0.0),  # without the minimum-norm safeguard
    "svm": _batch("svm_pauc"),  # pAUC(0, 0.1)
    "svm.02": _batch("svm_pauc", alpha=0.02, beta=0.05),  # tight surrogate on [0.02, 0.05]
})  # fmt: skip
try:  # LibAUC's linear pAUC learners, when the optional torch + libauc are installed
    from libauc_peers import available as _libauc_available
    from libauc_peers import peers as _libauc_peers
except ImportError:  # run as a module from elsewhere
    _libauc_available = None
if _libauc_available is not None and _libauc_available():
    LEARNERS.update(_libauc_peers())


# ------------------------------------------------------------------- baselines (issue 3)
# opauc refuses the 2^20-wide sparse set (full rank would need two 2^20 × 2^20 matrices, rank 8
# exceeds MAX_SKETCH_ENTRIES), so do oam's dense buffers; ``oam_sparse`` keeps buffered rows
# sparse (and refuses wide_dense, whose rows have 300 nonzeros).
LEARNERS.update({
    "oam": _aucstream("oam"),  # OAMseq
    "oam_gra": _aucstream("oam", variant="gra"),
    "oam_sparse": _aucstream("oam", max_nnz=64),  # rows of at most 64 nonzeros
    "opauc": _aucstream("opauc"),
    "adaoam": _aucstream("opauc", adaptive=True),
    "opauc_r8": _aucstream("opauc", rank=8),
})  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
