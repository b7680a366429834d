"""Compile every kernel ahead of the first request.

numba compiles a kernel on its first call (seconds per learner); with ``cache=True`` the
machine code is then written to disk (``NUMBA_CACHE_DIR``) and later processes load it in
milliseconds.  The Docker build runs :func:`compile_kernels` so containers start warm, and the
service's ``/readyz`` stays not-ready until it has run in the process.  Every group the service
can call is here -- the learners, the metrics and the regret window (whose hindsight solve took
25-43 s on the first ``/metrics`` when it was left out), and one fit of the tree embedding
(its libraries' import, about a second).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np

from core import metrics
from core.errors import InvalidParameter
from core.learners import available_learners, learner_class, make_learner
from core.regret import RegretWindow, learner_inputs
from core.tree_embedding import fit_tree
from core.validation import CSRMatrix


def _tiny_stream(n_features: int = 4, n_samples: int = 16):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_samples, n_features))
    y = np.tile(np.array([0, 1], dtype=np.int64), n_samples // 2)
    return X, y


def _as_csr(X: np.ndarray) -> CSRMatrix:
    rows, columns = np.nonzero(X)
    indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
    return CSRMatrix(indptr, columns.astype(np.int64), X[rows, columns], X.shape[1])


#: Parameters that select other kernels than the defaults' (found by listing the kernels a
#: warm-up left out of the cache): elastic-net SPAM, OAM's sparse buffers and its gradient
#: variant, OPAUC's low-rank sketch, AdaOAM.
VARIANTS: dict[str, list[dict]] = {
    "spam": [{"penalty": "elastic_net"}],
    "oam": [{"max_nnz": 4}, {"variant": "gra"}],
    "opauc": [{"rank": 2}, {"adaptive": True}, {"adaptive": True, "rank": 2}],
}

#: ``auto`` scores its candidates on a window only after enough events: learn this many rounds
AUTO_ROUNDS = 40


def _compile_learner(name: str, X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> float:
    started = time.perf_counter()
    cls = learner_class(name)
    layouts = [X, sparse] if cls.supports_sparse else [X]
    for params in [{}, *VARIANTS.get(name, [])]:
        for scaling in ("none", "unit_norm", "standard", "scale"):
            for batch in layouts:
                if scaling == "standard" and isinstance(batch, CSRMatrix):
                    continue
                try:
                    learner = make_learner(name, scaling=scaling, **params)
                except InvalidParameter:  # a combination refused at create time: never served
                    continue
                if cls.online:
                    learner.prequential_step(batch, y)
                    for _ in range(AUTO_ROUNDS if name == "auto" else 1):
                        learner.partial_fit(batch, y)
                else:
                    learner.fit(batch, y)
                learner.decision_function(batch)
                # the regret window reads the weights (computed by a kernel for some learners)
                getattr(learner, "coef_", None)
    return time.perf_counter() - started


def _compile_regret(X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> float:
    """The service's regret window: two rounds (dense and CSR inputs as a learner sees them)
    and the report with its hindsight solve, as ``GET /v1/models/{id}/metrics`` computes it."""
    started = time.perf_counter()
    learner = make_learner("spam", scaling="unit_norm")
    window = RegretWindow(64, X.shape[1])
    half = len(y) // 2
    rounds = ((X[:half], y[:half]), (sparse.take_rows(np.arange(half, len(y))), y[half:]))
    for batch, labels in rounds:
        weights = (
            np.array(learner.coef_, dtype=np.float64, copy=True)
            if learner.is_initialized
            else np.zeros(X.shape[1])
        )
        inputs = learner_inputs(learner, batch)
        scores = learner.prequential_step(batch, labels)
        window.update(inputs, labels, scores, weights)
    window.summary(0.0, 0.1)
    window.summary(0.02, 0.5)
    return time.perf_counter() - started


def _fit_tree() -> float:
    """One fit of the tree-path embedding (the third candidate of ``auto``'s default fits its
    tree on a model's first 2,000 labelled events): the first fit in a process imports
    scikit-learn's trees and imbalanced-learn's SMOTE, about a second, which belongs to the
    start and not to the request that brings some model's 2,000th event."""
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    y = np.where(np.arange(64) % 4 == 0, 1, -1)
    X = rng.normal(size=(64, 4)) + 0.5 * (y[:, None] > 0)
    fit_tree(X, y, max_depth=3, min_samples_leaf=2, embedding="full", smote=True,
             score_lam=0.01, random_state=0)  # fmt: skip
    return time.perf_counter() - started


def compile_kernels(
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, float]:
    """Run every learner (dense and, where supported, CSR input, every scaling), the metrics
    and the regret window once on a tiny stream, and fit a tree embedding once.  Returns the
    seconds each group took, by name; ``progress(name, seconds)`` is called as each group
    finishes (the service logs it)."""
    X, y = _tiny_stream()
    sparse = _as_csr(X)
    timings: dict[str, float] = {}

    def done(name: str, seconds: float) -> None:
        timings[name] = seconds
        if progress is not None:
            progress(name, seconds)

    with warnings.catch_warnings():
        # a 16-event stream is meant to exercise code paths, not to be learnable
        warnings.simplefilter("ignore")
        for name in available_learners():
            done(name, _compile_learner(name, X, sparse, y))
    started = time.perf_counter()
    scores = X[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics.auc(y, scores)
        metrics.pauc(y, scores, 0.0, 0.1)
        metrics.pauc(y, scores, 0.02, 0.5, standardized=True)
        metrics.roc_curve(y, scores)
        window = metrics.PrequentialWindow(8)
        window.update(scores, y)
        window.summary(0.0, 0.1)
    done("metrics", time.perf_counter() - started)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        done("regret", _compile_regret(X, sparse, y))
        done("tree", _fit_tree())
    return timings


if __name__ == "__main__":  # python -m core.warmup
    timings = compile_kernels(lambda name, seconds: print(f"{name:12s} {seconds:8.2f} s"))
    total = sum(timings.values())
    print(f"{'total':12s} {total:8.2f} s")
