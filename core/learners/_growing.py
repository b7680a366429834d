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
these arrays in ``_growing_arrays`` (name -> :data:`Growth`: (axis, capacity), or the axes
and their capacities of an array that grows along several: a boosted ensemble's trees, whose
rows come at a fit and whose nodes are as many as its largest tree has);
:meth:`~core.learners._stateful.StateContract.from_state` accepts any length within
``[0, capacity]`` along each such axis (checked before the array is copied), and the learner's
own checks relate the lengths to its fill.
"""

from __future__ import annotations

import numpy as np

from core._arrays import FIRST_LENGTH

__all__ = ["FIRST_LENGTH", "Growth", "growing_shape_problem", "growth_bounds"]

#: how a growing array grows: ``(axis, capacity)``, or ``(axes, capacities)`` (tuples of one
#: length) for an array that grows along several axes
Growth = tuple[int, int] | tuple[tuple[int, ...], tuple[int, ...]]


def growth_bounds(axis: int | tuple[int, ...], capacity: int | tuple[int, ...]) -> dict[int, int]:
    """A growing array's capacity along each axis it grows on (axis -> capacity), from the
    two of its :data:`Growth`."""
    if isinstance(axis, int) and isinstance(capacity, int):
        return {axis: capacity}
    if isinstance(axis, tuple) and isinstance(capacity, tuple):
        return dict(zip(axis, capacity, strict=True))
    raise TypeError(f"a growth is (axis, capacity) or (axes, capacities), not {axis, capacity}")


def growing_shape_problem(
    key: str,
    value: np.ndarray,
    expected: np.ndarray,
    axis: int | tuple[int, ...],
    capacity: int | tuple[int, ...],
) -> str | None:
    """What is wrong with a stored growing array (None: it fits): the layout's dtype and
    every dimension it does not grow on, and at most its capacity along each it grows on
    (``axis`` and ``capacity``: a :data:`Growth`'s two)."""
    shape, want = value.shape, expected.shape
    bounds = growth_bounds(axis, capacity)
    if (
        value.dtype != expected.dtype
        or len(shape) != len(want)
        or any(
            not 0 <= shape[i] <= bounds[i] if i in bounds else shape[i] != want[i]
            for i in range(len(want))
        )
    ):
        wanted = [f"0..{bounds[i]}" if i in bounds else str(want[i]) for i in range(len(want))]
        grows = ", ".join(f"up to {bounds[i]} along axis {i}" for i in sorted(bounds))
        return (
            f"state array {key!r} has dtype {value.dtype} and shape {shape}; expected "
            f"{expected.dtype} and ({', '.join(wanted)}) (it grows as it fills, {grows})"
        )
    return None
