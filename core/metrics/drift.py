"""Drift detection on a model's live prequential scores: Page-Hinkley on the per-event pairwise
loss (docs/algorithms/drift.md).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> labels = (rng.random(20_000) < 0.1).astype(int)
>>> signal = np.where(np.arange(20_000) < 10_000, 1.0, -1.0)     # the ranking flips at 10,000
>>> scores = rng.normal(size=20_000) + 1.5 * signal * labels
>>> detector = DriftDetector()
>>> detections = detector.update(scores, labels)
>>> len(detections), 10_000 < detections[0] < 11_000
(1, True)
"""

from __future__ import annotations

import numpy as np

from core._kernels import drift as _kernels
from core.errors import InvalidState
from core.validation import check_labelled_scores

__all__ = ["DriftDetector"]

#: [CHOICE] defaults (docs/algorithms/drift.md, "Defaults"): 64 recent scores per class, a
#: tolerance of 0.05 in loss units, an alarm when the cumulative excess passes 50, after at
#: least 100 losses since the last reset
DEFAULT_CAPACITY = 64
DEFAULT_DELTA = 0.05
DEFAULT_THRESHOLD = 50.0
DEFAULT_MIN_LOSSES = 100


class DriftDetector:
    """Page-Hinkley on the per-event pairwise loss of a prequential stream.

    Each event's pre-update score is compared with the latest ``capacity`` scores of the other
    class: its loss is the share it ranks on the wrong side of (a positive below a negative, or
    the reverse; ties half) — a local ``1 - AUC`` that needs no window sort.  Page-Hinkley
    (one-sided: only a rise of the loss is a change) accumulates ``loss - mean - delta`` and
    reports a drift when the sum exceeds its running minimum by ``threshold``; the statistics
    and the recent scores then restart.

    State: flat arrays (:meth:`get_state` / :meth:`from_state`), no pickling.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        delta: float = DEFAULT_DELTA,
        threshold: float = DEFAULT_THRESHOLD,
        min_losses: int = DEFAULT_MIN_LOSSES,
    ) -> None:
        if not (isinstance(capacity, int | np.integer) and 1 <= capacity <= 1 << 16):
            raise ValueError(f"capacity must be an integer in [1, 65536], got {capacity!r}")
        if not (np.isfinite(delta) and delta >= 0):
            raise ValueError(f"delta must be a finite number >= 0, got {delta!r}")
        if not (np.isfinite(threshold) and threshold > 0):
            raise ValueError(f"threshold must be a finite number > 0, got {threshold!r}")
        if not (isinstance(min_losses, int | np.integer) and min_losses >= 1):
            raise ValueError(f"min_losses must be an integer >= 1, got {min_losses!r}")
        self.parameters = np.array([delta, threshold], dtype=np.float64)
        self.limits = np.array([capacity, min_losses], dtype=np.int64)
        self.recent = np.zeros((2, capacity))
        self.recent_fill = np.zeros(2, dtype=np.int64)
        self.recent_next = np.zeros(2, dtype=np.int64)
        self.statistics = np.zeros(3)
        self.counters = np.array([0, 0, 0, -1], dtype=np.int64)

    # ------------------------------------------------------------------ learning
    def update(self, scores, labels, *, validated: bool = False) -> list[int]:
        """Feed a batch of (pre-update score, label) pairs in order; returns the stream index
        (events fed before it) of each drift detected in it.  ``validated``: the caller passes
        :func:`~core.validation.check_labelled_scores`'s output (the service's learning
        step)."""
        # validated: check_labelled_scores's arrays, contiguous float64 and int64, as they
        # come (a conversion that changes nothing still costs a microsecond on one event)
        signs = labels
        if not validated:
            signs, scores = check_labelled_scores(labels, scores)
        delta, threshold = self.parameters.tolist()
        detected_at = np.empty(len(scores), dtype=np.int64)
        found = _kernels.page_hinkley(
            scores, signs, self.recent, self.recent_fill, self.recent_next, self.statistics,
            self.counters, delta, threshold, int(self.limits[1]), detected_at,
        )  # fmt: skip
        if not found:  # most batches
            return []
        start = int(self.counters[0]) - len(scores)  # the events fed before this batch
        return [start + int(i) for i in detected_at[:found]]

    # ------------------------------------------------------------------ reporting
    @property
    def detections(self) -> int:
        return int(self.counters[2])

    @property
    def last_detection(self) -> int | None:
        """The stream index of the last detected drift (None before the first)."""
        value = int(self.counters[3])
        return None if value < 0 else value

    def report(self) -> dict:
        return {
            "detected": self.detections,
            "last_detected_at": self.last_detection,
            "events": int(self.counters[0]),
            "mean_loss": float(self.statistics[0]) if self.counters[1] else None,
            "statistic": float(self.statistics[1] - self.statistics[2]),
            "threshold": float(self.parameters[1]),
        }

    # ------------------------------------------------------------------ state
    _KEYS = ("parameters", "limits", "recent", "recent_fill", "recent_next", "statistics",
             "counters")  # fmt: skip

    def get_state(self) -> dict[str, np.ndarray]:
        return {key: getattr(self, key).copy() for key in self._KEYS}

    @classmethod
    def over(cls, state: dict[str, np.ndarray]) -> DriftDetector:
        """A detector working in place on the arrays of a state already validated by
        :meth:`from_state` (a learner that keeps them among its own, as ``auto`` does)."""
        detector = cls.__new__(cls)
        for key in cls._KEYS:
            setattr(detector, key, state[key])
        return detector

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> DriftDetector:
        """Rebuild from :meth:`get_state`; :class:`~core.errors.InvalidState` names the array
        at fault (checked by value before any kernel reads it)."""
        try:
            parameters = np.asarray(state["parameters"], dtype=np.float64).reshape(-1)
            limits = np.asarray(state["limits"], dtype=np.int64).reshape(-1)
            detector = cls(int(limits[0]), float(parameters[0]), float(parameters[1]),
                           int(limits[1]))  # fmt: skip
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise InvalidState(f"drift detector state: {error}", field="parameters") from None
        capacity = int(limits[0])
        expected = {
            "recent": ((2, capacity), np.float64),
            "recent_fill": ((2,), np.int64),
            "recent_next": ((2,), np.int64),
            "statistics": ((3,), np.float64),
            "counters": ((4,), np.int64),
        }
        for key, (shape, dtype) in expected.items():
            if key not in state:
                raise InvalidState(f"drift detector state has no {key!r}", field=key)
            value = np.asarray(state[key])
            if value.shape != shape or value.dtype != dtype:
                raise InvalidState(
                    f"drift detector array {key!r} has dtype {value.dtype} and shape "
                    f"{value.shape}; expected {np.dtype(dtype)} and {shape}",
                    field=key,
                )
            setattr(detector, key, np.array(value, copy=True))
        detector._check()
        return detector

    def _check(self) -> None:
        capacity = self.recent.shape[1]
        checks = {
            "recent": np.isfinite(self.recent).all(),
            "recent_fill": ((0 <= self.recent_fill) & (self.recent_fill <= capacity)).all(),
            "recent_next": ((0 <= self.recent_next) & (self.recent_next < capacity)).all(),
            "statistics": np.isfinite(self.statistics).all()
            and self.statistics[2] <= min(self.statistics[1], 0.0),
            "counters": self.counters[0] >= 0
            and 0 <= self.counters[1] <= self.counters[0]
            and 0 <= self.counters[2] <= self.counters[0]
            and -1 <= self.counters[3] < max(self.counters[0], 1),
        }
        for key, ok in checks.items():
            if not ok:
                raise InvalidState(f"drift detector array {key!r} holds impossible values",
                                   field=key)  # fmt: skip
