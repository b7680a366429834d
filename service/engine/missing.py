"""The running means behind a dense model's ``missing_values: "mean"`` policy
(docs/architecture.md, "Missing values"): a missing value of an event learned is filled with
the mean of the values present before it, one value at a time in order, so the state does not
depend on how events were split into requests; scoring fills with the current mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core._kernels.missing_means import fill_and_learn_means
from core.errors import InvalidState
from core.learners._state import MAX_COUNT
from core.validation import FEATURE_BOUND

MISSING_PREFIX = "missing:"
MEANS = MISSING_PREFIX + "means"
COUNTS = MISSING_PREFIX + "counts"


@dataclass
class RunningMeans:
    """Per-feature running means and counts of the present values of the events learned."""

    means: np.ndarray  # float64, (n_features,), each within the feature bound
    counts: np.ndarray  # int64, (n_features,)

    @classmethod
    def empty(cls, n_features: int) -> RunningMeans:
        return cls(np.zeros(n_features, dtype=np.float64), np.zeros(n_features, dtype=np.int64))

    def get_state(self) -> dict[str, np.ndarray]:
        return {"means": self.means, "counts": self.counts}

    @classmethod
    def from_arrays(
        cls, arrays: dict[str, np.ndarray], n_features: int, events_learned: int
    ) -> RunningMeans:
        """From the committed ``missing:*`` arrays (absent only for a model that learned
        nothing); InvalidState names the array at fault: a count is at most the events learned, a
        mean finite, within the feature bound, and 0 where its count is."""
        state = {name: value for name, value in arrays.items() if name.startswith(MISSING_PREFIX)}
        if not state and events_learned == 0:
            return cls.empty(n_features)
        unexpected = sorted(state.keys() - {MEANS, COUNTS})
        if unexpected:
            raise InvalidState(
                f"state array {unexpected[0]!r} is not part of a model's running means "
                f"({MEANS!r}, {COUNTS!r})",
                field=unexpected[0],
            )
        for field, dtype in ((MEANS, np.float64), (COUNTS, np.int64)):
            value = state.get(field)
            if value is None:
                raise InvalidState(f"state array {field!r} is missing", field=field)
            if value.shape != (n_features,) or value.dtype != dtype:
                raise InvalidState(
                    f"state array {field!r} must be {np.dtype(dtype).name} of shape "
                    f"({n_features},) (the model's n_features)",
                    field=field,
                )
        means, counts = np.array(state[MEANS]), np.array(state[COUNTS])
        limit = min(events_learned, MAX_COUNT)
        if (counts < 0).any() or (counts > limit).any():
            raise InvalidState(
                f"state array {COUNTS!r} must hold counts in [0, {limit}] (the events learned)",
                field=COUNTS,
            )
        if not (np.abs(means) <= FEATURE_BOUND).all() or (means[counts == 0] != 0).any():
            raise InvalidState(
                f"state array {MEANS!r} must hold means of magnitude at most the feature "
                f"bound ({FEATURE_BOUND:g}), 0 where {COUNTS!r} is 0",
                field=MEANS,
            )
        return cls(means, counts)

    def fill_for_scoring(self, X: np.ndarray) -> np.ndarray:
        """``X`` with each NaN replaced by its feature's current mean (``X`` itself when none
        is missing); the means do not move."""
        missing = np.isnan(X)
        if not missing.any():
            return X
        return np.where(missing, self.means, X)

    def fill_and_learn(self, X: np.ndarray) -> np.ndarray:
        """``X`` with each NaN replaced by its feature's mean as of the event's position
        (the events before it in ``X`` included), and the means and counts moved past ``X``.
        ``X`` itself is never written: a batch with a missing value is filled in a copy."""
        if np.isnan(X).any() or not (X.flags.c_contiguous and X.flags.writeable):
            # the kernel's one compiled signature: a C-ordered, writeable float64 array
            X = np.array(X, dtype=np.float64, order="C", copy=True)
        fill_and_learn_means(X, self.means, self.counts, FEATURE_BOUND)
        return X
