"""Each event rule, stated once with the message that refuses it, and called by every path (the
content types, the stream's frames, delayed labels, the OpenAPI document): batch size, labels,
ids, missing values, and ``core.validation``'s feature checks (bound, width, label set), whose
errors carry the ``row`` (and ``column``) that the :class:`Locator` names as the client sent it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any

import numpy as np

from core.csr import CSRMatrix
from core.errors import InvalidFeatures
from core.validation import as_features, as_labels, first_out_of_range
from service.errors import InvalidInput, MalformedBody, PayloadTooLarge
from service.ingest.batch import FeatureSpec

#: the longest event id an error message repeats (a refused id may be megabytes long)
SHOWN_ID_CHARACTERS = 64


def first_of(items: Iterable[str], total: int, shown: int) -> str:
    """The first ``shown`` of ``total`` items an error lists, then how many more there are."""
    return ", ".join(islice(items, shown)) + (f" and {total - shown} more" if total > shown else "")


def shown_id(value: Any) -> str:
    """An event id as an error shows it: cut to ``SHOWN_ID_CHARACTERS``, saying how long."""
    text = str(value) if type(value) is not str else value
    if len(text) <= SHOWN_ID_CHARACTERS:
        return text
    return f"{text[:SHOWN_ID_CHARACTERS]}... ({len(text):,} characters)"


class Locator:
    """Turns an event index into the error fields a client can act on (its id, its line)."""

    def __init__(self, ids: Sequence[Any] | None = None, lines: Sequence[int] | None = None):
        self.ids = ids
        self.lines = lines

    def error(self, index: int, detail: str, *, malformed: bool = False, field: str | None = None):
        event_id = None
        if self.ids is not None and index < len(self.ids) and self.ids[index] is not None:
            event_id = shown_id(self.ids[index])
        where = f"line {self.lines[index]}" if self.lines is not None else f"event {index}"
        if event_id is not None:
            where += f" (id {event_id!r})"
        cls = MalformedBody if malformed else InvalidInput
        return cls(
            f"{where}: {detail}",
            event=index,
            event_id=event_id,
            line=None if self.lines is None else self.lines[index],
            field=field,
        )

    def core_error(self, error: ValueError, field: str) -> InvalidInput:
        """A ``core`` ValueError as the service's error, at its row when it names one."""
        row = getattr(error, "row", None)
        if row is not None:
            # the location names the event (its line in a file); core's own "(first at row
            # N)" counts from 0 within the batch and would contradict a line number
            return self.error(row, str(error).replace(f" (first at row {row})", ""), field=field)
        return InvalidInput(str(error), field=field)


#: defaults of AUCSTREAM_MAX_DENSE_CELLS and AUCSTREAM_MAX_INFLATED_BYTES (service.settings)
MAX_DENSE_CELLS = 2**24
MAX_INFLATED_BYTES = 256 * 2**20


def check_dense_cells(n_events: int, spec: FeatureSpec, max_cells: int) -> None:
    """413 before densifying sparse input (LIBSVM, CSR arrays) for a dense model beyond
    ``max_cells`` values (a small LIBSVM body of empty lines can be gigabytes dense)."""
    if spec.feature_mode != "dense":
        return
    cells = n_events * spec.n_features
    if cells > max_cells:
        raise PayloadTooLarge(
            f"{n_events} events x {spec.n_features} features is {cells:,} values for this "
            f"dense model, more than the limit of {max_cells:,} per request "
            "(AUCSTREAM_MAX_DENSE_CELLS); send fewer events per request",
            field="events",
        )


def check_size(n_events: int, max_events: int, what: str = "events") -> None:
    """A batch of 1 to ``max_events`` events (or labels: ``what``)."""
    if n_events == 0:
        raise InvalidInput(f"empty batch: no {what}", field=what)
    if n_events > max_events:
        raise PayloadTooLarge(
            f"batch of {n_events} {what} exceeds the limit of {max_events} {what} per request",
            field=what,
        )


def dense(X: np.ndarray, spec: FeatureSpec, locate: Locator, field: str = "x") -> np.ndarray:
    """A dense batch through ``core.validation.as_features`` (width, finite, feature bound)."""
    if (
        X.dtype == np.float64
        and X.ndim == 2
        and X.shape[1] == spec.n_features
        and X.shape[0]
        and X.flags.c_contiguous
        and first_out_of_range(X) is None
    ):
        return X  # already what as_features returns: skip its coercions
    if spec.marks_missing and X.dtype == np.float64 and X.ndim == 2:
        return _checked_with_missing(X, spec, locate, field)
    if spec.fills_missing and X.dtype == np.float64:
        X = fill_missing(X)
    try:
        return as_features(X, spec.n_features, accept_sparse=False)  # type: ignore[return-value]
    except ValueError as error:
        raise refused(error, spec, locate, field) from None


def _checked_with_missing(X: np.ndarray, spec: FeatureSpec, locate: Locator, field: str):
    """``missing_values`` ``mean``: the present values checked, each NaN kept for the engine."""
    missing = np.isnan(X)
    any_missing = bool(missing.any())
    # with a hole, a copy is checked (the caller's array stays as sent) and marked again
    present = np.where(missing, 0.0, X) if any_missing else X
    try:
        checked: np.ndarray = as_features(present, spec.n_features, accept_sparse=False)  # type: ignore[assignment]
    except ValueError as error:
        raise refused(error, spec, locate, field) from None
    if any_missing:
        checked[missing] = np.nan
    return checked


def sparse(X: CSRMatrix, spec: FeatureSpec, locate: Locator, field: str = "x") -> CSRMatrix:
    """A CSR batch through ``core.validation.as_features`` (structure, indices, finite)."""
    if spec.fills_missing and X.data.dtype == np.float64:
        X = CSRMatrix(X.indptr, X.indices, fill_missing(X.data), X.shape[1])
    try:
        checked = as_features(X, spec.n_features, accept_sparse=True)
    except ValueError as error:
        raise refused(error, spec, locate, field) from None
    assert isinstance(checked, CSRMatrix)
    return checked


def refused(error: ValueError, spec: FeatureSpec, locate: Locator, field: str) -> InvalidInput:
    """A ``core`` error as the service's: a NaN or an infinity named by its feature (as a JSON
    null or a LIBSVM pair is), anything else at its row."""
    value = error.value if isinstance(error, InvalidFeatures) else None
    if value is None or np.isfinite(value):
        return locate.core_error(error, field)
    assert isinstance(error, InvalidFeatures) and error.row is not None and error.column is not None
    feature = feature_label(spec, error.column)
    if np.isnan(value):
        return missing_refused(locate, error.row, feature, "NaN", field)
    return not_finite(locate, error.row, feature, value, field)


def fill_missing(values: np.ndarray) -> np.ndarray:
    """``values`` with each NaN (a missing value, as JSON null is read) as 0: ``missing_values``
    ``zero``, or ``mean`` in a sparse or hashed model (no column to average)."""
    missing = np.isnan(values)
    if not missing.any():
        return values
    filled = values.copy()  # the caller's array (NPZ, binary frames) stays as sent
    filled[missing] = 0.0
    return filled


def feature_label(spec: FeatureSpec, column: int) -> str:
    """How an error names the feature at ``column``: its quoted name, else its 0-based number."""
    if spec.feature_names is not None and 0 <= column < len(spec.feature_names):
        return repr(spec.feature_names[column])
    return str(column)


#: what to do about a missing value a model refused
MISSING_REFUSED = (
    "this model refuses missing values (missing_values 'refuse'); send a number, or create "
    'the model with "missing_values": "zero" to read them as 0 (or "mean": the feature\'s '
    "running mean)"
)


#: the longest event id, in characters
MAX_ID_CHARACTERS = 256
ID_REFUSED = f"event id must be 1 to {MAX_ID_CHARACTERS} characters"
#: the label values an event may carry (besides true / false)
LABEL_VALUES = frozenset({0, 1, -1})
_LABELS_ACCEPTED = "accepted labels: 0/1, -1/+1 or true/false"


def is_label(value: Any) -> bool:
    """Whether a decoded value is a label (0/1, -1/+1, true/false)."""
    return type(value) is bool or (type(value) in (int, float) and value in LABEL_VALUES)


def label_refused(locate: Locator, index: int, value: Any, note: str = "") -> InvalidInput:
    """The 422 of event ``index``'s label ``value`` (None: missing)."""
    shown = "missing" if value is None else repr(value)
    return locate.error(index, f"label 'y' is {shown}; {_LABELS_ACCEPTED}{note}", field="y")


def not_finite(
    locate: Locator, index: int, feature: str, value: float, field: str = "x"
) -> InvalidInput:
    """The 422 of an infinite feature value (JSON cannot write one)."""
    detail = f"feature {feature} is {value}; values must be finite numbers"
    return locate.error(index, detail, field=field)


def missing_refused(
    locate: Locator, index: int, feature: str, shown: str, field: str = "x"
) -> InvalidInput:
    """The 422 of a missing value (``shown`` as sent: null, NaN) in a model that refuses them."""
    detail = f"feature {feature} is missing ({shown}): {MISSING_REFUSED}"
    return locate.error(index, detail, field=field)


def labels_from_values(values: Sequence[Any], locate: Locator) -> np.ndarray:
    """Decoded JSON / text labels -> int64 in {-1, +1}; the first bad value names its event."""
    for index, value in enumerate(values):
        if not is_label(value):
            raise label_refused(locate, index, value)
    return labels_from_array(np.asarray(values, dtype=np.float64), len(values), locate)


def check_unused_labels(values: Sequence[Any], locate: Locator) -> None:
    """``/score`` does not use a label ``y`` (or null) but refuses what ``/events`` would."""
    for index, value in enumerate(values):
        if value is not None and not is_label(value):
            raise label_refused(locate, index, value, " (or null: /score does not use it)")


def labels_from_array(labels: np.ndarray, n_events: int, locate: Locator) -> np.ndarray:
    """An array of labels (NPZ) -> int64 in {-1, +1}; the first bad value names its event."""
    labels = labels.reshape(-1)
    if labels.shape[0] != n_events:
        raise InvalidInput(f"got {labels.shape[0]} labels for {n_events} events", field="y")
    try:
        return as_labels(labels)
    except ValueError as error:
        row = getattr(error, "row", None)
        if row is None:  # a batch mixing 0 and -1
            raise InvalidInput(str(error), field="y") from None
        raise label_refused(locate, row, labels[row].item()) from None


#: the integers a JSON decoder reads as integers (the document's bounds of an integer id)
ID_MIN, ID_MAX = -(2**63), 2**64 - 1


def parse_ids(values: Sequence[Any], locate: Locator) -> list[str | None] | None:
    """Each event's :func:`as_id`, or None when no event has one."""
    if all(value is None for value in values):
        return None
    ids: list[str | None] = []
    for index, value in enumerate(values):
        try:
            ids.append(as_id(value))
        except ValueError as error:
            raise locate.error(index, str(error), field="id") from None
    return ids


def as_id(value: Any) -> str | None:
    """An event id (None for none) as a string: an integer as its decimal string, whether JSON
    wrote it 162 or 162.0; ValueError naming the rule it breaks."""
    kind = type(value)
    if kind is str:
        if not 0 < len(value) <= MAX_ID_CHARACTERS:
            raise ValueError(ID_REFUSED)
        return value
    if kind is int:
        return str(value)
    if kind is float and value.is_integer() and ID_MIN < value <= ID_MAX:
        # an integer literal beyond 64 bits is decoded as a float rounded to -2**63 or
        # below, 2**64 or above: the strict bound refuses it
        return str(int(value))
    if value is None:
        return None
    raise ValueError(f"event id must be a string or an integer, got {shown_id(repr(value))}")


def label_ids(values: Sequence[Any], locate: Locator) -> list[str]:
    """The ids of delayed labels (:func:`parse_ids`), every label naming its event."""
    ids = parse_ids(values, locate)
    if ids is None or None in ids:
        index = 0 if ids is None else ids.index(None)
        raise locate.error(index, "a label needs the event 'id' it belongs to", field="id")
    return ids  # type: ignore[return-value]
