"""The running means behind a dense model's ``missing_values: "mean"`` policy.

Ingest leaves a missing value as NaN in the dense batch (only under this policy); the engine
fills it, under the model's lock, in the call that learns or scores the batch.  A missing
value of an event that is learned is the mean of that feature over the values *present* in
the events learned before it (0 while there are none), as of the event's own position: a
batch learned at once gives each event the mean a one-at-a-time stream would have given it,
bit for bit (a cumulative sum down the batch's rows, which numpy adds in order), so that the
state does not depend on how events were split into requests (a queue worker merges them).
Scoring fills with the current mean and changes nothing.

The per-feature sums and counts of present values are committed with the model as
``missing:sums`` and ``missing:counts`` (:data:`MISSING_PREFIX`), checked when loaded like
every committed array.  They are kept apart from the learner's scaler: with a scaling other
than ``standard`` the model has no per-feature mean of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InvalidState
from core.learners._state import MAX_COUNT
from core.validation import FEATURE_BOUND

MISSING_PREFIX = "missing:"


@dataclass
class RunningMeans:
    """Per-feature sums and counts of the present values of the events learned."""

    sums: np.ndarray  # float64, (n_features,)
    counts: np.ndarray  # int64, (n_features,)

    @classmethod
    def empty(cls, n_features: int) -> RunningMeans:
        return cls(np.zeros(n_features, dtype=np.float64), np.zeros(n_features, dtype=np.int64))

    def get_state(self) -> dict[str, np.ndarray]:
        return {"sums": self.sums, "counts": self.counts}

    @classmethod
    def from_arrays(
        cls, arrays: dict[str, np.ndarray], n_features: int, events_learned: int
    ) -> RunningMeans:
        """From a model's committed ``missing:*`` arrays (empty when there are none: a model
        that learned nothing); InvalidState names the array at fault.  A count is at most the
        events learned, and a sum at most its count times the feature bound in magnitude."""
        state = {
            name[len(MISSING_PREFIX) :]: value
            for name, value in arrays.items()
            if name.startswith(MISSING_PREFIX)
        }
        if not state:
            return cls.empty(n_features)
        for name, dtype in (("sums", np.float64), ("counts", np.int64)):
            value = state.get(name)
            if value is None or value.shape != (n_features,) or value.dtype != dtype:
                field = MISSING_PREFIX + name
                raise InvalidState(
                    f"state array {field!r} must be {np.dtype(dtype).name} of shape "
                    f"({n_features},) (the model's n_features)",
                    field=field,
                )
        sums, counts = np.array(state["sums"]), np.array(state["counts"])
        limit = min(events_learned, MAX_COUNT)
        if (counts < 0).any() or (counts > limit).any():
            raise InvalidState(
                f"state array '{MISSING_PREFIX}counts' must hold counts in [0, {limit}] (the "
                "events learned)",
                field=f"{MISSING_PREFIX}counts",
            )
        if not np.isfinite(sums).all() or (np.abs(sums) > counts * FEATURE_BOUND).any():
            raise InvalidState(
                f"state array '{MISSING_PREFIX}sums' must hold finite sums of at most "
                f"'{MISSING_PREFIX}counts' times the feature bound ({FEATURE_BOUND:g})",
                field=f"{MISSING_PREFIX}sums",
            )
        return cls(sums, counts)

    def means(self) -> np.ndarray:
        """Each feature's mean of the values learned (0 where none was)."""
        return np.divide(
            self.sums, self.counts, out=np.zeros_like(self.sums), where=self.counts > 0
        )

    def fill_for_scoring(self, X: np.ndarray) -> np.ndarray:
        """``X`` with each NaN replaced by its feature's current mean (``X`` itself when none
        is missing); the means do not move."""
        missing = np.isnan(X)
        if not missing.any():
            return X
        return np.where(missing, self.means(), X)

    def fill_and_learn(self, X: np.ndarray) -> np.ndarray:
        """``X`` with each NaN replaced by its feature's mean as of the event's position
        (the events before it in ``X`` included), and the sums and counts moved past ``X``.

        One cumulative sum down the rows, started from the sums so far, adds the values in
        the order a one-at-a-time stream would; a missing value adds 0, so the running sum
        and count *at* a missing value are those of the events before it."""
        missing = np.isnan(X)
        any_missing = bool(missing.any())
        running_sums = np.where(missing, 0.0, X) if any_missing else X.copy()
        running_sums[0] += self.sums
        np.cumsum(running_sums, axis=0, out=running_sums)
        self.sums[:] = running_sums[-1]
        if not any_missing:
            self.counts += X.shape[0]
            return X
        running_counts = (~missing).astype(np.int64)
        running_counts[0] += self.counts
        np.cumsum(running_counts, axis=0, out=running_counts)
        self.counts[:] = running_counts[-1]
        filled = X.copy()
        seen = running_counts[missing]
        filled[missing] = np.divide(
            running_sums[missing], seen, out=np.zeros(len(seen)), where=seen > 0
        )
        return filled
