"""Kernel throughput: steady-state events per second of each learner on one core.

Not a test: prints one table.  Usage::

    python bench/kernels.py                      # every case, best of 30 repeats
    python bench/kernels.py --cases spam-dense50,solam-csr --repeats 3

Method:

* ``NUMBA_NUM_THREADS=1`` (and ``OPENBLAS_NUM_THREADS=1`` unless set) and a fresh, private
  ``NUMBA_CACHE_DIR`` are set before numba is imported, so the "compile" column is the real JIT
  time of the first call (a tiny batch), kept apart from the steady state.
* steady state: the learner learns the same batch of ``--events`` events repeatedly (its state
  keeps evolving); each repeat is timed and the best is reported, because the machine is shared
  (many short repeats catch the quiet moments that one long run averages away).
* ``kernel``: one ``_learn`` call on an already validated batch (what one kernel call costs per
  event); ``kernel+scores`` also writes the prequential scores; ``partial_fit`` adds the
  once-per-batch validation and coercion of the public path.

To add a case, add one entry to ``CASES`` below.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"
# one core: the BLAS calls inside kernels (opauc's sketch) must not start OpenBLAS threads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="aucstream-bench-jit-"))

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.csr import CSRMatrix
from core.learners import make_learner  # noqa: E402
from core.validation import check_batch  # noqa: E402


def dense_events(n_events, n_features, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n_events) < 0.3).astype(np.int64)
    X = rng.normal(size=(n_events, n_features)) + 0.5 * y[:, None]
    return X, y


def csr_events(n_events, n_features, nnz, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n_events) < 0.3).astype(np.int64)
    indices = np.sort(rng.integers(0, n_features, size=(n_events, nnz)), axis=1)
    indices = np.ascontiguousarray(indices.ravel(), dtype=np.int64)
    data = rng.normal(size=n_events * nnz) + 0.5
    indptr = np.arange(0, n_events * nnz + 1, nnz, dtype=np.int64)
    # duplicated columns inside a row are rejected by validation: nudge them apart
    flat = indices.reshape(n_events, nnz)
    for row in flat:
        for k in range(1, nnz):
            if row[k] <= row[k - 1]:
                row[k] = row[k - 1] + 1
    indices = np.minimum(flat.ravel(), n_features - 1)
    for row in indices.reshape(n_events, nnz):  # the clamp may collide at the top: rare, fix
        for k in range(nnz - 2, -1, -1):
            if row[k] >= row[k + 1]:
                row[k] = row[k + 1] - 1
    return CSRMatrix(indptr, indices, data, n_features), y


def zipf_csr_events(n_events, n_features, nnz, seed=0, exponent=1.1):
    """Columns drawn from a Zipf law (hashed tokens: a few frequent, a long tail), scrambled
    over the 2**20 columns; the frequent columns stay in cache, as in real hashed streams."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n_events) < 0.3).astype(np.int64)
    scramble = rng.permutation(n_features)
    rows = np.empty((n_events, nnz), dtype=np.int64)
    drawn = scramble[(np.minimum(rng.zipf(exponent, size=(n_events, 2 * nnz)), n_features) - 1)]
    for i in range(n_events):
        unique = np.unique(drawn[i])
        if unique.size < nnz:
            unique = np.union1d(unique, rng.choice(n_features, nnz, replace=False))
        rows[i] = np.sort(unique[:nnz])
    data = rng.normal(size=n_events * nnz) + 0.5
    indptr = np.arange(0, n_events * nnz + 1, nnz, dtype=np.int64)
    return CSRMatrix(indptr, rows.ravel(), data, n_features), y


# name -> learner, its parameters, the batch (callable(n_events)) and the target in events/s
CASES = {
    "spam-dense50": dict(learner="spam", params={}, data=lambda n: dense_events(n, 50),
                         target=10e6),
    "solam-dense50": dict(learner="solam", params={}, data=lambda n: dense_events(n, 50),
                          target=5e6),
    # columns uniform over 2**20: every access misses the cache (the worst case)
    "spam-csr": dict(learner="spam", params={}, data=lambda n: csr_events(n, 2**20, 20),
                     target=2e6),
    "solam-csr": dict(learner="solam", params={}, data=lambda n: csr_events(n, 2**20, 20),
                      target=2e6),
    "spam-csr-zipf": dict(learner="spam", params={},
                          data=lambda n: zipf_csr_events(n, 2**20, 20), target=None),
    "solam-csr-zipf": dict(learner="solam", params={},
                           data=lambda n: zipf_csr_events(n, 2**20, 20), target=None),
    "spam-net-dense50": dict(learner="spam", params={"penalty": "elastic_net"},
                             data=lambda n: dense_events(n, 50), target=None),
    "spam-dense50-last": dict(learner="spam", params={"average": False},
                              data=lambda n: dense_events(n, 50), target=None),
}  # fmt: skip

# the pairwise baselines: OAM (buffers of 100 per class) and OPAUC.  The rank-8 cases cap their
# batch at 4,000 events (a 10,000-wide dense row is 80 KB); their figures: bench/README.md,
# "OPAUC's low-rank sketch".
CASES.update({
    "oam-seq-dense50": dict(learner="oam", params={"variant": "seq"},
                            data=lambda n: dense_events(n, 50), target=3e5),
    "oam-gra-dense50": dict(learner="oam", params={"variant": "gra"},
                            data=lambda n: dense_events(n, 50), target=3e5),
    "oam-seq-csr": dict(learner="oam", params={"max_nnz": 20},
                        data=lambda n: csr_events(n, 2**20, 20), target=None),
    "opauc-dense50": dict(learner="opauc", params={}, data=lambda n: dense_events(n, 50),
                          target=5e5),
    "adaoam-dense50": dict(learner="opauc", params={"adaptive": True},
                           data=lambda n: dense_events(n, 50), target=None),
    "opauc-r8-dense10k": dict(learner="opauc", params={"rank": 8},
                              data=lambda n: dense_events(min(n, 4000), 10_000), target=5e4),
    "opauc-r8-csr10k": dict(learner="opauc", params={"rank": 8},
                            data=lambda n: csr_events(min(n, 4000), 10_000, 50), target=5e4),
})  # fmt: skip

# the pAUC learners with their defaults and without the all-pairs term (auc_weight=0: Kar et
# al.'s objective and POISE's game; docs/algorithms/poise.md (poise.14))
CASES.update({
    "pmb-dense50": dict(learner="pmb", params={}, data=lambda n: dense_events(n, 50),
                        target=None),
    "pmb-dense50-auc0": dict(learner="pmb", params={"auc_weight": 0.0},
                             data=lambda n: dense_events(n, 50), target=None),
    "ftrl-pauc-dense50": dict(learner="ftrl_pauc", params={},
                              data=lambda n: dense_events(n, 50), target=None),
    "ftrl-pauc-dense50-auc0": dict(learner="ftrl_pauc", params={"auc_weight": 0.0},
                                   data=lambda n: dense_events(n, 50), target=None),
    "poise-dense50": dict(learner="poise", params={}, data=lambda n: dense_events(n, 50),
                          target=None),
    "poise-dense50-auc0": dict(learner="poise", params={"auc_weight": 0.0},
                               data=lambda n: dense_events(n, 50), target=None),
})  # fmt: skip


# logistic's FTRL solver (the dense and CSR kernels share one per-event helper), plain and with
# every option that adds work per event (forgetting, the base-rate offset)
CASES.update({
    "logistic-ftrl-dense50": dict(learner="logistic", params={"solver": "ftrl"},
                                  data=lambda n: dense_events(n, 50), target=None),
    "logistic-ftrl-csr": dict(learner="logistic", params={"solver": "ftrl"},
                              data=lambda n: csr_events(n, 2**20, 20), target=None),
    "logistic-ftrl-forget-dense50": dict(
        learner="logistic", params={"solver": "ftrl", "half_life": 1000.0,
                                    "base_rate_offset": True},
        data=lambda n: dense_events(n, 50), target=None),
    "logistic-ftrl-forget-csr": dict(
        learner="logistic", params={"solver": "ftrl", "half_life": 1000.0,
                                    "base_rate_offset": True},
        data=lambda n: csr_events(n, 2**20, 20), target=None),
})  # fmt: skip


def best_rate(function, n_events, repeats):
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return n_events / best


def measure(case, n_events, repeats):
    X, y = case["data"](n_events)
    n_events = len(y)  # a case may cap its batch (wide rows)
    X, labels = check_batch(X, y)
    learner = make_learner(case["learner"], **case["params"])
    learner.initialize(X.shape[1])
    tiny = X.take_rows(np.arange(4)) if isinstance(X, CSRMatrix) else X[:4]
    started = time.perf_counter()
    learner.prequential_step(tiny, labels[:4])  # compiles the learning kernel (and scores)
    compile_seconds = time.perf_counter() - started
    learner.decision_function(tiny)
    no_scores = np.empty(0)
    scores = np.empty(n_events)
    # warm the caches once, then time
    learner._learn(X, labels, no_scores)
    kernel = best_rate(lambda: learner._learn(X, labels, no_scores), n_events, repeats)
    with_scores = best_rate(lambda: learner._learn(X, labels, scores), n_events, repeats)
    public = best_rate(lambda: learner.partial_fit(X, labels), n_events, repeats)
    assert np.isfinite(learner.coef_).all()
    return compile_seconds, kernel, with_scores, public


def chosen_cases(parser: argparse.ArgumentParser, text: str, cases) -> list[str]:
    """The comma-separated case names of ``--cases``; an unknown one is a usage error."""
    names = text.split(",")
    for name in names:
        if name not in cases:
            parser.error(f"unknown case {name!r}; available: {', '.join(cases)}")
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    names = chosen_cases(parser, args.cases, CASES)
    import platform

    import numba

    machine = platform.processor() or platform.machine()
    print(
        f"numba {numba.__version__}, numpy {np.__version__}, {machine}, "
        f"NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']}, "
        f"{args.events} events per batch, best of {args.repeats}"
    )
    header = (
        f"{'case':<28} {'compile s':>10} {'kernel ev/s':>13} {'kernel+scores':>14} "
        f"{'partial_fit':>13} {'target':>10}  met"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        case = CASES[name]
        compile_seconds, kernel, with_scores, public = measure(case, args.events, args.repeats)
        target = case["target"]
        met = "" if target is None else ("yes" if kernel >= target else "NO")
        target_text = "—" if target is None else f"{target / 1e6:g}M"
        rates = f"{kernel / 1e6:>12.2f}M {with_scores / 1e6:>13.2f}M {public / 1e6:>12.2f}M"
        print(f"{name:<28} {compile_seconds:>10.2f} {rates} {target_text:>10}  {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
