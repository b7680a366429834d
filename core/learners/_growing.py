"""State arrays that grow as they fill: a buffer, a reservoir or a window is allocated for what
it holds and grown as it fills, up to the capacity its hyper-parameters declare, so a model
that has seen a few hundred events does not hold thousands of empty rows (in the cache and in
every stored state).

They grow by :func:`core._arrays.grown` (geometrically, so the copies cost O(1) per slot
amortised) to lengths that depend on the slots needed alone (:func:`core._arrays.slots_for`:
16, 18, 20, ..., steps of an eighth of an octave, up to the capacity), so a batch learned at
once leaves the same state, bit for bit, as its events learned one at a time.  Kernels read
only the slots the learner's counters say are filled (its fill; a ring is indexed modulo its
capacity, or its length, which holds every event written until it is full), so what is
learned is what arrays of full capacity learn (tests/core/test_growing.py).  A learner names
these arrays in ``_growing_arrays`` (name -> (axis, capacity));
:meth:`~core.learners._stateful.StateContract.from_state` accepts any length within
``[0, capacity]`` along that axis (checked before the array is copied), and the learner's own
checks relate the length to its fill.
"""

from __future__ import annotations

import numpy as np

from core._arrays import FIRST_LENGTH

__all__ = ["FIRST_LENGTH", "growing_shape_problem"]


def growing_shape_problem(
    key: str, value: np.ndarray, expected: np.ndarray, axis: int, capacity: int
) -> str | None:
    """What is wrong with a stored growing array (None: it fits): the layout's dtype and
    every dimension but ``axis``, and at most ``capacity`` along ``axis``."""
    shape, want = value.shape, expected.shape
    others = [i for i in range(len(want)) if i != axis]
    if (
        value.dtype != expected.dtype
        or len(shape) != len(want)
        or any(shape[i] != want[i] for i in others)
        or not 0 <= shape[axis] <= capacity
    ):
        wanted = list(want)
        wanted[axis] = f"0..{capacity}"
        return (
            f"state array {key!r} has dtype {value.dtype} and shape {shape}; expected "
            f"{expected.dtype} and ({', '.join(map(str, wanted))}) (it grows as it fills, up "
            f"to {capacity} along axis {axis})"
        )
    return None
