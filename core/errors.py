"""Typed errors raised by ``core``: the service maps them to HTTP without reading message text.

All subclass :class:`ValueError`, so callers that catch ``ValueError`` (scikit-learn's habit,
and every existing test) keep working.

>>> error = InvalidFeatures("features contain NaN or infinity (first at row 3)", row=3)
>>> isinstance(error, ValueError), error.row
(True, 3)
>>> InvalidParameter("eta0 must be > 0, got -1", param="eta0").param
'eta0'
>>> InvalidState("state array 'fill_neg' holds 2**40", field="fill_neg").field
'fill_neg'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(eq=False, repr=False)
class _Located(ValueError):
    """The errors below: a message, then keyword-only attributes (what is at fault), each
    declared once with its default."""

    message: str

    def __post_init__(self) -> None:
        super().__init__(self.message)  # str(error) is the message


@dataclass(eq=False, repr=False, kw_only=True)
class InvalidFeatures(_Located):
    """A batch's features or labels are unusable.

    ``row`` is the 0-based event at fault, if one; ``field`` is ``"features"`` or ``"labels"``;
    ``column`` and ``value`` the feature at fault and its value, when one value is (a NaN, an
    infinity, a value beyond the feature bound), so a caller can name the feature its own way.
    """

    row: int | None = None
    field: str = "features"
    column: int | None = None
    value: float | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class StateOverflow(InvalidFeatures):
    """Learning a batch would have grown a state array beyond its bound
    (``core.learners._state.STATE_BOUND``): the events' values are legal, but the model cannot
    learn them without overflowing (a weight growing geometrically on large unscaled features).
    ``row`` is the event at fault when it is known.  ``restored`` says whether the learner is
    as it was before the batch; when it is not (a learner whose state is too large to copy
    before every batch), the learner refuses every use until its state is put back
    (``from_state``) or restarted (``initialize``).
    """

    restored: bool = True


@dataclass(eq=False, repr=False, kw_only=True)
class InvalidParameter(_Located):
    """A hyper-parameter is unknown or out of range; ``param`` is its name."""

    param: str | None = None


@dataclass(eq=False, repr=False, kw_only=True)
class InvalidState(_Located):
    """A learner state (a snapshot, a stored model) breaks an invariant of its learner: a fill
    beyond its buffer, a negative count, a NaN weight, an array of the wrong size.  ``field``
    is the state array's name (``"fill_neg"``), or None when the state as a whole is unusable.
    """

    field: str | None = None


def unknown_names(
    names: Iterable[str], accepted: Sequence[str], what: str, where: str = ""
) -> tuple[str, str] | None:
    """The names of ``names`` outside ``accepted`` as an error states them: ``(the first of
    them in sorted order, "<what> 'a', 'b'<where>; accepted: <accepted>")``, or None when
    every name is accepted (a learner's parameters, the arrays of an NPZ body).

    >>> unknown_names(["y", "Z", "W"], ("X", "y"), "unexpected array(s)")
    ('W', "unexpected array(s) 'W', 'Z'; accepted: X, y")
    >>> unknown_names(["y"], ("X", "y"), "unexpected array(s)") is None
    True
    """
    unknown = sorted(set(names) - set(accepted))
    if not unknown:
        return None
    listed = ", ".join(map(repr, unknown))
    return unknown[0], f"{what} {listed}{where}; accepted: {', '.join(accepted)}"


__all__ = [
    "InvalidFeatures",
    "InvalidParameter",
    "InvalidState",
    "StateOverflow",
    "unknown_names",
]
