"""Typed errors raised by ``core``: the service maps them to HTTP without reading message text.

Both subclass :class:`ValueError`, so callers that catch ``ValueError`` (scikit-learn's habit,
and every existing test) keep working.

>>> error = InvalidFeatures("features contain NaN or infinity (first at row 3)", row=3)
>>> isinstance(error, ValueError), error.row
(True, 3)
>>> InvalidParameter("eta0 must be > 0, got -1", param="eta0").param
'eta0'
"""

from __future__ import annotations


class InvalidFeatures(ValueError):
    """A batch's features or labels are unusable.

    ``row`` is the 0-based event at fault, if one; ``field`` is ``"features"`` or ``"labels"``.
    """

    def __init__(self, message: str, *, row: int | None = None, field: str = "features") -> None:
        super().__init__(message)
        self.row = row
        self.field = field


class InvalidParameter(ValueError):
    """A hyper-parameter is unknown or out of range; ``param`` is its name."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


__all__ = ["InvalidFeatures", "InvalidParameter"]
