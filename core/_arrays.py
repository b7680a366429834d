"""Small array helpers shared by the prequential and regret windows."""

from __future__ import annotations

import numbers

import numpy as np


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is a positive integer, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got: {value!r}")
    return int(value)


def grown(array: np.ndarray, needed: int, capacity: int) -> np.ndarray:
    """``array`` with room for ``needed`` rows, grown geometrically up to ``capacity`` rows.

    Buffers start small and grow like a list, so a window of capacity 100,000 that has seen ten
    events holds ten slots, in memory and in its stored state.

    >>> grown(np.arange(3), 4, 10).tolist()
    [0, 1, 2, 0, 0, 0]
    """
    if needed <= array.shape[0]:
        return array
    size = min(capacity, max(needed, 2 * array.shape[0]))
    larger = np.zeros((size, *array.shape[1:]), dtype=array.dtype)
    larger[: array.shape[0]] = array
    return larger
