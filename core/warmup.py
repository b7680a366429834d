"""Compile every kernel ahead of the first request, the default path first.

numba compiles a kernel on its first call (seconds per learner); with ``cache=True`` the
machine code is then written to disk (``NUMBA_CACHE_DIR``) and later processes load it in
milliseconds.  The Docker build runs :func:`compile_kernels` so containers start warm.

The kernels come in groups (:func:`kernel_groups`), in the order the service runs them: first
:data:`READY_GROUPS` -- the default path, i.e. what a model created over HTTP with no
parameters but its width runs (``auto``'s default tournament on dense events under the
``standard`` scaling ``"scaling": "auto"`` resolves to for them), the metrics and the regret
window (whose hindsight solve took 25-43 s on the first ``/metrics`` when it was left out) --
after which the service is ready; then the rest of the default path (the tournament of models
wider than ``WIDE_FEATURES``, and the ``scale`` scaling of sparse and hashed models), the tree
embedding (a grown tree's kernels, and the import of scikit-learn's trees and
imbalanced-learn's SMOTE that the first tree fit of a process pays), then every learner in its
dense and sparse forms under every scaling.  :class:`KernelReadiness` records which groups a
process has run and how long they took, for the service to refuse only the requests whose
kernels are not ready yet (:func:`groups_for` names them) and to tell how far the warm-up is
(:meth:`KernelReadiness.progress`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from core import metrics
from core._kernels._config import drop_stale_cache
from core._kernels.missing_means import fill_and_learn_means
from core.csr import CSRMatrix
from core.errors import InvalidParameter
from core.learners import available_learners, learner_class, make_learner
from core.learners._candidates import (
    BOOSTED_CANDIDATE,
    SINGLE_FIT_TREE_CANDIDATE,
    WIDE_FEATURES,
    default_candidates,
)
from core.learners.boosted_embedded import BoostedEmbedded
from core.learners.tree_embedded import TreeEmbedded
from core.metrics.calibration import OnlineCalibrator
from core.metrics.drift import DriftDetector
from core.regret import RegretWindow
from core.tree_embedding import fit_tree
from core.validation import FEATURE_BOUND

#: the group of the default path (see the module docstring)
DEFAULT_PATH = "default"
#: the groups after which the service answers: the default path, the metrics, the regret window
READY_GROUPS = (DEFAULT_PATH, "metrics", "regret")
#: the rest of the default path, first after ready: the wide tournament, the ``scale`` scaling
DEFAULT_REST = "default_wide_sparse"
#: the group of a grown tree embedding (its kernels, and its libraries' import)
TREE = "tree"
#: the learners the default path runs: ``auto``, its default candidates (narrow and wide
#: tournaments, the fast candidate of ``track_drift``) and the tree candidate's inner learner
DEFAULT_PATH_LEARNERS = frozenset(
    {"auto", "logistic", "ftrl_pauc", "boosted_embedded", "tree_embedded", "pmb"}
)
#: the learners of the default path only the wide tournament runs (:data:`DEFAULT_REST`)
WIDE_PATH_LEARNERS = frozenset({"pmb"})
#: the scalings ``"scaling": "auto"`` resolves to (dense; sparse and hashed models)
DEFAULT_SCALINGS = frozenset({"standard", "scale"})


def _tiny_stream(n_features: int = 4, n_samples: int = 16):
    """Events whose positives lie apart from the negatives: a learnable stream, so that the
    batch solvers (``svm_pauc``, the regret window's hindsight solve) find a ranking instead of
    warning that ``w = 0`` minimises their surrogate, as they rightly do on pure noise."""
    rng = np.random.default_rng(0)
    y = np.tile(np.array([0, 1], dtype=np.int64), n_samples // 2)
    X = rng.normal(size=(n_samples, n_features)) + 1.5 * y[:, None]
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


def _exercise(learner: Any, batch: np.ndarray | CSRMatrix, y: np.ndarray, rounds: int) -> None:
    """What the service does with a learner: learn (prequentially, then ``rounds`` batches),
    score, and read the weights (the regret window does; a kernel computes them for some)."""
    if type(learner).online:
        learner.prequential_step(batch, y)
        for _ in range(rounds):
            learner.partial_fit(batch, y)
    else:
        learner.fit(batch, y)
    learner.decision_function(batch)
    getattr(learner, "coef_", None)


def _compile_learner(name: str, X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> None:
    cls = learner_class(name)
    layouts: list[np.ndarray | CSRMatrix] = [X, sparse] if cls.supports_sparse else [X]
    for params in [{}, *VARIANTS.get(name, [])]:
        for scaling in ("none", "unit_norm", "standard", "scale"):
            for batch in layouts:
                if scaling == "standard" and isinstance(batch, CSRMatrix):
                    continue
                try:
                    learner = make_learner(name, scaling=scaling, **params)
                except InvalidParameter:  # a combination refused at create time: never served
                    continue
                _exercise(learner, batch, y, AUTO_ROUNDS if name == "auto" else 1)


def _compile_default_path(X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> None:
    """``auto`` as a model created over HTTP with no parameters but its width runs it (drift
    tracking on, dense events, the ``standard`` scaling ``"auto"`` resolves to for them): the
    default tournament of a model no wider than ``WIDE_FEATURES``.  Two thirds of what the
    whole default path used to compile before ready."""
    _exercise_auto([(None, "standard", X)], y)


def _compile_default_rest(X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> None:
    """The rest of the default path: the tournament of models wider than ``WIDE_FEATURES``,
    and the ``scale`` scaling of sparse and hashed models (on CSR and dense events)."""
    wide = list(default_candidates(WIDE_FEATURES + 1, track_drift=True))
    _exercise_auto(
        [(None, "scale", sparse), (None, "scale", X), (wide, "standard", X),
         (wide, "scale", sparse), (wide, "scale", X)],
        y,
    )  # fmt: skip


def _exercise_auto(
    runs: list[tuple[list | None, str, np.ndarray | CSRMatrix]], y: np.ndarray
) -> None:
    """``auto`` with drift tracking, for each ``(candidates, scaling, events)`` of ``runs``
    (None: the default tournament of the events' width)."""
    for candidates, scaling, batch in runs:
        chosen = candidates or list(default_candidates(batch.shape[1], track_drift=True))
        learner = make_learner("auto", candidates=_without_fits(chosen), track_drift=True,
                               scaling=scaling)  # fmt: skip
        _exercise(learner, batch, y, AUTO_ROUNDS)


def _without_fits(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``candidates`` with the boosted one's first fit past the warm-up's events: the fits
    (the growth kernel's first call) belong to the tree group, the other kernels are the same."""
    return [
        {**spec, "params": {**spec["params"], "first_fit": _buffer_size(spec)}}
        if spec["learner"] == BoostedEmbedded.name
        else spec
        for spec in candidates
    ]


def _buffer_size(spec: dict[str, Any]) -> int:
    """A boosted candidate's buffer size: its first fit's largest count."""
    return int(spec["params"].get("buffer_size", BoostedEmbedded().buffer_size))


def _compile_metrics(X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> None:
    """The exact AUC / pAUC, the ROC, the metrics window, the drift detector, the
    calibrator, and the running means that fill a model's missing values."""
    scores = X[:, 0]
    with_missing = X.copy()
    with_missing[1, 0] = np.nan
    counts = np.zeros(X.shape[1], dtype=np.int64)
    fill_and_learn_means(with_missing, np.zeros(X.shape[1]), counts, FEATURE_BOUND)
    metrics.auc(y, scores)
    metrics.pauc(y, scores, 0.0, 0.1)
    metrics.pauc(y, scores, 0.02, 0.5, standardized=True)
    metrics.roc_curve(y, scores)
    window = metrics.PrequentialWindow(8)
    window.update(scores, y)
    window.summary(0.0, 0.1)
    DriftDetector().update(scores, y)
    calibrator = OnlineCalibrator()
    calibrator.update(scores, y)
    calibrator.probabilities(scores)


def _compile_regret(X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> None:
    """The service's regret window: two rounds recorded as the service records them (the
    weights served before the round, the rows its kernel learned) and the report with its
    hindsight solve, as ``GET /v1/models/{id}/metrics`` computes it.  The window's kernels see
    dense rows whatever the learner (CSR rows are densified first), so the rounds come from
    the default path's learner, whose kernels are loaded by now: another learner would compile
    its own kernels before ready (``spam``'s took a third of this group)."""
    learner = make_learner("auto", track_drift=True, scaling="standard")
    learner.initialize(X.shape[1])
    window = RegretWindow(64, X.shape[1])
    half = len(y) // 2
    for batch, labels in ((X[:half], y[:half]), (X[half:], y[half:])):
        weights = np.array(learner.coef_, dtype=np.float64)
        with learner.recording_inputs() as inputs:
            scores = learner.prequential_step(batch, labels)
        window.update(np.array(inputs[0]), labels, scores, weights)
    window.summary(0.0, 0.1)
    window.summary(0.02, 0.5)


def _compile_tree(X: np.ndarray, sparse: CSRMatrix, y: np.ndarray) -> None:
    """Grown trees, as the default tournament's tree candidates grow them: the tree embedding
    (models of 250 to 1,000 features) and the boosted ensemble (narrower ones).  Their fits'
    first calls in a process import scikit-learn and imbalanced-learn, seconds that belong to
    the start and not to the request that brings some model's fit; then the kernels that embed
    events in the grown trees."""
    _fit_tree()
    tree_params = dict(SINGLE_FIT_TREE_CANDIDATE["params"])
    tree_params.update(n_fit_events=len(y), refit_events=2 * len(y), min_samples_leaf=2)
    boosted_params = dict(BOOSTED_CANDIDATE["params"])
    # fit_delay 0: the fit lands where it falls due, inside these few events
    boosted_params.update(first_fit=len(y), buffer_size=len(y), n_trees=2, max_leaves=3,
                          min_samples_leaf=2, fit_delay=0)  # fmt: skip
    for batch in (X, sparse):
        learner = make_learner("tree_embedded", scaling="none", **tree_params)
        _exercise(learner, batch, y, 2)
        boosted = BoostedEmbedded(scaling="none", **boosted_params)
        _exercise(boosted, batch, y, 2)


def _fit_tree() -> None:
    """One fit of the tree-path embedding, with SMOTE (the tree candidates' default)."""
    rng = np.random.default_rng(0)
    y = np.where(np.arange(64) % 4 == 0, 1, -1)
    X = rng.normal(size=(64, 4)) + 0.5 * (y[:, None] > 0)
    fit_tree(X, y, max_depth=3, min_samples_leaf=2, embedding="full", smote=True,
             score_lam=0.01, random_state=0)  # fmt: skip


_SPECIAL_GROUPS: dict[str, Callable[[np.ndarray, CSRMatrix, np.ndarray], None]] = {
    DEFAULT_PATH: _compile_default_path,
    DEFAULT_REST: _compile_default_rest,
    "metrics": _compile_metrics,
    "regret": _compile_regret,
    TREE: _compile_tree,
}


def kernel_groups() -> list[str]:
    """Every group, in the order the service runs them: :data:`READY_GROUPS`, the rest of the
    default path, the tree, the learners of the default path (each under every scaling), then
    the other learners."""
    learners = available_learners()
    first = [name for name in learners if name in DEFAULT_PATH_LEARNERS]
    rest = [name for name in learners if name not in DEFAULT_PATH_LEARNERS]
    return [*READY_GROUPS, DEFAULT_REST, TREE, *first, *rest]


def compile_group(name: str) -> float:
    """Compile (or load from the cache) the kernels of group ``name``; returns the seconds."""
    started = time.perf_counter()
    X, y = _tiny_stream()
    sparse = _as_csr(X)
    _SPECIAL_GROUPS.get(name, lambda *batch: _compile_learner(name, *batch))(X, sparse, y)
    return time.perf_counter() - started


def compile_kernels(
    progress: Callable[[str, float], None] | None = None,
    groups: Iterable[str] | None = None,
) -> dict[str, float]:
    """Run every group of :func:`kernel_groups` (or ``groups``) once on a tiny stream.  Returns
    the seconds each group took, by name; ``progress(name, seconds)`` is called as each group
    finishes."""
    drop_stale_cache()
    timings: dict[str, float] = {}
    for name in kernel_groups() if groups is None else groups:
        timings[name] = compile_group(name)
        if progress is not None:
            progress(name, timings[name])
    return timings


def _learners_in(learner: str, params: Mapping[str, Any]) -> set[str]:
    """``learner`` and the learners it composes: ``auto``'s candidates, ``tree_embedded``'s
    and ``boosted_embedded``'s inner learner (recursively; malformed entries are left to the
    learner's own checks)."""
    names = {learner}
    if learner == "auto" and isinstance(params.get("candidates"), list | tuple):
        for spec in params["candidates"]:
            if isinstance(spec, Mapping) and isinstance(spec.get("learner"), str):
                own = spec.get("params")
                names |= _learners_in(spec["learner"], own if isinstance(own, Mapping) else {})
    if learner in ("tree_embedded", "boosted_embedded"):
        wrapper = TreeEmbedded if learner == "tree_embedded" else BoostedEmbedded
        inner = params.get("learner", wrapper.learner)
        own = params.get("params")
        if isinstance(inner, str):
            names |= _learners_in(inner, own if isinstance(own, Mapping) else {})
    return names


def groups_for(
    learner: str, params: Mapping[str, Any], scaling: str, n_features: int | None = None
) -> list[str]:
    """The groups a model of ``learner`` with ``params``, ``scaling`` and ``n_features``
    needs: for an ``auto`` model whose learners are those of the default tournaments at a
    default scaling, the default path, and its rest unless the model is a dense one
    (``standard``) no wider than ``WIDE_FEATURES``; else each learner's own group (every
    scaling, the parameter variants).  The metrics and the regret window are ready before any
    model is served.  A tree candidate grows its tree only after 2,000 events: the tree group
    is not waited for (it runs early after the start)."""
    names = _learners_in(learner, params)
    if learner == "auto" and scaling in DEFAULT_SCALINGS and names <= DEFAULT_PATH_LEARNERS:
        narrow = n_features is not None and n_features <= WIDE_FEATURES
        narrow = narrow and not names & WIDE_PATH_LEARNERS
        return [DEFAULT_PATH] if scaling == "standard" and narrow else [DEFAULT_PATH, DEFAULT_REST]
    return sorted(names)


#: [CHOICE] CPU seconds each group took to compile with an empty cache on one core of the
#: 2-core development machine (loadtest/README.md, "Start-up"): what the warm-up's estimate of
#: the time left is scaled from.  Only their ratios matter; a group not listed counts
#: :data:`TYPICAL_GROUP_SECONDS`.
GROUP_CPU_SECONDS: dict[str, float] = {
    DEFAULT_PATH: 35.0, "metrics": 2.0, "regret": 14.0, DEFAULT_REST: 17.0, TREE: 5.0,
    "auto": 0.7, "boosted_embedded": 0.1, "ftrl_pauc": 0.3, "logistic": 0.1, "pmb": 0.1,
    "tree_embedded": 7.0, "oam": 11.5, "opauc": 67.0, "poise": 0.1, "solam": 7.0, "spam": 8.0,
    "spdam": 7.5, "svm_pauc": 0.1,
}  # fmt: skip
#: the CPU seconds of a group :data:`GROUP_CPU_SECONDS` does not list
TYPICAL_GROUP_SECONDS = 5.0


def group_cost(name: str) -> float:
    """The relative cost of compiling group ``name`` (:data:`GROUP_CPU_SECONDS`)."""
    return GROUP_CPU_SECONDS.get(name, TYPICAL_GROUP_SECONDS)


class KernelReadiness:
    """Which groups of kernels a process still has to compile or load while its warm-up runs
    them one by one (:meth:`plan`, :meth:`next_group`, :meth:`finished`); a process that plans
    none has every group ready.  :meth:`missing` tells a request whether the groups it needs
    are ready, and moves those that are not to the front of the queue; :meth:`progress` tells
    how far the warm-up is.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[str] = []
        self._done: set[str] = set()
        #: the group being compiled, None when none is
        self.compiling: str | None = None
        self.total = 0
        self._started = time.monotonic()
        self._group_started = self._started
        #: seconds each group of the plan took, by name, as they finish
        self.seconds: dict[str, float] = {}

    def plan(self, groups: Iterable[str]) -> None:
        """Groups to run, in order (those already run by this process are left out)."""
        with self._lock:
            self._queue = [name for name in groups if name not in self._done]
            self.total = len(self._queue)
            self._started = time.monotonic()
            self.seconds = {}

    def next_group(self) -> str | None:
        """The next group to run (now :attr:`compiling`); None when all are done."""
        with self._lock:
            self.compiling = self._queue.pop(0) if self._queue else None
            self._group_started = time.monotonic()
            return self.compiling

    def finished(self, name: str) -> None:
        """``name`` has run (or failed: its kernels then compile on first use)."""
        with self._lock:
            self._done.add(name)
            if self.compiling == name:
                self.seconds[name] = time.monotonic() - self._group_started
                self.compiling = None

    def abandon(self) -> None:
        """The warm-up ended before its plan did (it failed): the groups left are no longer
        waited for, and their kernels compile on first use."""
        with self._lock:
            self._done.update(self._queue)
            self._queue = []
            self.compiling = None

    @property
    def done(self) -> int:
        """How many of the planned groups have run."""
        with self._lock:
            return self.total - len(self._queue) - (self.compiling is not None)

    def missing(self, groups: Iterable[str]) -> list[str]:
        """Those of ``groups`` not ready yet; they are moved to the front of the queue, so a
        request that needs them waits for them alone."""
        if not self._queue and self.compiling is None:  # the usual case: one attribute read
            return []
        with self._lock:
            missing = [name for name in groups if name in self._queue or name == self.compiling]
            queued = [name for name in missing if name in self._queue]
            self._queue = queued + [name for name in self._queue if name not in queued]
            return missing

    def progress(self, ready_groups: Iterable[str] = READY_GROUPS) -> dict[str, Any]:
        """How far the warm-up is: groups done of the total, the group compiling, the seconds
        so far, and estimates of the seconds left until ``ready_groups`` have run (0 once they
        have) and until every group has.  An estimate is the typical cost of the groups still
        to run (:data:`GROUP_CPU_SECONDS`) scaled by how long the groups done took against
        their typical cost -- a warm cache or a fast machine shortens it, a busy one
        lengthens it, as does a group running past its share -- and before any group is done,
        by the typical costs as they are."""
        with self._lock:
            now = time.monotonic()
            pending = ([self.compiling] if self.compiling else []) + self._queue
            typical_done = sum(group_cost(name) for name in self.seconds)
            seconds_done = sum(self.seconds.values())
            scale = seconds_done / typical_done if typical_done > 0 else 1.0
            in_progress = now - self._group_started if self.compiling else 0.0
            if self.compiling:  # a group taking longer than its share: slower than thought
                scale = max(
                    scale,
                    (seconds_done + in_progress) / (typical_done + group_cost(self.compiling)),
                )
            lefts = []
            for name in pending:
                left = group_cost(name) * scale
                lefts.append(max(left - in_progress, 0.0) if name == self.compiling else left)
            wanted = set(ready_groups)
            last_wanted = max((i for i, name in enumerate(pending) if name in wanted), default=-1)
            elapsed = now - self._started if self.total else 0.0
            return {
                "groups_done": self.total - len(pending),
                "groups_total": self.total,
                "compiling": self.compiling,
                "elapsed_seconds": round(elapsed, 1),
                "seconds_to_ready": round(sum(lefts[: last_wanted + 1]), 1),
                "seconds_to_all": round(sum(lefts), 1),
            }


#: the kernel groups of this process (numba's compiled kernels are per process)
readiness = KernelReadiness()


if __name__ == "__main__":  # python -m core.warmup
    timings = compile_kernels(lambda name, seconds: print(f"{name:14s} {seconds:8.2f} s"))
    total = sum(timings.values())
    print(f"{'total':14s} {total:8.2f} s")
