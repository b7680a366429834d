"""Regret of an online pAUC learner on a window of events, after Kar et al. (2014) §2-3.

Definitions (notes 002 §2; all on one bounded window of ``T`` labelled events in arrival order)
---------------------------------------------------------------------------------------------
* ``l(x_{1:t}, w)``: the pAUC hinge surrogate of the prefix, Kar et al. eq. (5) with the hinge —
  the sum over (positive, top-``ceil(beta t_-)`` negative) pairs of ``max(0, 1 - w.(x_i - x_j))``
  (for ``alpha > 0`` the tight surrogate of Narasimhan & Agarwal eq. (18)), **unnormalised**, so
  that the thresholds grow with the prefix as in the paper.
* Online penalty of round ``b`` (eq. (6), batched form of §3.2): the learner serves ``w_b`` while
  the events ``Z_b = x_{e_{b-1}+1 .. e_b}`` arrive (``w_b`` = the model *before* it learns
  ``Z_b``: prequential), and pays
  ``L_b(w_b) = l(x_{1:e_b}, w_b) - l(x_{1:e_{b-1}}, w_b)``.  One event per round is the plain
  model; a learner that changes its weights once per buffer needs only those rounds.
* Comparator: ``w*`` from :func:`core.learners.svm_pauc.solve_svm_pauc` on the window with
  weight ``C``.  [CHOICE] The paper's ``min_{w in W}`` needs a bounded ``W`` (unconstrained,
  the hinge loss of separable data goes to 0); by Lagrange duality the SVM solution ``w_C``
  minimises ``l(x_{1:T}, .)`` over the ball ``||w|| <= ||w_C||``, so this *is* the best fixed
  model in hindsight over that ball (up to the solver's ``tol``).
* ``regret = (sum_b L_b(w_b) - l(x_{1:T}, w*)) / (T_+ (j_beta - j_alpha))``: the paper's
  Theorem 3 normalisation (per pair counted by pAUC; ``j_beta = ceil(beta T_-)``), so it is
  comparable across windows and tends to 0 as ``O(sqrt(1/T_+ + 1/T_-))`` for FTRL.
  ``regret_per_event`` is the paper's ``R(T)``: the same difference divided by ``T``.
* Metric gap: ``pauc(y, X w*) - pauc(y, prequential scores)`` with :func:`core.metrics.pauc`
  (trapezoid, ties 1/2), where the prequential score of an event is its pre-update score.

Telescoping: for one fixed ``w`` the penalties sum to ``l(x_{1:T}, w)``, whatever the order of
the rounds' boundaries — the property that makes ``w*`` the batch optimum (notes 002 §2).

For a service: :class:`RegretWindow` keeps the last N events of a stream with their rounds
(what a round is there, and what that implies for learners that step inside a batch, is written
in its docstring), serialises like :class:`core.metrics.PrequentialWindow`, and
:meth:`RegretWindow.report` is :func:`regret` on its content.  Cost of a report on ``T`` events
in ``R`` rounds: ``O(R T d)`` BLAS + ``O(R T)`` for the penalties, plus one ``svm_pauc`` solve.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np

from core._kernels.pauc_surrogate import tight_pauc_coefficients
from core._kernels.regret import round_penalties
from core.learners.svm_pauc import range_counts, solve_svm_pauc
from core.metrics import pauc
from core.preprocessing import scale_batch
from core.validation import CSRMatrix, as_features, as_labels, check_batch

__all__ = [
    "RegretReport",
    "RegretWindow",
    "learner_inputs",
    "prefix_loss",
    "online_penalties",
    "regret",
    "replay",
]


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


# ----------------------------------------------------------------------------- service window
def learner_inputs(learner, X) -> np.ndarray:
    """The dense float64 features ``learner``'s next ``partial_fit`` / ``prequential_step`` on
    ``X`` will learn from: ``X`` after the learner's online scaling, computed on a copy of the
    scaler statistics (the learner is not changed; ``scale_batch`` is deterministic, so these
    are bit for bit the rows the kernel sees).  Sparse rows are densified.

    Raises ValueError where the learner would (wrong width, ``standard`` scaling of CSR rows).
    """
    n_features = learner.n_features_in_ if learner.is_initialized else None
    features = as_features(X, n_features, accept_sparse=type(learner).supports_sparse)
    state = learner.state_ if learner.is_initialized else {}
    statistics = {key: value.copy() for key, value in state.items() if key.startswith("scaler_")}
    features = scale_batch(learner.scaling, statistics, features, learn=True)
    if isinstance(features, CSRMatrix):
        return features.toarray()
    return np.array(features, dtype=np.float64, order="C", copy=True)


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got: {value!r}")
    return int(value)


def _room(array: np.ndarray, needed: int, capacity: int) -> np.ndarray:
    """``array`` with at least ``needed`` rows (geometric growth, at most ``capacity``)."""
    if needed <= array.shape[0]:
        return array
    grown = np.zeros(
        (min(capacity, max(needed, 2 * array.shape[0])), *array.shape[1:]), array.dtype
    )
    grown[: array.shape[0]] = array
    return grown


_WINDOW_STATE = {
    "parameters": (np.int64, 1),
    "counters": (np.int64, 1),
    "features": (np.float64, 2),
    "labels": (np.int64, 1),
    "scores": (np.float64, 1),
    "round_ends": (np.int64, 1),
    "round_weights": (np.float64, 2),
}


class RegretWindow:
    """The last ``capacity`` labelled events of a stream with what regret needs: their features
    (as the learner saw them), labels and prequential scores, and the **rounds** — for each
    learned batch, where it ends and the weight vector served when it began.

    :meth:`report` is :func:`regret` on the window's content (module docstring: Kar et al.'s
    batched online model, eq. (6) on the window, comparator ``svm_pauc`` on the same window).

    What a round is — and the consequence ([CHOICE])
    ------------------------------------------------
    A round is one call of :meth:`update`: the service learns a batch with ONE kernel call, and
    records ``learner.coef_`` from *before* the call as the round's weights ``w_b``.  The
    learner may change its weights inside the batch (``spam``, ``solam``, ``oam``, ``opauc``
    step after every event; ``pmb`` / ``ftrl_pauc`` when a buffer fills or every ``s`` events),
    but the round's penalty ``L_b(w_b)`` is evaluated at ``w_b`` for the whole batch: this is Kar
    et al.'s *batched* online model (§3.2, ``R(T, s)``), in which the player commits to one
    model per batch.  Consequences:

    * exact (the penalties are those of the model that really scored the events) for
      single-event rounds — delayed labels arrive one by one, HTTP clients posting one event —
      and for learners that serve one weight vector per round (``pmb`` and ``ftrl_pauc``
      between two updates, when batches do not straddle an update);
    * otherwise ``online_loss`` is the loss of the *batch-start* models, typically **higher**
      than what the per-event models paid (they had learned part of the batch), so with large
      batches the regret of per-event learners is an upper-biased, batched-model regret; the
      prequential pAUC and the metric gap, on the other hand, use the real per-event scores.
      Post small batches (or one event per request) when the regret of a per-event learner
      matters.

    The regret is about the *learning algorithm on its own input stream*: features are stored
    after the model's online scaling (:func:`learner_inputs`), because that is the stream the
    learner optimises over and the space its ``coef_`` lives in; the comparator is the best fixed
    linear model on those same rows.  For delayed labels, the prequential score is the one
    recorded when the event was scored (as in the metrics window), while ``w_b`` is the model
    that then learned the label.

    Trimming: after a round is appended, whole oldest rounds are dropped while the window holds
    more than ``capacity`` events, so it always starts at a round boundary and holds between
    ``capacity - (last batch size) + 1`` and ``capacity`` events; a batch longer than the
    capacity keeps only its last ``capacity`` events (still one round, served by one ``w``).
    Choose a capacity of several batches.

    State: :meth:`get_state` is a flat dict of C-contiguous int64 / float64 arrays that
    :meth:`from_state` rebuilds bit for bit.  Events and rounds live in ring buffers indexed by
    their absolute position modulo ``capacity`` (so a commit rewrites only the slots that
    changed; a store that sends only changed bytes sends about one batch's rows).  Keys:
    ``parameters`` [capacity, n_features]; ``counters`` [events ever appended, events in the
    window, rounds ever appended, rounds in the window]; ``features`` (rows, n_features),
    ``labels`` (±1), ``scores``; ``round_ends`` (absolute event count at each round's end) and
    ``round_weights`` (rounds, n_features).  Rows are ``min(capacity, ever appended)``; slots
    outside the window hold stale rows.

    Examples
    --------
    >>> window = RegretWindow(capacity=4, n_features=1)
    >>> window.update([[1.0], [0.0]], [1, -1], [0.0, 0.0], [0.0])  # served w = 0
    >>> window.update([[2.0]], [-1], [0.5], [0.5])
    >>> len(window), window.n_rounds
    (3, 2)
    >>> window.update([[3.0], [1.0]], [1, -1], [1.0, 0.2], [0.2])  # 5 > 4: round 1 leaves
    >>> len(window), window.n_rounds
    (3, 2)
    >>> RegretWindow(3, 2).report().reason
    'the regret window holds no event'
    """

    def __init__(self, capacity: int, n_features: int) -> None:
        self.capacity = _count("capacity", capacity)
        self.n_features = _count("n_features", n_features)
        d = self.n_features
        self._features: np.ndarray = np.zeros((0, d))
        self._labels: np.ndarray = np.zeros(0, dtype=np.int64)
        self._scores: np.ndarray = np.zeros(0)
        self._round_ends: np.ndarray = np.zeros(0, dtype=np.int64)
        self._round_weights: np.ndarray = np.zeros((0, d))
        # events ever appended, events in the window, rounds ever appended, rounds in the window
        self._counters: np.ndarray = np.zeros(4, dtype=np.int64)

    # -- learning
    def update(self, X, y, scores, weights) -> None:
        """Append one round: the events ``X`` (dense, as the learner saw them), labels ``y``,
        prequential ``scores``, served by ``weights`` (``coef_`` before the batch).  Validated
        whole first: a rejected round leaves the window as it was.  An empty batch is a no-op.
        """
        features = np.asarray(X, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] != self.n_features:
            raise ValueError(
                f"expected features of shape (n, {self.n_features}), got {features.shape}"
            )
        n_events = features.shape[0]
        if n_events == 0:
            return
        labels = as_labels(y, n_events)
        score_array = np.asarray(scores, dtype=np.float64).reshape(-1)
        served = np.asarray(weights, dtype=np.float64).reshape(-1)
        if score_array.size != n_events:
            raise ValueError(f"got {score_array.size} scores for {n_events} events")
        if served.size != self.n_features:
            raise ValueError(f"got {served.size} weights for {self.n_features} features")
        for name, array in (("features", features), ("scores", score_array), ("weights", served)):
            if not np.isfinite(array).all():
                raise ValueError(f"{name} hold NaN or infinity")

        capacity = self.capacity
        total, size, rounds_total, n_rounds = (int(value) for value in self._counters)
        kept = min(n_events, capacity)
        new_total = total + n_events
        self._features = _room(self._features, min(capacity, new_total), capacity)
        self._labels = _room(self._labels, min(capacity, new_total), capacity)
        self._scores = _room(self._scores, min(capacity, new_total), capacity)
        # the kept events take ring slots (new_total - kept .. new_total - 1) % capacity: at most
        # two runs, written by slices (fancy indexing cost twice as much for 1,000 x 50 rows)
        start = (new_total - kept) % capacity
        head = min(kept, capacity - start)
        for ring, values in (
            (self._features, features),
            (self._labels, labels),
            (self._scores, score_array),
        ):
            tail = values[n_events - kept :]
            ring[start : start + head] = tail[:head]
            ring[: kept - head] = tail[head:]

        # drop whole oldest rounds while the window would hold more than `capacity` events
        # (before the new round takes its ring slot: the oldest round may live there)
        while size + n_events > capacity and n_rounds > 0:
            oldest_end = int(self._round_ends[(rounds_total - n_rounds) % capacity])
            size -= oldest_end - (total - size)
            n_rounds -= 1
        size = min(size + n_events, capacity)  # a round longer than the window keeps its tail
        self._round_ends = _room(self._round_ends, min(capacity, rounds_total + 1), capacity)
        self._round_weights = _room(self._round_weights, min(capacity, rounds_total + 1), capacity)
        slot = rounds_total % capacity
        self._round_ends[slot] = new_total
        self._round_weights[slot] = served
        rounds_total += 1
        n_rounds += 1
        self._counters[:] = (new_total, size, rounds_total, n_rounds)

    # -- content
    def __len__(self) -> int:
        return int(self._counters[1])

    @property
    def n_rounds(self) -> int:
        return int(self._counters[3])

    @property
    def events_seen(self) -> int:
        """Events appended since the start (in and out of the window)."""
        return int(self._counters[0])

    def contents(self):
        """``(X, y, scores, ends, weights)`` of the window, oldest first: ``ends`` are the rounds'
        ends relative to the window's first event (exclusive, the last one is ``len(self)``) and
        ``weights`` (rounds, n_features) their served weight vectors."""
        total, size, rounds_total, n_rounds = (int(value) for value in self._counters)
        events = (total - size + np.arange(size)) % self.capacity
        rounds = (rounds_total - n_rounds + np.arange(n_rounds)) % self.capacity
        ends = self._round_ends[rounds] - (total - size)
        return (
            self._features[events],
            self._labels[events],
            self._scores[events],
            ends,
            self._round_weights[rounds],
        )

    # -- regret
    def report(
        self, alpha: float = 0.0, beta: float = 0.1, *, C: float = 10.0, tol: float = 1e-3
    ) -> RegretReport:
        """:func:`regret` on the window; when it is undefined (empty window, one class only)
        the numbers are NaN and ``reason`` says why."""
        X, y, scores, ends, weights = self.contents()
        n_pos = int(np.count_nonzero(y > 0))
        reason = None
        if len(y) == 0:
            reason = "the regret window holds no event"
        elif n_pos == 0:
            reason = "the regret window holds no positive event"
        elif n_pos == len(y):
            reason = "the regret window holds no negative event"
        if reason is not None:
            nan = math.nan
            return RegretReport(
                len(y), nan, nan, nan, nan, nan, nan, nan, np.full(self.n_features, nan),
                rounds=len(ends), reason=reason,
            )  # fmt: skip
        return regret(X, y, ends, list(weights), scores, alpha=alpha, beta=beta, C=C, tol=tol)

    def summary(
        self, alpha: float = 0.0, beta: float = 0.1, *, C: float = 10.0, tol: float = 1e-3
    ) -> tuple[dict | None, str | None]:
        """``(regret section, reason)`` for the metrics endpoint, JSON-able: the section is None
        (and ``reason`` says why) when the regret is undefined."""
        report = self.report(alpha, beta, C=C, tol=tol)
        if report.reason is not None:
            return None, report.reason
        return {
            "regret": report.regret,
            "regret_per_event": report.regret_per_event,
            "online_loss": report.online_loss,
            "hindsight_loss": report.hindsight_loss,
            "prequential_pauc": report.prequential_pauc,
            "hindsight_pauc": report.hindsight_pauc,
            "pauc_gap": report.pauc_gap,
            "n_events": report.n_events,
            "rounds": report.rounds,
            "window_capacity": self.capacity,
            "hindsight_C": C,
            "hindsight_converged": report.hindsight_converged,
            "solve_seconds": report.solve_seconds,
        }, None

    # -- state
    def get_state(self, copy: bool = True) -> dict[str, np.ndarray]:
        """The window as a flat dict of C-contiguous arrays (see the class docstring);
        ``copy=False`` returns views of the live buffers (for a caller that copies or encodes
        them at once)."""
        total, _, rounds_total, _ = (int(value) for value in self._counters)
        rows = min(self.capacity, total)
        round_rows = min(self.capacity, rounds_total)
        state = {
            "parameters": np.array([self.capacity, self.n_features], dtype=np.int64),
            "counters": self._counters,
            "features": self._features[:rows],
            "labels": self._labels[:rows],
            "scores": self._scores[:rows],
            "round_ends": self._round_ends[:round_rows],
            "round_weights": self._round_weights[:round_rows],
        }
        if copy:
            return {key: value.copy() for key, value in state.items()}
        return state

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> RegretWindow:
        """Rebuild a window from :meth:`get_state`; ValueError naming the key when the arrays
        are missing, of another dtype or shape, or inconsistent."""
        arrays = {}
        for key, (dtype, ndim) in _WINDOW_STATE.items():
            if key not in state:
                raise ValueError(f"regret window state lacks the array {key!r}")
            array = np.asarray(state[key])
            if array.dtype != dtype or array.ndim != ndim:
                raise ValueError(
                    f"regret window state array {key!r} must be {ndim}-d "
                    f"{np.dtype(dtype).name}, got {array.ndim}-d {array.dtype.name}"
                )
            arrays[key] = np.array(array, dtype=dtype, order="C", copy=True)
        if arrays["parameters"].size != 2 or arrays["counters"].size != 4:
            raise ValueError("regret window state: parameters needs 2 values, counters 4")
        capacity, n_features = (int(value) for value in arrays["parameters"])
        window = cls(capacity, n_features)
        total, size, rounds_total, n_rounds = (int(value) for value in arrays["counters"])
        rows, round_rows = min(capacity, total), min(capacity, rounds_total)
        problems = []
        if (
            min(total, size, rounds_total, n_rounds) < 0
            or size > rows
            or n_rounds > size
            or n_rounds > rounds_total
        ):
            problems.append(f"counters {arrays['counters'].tolist()} are inconsistent")
        elif size > 0 and n_rounds == 0:
            problems.append("a non-empty window needs a round")
        for key, expected in (
            ("features", (rows, n_features)),
            ("labels", (rows,)),
            ("scores", (rows,)),
            ("round_ends", (round_rows,)),
            ("round_weights", (round_rows, n_features)),
        ):
            if arrays[key].shape != expected:
                problems.append(f"{key} has shape {arrays[key].shape}, expected {expected}")
        if not problems:
            if not np.isin(arrays["labels"], (-1, 1)).all():
                problems.append("labels must be -1 or +1")
            for key in ("features", "scores", "round_weights"):
                if not np.isfinite(arrays[key]).all():
                    problems.append(f"{key} holds NaN or infinity")
            live = (rounds_total - n_rounds + np.arange(n_rounds)) % capacity
            ends = arrays["round_ends"][live]
            if n_rounds and (
                ends[-1] != total or np.any(np.diff(ends) <= 0) or ends[0] <= total - size
            ):
                problems.append("round_ends do not cover the window in increasing order")
        if problems:
            raise ValueError("inconsistent regret window state: " + "; ".join(problems))
        window._features = arrays["features"]
        window._labels = arrays["labels"]
        window._scores = arrays["scores"]
        window._round_ends = arrays["round_ends"]
        window._round_weights = arrays["round_weights"]
        window._counters = arrays["counters"]
        return window
