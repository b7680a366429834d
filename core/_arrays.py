"""Small array helpers shared by the prequential and regret windows and the learners' growing
buffers."""

from __future__ import annotations

import numbers

import numpy as np


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is a positive integer, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got: {value!r}")
    return int(value)


def grown(array: np.ndarray, needed: int, capacity: int, axis: int = 0) -> np.ndarray:
    """``array`` with room for ``needed`` slots along ``axis``, grown geometrically up to
    ``capacity`` (the array itself when it has them, or has ``capacity`` already).

    Buffers start small and grow like a list, so a window of capacity 100,000 that has seen ten
    events holds ten slots, in memory and in its stored state (core/learners/_growing.py: the
    learners' buffers, reservoirs and windows that do the same).

    >>> grown(np.arange(3), 4, 10).tolist()
    [0, 1, 2, 0, 0, 0]
    >>> grown(np.ones((2, 3)), 5, 4, axis=1).shape
    (2, 4)
    """
    length = array.shape[axis]
    if min(needed, capacity) <= length:
        return array
    shape = list(array.shape)
    shape[axis] = min(capacity, max(needed, 2 * length))
    larger = np.zeros(shape, dtype=array.dtype)
    larger[(slice(None),) * axis + (slice(0, length),)] = array
    return larger
