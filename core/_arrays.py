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


#: the dtype of the labels a state holds (-1 / +1, and 0 for a slot not written yet): one byte,
#: not eight, since a mature model holds tens of thousands (its windows and fit buffers); the
#: kernels that take labels are given int64 copies, except where they write a held array
LABELS = np.int8

#: the fewest slots a growing array takes when it first grows (less when its capacity is less)
FIRST_LENGTH = 16


def slots_for(needed: int) -> int:
    """The length a growing array takes to hold ``needed`` slots: :data:`FIRST_LENGTH`, then the
    least multiple of an eighth of the power of two below ``needed`` that holds them (16, 18,
    20, ..., 30, 32, 36, ..., 60, 64, 72, ...).  A function of ``needed`` alone, so a batch
    learned at once leaves the lengths its events learned one at a time leave.

    [CHOICE] steps of an eighth of an octave (geometric, ratio 1.125 or less), not doubling: an
    array holds at most 12.5 % of unused slots (half, when doubling), and the copies growth makes
    still cost O(1) per slot (at most about 9 copies of each slot in all).

    >>> [slots_for(n) for n in (0, 16, 17, 33, 250, 300, 5000)]
    [16, 16, 18, 36, 256, 320, 5120]
    """
    if needed <= FIRST_LENGTH:
        return FIRST_LENGTH
    step = 1 << ((needed - 1).bit_length() - 4)  # an eighth of the octave holding `needed`
    return -(-needed // step) * step


def grown(array: np.ndarray, needed: int, capacity: int, axis: int = 0) -> np.ndarray:
    """``array`` with room for ``needed`` slots along ``axis``: itself when it has them (or has
    ``capacity`` already), else a copy grown to :func:`slots_for` ``needed``, at most
    ``capacity`` (the new slots zero).

    Buffers start small and grow geometrically, so a window of capacity 100,000 that has seen
    ten events holds 16 slots, in memory and in its stored state (core/learners/_growing.py:
    the learners' buffers, reservoirs and windows that do the same).

    >>> grown(np.arange(3), 4, 10).tolist()
    [0, 1, 2, 0, 0, 0, 0, 0, 0, 0]
    >>> grown(np.ones((2, 3)), 5, 4, axis=1).shape
    (2, 4)
    >>> grown(np.ones(16), 17, 100).shape
    (18,)
    """
    length = array.shape[axis]
    if min(needed, capacity) <= length:
        return array
    shape = list(array.shape)
    shape[axis] = min(capacity, slots_for(needed))
    larger = np.zeros(shape, dtype=array.dtype)
    larger[(slice(None),) * axis + (slice(0, length),)] = array
    return larger


def write_to_rings(rings, start: int, kept: int, capacity: int) -> None:
    """The last ``kept`` values of each ``(ring, values)`` of ``rings`` written into the ring's
    slots from ``start`` on, modulo ``capacity``: at most two runs, written by slices (an index
    array costs more than the copy), one event by an item write (~1 us less than slices)."""
    if kept == 1:
        for ring, values in rings:
            ring[start] = values[-1]
        return
    head = min(kept, capacity - start)
    for ring, values in rings:
        tail = values[len(values) - kept :]
        ring[start : start + head] = tail[:head]
        if head < kept:
            ring[: kept - head] = tail[head:]
