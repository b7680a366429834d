"""The prequential window: the last ``capacity`` (score, label) pairs of a stream with exact
AUC / pAUC over them, and reservoir samples for the since-start metrics (conventions:
:mod:`core.metrics`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from core._arrays import LABELS, grown, positive_int, write_to_rings
from core._kernels import metrics as _kernels
from core._kernels.random import seed_state
from core.metrics._window_state import state_arrays, state_problems
from core.metrics.operating import (
    DEFAULT_TARGET_ALERT_RATES,
    DEFAULT_TARGET_FPRS,
    DEFAULT_TOP_K,
    RocCounts,
    operating_points_of,
    undefined_operating_points,
)
from core.metrics.ranking import (
    _SINCE_START,
    _WINDOW,
    _auc_sorted,
    _pauc_sorted,
    _roc_sorted,
    _split_sorted,
    _undefined_reason,
    _warn_undefined,
)
from core.validation import as_scores, check_fpr_range, check_labelled_scores

__all__ = ["PrequentialWindow"]


def _metric_or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


class PrequentialWindow:
    """The last ``capacity`` (score, label) pairs of a stream, with exact AUC / pAUC over them.

    Prequential ("test then train") evaluation: feed each event's score from *before* the model
    learned it.  The window is a ring buffer; a batch is appended at once, and a batch longer than
    the capacity keeps its last ``capacity`` pairs.  Metrics over the window are exact (two sorts
    and one O(n) sweep: 4-9 ms for 100,000 pairs on the project's 2-core machines, see
    ``bench/metrics.py``; the sorted scores are cached until the next update).

    Since the start, the window counts events, positives and negatives, and keeps one uniform
    reservoir sample of scores per class (Algorithm R, ``reservoir_capacity`` per class), from
    which :meth:`cumulative_auc` and :meth:`cumulative_pauc` are computed.  While each class has
    had at most ``reservoir_capacity`` events the reservoirs hold every score and these metrics are
    exact (``cumulative_exact``).  Beyond that, :meth:`cumulative_auc` is an unbiased estimate
    of the since-start AUC (every positive-negative pair is equally likely to be in the sample);
    the pAUC estimate is the plug-in value on the samples, consistent but not exactly unbiased,
    because the top-beta negatives are themselves estimated.

    The whole state is a flat dict of C-contiguous numpy arrays (:meth:`get_state`,
    :meth:`from_state`), round-tripping bit for bit; the RNG state is part of it, so a restored
    window samples exactly as the original would have.

    Parameters
    ----------
    capacity : int
        Number of most recent pairs kept.
    reservoir_capacity : int
        Scores kept per class for the since-start metrics.
    random_state : int or None
        Seed of the reservoir sampling (None means 0: deterministic by default).

    Examples
    --------
    >>> window = PrequentialWindow(capacity=4)
    >>> window.update([0.9, 0.2, 0.4], [1, 0, 0])
    >>> window.auc()
    1.0
    >>> window.update([0.1, 0.8], [1, 0])     # 0.9 (the oldest) leaves the window
    >>> len(window), window.auc()
    (4, 0.0)
    >>> window.cumulative_auc()               # all five events: 3 of 6 pairs correct
    0.5
    >>> summary = window.summary(alpha=0.0, beta=0.5)
    >>> summary["window"]["positives"], summary["since_start"]["events"]
    (1, 5)
    >>> PrequentialWindow(3).summary()["window"]["reason"]
    'window holds no event'
    """

    def __init__(self, capacity: int, reservoir_capacity: int = 100_000, random_state=None):
        self.capacity = capacity
        self.reservoir_capacity = reservoir_capacity
        self.random_state = random_state
        positive_int("capacity", capacity)
        positive_int("reservoir_capacity", reservoir_capacity)
        self._window_scores = np.zeros(0, dtype=np.float64)
        self._window_labels = np.zeros(0, dtype=LABELS)
        self._size = 0
        self._cursor = 0
        self._counts_since_start = np.zeros(3, dtype=np.int64)
        self._positive_reservoir = np.zeros(0, dtype=np.float64)
        self._negative_reservoir = np.zeros(0, dtype=np.float64)
        self._rng_state = seed_state(random_state)

    # -- learning

    def update(self, scores, labels, *, validated: bool = False) -> None:
        """Append a batch of (score, label) pairs, in order.

        Validated whole before anything changes: a rejected batch leaves the window as it was.
        One kernel call per batch, not per event (a numba call from Python costs ~1 µs).

        Parameters
        ----------
        scores : array-like of shape (n_events,)
            Finite pre-update scores.
        labels : array-like of shape (n_events,)
            {0, 1}, {-1, +1} or bool.  An empty batch is a no-op.
        validated : bool, default False
            The caller has checked the pair as :func:`~core.validation.check_labelled_scores`
            does and passes its output (finite float64 scores, labels in {-1, +1}): the
            service's learning step, which checks them once for the window, the drift
            detector and the calibrator.
        """
        if validated:  # check_labelled_scores's arrays: contiguous float64 and int64
            score_array, labels_pm1 = scores, labels
            if score_array.size == 0:
                return
        else:
            score_array = as_scores(scores)
            if score_array.size == 0 and np.asarray(labels).size == 0:
                return
            labels_pm1, score_array = check_labelled_scores(labels, score_array)
        capacity = int(self.capacity)
        reservoir_capacity = int(self.reservoir_capacity)

        n_events = score_array.size
        if n_events == 1:  # one event: a scalar test (numpy's costs ~1 us on one value)
            n_batch_positive = 1 if labels_pm1[0] > 0 else 0
        else:
            n_batch_positive = int(np.count_nonzero(labels_pm1 > 0))
        counts = self._counts_since_start
        # the counts as Python ints: a numpy reduction or a scalar's arithmetic costs
        # microseconds on the one event of a request
        events, positives, negatives = counts.tolist()
        n_batch_negative = n_events - n_batch_positive
        if self._reservoirs_in_window():
            # The k-th score of a class goes to slot k - 1 without a draw while k is within the
            # reservoir's capacity, so the reservoirs are the window's scores of each class, in
            # order, until the window lets an event go or a class outgrows its reservoir.
            if (
                events + n_events <= capacity
                and positives + n_batch_positive <= reservoir_capacity
                and negatives + n_batch_negative <= reservoir_capacity
            ):
                counts[0] = events + n_events
                counts[1] = positives + n_batch_positive
                counts[2] = negatives + n_batch_negative
                self._append_to_window(score_array, labels_pm1)
                return
            self._positive_reservoir, self._negative_reservoir = self._reservoir_scores()
        self._positive_reservoir = grown(
            self._positive_reservoir,
            min(reservoir_capacity, positives + n_batch_positive),
            reservoir_capacity,
        )
        self._negative_reservoir = grown(
            self._negative_reservoir,
            min(reservoir_capacity, negatives + n_batch_negative),
            reservoir_capacity,
        )
        _kernels.reservoir_update(
            score_array,
            labels_pm1,
            self._positive_reservoir,
            self._negative_reservoir,
            reservoir_capacity,
            counts,
            self._rng_state,
        )
        self._append_to_window(score_array, labels_pm1)

    def _append_to_window(self, score_array: np.ndarray, labels_pm1: np.ndarray) -> None:
        capacity = int(self.capacity)
        n_events = score_array.size
        if n_events == 1 and self._cursor < len(self._window_scores):
            # a request's one event into a slot the rings already have: two item writes
            self._window_scores[self._cursor] = score_array[0]
            self._window_labels[self._cursor] = labels_pm1[0]
            self._cursor = (self._cursor + 1) % capacity
            self._size = min(capacity, self._size + 1)
            return
        # Only the last `capacity` pairs of the batch can survive.  They go to the slots they
        # would occupy had the batch arrived one event at a time, so the state does not depend
        # on how a stream was cut into batches.
        n_kept = min(n_events, capacity)
        needed = min(capacity, self._size + n_events)
        # Before the first wrap the cursor equals the size, so growing never moves a pair.
        self._window_scores = grown(self._window_scores, needed, capacity)
        self._window_labels = grown(self._window_labels, needed, capacity)
        # the slots from first_slot on, modulo the capacity: at most two runs, written by
        # slices (an index array costs more than the copy for the one event of a request)
        first_slot = (self._cursor + n_events - n_kept) % capacity
        rings = ((self._window_scores, score_array), (self._window_labels, labels_pm1))
        write_to_rings(rings, first_slot, n_kept, capacity)
        self._cursor = (self._cursor + n_events) % capacity
        self._size = needed

    # -- content

    def __len__(self) -> int:
        return self._size

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, labels)`` in the window, oldest first; labels in {-1, +1}."""
        if self._size < int(self.capacity):
            order = np.arange(self._size)
        else:
            order = (self._cursor + np.arange(self._size)) % self._size
        return self._window_scores[order], self._window_labels[order].astype(np.int64)

    @property
    def counts_since_start(self) -> dict[str, int]:
        """``{"events", "positives", "negatives"}`` seen since the start."""
        events, positives, negatives = (int(count) for count in self._counts_since_start)
        return {"events": events, "positives": positives, "negatives": negatives}

    @property
    def cumulative_exact(self) -> bool:
        """True while both reservoirs hold every score seen, so since-start metrics are exact."""
        return bool(self._counts_since_start[1:].max() <= int(self.reservoir_capacity))

    # The sorted class scores are sorted anew by each metric call, not kept between calls: a
    # cached model would hold a second copy of its window and reservoirs until its next update
    # (240 KB once full at the service's default window and reservoirs of 10,000); summary()
    # sorts each once for all its metrics.
    def _sorted_window(self) -> tuple[np.ndarray, np.ndarray]:
        return _split_sorted(self._window_labels[: self._size], self._window_scores[: self._size])

    def _sorted_reservoirs(self) -> tuple[np.ndarray, np.ndarray]:
        positives, negatives = self._reservoir_scores()
        return np.sort(positives), np.sort(negatives)

    def _reservoirs_in_window(self) -> bool:
        """Whether the window holds every event since the start and each reservoir every score
        of its class: the reservoirs are then the window's and are not kept twice."""
        events, positives, negatives = self._counts_since_start.tolist()
        return events == self._size and max(positives, negatives) <= int(self.reservoir_capacity)

    def _reservoir_scores(self) -> tuple[np.ndarray, np.ndarray]:
        """The filled part of each reservoir (positives, negatives), in slot order."""
        if self._reservoirs_in_window():
            scores = self._window_scores[: self._size]
            positive = self._window_labels[: self._size] > 0
            return scores[positive], scores[~positive]
        reservoir_capacity = int(self.reservoir_capacity)
        n_positive = min(reservoir_capacity, int(self._counts_since_start[1]))
        n_negative = min(reservoir_capacity, int(self._counts_since_start[2]))
        return self._positive_reservoir[:n_positive], self._negative_reservoir[:n_negative]

    # -- metrics (over the sorted classes, by _measure below)

    def auc(self) -> float:
        """Exact AUC of the pairs in the window (NaN + warning if a class is missing)."""
        return _warned(*_measure(self._sorted_window(), _WINDOW), "AUC")

    def pauc(self, alpha: float = 0.0, beta: float = 0.1, standardized: bool = False) -> float:
        """Exact pAUC of the window over FPR [alpha, beta], as :func:`pauc`."""
        alpha, beta = check_fpr_range(alpha, beta)
        values, reason = _measure(self._sorted_window(), _WINDOW, alpha, beta)
        return _warned(values[1 if standardized else 0], reason, "pAUC")

    def roc_curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ROC curve of the window, as :func:`roc_curve`."""
        positive_sorted, negative_sorted = self._sorted_window()
        reason = _undefined_reason(positive_sorted.size, negative_sorted.size, _WINDOW)
        if reason is not None:
            _warn_undefined("the ROC curve", reason, stacklevel=3)
        return _roc_sorted(positive_sorted, negative_sorted)

    def cumulative_auc(self) -> float:
        """AUC since the start: exact while ``cumulative_exact``, else an unbiased estimate."""
        return _warned(*_measure(self._sorted_reservoirs(), _SINCE_START), "AUC")

    def cumulative_pauc(
        self, alpha: float = 0.0, beta: float = 0.1, standardized: bool = False
    ) -> float:
        """pAUC since the start: exact while ``cumulative_exact``, else a reservoir estimate."""
        alpha, beta = check_fpr_range(alpha, beta)
        values, reason = _measure(self._sorted_reservoirs(), _SINCE_START, alpha, beta)
        return _warned(values[1 if standardized else 0], reason, "pAUC")

    def _reservoir_weights(self) -> tuple[float, float]:
        """How many events of its class each reservoir score stands for (1 while exact)."""
        positives, negatives = (int(count) for count in self._counts_since_start[1:])
        kept = (
            min(int(self.reservoir_capacity), positives),
            min(int(self.reservoir_capacity), negatives),
        )
        return positives / max(kept[0], 1), negatives / max(kept[1], 1)

    def summary(
        self,
        alpha: float = 0.0,
        beta: float = 0.1,
        target_fprs: Sequence[float] = DEFAULT_TARGET_FPRS,
        target_alert_rates: Sequence[float] = DEFAULT_TARGET_ALERT_RATES,
        top_k: Sequence[int] = DEFAULT_TOP_K,
    ) -> dict:
        """Everything the metrics endpoint reports, JSON-able (no NaN: an undefined metric is
        None, and ``reason`` says why).

        Returns
        -------
        dict
            ``window_capacity``, ``alpha``, ``beta``, and two sections, ``window`` and
            ``since_start``, each with ``events``, ``positives``, ``negatives``, ``auc``,
            ``pauc``, ``pauc_standardized``, ``average_precision``, ``operating_points``
            (:func:`core.metrics.operating_points` at the targets; since the start, each
            reservoir's scores weighted by the events of its class they stand for) and
            ``reason`` (None when the metrics are defined, else e.g. "window holds no negative
            event").  ``since_start`` adds
            ``cumulative_exact`` and ``reservoir_capacity``.  ``window["events"]`` is the
            window's current size.
        """
        alpha, beta = check_fpr_range(alpha, beta)
        targets = (tuple(target_fprs), tuple(target_alert_rates), tuple(top_k))
        sections = {
            "window": _section(self._sorted_window(), _WINDOW, alpha, beta, targets),
            "since_start": _section(
                self._sorted_reservoirs(),
                _SINCE_START,
                alpha,
                beta,
                targets,
                self._reservoir_weights(),
            ),
        }
        window_labels = self._window_labels[: self._size]
        window_positives = int(np.count_nonzero(window_labels > 0))
        sections["window"].update(
            events=self._size, positives=window_positives, negatives=self._size - window_positives
        )
        sections["since_start"].update(
            **self.counts_since_start,
            cumulative_exact=self.cumulative_exact,
            reservoir_capacity=int(self.reservoir_capacity),
        )
        return {
            "window_capacity": int(self.capacity),
            "alpha": alpha,
            "beta": beta,
            "window": sections["window"],
            "since_start": sections["since_start"],
        }

    # -- state

    def get_state(self) -> dict[str, np.ndarray]:
        """The whole window as a flat dict of C-contiguous float64 / int64 / uint64 arrays.

        Only filled slots are stored, so a young window is small.  Keys: ``window_parameters``
        ([capacity, reservoir_capacity]), ``window_scores``, ``window_labels`` (ring order),
        ``window_cursor``, ``counts_since_start`` ([events, positives, negatives]),
        ``reservoir_positive_scores``, ``reservoir_negative_scores``, ``rng_state``.
        """
        reservoir_capacity = int(self.reservoir_capacity)
        positives, negatives = self._reservoir_scores()
        state: dict[str, np.ndarray] = {
            "window_parameters": np.array([self.capacity, reservoir_capacity], dtype=np.int64),
            "window_scores": self._window_scores[: self._size].copy(),
            "window_labels": self._window_labels[: self._size].copy(),
            "window_cursor": np.array([self._cursor], dtype=np.int64),
            "counts_since_start": self._counts_since_start.copy(),
            "reservoir_positive_scores": positives.copy(),
            "reservoir_negative_scores": negatives.copy(),
            "rng_state": self._rng_state.copy(),
        }
        return state

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> PrequentialWindow:
        """Rebuild a window from :meth:`get_state`'s dict; checks it is consistent.

        Raises
        ------
        ValueError
            A key is missing, has another dtype or shape, or the arrays disagree with each
            other (naming the key).
        """
        arrays = state_arrays(state)
        capacity, reservoir_capacity = (int(value) for value in arrays["window_parameters"])
        window = cls(capacity, reservoir_capacity)
        size = arrays["window_scores"].size
        cursor = int(arrays["window_cursor"][0])
        problems = state_problems(arrays)
        if problems:
            raise ValueError("inconsistent window state: " + "; ".join(problems))
        window._window_scores = arrays["window_scores"]
        window._window_labels = arrays["window_labels"]
        window._size = size
        window._cursor = cursor
        window._counts_since_start = arrays["counts_since_start"]
        window._rng_state = arrays["rng_state"]
        if not window._reservoirs_in_window():
            window._positive_reservoir = arrays["reservoir_positive_scores"]
            window._negative_reservoir = arrays["reservoir_negative_scores"]
        elif not all(
            np.array_equal(stored, derived)
            for stored, derived in zip(
                (arrays["reservoir_positive_scores"], arrays["reservoir_negative_scores"]),
                window._reservoir_scores(),
                strict=True,
            )
        ):
            raise ValueError(
                "inconsistent window state: the reservoirs must hold the window's scores of "
                "their class while the window holds every event"
            )
        return window


def _measure(sorted_classes, reason_template, alpha=None, beta=None) -> tuple[Any, str | None]:
    """``(values, reason)``: ``values`` is the AUC, or ``(pAUC, standardised pAUC)`` when alpha
    and beta are given; NaN and why when undefined (no warning: summary() reports)."""
    positive_sorted, negative_sorted = sorted_classes
    reason = _undefined_reason(positive_sorted.size, negative_sorted.size, reason_template)
    if reason is not None:
        return (math.nan if alpha is None else (math.nan, math.nan)), reason
    if alpha is None:
        return _auc_sorted(positive_sorted, negative_sorted), None
    return _pauc_sorted(positive_sorted, negative_sorted, alpha, beta), None


def _warned(value: Any, reason: str | None, metric: str) -> Any:
    """``value``, or NaN with a warning saying why it is undefined (``stacklevel``: the user's
    call of a :class:`PrequentialWindow` method)."""
    if reason is not None:
        return _warn_undefined(metric, reason, stacklevel=4)
    return value


def _section(
    sorted_classes, reason_template, alpha, beta, targets, weights=(1.0, 1.0)
) -> dict[str, Any]:
    """One section of :meth:`PrequentialWindow.summary`, without its counts; ``targets`` is
    ``(target_fprs, target_alert_rates, top_k)``, ``weights`` the events each sorted score of
    a class stands for."""
    auc_value, reason = _measure(sorted_classes, reason_template)
    (pauc_value, standardized_value), _ = _measure(sorted_classes, reason_template, alpha, beta)
    if reason is None:
        counts = RocCounts(*sorted_classes, *weights)
        average_precision = counts.average_precision()
        points = operating_points_of(counts, *targets)
    else:
        average_precision, points = None, undefined_operating_points(*targets)
    return {
        "auc": _metric_or_none(auc_value),
        "pauc": _metric_or_none(pauc_value),
        "pauc_standardized": _metric_or_none(standardized_value),
        "average_precision": average_precision,
        "operating_points": points,
        "reason": reason,
    }
