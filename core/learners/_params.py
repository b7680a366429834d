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
    "Structured",
    "parameters_schema",
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

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the accepted numbers (``exclusiveMinimum`` for an open end)."""
        schema: dict[str, Any] = {"type": "integer" if self.kind is int else "number"}
        for bound, closed, inclusive, exclusive in (
            (self.low, self.closed in ("both", "left"), "minimum", "exclusiveMinimum"),
            (self.high, self.closed in ("both", "right"), "maximum", "exclusiveMaximum"),
        ):
            if bound is not None:
                schema[inclusive if closed else exclusive] = bound
        return schema

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
    """One of a fixed set of values (compared with ``==``, but a boolean never matches a
    number nor a number a boolean: ``passes=True`` is not ``passes=1``)."""

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = tuple(values)

    def accepts(self, value: Any) -> bool:
        boolean = isinstance(value, bool | np.bool_)
        try:
            return any(
                bool(value == option) and boolean == isinstance(option, bool)
                for option in self.values
            )
        except (TypeError, ValueError):  # e.g. an array compared with a string
            return False

    def json_schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}

    def describe(self, name: str, value: Any) -> str:
        accepted = ", ".join(map(repr, self.values))
        return f"Expected {name} in {{{accepted}}}, got: {value!r}"


class Boolean:
    """``True`` or ``False`` (Python or NumPy booleans), not 0 or 1."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool | np.bool_)

    def json_schema(self) -> dict[str, Any]:
        return {"type": "boolean"}

    def describe(self, name: str, value: Any) -> str:
        return f"{name} must be True or False, got {value!r}"


class RandomState:
    """An integer seed (``None`` is listed separately where it is accepted)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)

    def json_schema(self) -> dict[str, Any]:
        return {"type": "integer"}

    def describe(self, name: str, value: Any) -> str:
        return f"{name} must be None or an integer seed, got {value!r}"


class Structured:
    """A structured value (a list of candidates, an FPR range) whose shape this module cannot
    state: it is declared here so that every parameter is declared, and checked field by field
    by the learner's ``_check_params`` (whose errors name the field, e.g. ``candidates[1]``).
    ``schema`` is the JSON Schema of its shape, as far as one can state it (for documents such
    as the service's OpenAPI; the learner's checks stay the reference)."""

    def __init__(self, description: str, schema: dict[str, Any] | None = None) -> None:
        self.description = description
        self.schema = schema or {}

    def accepts(self, value: Any) -> bool:
        return True

    def json_schema(self) -> dict[str, Any]:
        return {**self.schema, "description": self.description}

    def describe(self, name: str, value: Any) -> str:  # pragma: no cover - accepts everything
        return f"Expected {name} to be {self.description}, got: {value!r}"


BOOLEAN = Boolean()
RANDOM_STATE = RandomState()
#: a model's FPR range, as ``auto`` and ``tree_embedded`` take it (checked by their
#: ``_check_params``, which name the field)
PAUC_RANGE = Structured(
    "[alpha, beta] with 0 <= alpha < beta <= 1",
    {
        "type": "array",
        "items": {"type": "number", "minimum": 0, "maximum": 1},
        "minItems": 2,
        "maxItems": 2,
    },
)
#: the ends of the FPR range ``[alpha, beta]`` a pAUC learner optimises, each alone
#: (``0 <= alpha < 1``, ``0 < beta <= 1``); ``alpha < beta`` is checked by the learner's
#: ``_check_params`` (:func:`core.validation.check_fpr_range`)
FPR_LOW = Interval(float, 0, 1, closed="left")
FPR_HIGH = Interval(float, 0, 1, closed="right")
#: both, for a learner that lists ``alpha`` before ``beta`` (``ftrl_pauc`` and ``pmb`` list
#: ``beta`` first, and their constraints follow that order: the schemas and checks do)
FPR_RANGE: dict[str, list[Constraint]] = {"alpha": [FPR_LOW], "beta": [FPR_HIGH]}
#: ``auto``'s tournament, checked candidate by candidate by ``candidate_specs``
CANDIDATES = Structured(
    'a list of {"learner": name, "params": {...}}',
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"learner": {"type": "string"}, "params": {"type": "object"}},
            "required": ["learner"],
        },
    },
)

Constraint = Interval | Options | Boolean | RandomState | Structured | None


def parameters_schema(
    constraints: Mapping[str, list[Constraint]],
    defaults: Mapping[str, Any],
    *,
    exclude: Iterable[str] = (),
) -> dict[str, Any]:
    """The JSON Schema of an object of hyper-parameters, generated from the declared
    ``constraints`` (each parameter optional, with its default from ``defaults`` when that is
    JSON-able; ``None`` accepted where it is declared); parameters in ``exclude`` are left out,
    and so are names the object may not have (``additionalProperties`` is false).

    Cross-parameter checks (``_check_params``) are not expressible here: a value the schema
    accepts may still be refused, with an error naming the parameter.

    >>> parameters_schema({"eta0": [Interval(float, 0, None, closed="neither")]}, {"eta0": 1.0})
    {'type': 'object', 'properties': {'eta0': {'type': 'number', 'exclusiveMinimum': 0, 'default': 1.0}}, 'additionalProperties': False}
    """  # noqa: E501
    skipped = set(exclude)
    properties: dict[str, Any] = {}
    for name, forms in constraints.items():
        if name in skipped:
            continue
        schemas = [form.json_schema() for form in forms if form is not None]
        if None in forms:
            schemas.append({"type": "null"})
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        default = defaults.get(name)
        if isinstance(default, bool | int | float | str) or (default is None and None in forms):
            schema = {**schema, "default": default}
        properties[name] = schema
    return {"type": "object", "properties": properties, "additionalProperties": False}


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
