"""JSON documents decoded, and their event objects (JSON and NDJSON bodies) made a validated
:class:`Batch`; the shapes of ``x`` per feature mode are in docs/api.md.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson
import simdjson

from core.csr import CSRMatrix
from core.validation import width_refused
from service.errors import InvalidInput, MalformedBody
from service.ingest import fields, named
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.fields import Locator
from service.ingest.repeated_keys import document_key_count, refuse_repeated_keys


def dense_features(rows: list[Any], spec: FeatureSpec, locate: Locator) -> np.ndarray:
    """A list of feature lists -> (n, n_features) float64, one numpy call on the happy path
    (a ragged or non-numeric batch falls through to the per-event diagnosis)."""
    width = spec.n_features
    X = None
    if all(type(row) is list and len(row) == width for row in rows):
        try:
            # a TypeError on anything but numbers: fromiter alone would parse "1.5"
            sum(map(sum, rows))
            X = np.fromiter(
                itertools.chain.from_iterable(rows), dtype=np.float64, count=len(rows) * width
            ).reshape(len(rows), width)
        except (TypeError, ValueError):
            if spec.fills_missing:
                X = _with_missing_values(rows, width)
    if X is None:
        for index, row in enumerate(rows):
            if type(row) is not list:
                raise locate.error(
                    index,
                    f"'x' must be a list of {spec.n_features} numbers for a dense model, "
                    f"got {type(row).__name__}",
                    field="x",
                )
            if len(row) != spec.n_features:
                detail = width_refused(spec.n_features, len(row))
                raise locate.error(index, detail, field="x")
            for column, value in enumerate(row):
                if value is None:
                    label = fields.feature_label(spec, column)
                    raise fields.missing_refused(locate, index, label, "null")
                if type(value) not in (int, float):
                    raise locate.error(
                        index, f"feature values must be numbers, got {value!r}", field="x"
                    )
        raise InvalidInput("features could not be read as numbers", field="x")
    return fields.dense(X, spec, locate)


def _with_missing_values(rows: list[Any], width: int) -> np.ndarray | None:
    """The rows as (n, width) float64, each null (a missing value) NaN for ``fields.dense`` to
    fill; None when anything else is wrong (the caller's diagnosis names it)."""
    values = [math.nan if value is None else value for value in itertools.chain.from_iterable(rows)]
    try:
        sum(values)  # a TypeError on anything but numbers, as above
        return np.fromiter(values, dtype=np.float64, count=len(values)).reshape(len(rows), width)
    except (TypeError, ValueError):
        return None


_SPARSE_KEYS = {"indices", "values"}


def sparse_features(rows: list[Any], spec: FeatureSpec, locate: Locator) -> CSRMatrix:
    """``[{"indices": [...], "values": [...]}, ...]`` -> CSR, checked whole."""
    indices_lists = []
    values_lists = []
    for index, row in enumerate(rows):
        if type(row) is not dict or row.keys() != _SPARSE_KEYS:
            raise locate.error(
                index,
                '\'x\' must be an object {"indices": [...], "values": [...]} for a sparse model',
                field="x",
            )
        row_indices, row_values = row["indices"], row["values"]
        if (
            type(row_indices) is not list
            or type(row_values) is not list
            or len(row_indices) != len(row_values)
        ):
            raise locate.error(
                index, "'indices' and 'values' must be lists of the same length", field="x"
            )
        indices_lists.append(row_indices)
        values_lists.append(row_values)
    lengths = np.fromiter((len(part) for part in indices_lists), dtype=np.int64, count=len(rows))
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    flat_indices = [i for part in indices_lists for i in part]
    flat_values = [v for part in values_lists for v in part]
    if spec.fills_missing and None in flat_values:  # null: NaN, filled by fields.sparse
        flat_values = [math.nan if v is None else v for v in flat_values]
    try:
        if any(type(i) is not int for i in flat_indices):
            raise ValueError("indices")
        sum(flat_values)  # a TypeError on anything but numbers (np.array would parse "1.5")
        indices = np.array(flat_indices, dtype=np.int64)
        data = np.array(flat_values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        for index, (row_indices, row_values) in enumerate(
            zip(indices_lists, values_lists, strict=True)
        ):
            if any(type(i) is not int for i in row_indices):
                raise locate.error(index, "sparse indices must be integers", field="x") from None
            if None in row_values:
                column = row_indices[row_values.index(None)]
                known = type(column) is int and 0 <= column < spec.n_features
                label = fields.feature_label(spec, column) if known else repr(column)
                raise fields.missing_refused(locate, index, label, "null") from None
            if any(type(v) not in (int, float) for v in row_values):
                raise locate.error(index, "sparse values must be numbers", field="x") from None
        raise InvalidInput("sparse features could not be read", field="x") from None
    return fields.sparse(CSRMatrix(indptr, indices, data, spec.n_features), spec, locate)


def hashed_features(rows: list[Any], spec: FeatureSpec, locate: Locator) -> CSRMatrix:
    """``[{"name": value}, ...]`` -> CSR through the stable feature hasher; a string value is
    the one-hot feature ``"name=value"``."""
    prepared = []
    for index, row in enumerate(rows):
        if type(row) is not dict:
            raise locate.error(
                index, "'x' must be an object {\"name\": value} for a hashed model", field="x"
            )
        if any(type(value) is not float and type(value) is not int for value in row.values()):
            converted = {}
            for name, value in row.items():
                kind = type(value)
                if kind is str:
                    converted[f"{name}={value}"] = 1.0
                elif kind is bool:
                    converted[name] = float(value)
                elif kind is int or kind is float:
                    converted[name] = value
                elif value is None and spec.fills_missing:
                    continue  # an absent feature is 0 in a hashed model
                elif value is None:
                    raise fields.missing_refused(locate, index, repr(name), "null")
                else:
                    raise locate.error(
                        index,
                        f"feature {name!r} must be a number, a string or a boolean, got {value!r}",
                        field="x",
                    )
            row = converted
        prepared.append(row)
    try:
        return spec.hasher().transform(prepared)
    except ValueError as error:
        raise locate.core_error(error, "x") from None


def features_from_objects(
    rows: list[Any], spec: FeatureSpec, locate: Locator
) -> np.ndarray | CSRMatrix:
    if spec.feature_mode != "hashed" and named.needs_names(rows, spec):
        rows = named.positional_rows(rows, spec, locate)
    if spec.feature_mode == "dense":
        return dense_features(rows, spec, locate)
    if spec.feature_mode == "sparse":
        return sparse_features(rows, spec, locate)
    return hashed_features(rows, spec, locate)


#: the keys of an event object (a label ``y`` sent to ``/score`` is not used)
EVENT_KEYS = frozenset({"id", "x", "y"})


def unknown_key(document: dict[str, Any], accepted: frozenset[str]) -> tuple[str, str] | None:
    """``(field, detail)`` naming the first key of ``document`` outside ``accepted``, or None
    (a misspelt key ignored would be data lost)."""
    if document.keys() <= accepted:
        return None
    key = fields.shown_id(next(key for key in document if key not in accepted))
    names = ", ".join(repr(name) for name in sorted(accepted))
    return key, f"unknown key {key!r}; accepted: {names}"


def located_objects(
    items: list[Any],
    accepted: frozenset[str],
    not_an_object: Callable[[Any], str],
    lines: Sequence[int] | None = None,
) -> tuple[list[Any], Locator]:
    """The raw ids of ``items`` (events, or labels) and the :class:`Locator` naming them, once
    each item is an object without a key outside ``accepted``."""
    for index, item in enumerate(items):
        if type(item) is not dict:
            raise Locator(None, lines).error(index, not_an_object(item))
    raw_ids = [item.get("id") for item in items]
    locate = Locator(raw_ids, lines)
    for index, item in enumerate(items):
        unknown = unknown_key(item, accepted)
        if unknown is not None:
            raise locate.error(index, unknown[1], field=unknown[0])
    return raw_ids, locate


def events_to_batch(
    events: list[Any],
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    lines: Sequence[int] | None = None,
) -> Batch:
    """Decoded event objects -> a validated :class:`Batch`."""
    fields.check_size(len(events), max_events)
    raw_ids, locate = located_objects(
        events,
        EVENT_KEYS,
        lambda event: f"an event must be a JSON object, got {type(event).__name__}",
        lines,
    )
    ids = fields.parse_ids(raw_ids, locate)
    rows = [event.get("x") for event in events]
    for index, row in enumerate(rows):
        if row is None:
            raise locate.error(index, "missing features 'x'", field="x")
    X = features_from_objects(rows, spec, locate)
    labels = [event.get("y") for event in events]
    if not labelled:
        fields.check_unused_labels(labels, locate)
        return Batch(X, None, ids, rows if spec.feature_mode == "hashed" else None)
    return Batch(X, fields.labels_from_values(labels, locate), ids)


#: From this size on, simdjson decodes a document and its top-level list (or the list under a
#: top-level key) is made Python objects an item at a time: orjson's one call would hold the
#: GIL, and so stop the event loop even from the thread pool, for the whole document.
_STEPWISE_MIN_BYTES = 1 << 20
_BYTE_ORDER_MARK = b"\xef\xbb\xbf"


def parse_json(body: bytes) -> Any:
    """The decoded JSON ``body``; MalformedBody when it is not JSON or repeats a key."""
    if len(body) >= _STEPWISE_MIN_BYTES and not body.startswith(_BYTE_ORDER_MARK):
        loaded = _load_stepwise(body)
        if loaded is not _NOT_LOADED:
            document, decoded_keys = loaded
            refuse_repeated_keys(body, decoded_keys)
            return document
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise MalformedBody(json_error_detail(body, error.pos, str(error))) from None
    refuse_repeated_keys(body, document_key_count(document))
    return document


#: how Python, JavaScript and numpy write non-finite floats; none is JSON
_NON_FINITE = re.compile(rb"-?(?:nan|infinity|inf)\b", re.IGNORECASE)


def json_error_detail(text: bytes | bytearray, position: int, reason: str) -> str:
    """The message for JSON that does not decode where ``position`` is, specific to a ``NaN``
    or ``Infinity`` literal there."""
    start = position - 1 if position > 0 and text[position - 1 : position] == b"-" else position
    literal = _NON_FINITE.match(text, start) if position >= 0 else None
    if literal is not None:
        return (
            f"body is not valid JSON: {literal.group().decode()} at character {start} is not a "
            "JSON number (Python's json.dumps writes NaN / Infinity for non-finite floats, "
            "which JSON has no way to write); send finite numbers"
        )
    return f"body is not valid JSON: {reason}"


_NOT_LOADED = object()


def _load_stepwise(body: bytes) -> Any:
    """``(orjson.loads(body), its key count)`` made in small steps, or ``_NOT_LOADED`` where
    simdjson refuses or might read otherwise (a repeated top-level key: simdjson finds the
    first, orjson keeps the last; an integer beyond 64 bits): orjson then decodes the body."""
    try:
        document = simdjson.Parser().parse(body)  # a parser of its own: freed with the proxies
        if type(document) is simdjson.Object:
            keys = list(document.keys())
            if len(set(keys)) != len(keys):
                return _NOT_LOADED
            counter = _KeyCounter(sum(1 + key.count(":") for key in keys))
            return {key: _to_python(document[key], counter) for key in keys}, counter.total
        counter = _KeyCounter(0)
        return _to_python(document, counter), counter.total
    except (ValueError, RuntimeError, TypeError, KeyError):
        return _NOT_LOADED


class _KeyCounter:
    """:func:`~service.ingest.repeated_keys.document_key_count` summed over the pieces of a
    document (None once a piece cannot be counted exactly)."""

    def __init__(self, total: int | None) -> None:
        self.total = total

    def add(self, value: Any) -> Any:
        if self.total is not None:
            if type(value) is str:
                self.total += value.count(":")
            elif type(value) in (dict, list):
                counted = document_key_count(value)
                self.total = None if counted is None else self.total + counted
        return value


def _to_python(value: Any, counter: _KeyCounter) -> Any:
    if type(value) is simdjson.Array:
        return [
            counter.add(item.as_dict())
            if type(item) is simdjson.Object
            else counter.add(item.as_list())
            if type(item) is simdjson.Array
            else counter.add(item)
            for item in value
        ]
    if type(value) is simdjson.Object:
        return counter.add(value.as_dict())
    return counter.add(value)
