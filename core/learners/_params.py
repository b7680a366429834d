"""Declared hyper-parameter constraints, checked by one function (scikit-learn's habit).

Each learner declares ``_parameter_constraints``: a dict from parameter name to a list of
accepted forms, where a form is a constraint below or ``None`` (the value ``None`` is accepted).
A subclass extends its parent's dict (``{**OnlineLearner._parameter_constraints, ...}``).
:func:`validate_parameters` checks every declared parameter and raises
:class:`~core.errors.InvalidParameter` carrying the parameter's name, with a message that names
it, the accepted values and the value given.

>>> constraints = {"eta0": [Interval(float, 0, None, closed="neither")], "rank": [None, Interval(int, 1)]}
>>> validate_parameters(constraints, {"eta0": 0.5, "rank": None})
>>> try:
...     validate_parameters(constraints, {"eta0": -1, "rank": None})
... except ValueError as error:
...     print(error, "|", error.param)
Expected eta0 > 0, got: -1 | eta0
"""  # noqa: E501

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from core.errors import InvalidParameter

__all__ = [
    "BOOLEAN",
    "RANDOM_STATE",
    "Boolean",
    "Interval",
    "Options",
    "RandomState",
    "validate_parameters",
]


class Interval:
    """A real (``kind=float``) or integer (``kind=int``) number in a range.

    ``low`` / ``high`` of None mean unbounded; ``closed`` is "both", "left", "right" or
    "neither".  Real numbers must also be finite; booleans are never numbers here.
    """

    def __init__(
        self,
        kind: type,
        low: float | None = None,
        high: float | None = None,
        *,
        closed: str = "both",
    ) -> None:
        if kind not in (int, float):
            raise TypeError(f"Interval kind must be int or float, got {kind!r}")
        if closed not in ("both", "left", "right", "neither"):
            raise TypeError(f"unknown closed={closed!r}")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def _is_number(self, value: Any) -> bool:
        if isinstance(value, bool | np.bool_):
            return False
        if self.kind is int:
            return isinstance(value, numbers.Integral)
        return isinstance(value, numbers.Real) and math.isfinite(value)

    def accepts(self, value: Any) -> bool:
        if not self._is_number(value):
            return False
        low_closed = self.closed in ("both", "left")
        high_closed = self.closed in ("both", "right")
        if self.low is not None and (value < self.low or (value == self.low and not low_closed)):
            return False
        return not (
            self.high is not None
            and (value > self.high or (value == self.high and not high_closed))
        )

    def describe(self, name: str, value: Any) -> str:
        if not self._is_number(value) and not (self.kind is float and _is_real(value)):
            noun = "an integer" if self.kind is int else "a number"
            return f"{name} must be {noun}, got {value!r}"
        low_closed = self.closed in ("both", "left")
        high_closed = self.closed in ("both", "right")
        if self.high is None:
            accepted = f"{'>=' if low_closed else '>'} {self.low}"
        elif self.low is None:
            accepted = f"{'<=' if high_closed else '<'} {self.high}"
        else:
            left, right = "[" if low_closed else "(", "]" if high_closed else ")"
            return f"Expected {name} in {left}{self.low}, {self.high}{right}, got: {value!r}"
        return f"Expected {name} {accepted}, got: {value!r}"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


class Options:
    """One of a fixed set of values (compared with ``==``, so ``1`` matches ``True``)."""

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = tuple(values)

    def accepts(self, value: Any) -> bool:
        try:
            return value in self.values
        except (TypeError, ValueError):  # e.g. an array compared with a string
            return False

    def describe(self, name: str, value: Any) -> str:
        accepted = ", ".join(map(repr, self.values))
        return f"Expected {name} in {{{accepted}}}, got: {value!r}"


class Boolean:
    """``True`` or ``False`` (Python or NumPy booleans), not 0 or 1."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool | np.bool_)

    def describe(self, name: str, value: Any) -> str:
        return f"{name} must be True or False, got {value!r}"


class RandomState:
    """An integer seed (``None`` is listed separately where it is accepted)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)

    def describe(self, name: str, value: Any) -> str:
        return f"{name} must be None or an integer seed, got {value!r}"


BOOLEAN = Boolean()
RANDOM_STATE = RandomState()

Constraint = Interval | Options | Boolean | RandomState | None


def validate_parameters(
    constraints: Mapping[str, list[Constraint]], params: Mapping[str, Any]
) -> None:
    """Check ``params[name]`` against each declared ``constraints[name]``, in declaration order.

    A value is accepted when any of its forms accepts it; otherwise the error describes the
    last form that is not ``None`` (the meaningful one: ``[None, Interval(...)]`` reports the
    interval).
    """
    for name, forms in constraints.items():
        value = params[name]
        if value is None and None in forms:
            continue
        checks = [form for form in forms if form is not None]
        if any(form.accepts(value) for form in checks):
            continue
        raise InvalidParameter(checks[-1].describe(name, value), param=name)
