"""The service's regret window: the last N labelled events of a stream with their rounds,
serialised like :class:`core.metrics.PrequentialWindow`; :meth:`RegretWindow.report` is
:func:`core.regret.report.regret` on its content (definitions: :mod:`core.regret`)."""

from __future__ import annotations

import math

import numpy as np

from core._arrays import LABELS, grown, positive_int, write_to_rings
from core._kernels.validation import count_nonfinite
from core.csr import CSRMatrix
from core.preprocessing import scale_batch
from core.regret.report import RegretReport, regret
from core.validation import FEATURE_BOUND, as_features, as_labels, first_out_of_range

__all__ = ["RegretWindow", "learner_inputs"]


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


def _finite(array: np.ndarray) -> bool:
    """Whether every value of the float64 ``array`` is finite: one kernel pass when it is
    C-contiguous and writeable, the layout the kernel is compiled for (numpy's
    ``isfinite(...).all()`` costs more than the pass on a round of one event), else numpy's;
    a single value (one event's score) by ``math.isfinite``, cheaper than either call."""
    if array.size == 1:
        return math.isfinite(array.flat[0])
    if array.flags.c_contiguous and array.flags.writeable:
        return count_nonfinite(array.reshape(-1)) == 0
    return bool(np.isfinite(array).all())


_WINDOW_STATE = {
    "parameters": (np.int64, 1),
    "counters": (np.int64, 1),
    "features": (np.float64, 2),
    "labels": (LABELS, 1),
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
    A round is one call of :meth:`update` (or one of the rounds :meth:`update_rounds` appends
    at once, the same window): the service learns a batch with ONE kernel call, and
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
        self.capacity = positive_int("capacity", capacity)
        self.n_features = positive_int("n_features", n_features)
        d = self.n_features
        self._features: np.ndarray = np.zeros((0, d))
        self._labels: np.ndarray = np.zeros(0, dtype=LABELS)
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
        n_events = np.shape(X)[0] if np.ndim(X) == 2 else -1
        self.update_rounds(X, y, scores, np.reshape(weights, (1, -1)), [max(n_events, 0)])

    def update_rounds(self, X, y, scores, weights, sizes) -> None:
        """Append several rounds at once: the same window as :meth:`update` of each in turn.
        ``X``, ``y`` and ``scores`` hold the rounds' events one after another, ``sizes`` how
        many events each round has, ``weights`` (rounds, n_features) the weights served at the
        start of each.  Validated whole first: a rejected call leaves the window as it was;
        rounds of no event are no-ops."""
        features = np.asarray(X, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] != self.n_features:
            raise ValueError(
                f"expected features of shape (n, {self.n_features}), got {features.shape}"
            )
        n_events = features.shape[0]
        round_sizes = [int(size) for size in sizes]
        if sum(round_sizes) != n_events or min(round_sizes, default=0) < 0:
            raise ValueError(f"round sizes {round_sizes} do not add up to {n_events} events")
        if n_events == 0:
            return
        labels = as_labels(y, n_events)
        score_array = np.asarray(scores, dtype=np.float64).reshape(-1)
        served = np.asarray(weights, dtype=np.float64).reshape(len(round_sizes), -1)
        if score_array.size != n_events:
            raise ValueError(f"got {score_array.size} scores for {n_events} events")
        if served.shape[1] != self.n_features:
            raise ValueError(f"got {served.shape[1]} weights for {self.n_features} features")
        for name, array in (("features", features), ("scores", score_array), ("weights", served)):
            if not _finite(array):
                raise ValueError(f"{name} hold NaN or infinity")
        self._append_events(features, labels, score_array)
        self._append_rounds(served, round_sizes)

    def _append_events(self, features, labels, scores) -> None:
        # Events live at ring slot (absolute position % capacity), so the last `capacity`
        # events of several rounds land where the rounds one by one would put them.
        capacity = self.capacity
        n_events = features.shape[0]
        total = int(self._counters[0])
        kept = min(n_events, capacity)
        new_total = total + n_events
        self._features = grown(self._features, min(capacity, new_total), capacity)
        self._labels = grown(self._labels, min(capacity, new_total), capacity)
        self._scores = grown(self._scores, min(capacity, new_total), capacity)
        # the kept events take ring slots (new_total - kept .. new_total - 1) % capacity: at most
        # two runs, written by slices (fancy indexing cost twice as much for 1,000 x 50 rows)
        start = (new_total - kept) % capacity
        rings = ((self._features, features), (self._labels, labels), (self._scores, scores))
        write_to_rings(rings, start, kept, capacity)

    def _append_rounds(self, served: np.ndarray, round_sizes: list[int]) -> None:
        capacity = self.capacity
        total, size, rounds_total, n_rounds = self._counters.tolist()
        needed = min(capacity, rounds_total + len(round_sizes) - round_sizes.count(0))
        self._round_ends = grown(self._round_ends, needed, capacity)
        self._round_weights = grown(self._round_weights, needed, capacity)
        for n_events, weights in zip(round_sizes, served, strict=True):
            if n_events == 0:
                continue
            # drop whole oldest rounds while the window would hold more than `capacity` events
            # (before the new round takes its ring slot: the oldest round may live there)
            while size + n_events > capacity and n_rounds > 0:
                oldest_end = int(self._round_ends[(rounds_total - n_rounds) % capacity])
                size -= oldest_end - (total - size)
                n_rounds -= 1
            size = min(size + n_events, capacity)  # a round longer than the window: its tail
            total += n_events
            slot = rounds_total % capacity
            self._round_ends[slot] = total
            self._round_weights[slot] = weights
            rounds_total += 1
            n_rounds += 1
        self._counters[:] = (total, size, rounds_total, n_rounds)

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
            self._labels[events].astype(np.int64),
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
            # the rows the learner saw, validated within the feature bound before it learned
            # them (scaling keeps them within it): a larger value overflows the comparator
            if (
                first_out_of_range(arrays["features"]) is not None
                and np.isfinite(arrays["features"]).all()
            ):
                problems.append(f"features hold values beyond the feature bound {FEATURE_BOUND:g}")
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
