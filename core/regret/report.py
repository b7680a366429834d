"""Regret of an online pAUC learner on a window of events (definitions: :mod:`core.regret`):
the prefix surrogate, the online penalties of the rounds, the comparator and the report."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from core._kernels.pauc_surrogate import tight_pauc_coefficients
from core._kernels.regret import round_penalties
from core.learners.svm_pauc import range_counts, solve_svm_pauc
from core.metrics import pauc
from core.validation import check_batch

__all__ = ["RegretReport", "online_penalties", "prefix_loss", "regret", "replay"]


def prefix_loss(X: np.ndarray, y: np.ndarray, w: np.ndarray, alpha=0.0, beta=0.1) -> float:
    """``l(x_{1:t}, w)``: the unnormalised pAUC surrogate of a set (0 with one class only).

    >>> X = np.array([[2.0], [0.0], [1.5], [-1.0]]); y = np.array([1, 1, -1, -1])
    >>> prefix_loss(X, y, np.array([1.0]), beta=0.5)  # hinge(2 - 1.5) + hinge(0 - 1.5)
    3.0
    """
    positive = y > 0
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.0
    scores = X @ w
    j_alpha, j_beta = range_counts(alpha, beta, n_neg)
    value, _ = tight_pauc_coefficients(
        np.ascontiguousarray(scores[positive]), np.ascontiguousarray(scores[~positive]),
        j_alpha, j_beta, np.empty(n_pos), np.empty(n_neg),
    )  # fmt: skip
    return float(value)


#: scores computed per block of rounds in online_penalties (float64 cells: 16 MB)
_PENALTY_BLOCK_CELLS = 1 << 21


def online_penalties(X, y, ends, weights, alpha=0.0, beta=0.1) -> np.ndarray:
    """``L_b(w_b)`` for rounds ending (exclusive) at ``ends`` (increasing, last = T), each
    served by ``weights[b]`` (Kar et al. eq. (6), batched form §3.2).

    One kernel call (:func:`core._kernels.regret.round_penalties`); equal to
    ``prefix_loss(X[:e_b], y[:e_b], w_b) - prefix_loss(X[:e_{b-1}], y[:e_{b-1}], w_b)`` up to
    rounding (the kernel scores with its own dot products, not BLAS).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    labels = np.ascontiguousarray(np.where(np.asarray(y) > 0, 1, -1), dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    W = np.ascontiguousarray(np.reshape(weights, (len(ends), X.shape[1])), dtype=np.float64)
    penalties = np.empty(len(ends))
    # scores of every round's weights on its prefix: one BLAS product per block of rounds
    block = max(1, _PENALTY_BLOCK_CELLS // max(1, X.shape[0]))
    for first in range(0, len(ends), block):
        last = min(len(ends), first + block)
        prefix = int(ends[last - 1])
        scores = np.ascontiguousarray(W[first:last] @ X[:prefix].T)
        start = int(ends[first - 1]) if first else 0
        round_penalties(
            scores, labels, start, ends[first:last], float(alpha), float(beta),
            penalties[first:last],
        )  # fmt: skip
    return penalties


@dataclass
class RegretReport:
    n_events: int
    online_loss: float  # sum_b L_b(w_b) / (T_+ (j_beta - j_alpha))
    hindsight_loss: float  # l(x_{1:T}, w*) / (T_+ (j_beta - j_alpha))
    regret: float  # online_loss - hindsight_loss (Theorem 3 normalisation)
    regret_per_event: float  # (sum_b L_b(w_b) - l(x_{1:T}, w*)) / T (the paper's R(T))
    prequential_pauc: float
    hindsight_pauc: float
    pauc_gap: float  # hindsight_pauc - prequential_pauc
    w_hindsight: np.ndarray
    rounds: int = 0  # number of rounds (served weight vectors) in the window
    hindsight_converged: bool = True  # the comparator's solver met its tolerance
    solve_seconds: float = 0.0  # wall time of the whole report (penalties + comparator solve)
    reason: str | None = None  # why the numbers are NaN (RegretWindow.report only)


def regret(X, y, ends, weights, scores, *, alpha=0.0, beta=0.1, C=10.0, tol=1e-3) -> RegretReport:
    """Regret and pAUC gap of an online learner on the window ``(X, y)``; see the module
    docstring.  ``ends``/``weights``: the rounds and the served weights (:func:`replay` records
    them); ``scores``: the prequential score of every event.

    >>> rng = np.random.default_rng(0)
    >>> y = np.where(rng.random(400) < 0.3, 1, -1)
    >>> X = rng.normal(size=(400, 3)) + (y[:, None] > 0) * np.array([2.0, 0.0, 0.0])
    >>> report = regret(X, y, [400], [np.zeros(3)], np.zeros(400))  # never learned anything
    >>> report.online_loss  # every pair at margin 0: hinge 1
    1.0
    >>> round(report.hindsight_loss, 3), round(report.regret, 3)
    (0.866, 0.134)
    >>> report.prequential_pauc, round(report.hindsight_pauc, 3)  # tied scores: the diagonal
    (0.05, 0.592)
    """
    X, y = check_batch(X, y, accept_sparse=False)
    ends = np.asarray(ends, dtype=np.int64)
    if len(ends) == 0 or ends[-1] != len(y) or np.any(np.diff(ends) <= 0) or ends[0] <= 0:
        raise ValueError(f"ends must increase strictly and finish at {len(y)}, got {ends!r}")
    if len(weights) != len(ends):
        raise ValueError(f"got {len(weights)} weight vectors for {len(ends)} rounds")
    scores = np.asarray(scores, dtype=float)
    if scores.shape != y.shape:
        raise ValueError(f"got {scores.shape[0]} scores for {len(y)} events")
    n_pos, n_neg = int((y > 0).sum()), int((y < 0).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"regret needs both classes in the window; got {n_pos} and {n_neg}")
    j_alpha, j_beta = range_counts(alpha, beta, n_neg)
    pairs = n_pos * (j_beta - j_alpha)
    started = time.perf_counter()
    online = float(online_penalties(X, y, ends, weights, alpha, beta).sum())
    solution = solve_svm_pauc(X, y, alpha=alpha, beta=beta, C=C, tol=tol)
    best = solution.w
    hindsight = prefix_loss(X, y, best, alpha, beta)
    prequential_pauc = pauc(y, scores, alpha, beta)
    hindsight_pauc = pauc(y, X @ best, alpha, beta)
    return RegretReport(
        n_events=len(y),
        online_loss=online / pairs,
        hindsight_loss=hindsight / pairs,
        regret=(online - hindsight) / pairs,
        regret_per_event=(online - hindsight) / len(y),
        prequential_pauc=prequential_pauc,
        hindsight_pauc=hindsight_pauc,
        pauc_gap=hindsight_pauc - prequential_pauc,
        w_hindsight=best,
        rounds=len(ends),
        hindsight_converged=bool(solution.converged),
        solve_seconds=time.perf_counter() - started,
    )


def replay(learner, X, y, batch_size: int):
    """Stream ``(X, y)`` through ``learner`` in batches, recording for :func:`regret` the
    served weights before each batch (``learner.coef_``), the batch ends and the prequential
    scores.

    A round must be served by one weight vector: pick ``batch_size`` so that the learner does
    not change its weights inside a batch (1, or a divisor of ``pmb``'s ``buffer_size`` /
    ``ftrl_pauc``'s ``update_every``), with ``scaling="none"``.  Otherwise the recorded scores
    differ from ``X @ w`` and a ValueError says so.
    """
    X, y = check_batch(X, y, accept_sparse=False)
    ends, weights, scores = [], [], []
    n = len(y)
    for start in range(0, n, batch_size):
        stop = min(n, start + batch_size)
        w = learner.coef_ if learner.is_initialized else np.zeros(X.shape[1])
        batch_scores = learner.prequential_step(X[start:stop], y[start:stop])
        if not np.allclose(batch_scores, X[start:stop] @ w, rtol=1e-9, atol=1e-12):
            raise ValueError(
                f"the learner changed its weights inside the batch of events {start}..{stop - 1}"
                " (or does not score linearly); use a smaller batch_size"
            )
        weights.append(w)
        scores.append(batch_scores)
        ends.append(stop)
    return np.array(ends), weights, np.concatenate(scores)
