"""State arrays that grow as they fill: a buffer, a reservoir or a window is allocated for what
it holds and doubled as it fills, up to the capacity its hyper-parameters declare, so a model
that has seen a few hundred events does not hold thousands of empty rows (in the cache and in
every stored state).

They grow by :func:`core._arrays.grown` (doubling, so the copies cost O(1) per slot
amortised).  A learner names these arrays in ``_growing_arrays`` (name -> (axis, capacity));
:meth:`~core.learners._stateful.StateContract.from_state` accepts any length within
``[0, capacity]`` along that axis (checked before the array is copied), and the learner's own
checks relate the length to its fill.
"""

from __future__ import annotations

__all__ = ["growing_shape_problem"]


def growing_shape_problem(
    key: str, shape: tuple[int, ...], expected: tuple[int, ...], axis: int, capacity: int
) -> str | None:
    """What is wrong with a stored growing array's shape (None: it fits): every dimension but
    ``axis`` as the layout's, and at most ``capacity`` along ``axis``."""
    others = [i for i in range(len(expected)) if i != axis]
    if len(shape) != len(expected) or any(shape[i] != expected[i] for i in others):
        return f"state array {key!r} has shape {shape}; expected {expected} up to axis {axis}"
    if not 0 <= shape[axis] <= capacity:
        return (
            f"state array {key!r} has {shape[axis]} slots along axis {axis}; expected at most "
            f"its capacity {capacity}"
        )
    return None
