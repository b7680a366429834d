"""The check after every learned batch that no state array grew past its bound.

Learning can grow some state arrays without bound from legal inputs (weights, averaged
iterates: they diverge on large features with a large step); a learner declares them
:class:`~core.learners._state.Grown` in its ``_state_invariants``.  :class:`GrownStateChecks`
reads those declarations once per state layout and checks the arrays with one kernel call
after every batch (:class:`~core.learners._base.OnlineLearner` raises
:class:`~core.errors.StateOverflow` on the batch that would pass a bound).

A learner may name the grown arrays it knows unchanged since the check last passed
(:meth:`GrownStateChecks._unchanged_grown_keys`): their values were in bounds then and still
are, so they are not read again.  ``pmb`` changes its weights only at the end of an epoch: a
hashed model's 2^18-wide weights were read after every event, and are now read after the
events that take a step (bench/README.md, "pmb's hashed event").
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import numpy as np

from core._kernels.validation import count_out_of_range_in
from core.errors import StateOverflow
from core.learners._state import STATE_BOUND, Grown, StateInvariant


class GrownStateChecks:
    """Mixin of :class:`~core.learners._base.OnlineLearner`: the checks of its
    :class:`~core.learners._state.Grown` state arrays."""

    state_: dict[str, np.ndarray]

    if TYPE_CHECKING:  # the learner's own (StateContract)

        def _state_invariants(self, n_features: int) -> dict[str, StateInvariant]: ...

    def grown_state_keys(self) -> tuple[str, ...]:
        """The state arrays declared :class:`~core.learners._state.Grown`: those that learning
        can grow without bound from legal inputs (weights and what is computed from them),
        checked after every batch (the others hold inputs within the feature bound, or
        statistics of them, which that bound keeps finite)."""
        return self._grown_state()[0]

    def _grown_state(self) -> tuple[tuple[str, ...], np.ndarray]:
        """:meth:`grown_state_keys` and their bounds, read from the declarations once per
        state layout (a new ``n_features`` array: ``initialize``, ``from_state``)."""
        width = self._width_array()
        cached = self.__dict__.get("_grown")
        if cached is None or cached[0] is not width:
            invariants = self._state_invariants(int(width[0]))
            state = self.state_  # a declaration may cover arrays of other parameters
            keys = tuple(
                key for key, rule in invariants.items() if isinstance(rule, Grown) and key in state
            )
            bounds = np.array([invariants[key].bound for key in keys])  # type: ignore[attr-defined]
            cached = self.__dict__["_grown"] = (width, keys, bounds)
        return cached[1], cached[2]

    def _width_array(self) -> np.ndarray:
        """The ``n_features`` array: a new one is a new state layout."""
        return self.state_["n_features"]

    def _current_arrays(self, keys: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """The state arrays of ``keys`` as they are now (a composite reads them from its parts
        without building its view: core.learners._composed)."""
        state = self.state_
        return tuple(map(state.__getitem__, keys))

    #: whether the learner may name grown arrays unchanged since their last check
    #: (:meth:`_unchanged_grown_keys`); the check asks the others nothing
    settles_grown_arrays = False

    def _settles_grown_arrays(self) -> bool:
        return self.settles_grown_arrays

    def _unchanged_grown_keys(self) -> frozenset[str]:
        """The :meth:`grown_state_keys` whose arrays this learner knows unchanged (the same
        objects, not written) since :meth:`_grown_state_checked` was last called: none by
        default."""
        return frozenset()

    def _grown_state_checked(self) -> None:
        """The check of every grown array passed (the learner may note which arrays it read)."""

    def grown_state_in_bounds(self) -> bool:
        """Whether every :meth:`grown_state_keys` array is finite and within its bound: one
        kernel call over them all (the :meth:`_unchanged_grown_keys` passed as empty arrays)."""
        keys, bounds = self._grown_state()
        arrays = self._current_arrays(keys)
        if not arrays:
            return True
        settles = self._settles_grown_arrays()
        if not self._kernel_in_bounds(keys, arrays, bounds, settles):
            return False
        if settles:
            self._grown_state_checked()
        return True

    def _kernel_in_bounds(
        self,
        keys: tuple[str, ...],
        arrays: tuple[np.ndarray, ...],
        bounds: np.ndarray,
        settles: bool,
    ) -> bool:
        # kernels update the state in place, so the same arrays come back batch after batch:
        # their 1-d views for the kernel are kept for them (a view of an array shows its memory
        # for as long as the array lives, so it is made once; a strided array, which has no
        # flat view, is copied at each call)
        cached = self.__dict__.get("_grown_flat")
        if cached is None or not all(map(operator.is_, arrays, cached[0])):
            flat = tuple(
                (array if array.ndim == 1 else array.reshape(-1))
                if array.flags.c_contiguous
                else None
                for array in arrays
            )
            strided = any(view is None for view in flat)
            cached = self.__dict__["_grown_flat"] = (arrays, flat, strided)
        kept = cached[1]
        if cached[2]:
            kept = tuple(np.ascontiguousarray(array).reshape(-1) for array in arrays)
        unchanged = self._unchanged_grown_keys() if settles else None
        if unchanged:
            # an empty array of the same type: the kernel's tuple type, and so its compiled
            # version, stays the same
            kept = tuple(
                value[:0] if key in unchanged else value
                for key, value in zip(keys, kept, strict=True)
            )
        return count_out_of_range_in(kept, bounds) == 0

    def _check_grown_state(self, *, restored: bool) -> None:
        """Raise :class:`~core.errors.StateOverflow` when the batch just learned grew a state
        array past its bound.  ``restored``: the caller puts the saved state back; otherwise
        the learner is marked overflowed and refuses every use until ``from_state`` or
        ``initialize`` gives it a state again."""
        if self.grown_state_in_bounds():
            return
        if not restored:
            self.__dict__["_overflowed"] = True
        outcome = (
            "nothing was learned"
            if restored
            else "this learner is unusable until a saved state is put back (from_state) or it "
            "is restarted (initialize)"
        )
        raise StateOverflow(
            "learning these events would grow the model's weights beyond "
            f"+-{STATE_BOUND:g} (they diverge on features this large); {outcome}: scale the "
            "features (the 'scaling' parameter) or lower the step size",
            restored=restored,
        )
