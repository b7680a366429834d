"""Declared state invariants, checked by one function (as ``_params`` does for hyper-parameters).

Kernels do no bounds checks (docs/architecture.md §3: validation happens once, in Python), so a
state read back from a snapshot or a store must be checked *by value* before any kernel sees it:
a reservoir fill of 2**40 makes a kernel write far outside its buffer, a NaN weight poisons
every later score.  Each learner declares, next to ``_initial_state``, what every one of its
state arrays may hold (``_state_invariants(n_features)``: a dict from array name to one
invariant below); :func:`validate_state` checks all of them and raises :class:`~core.errors.InvalidState` naming
the first array at fault.

A bound is an integer, the name of another state array holding one value (``"count_pos"``), or
:class:`Sum` of such names, so relations between counters read as declarations.

>>> import numpy as np
>>> invariants = {"count": Count(), "fill": ReservoirFill(capacity=100, seen="count")}
>>> state = {"count": np.array([250]), "fill": np.array([100])}
>>> validate_state(invariants, state)
>>> state["fill"][0] = 2**40
>>> try:
...     validate_state(invariants, state)
... except ValueError as error:
...     print(error, "|", error.field)
state array 'fill' holds 1099511627776 at index 0; a reservoir of capacity 100 that was offered 250 events holds exactly 100 | fill
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from core.errors import InvalidState

__all__ = [
    "MAX_COUNT",
    "STATE_BOUND",
    "VALUE_BOUND",
    "Grown",
    "RNG_STATE",
    "Count",
    "Finite",
    "Fraction",
    "Index",
    "OneOf",
    "ReservoirFill",
    "StateInvariant",
    "Sum",
    "validate_state",
    "with_prefix",
]

#: [CHOICE] the largest value a counter may hold: 2**53 events (a million a second for 285
#: years).  Counters are int64 that kernels increment and compare with capacities; a value
#: near 2**63 would wrap to a negative count on the next event and index a buffer with it.
MAX_COUNT = 2**53

#: [CHOICE] the largest magnitude of an array that learning can grow without bound from legal
#: inputs (weights, and what is computed from them: averaged iterates, scores' moments):
#: :class:`Grown`.  With features within ``core.validation.FEATURE_BOUND`` (1e100) a weight's
#: product with a feature stays below 1e250, and its square below 1e300, so scoring and the
#: next update cannot overflow from a state that holds it; learning that would grow such an
#: array past it is refused, and the batch is rolled back (``OnlineLearner.partial_fit``).
STATE_BOUND = 1e150

#: [CHOICE] the largest magnitude of any other float state (:class:`Finite`): statistics of the
#: inputs, which the feature bound keeps far below it (a sum of squares of 2**53 events is at
#: most ~1e222), and buffers of inputs.  A value near float64's 1.8e308 overflows the first sum
#: or square it enters, so a snapshot holding one is refused before any kernel sees it.
VALUE_BOUND = 1e250


class Sum:
    """The sum of the single values of several state arrays (``Sum("n_pos", "n_neg")``)."""

    def __init__(self, *keys: str) -> None:
        self.keys = keys

    def __repr__(self) -> str:
        return " + ".join(self.keys)


Bound = int | str | Sum


def _resolve(bound: Bound, state: Mapping[str, np.ndarray]) -> int:
    if isinstance(bound, Sum):
        return sum(_resolve(key, state) for key in bound.keys)
    if isinstance(bound, str):
        return int(np.asarray(state[bound]).reshape(-1)[0])
    return int(bound)


def _describe(bound: Bound, state: Mapping[str, np.ndarray]) -> str:
    if isinstance(bound, int):
        return str(bound)
    return f"{bound} = {_resolve(bound, state)}"


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(-1))[0])


class StateInvariant:
    """What one state array may hold; :meth:`problem` returns None or what is wrong."""

    #: state arrays this invariant reads (checked first, so the bounds they give are sound)
    def references(self) -> tuple[str, ...]:
        return ()

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        raise NotImplementedError

    def renamed(self, prefix: str) -> StateInvariant:
        """This invariant with each referenced array name prefixed (:func:`with_prefix`)."""
        return self


class Finite(StateInvariant):
    """Finite floats of magnitude at most ``bound`` (:data:`VALUE_BOUND` unless given),
    optionally ``>= minimum`` (``> minimum`` when ``strict``)."""

    def __init__(
        self, minimum: float | None = None, *, strict: bool = False, bound: float = VALUE_BOUND
    ) -> None:
        self.minimum, self.strict, self.bound = minimum, strict, bound

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        if array.dtype.kind != "f":
            return f"has dtype {array.dtype}; expected float64"
        finite = np.isfinite(array)
        if not finite.all():
            index = _first(~finite)
            value = float(array.reshape(-1)[index])
            return f"holds {value!r} at index {index}; expected finite values"
        outside = np.abs(array) > self.bound
        if outside.any():
            index = _first(outside)
            value = float(array.reshape(-1)[index])
            return (
                f"holds {value!r} at index {index}; expected values of magnitude at most "
                f"{self.bound:g}"
            )
        if self.minimum is not None and array.size:
            bad = array <= self.minimum if self.strict else array < self.minimum
            if bad.any():
                index = _first(bad)
                relation = ">" if self.strict else ">="
                return (
                    f"holds {float(array.reshape(-1)[index])!r} at index {index}; expected values "
                    f"{relation} {self.minimum}"
                )
        return None


class Grown(Finite):
    """An array that learning can grow without bound from legal inputs (weights, averaged
    iterates, scores' moments): finite, of magnitude at most :data:`STATE_BOUND` (a square of
    such values -- a second moment of scores, a squared norm, a loss -- at most
    :data:`VALUE_BOUND`), and checked
    after every learned batch as well as on load (``OnlineLearner.grown_state_keys``), so
    that a batch which would overflow it is refused instead of stored."""

    def __init__(
        self, minimum: float | None = None, *, strict: bool = False, bound: float = STATE_BOUND
    ) -> None:
        super().__init__(minimum, strict=strict, bound=bound)


class Count(StateInvariant):
    """Integers in ``[low, high]`` (``high`` at most :data:`MAX_COUNT`), or equal to ``equal``."""

    def __init__(
        self, low: Bound = 0, high: Bound | None = None, *, equal: Bound | None = None
    ) -> None:
        self.low, self.high, self.equal = low, high, equal

    def references(self) -> tuple[str, ...]:
        bounds = (self.low, self.high, self.equal)
        names: list[str] = []
        for bound in bounds:
            if isinstance(bound, str):
                names.append(bound)
            elif isinstance(bound, Sum):
                names.extend(bound.keys)
        return tuple(names)

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        if array.dtype.kind not in "iu":
            return f"has dtype {array.dtype}; expected int64"
        values = array.astype(np.int64, copy=False)
        if self.equal is not None:
            expected = _resolve(self.equal, state)
            bad = values != expected
            if bad.any():
                index = _first(bad)
                return (
                    f"holds {int(values.reshape(-1)[index])} at index {index}; expected "
                    f"{_describe(self.equal, state)}"
                )
            return None
        low = _resolve(self.low, state)
        high = MAX_COUNT if self.high is None else min(_resolve(self.high, state), MAX_COUNT)
        bad = (values < low) | (values > high)
        if bad.any():
            index = _first(bad)
            upper = f"{MAX_COUNT}" if self.high is None else _describe(self.high, state)
            return (
                f"holds {int(values.reshape(-1)[index])} at index {index}; expected an integer "
                f"in [{_describe(self.low, state)}, {upper}]"
            )
        return None

    def renamed(self, prefix: str) -> StateInvariant:
        def rename(bound: Bound) -> Bound:
            if isinstance(bound, str):
                return prefix + bound
            if isinstance(bound, Sum):
                return Sum(*(prefix + key for key in bound.keys))
            return bound

        high = None if self.high is None else rename(self.high)
        equal = None if self.equal is None else rename(self.equal)
        return Count(rename(self.low), high, equal=equal)


def Index(size: int) -> Count:  # noqa: N802 - reads as a type in the declarations
    """Positions into an axis of ``size`` entries: integers in ``[0, size - 1]``."""
    return Count(0, size - 1)


class ReservoirFill(StateInvariant):
    """The fill of a reservoir (Vitter's Algorithm R) of ``capacity`` rows after ``seen``
    offers: exactly ``min(seen, capacity)``, since every offer fills a free row first."""

    def __init__(self, capacity: int, seen: str) -> None:
        self.capacity, self.seen = capacity, seen

    def references(self) -> tuple[str, ...]:
        return (self.seen,)

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        if array.dtype.kind not in "iu":
            return f"has dtype {array.dtype}; expected int64"
        seen = _resolve(self.seen, state)
        expected = min(seen, self.capacity)
        value = int(array.reshape(-1)[0])
        if value != expected:
            return (
                f"holds {value} at index 0; a reservoir of capacity {self.capacity} that was "
                f"offered {seen} events holds exactly {expected}"
            )
        return None

    def renamed(self, prefix: str) -> StateInvariant:
        return ReservoirFill(self.capacity, prefix + self.seen)


class OneOf(StateInvariant):
    """Integers from a fixed set (labels in ``{-1, 0, 1}``, flags in ``{0, 1}``)."""

    def __init__(self, values: Iterable[int]) -> None:
        self.values = tuple(int(value) for value in values)

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        if array.dtype.kind not in "iu":
            return f"has dtype {array.dtype}; expected int64"
        bad = ~np.isin(array, self.values)
        if bad.any():
            index = _first(bad)
            return (
                f"holds {int(array.reshape(-1)[index])} at index {index}; expected one of "
                f"{set(self.values)}"
            )
        return None


class Fraction(StateInvariant):
    """Floats in ``[0, 1]``, or NaN where a metric is not defined yet (``auto``'s windowed
    pAUC / AUC before a candidate's first evaluation)."""

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        if array.dtype.kind != "f":
            return f"has dtype {array.dtype}; expected float64"
        bad = ~(np.isnan(array) | ((array >= 0.0) & (array <= 1.0)))
        if bad.any():
            index = _first(bad)
            value = float(array.reshape(-1)[index])
            return f"holds {value!r} at index {index}; expected a value in [0, 1] or NaN"
        return None


class _AnyRngState(StateInvariant):
    """A SplitMix64 state (``core._kernels.random``): every uint64 value is a valid state, so
    only the dtype is checked (the shape is checked with the layout)."""

    def problem(self, array: np.ndarray, state: Mapping[str, np.ndarray]) -> str | None:
        if array.dtype != np.uint64:
            return f"has dtype {array.dtype}; expected uint64"
        return None


RNG_STATE = _AnyRngState()


def with_prefix(invariants: Mapping[str, StateInvariant], prefix: str) -> dict:
    """``invariants`` for arrays stored as ``prefix + name`` (a learner composed of others,
    whose states it keeps under prefixed names): names and references both prefixed."""
    return {prefix + key: invariant.renamed(prefix) for key, invariant in invariants.items()}


def validate_state(
    invariants: Mapping[str, StateInvariant], state: Mapping[str, np.ndarray]
) -> None:
    """Check every array of ``state`` against its declared invariant.

    An array is checked after the arrays its bounds refer to (counts bounding fills ...), so a
    bound is never read from an array that is itself out of range.  Raises
    :class:`~core.errors.InvalidState` (a ValueError) naming the first array at fault, and
    TypeError when an array has no declared invariant (a learner that forgot one must not load
    states unchecked).
    """
    undeclared = sorted(set(state) - set(invariants))
    if undeclared:
        raise TypeError(
            f"no state invariant declared for {', '.join(map(repr, undeclared))}; every state "
            "array needs one (core.learners._state)"
        )
    checked: set[str] = set()
    pending = list(state)
    while pending:
        ready = [key for key in pending if checked.issuperset(invariants[key].references())]
        if not ready:
            raise TypeError(f"state invariants of {pending} refer to missing or cyclic arrays")
        for key in ready:
            problem = invariants[key].problem(np.asarray(state[key]), state)
            if problem is not None:
                raise InvalidState(f"state array {key!r} {problem}", field=key)
            checked.add(key)
        pending = [key for key in pending if key not in checked]
