"""The ``half_life`` option every online learner takes (docs/algorithms/forgetting.md).

``half_life=None`` (the default) is the learner without forgetting: no state array is added
and the kernels take their paths without it.  ``half_life=H`` (events, >= 1) makes the learner
forget: an event ``H`` events old weighs half as much as the newest one (forgetting.1).  Each
learner documents what that means for it (its step sizes, class statistics, reservoirs) on its
page of docs/algorithms/.
"""

from __future__ import annotations

import numpy as np

from core.learners._params import Constraint, Interval
from core.learners._state import Count, Finite, ReservoirFill, StateInvariant

#: the declared constraint of ``half_life`` (an event count; a fraction of an event would
#: forget everything between two events)
HALF_LIFE: list[Constraint] = [None, Interval(float, 1, None)]


class HalfLife:
    """Mixin declaring the ``half_life`` hyper-parameter (off by default) of a learner that
    forgets; listed before the hyper-parameters every learner takes
    (``class SPAM(HalfLife, OnlineLearner)``)."""

    half_life: float | None = None


def half_life_arg(half_life: float | None) -> float:
    """The kernels' form of the option: ``H`` as a float, 0.0 for "off"."""
    return 0.0 if half_life is None else float(half_life)


def clock_state(half_life: float | None) -> dict[str, np.ndarray]:
    """``forget_clock``: events learned so far, the time base of (forgetting.1) (only with
    ``half_life``; absent otherwise, so the states of learners without it do not change)."""
    if half_life is None:
        return {}
    return {"forget_clock": np.zeros(1, dtype=np.int64)}


def clock_invariants(half_life: float | None) -> dict[str, StateInvariant]:
    return {} if half_life is None else {"forget_clock": Count()}


def weighted_state(half_life: float | None, averaged: bool) -> dict[str, np.ndarray]:
    """The arrays of exponentially weighted class statistics (forgetting.3): the clock and the
    epoch of the weights, the classes' weights ``[negatives, positives]`` and, for a learner
    that averages its iterates, the averaged iterates' weight."""
    if half_life is None:
        return {}
    state = {
        **clock_state(half_life),
        "forget_epoch": np.zeros(1, dtype=np.int64),
        "class_weight": np.zeros(2),
    }
    if averaged:
        state["avg_weight"] = np.zeros(1)
    return state


def weighted_invariants(half_life: float | None, clock_equals: str) -> dict[str, StateInvariant]:
    """Invariants of :func:`weighted_state`; ``clock_equals`` names the learner's own event
    counter, which the clock always equals."""
    if half_life is None:
        return {}
    return {
        "forget_clock": Count(equal=clock_equals),
        "forget_epoch": Count(0, "forget_clock"),
        "class_weight": Finite(0.0),
        "avg_weight": Finite(0.0),
    }


def forget_arrays(state: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """``(clock, epoch, class_weight, avg_weight)`` for the kernels; placeholders (never read
    with ``half_life`` 0) where the state has none."""
    return tuple(state.get(key, _PLACEHOLDERS[key]) for key in _PLACEHOLDERS)


_PLACEHOLDERS = {
    "forget_clock": np.zeros(1, dtype=np.int64),
    "forget_epoch": np.zeros(1, dtype=np.int64),
    "class_weight": np.zeros(2),
    "avg_weight": np.zeros(1),
}


def reservoir_fill(half_life: float | None, capacity: int, seen: str) -> StateInvariant:
    """A uniform reservoir holds exactly ``min(seen, capacity)`` events; a biased one
    (forgetting.4) inserts only some of its offers, so at most that many."""
    if half_life is None:
        return ReservoirFill(capacity=capacity, seen=seen)
    return Count(0, capacity) if capacity <= 0 else _AtMost(capacity, seen)


def row_reservoir(prefix: str, capacity: int, n_features: int) -> dict[str, np.ndarray]:
    """The state of a reservoir of ``capacity`` dense rows: ``<prefix>_X`` (the rows),
    ``<prefix>_fill`` (how many of them hold an event) and ``<prefix>_seen`` (the events
    offered to it so far)."""
    return {
        f"{prefix}_X": np.zeros((capacity, n_features)),
        f"{prefix}_fill": np.zeros(1, dtype=np.int64),
        f"{prefix}_seen": np.zeros(1, dtype=np.int64),
    }


def row_reservoir_invariants(
    prefix: str, capacity: int, half_life: float | None, offered: str | None = None
) -> dict[str, StateInvariant]:
    """Invariants of :func:`row_reservoir`: finite rows, and a fill that
    :func:`reservoir_fill` allows after the ``<prefix>_seen`` offers (or after those counted
    by the state array ``offered``, for a reservoir offered only some of the events seen)."""
    seen = f"{prefix}_seen"
    return {
        f"{prefix}_X": Finite(),
        f"{prefix}_fill": reservoir_fill(half_life, capacity, offered or seen),
        seen: Count(),
    }


class _AtMost(Count):
    """At most ``capacity`` and at most the value of the state array ``seen``."""

    def __init__(self, capacity: int, seen: str) -> None:
        super().__init__(0, seen)
        self.capacity = capacity

    def problem(self, array: np.ndarray, state) -> str | None:
        found = super().problem(array, state)
        fill = int(array.reshape(-1)[0])
        if found is None and fill > self.capacity:
            return f"holds {fill}; a reservoir of capacity {self.capacity} holds at most that"
        return found
