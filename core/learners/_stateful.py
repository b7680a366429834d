"""The learned state (the second half of the learner contract, docs/architecture.md §3): one
flat dict of arrays, ``state_``, started by :meth:`StateContract.initialize`, copied out by
``get_state`` and rebuilt by ``from_state``, which checks its layout and every declared
invariant (:mod:`core.learners._state`) before any kernel can see it.  Kept apart from
:class:`core.learners._base.OnlineLearner`, which inherits it, because nothing here learns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from core.errors import InvalidState
from core.learners._growing import Growth, growing_shape_problem
from core.learners._state import Count, Finite, StateInvariant, validate_state
from core.preprocessing import initial_scaler_state

__all__ = ["NotFittedError", "StateContract"]


#: the scaler arrays :func:`core.preprocessing.initial_scaler_state` adds (only those of the
#: learner's ``scaling`` are present): running counts, means and sums finite, squares >= 0
_SCALER_INVARIANTS: dict[str, StateInvariant] = {
    "scaler_count": Count(),
    "scaler_mean": Finite(),
    "scaler_m2": Finite(0.0),
    "scaler_present": Count(0, "scaler_count"),
    # the one magnitude of the non-zero values (> 0), 0 before the first, -1 once they varied
    "scaler_magnitude": Finite(-1.0),
    "scaler_nonzero": Count(),
    "scaler_sum": Finite(),
    "scaler_sum_sq": Finite(0.0),
}


def scaler_invariants(scaling: str) -> dict[str, StateInvariant]:
    """The declarations of the scaler arrays of ``scaling`` (a part of a composed learner that
    scales its own rows declares them under its prefix)."""
    return {key: _SCALER_INVARIANTS[key] for key in initial_scaler_state(scaling, 1)}


class NotFittedError(ValueError, AttributeError):
    """Raised when scoring with a learner that has no state yet (as scikit-learn does)."""


class StateContract(ABC):
    """Mixin: ``state_`` and its life cycle; a learner provides the hooks below."""

    name: ClassVar[str] = ""
    state_: dict[str, np.ndarray]

    if TYPE_CHECKING:  # provided by the learner (declared parameters); not parameters here
        scaling: str

        def __init__(self, **params: Any) -> None: ...

        def validate_params(self) -> None: ...

    @abstractmethod
    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        """The state of a learner that has seen nothing (see the module docstring)."""

    def _state_invariants(self, n_features: int) -> dict[str, StateInvariant]:
        """What each array of :meth:`_initial_state` may hold (see the module docstring).

        Not abstract so that a learner without declarations still builds, but
        :meth:`validate_state` refuses (TypeError) any state with an undeclared array: states
        are never loaded unchecked."""
        return {}

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """Invariants relating several arrays beyond the declarations (none by default)."""
        return None

    def _growing_arrays(self) -> dict[str, Growth]:
        """The state arrays that grow as they fill (:mod:`core.learners._growing`), of an
        initialised learner: name -> (axis, capacity) (:data:`~core.learners._growing.Growth`);
        none by default."""
        return {}

    # ------------------------------------------------------------------ state
    @property
    def is_initialized(self) -> bool:
        return hasattr(self, "state_")

    @property
    def n_features_in_(self) -> int:
        self._check_initialized()
        return int(self._scaler_arrays["n_features"][0])

    @property
    def _scaler_arrays(self) -> dict[str, np.ndarray]:
        """The dict that holds the width and the scaler's arrays: ``state_`` (a composite's
        own arrays, not the view over its parts')."""
        return self.state_

    def initialize(self, n_features: int) -> Self:
        """Start from scratch for ``n_features`` features (a model that has seen nothing)."""
        self.validate_params()
        if isinstance(n_features, bool) or not isinstance(n_features, int | np.integer):
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        if n_features < 1:
            raise ValueError(f"n_features must be a positive integer, got {n_features}")
        state = {"n_features": np.array([n_features], dtype=np.int64)}
        state.update(self._initial_state(int(n_features)))
        state.update(initial_scaler_state(self.scaling, int(n_features)))
        self.state_ = state
        self.__dict__.pop("_overflowed", None)
        return self

    def get_state(self) -> dict[str, np.ndarray]:
        """A copy of the learned state: flat dict of C-contiguous float64/int64/uint64 arrays
        (int16 / int32 for the boosted trees' node and feature indices, int8 for labels)."""
        self._check_initialized()
        return {key: value.copy() for key, value in self.state_.items()}

    def validate_state(self, state: dict[str, np.ndarray]) -> None:
        """Check a state of this learner's layout by value (every declared invariant, then
        :meth:`_check_state`); raises :class:`~core.errors.InvalidState` naming the array."""
        n_features = int(state["n_features"][0])
        invariants: dict[str, StateInvariant] = {"n_features": Count(1, n_features)}
        invariants.update(self._state_invariants(n_features))
        invariants.update(_SCALER_INVARIANTS)
        validate_state(invariants, state)
        self._check_state(state)

    @classmethod
    def from_state(
        cls,
        params: dict[str, Any],
        state: dict[str, np.ndarray],
        *,
        n_features: int | None = None,
    ) -> Self:
        """Rebuild a learner from ``get_params()`` and ``get_state()``; continues bit for bit.

        The arrays are checked against the state layout the parameters imply (same keys,
        dtypes and shapes; a growing array's length within its capacity), then by value
        (:meth:`validate_state`: fills within capacity,
        counts consistent, finite floats), so no kernel ever sees a truncated, foreign or
        corrupt state; :class:`~core.errors.InvalidState` (a ValueError) names the array at
        fault.  ``n_features``, when given, is the width the state must have (a model's
        configuration): checked before any array is allocated for the layout.  There is one
        state layout per parameters: a state of another layout is refused, naming the first
        array missing or unexpected.
        """
        learner = cls(**params)
        try:
            stored_width = np.asarray(state["n_features"])
            width = int(stored_width.reshape(-1)[0])
        except (KeyError, IndexError, TypeError, ValueError, OverflowError):
            raise InvalidState(
                "state has no valid 'n_features' entry", field="n_features"
            ) from None
        if stored_width.shape != (1,) or stored_width.dtype != np.int64:
            raise InvalidState(
                f"state array 'n_features' has dtype {stored_width.dtype} and shape "
                f"{stored_width.shape}; expected int64 and (1,)",
                field="n_features",
            )
        if n_features is not None and width != n_features:
            raise InvalidState(
                f"state array 'n_features' holds {width}; expected {n_features} (the model's "
                "n_features)",
                field="n_features",
            )
        if width < 1:
            raise InvalidState(
                f"state array 'n_features' holds {width}; expected a positive integer",
                field="n_features",
            )
        template = learner.initialize(width).state_
        missing = sorted(set(template) - set(state))
        extra = sorted(set(state) - set(template))
        if missing or extra:
            raise InvalidState(
                f"state does not match learner {cls.name!r} with these parameters: "
                f"missing {missing}, unexpected {extra}",
                field=(missing or extra)[0],
            )
        restored = {}
        growing = learner._growing_arrays()
        for key, expected in template.items():
            value = np.asarray(state[key])
            if key in growing:
                problem = growing_shape_problem(key, value, expected, *growing[key])
                if problem is not None:
                    raise InvalidState(problem, field=key)
            elif value.dtype != expected.dtype or value.shape != expected.shape:
                raise InvalidState(
                    f"state array {key!r} has dtype {value.dtype} and shape {value.shape}; "
                    f"expected {expected.dtype} and {expected.shape}",
                    field=key,
                )
            restored[key] = np.array(value, dtype=expected.dtype, order="C", copy=True)
        learner.validate_state(restored)
        learner.state_ = restored
        return learner

    def _check_initialized(self) -> None:
        if self.__dict__.get("_overflowed"):
            raise InvalidState(
                f"this {type(self).__name__} overflowed on its last batch, which it could not "
                "undo; give it a state again (from_state) or restart it (initialize)"
            )
        if not self.is_initialized:
            raise NotFittedError(
                f"this {type(self).__name__} has learned nothing yet; "
                "call partial_fit, fit or initialize first"
            )
