"""Compile every kernel ahead of the first request.

numba compiles a kernel on its first call (seconds per learner); with ``cache=True`` the
machine code is then written to disk (``NUMBA_CACHE_DIR``) and later processes load it in
milliseconds.  The Docker build runs :func:`compile_kernels` so containers start warm, and the
service's ``/readyz`` stays not-ready until it has run in the process.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from core import metrics
from core.learners import available_learners, learner_class, make_learner
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


def _compile_learner(name: str, X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> float:
    started = time.perf_counter()
    cls = learner_class(name)
    layouts = [X, sparse] if cls.supports_sparse else [X]
    for scaling in ("none", "unit_norm", "standard", "scale"):
        for batch in layouts:
            if scaling == "standard" and isinstance(batch, CSRMatrix):
                continue
            learner = make_learner(name, scaling=scaling)
            if cls.online:
                learner.prequential_step(batch, y)
                learner.partial_fit(batch, y)
            else:
                learner.fit(batch, y)
            learner.decision_function(batch)
    return time.perf_counter() - started


def compile_kernels() -> dict[str, float]:
    """Run every learner (dense and, where supported, CSR input, every scaling) and the metrics
    once on a tiny stream.  Returns the seconds each took, by name."""
    X, y = _tiny_stream()
    sparse = _as_csr(X)
    timings: dict[str, float] = {}
    with warnings.catch_warnings():
        # a 16-event stream is meant to exercise code paths, not to be learnable
        warnings.simplefilter("ignore")
        for name in available_learners():
            timings[name] = _compile_learner(name, X, sparse, y)
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
    timings["metrics"] = time.perf_counter() - started
    return timings


if __name__ == "__main__":  # python -m core.warmup
    for name, seconds in compile_kernels().items():
        print(f"{name:12s} {seconds:8.2f} s")
