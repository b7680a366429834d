"""Request bodies -> validated batches ``(X, y, ids)``, vectorised, validated whole.

Four content types carry events (DESIGN §4):

``application/json``
    ``{"events": [{"id": "e1", "x": ..., "y": 1}, ...]}`` (a bare list of events is accepted
    too).  ``x`` is a list of ``n_features`` numbers (feature mode ``dense``),
    ``{"indices": [...], "values": [...]}`` (``sparse``, 0-based indices) or
    ``{"name": value, ...}`` (``hashed``; a string value ``"country": "FR"`` becomes the
    one-hot feature ``"country=FR"`` with value 1).  ``id`` (string or integer) is optional.
``application/x-ndjson``
    one such event object per line, read line by line as the body streams in.
``text/x-libsvm``
    ``<label> <index>:<value> ... [# <event id>]`` per line; indices are 1-based as in LIBSVM
    and svmlight files (``?zero_based=true`` for 0-based).  Dense and sparse models only.
``application/x-npz``
    a NumPy ``.npz`` archive loaded with ``allow_pickle=False`` (object arrays are refused):
    ``X`` (2-d) or the CSR triple ``indptr``, ``indices``, ``data``; ``y`` (labels; not needed by
    ``/score``); optional ``ids`` (1-d strings or integers).

Labels are 0/1, -1/+1 or booleans.  Parsing turns the body into numpy arrays with one
``orjson`` call and a few list comprehensions (no object per event); every check runs on the
whole batch before anything is learned, and an error names the event (0-based index and id) or
the line (1-based) at fault.  A dense-model JSON body of the plain shape takes a faster road
(simdjson straight into float64, see ``_dense_json_fast``) that gives the same batch and leaves
every other body, and every error, to the general path.
"""

from __future__ import annotations

import functools
import io
import itertools
import struct
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import orjson
import simdjson
from isal.isal_zlib import crc32

from core.hashing import FeatureHasher
from core.validation import CSRMatrix, as_features
from service.errors import (
    InvalidInput,
    MalformedBody,
    PayloadTooLarge,
    ServiceError,
    UnsupportedMediaType,
)

FeatureMode = Literal["dense", "sparse", "hashed"]

JSON = "application/json"
NDJSON = "application/x-ndjson"
LIBSVM = "text/x-libsvm"
NPZ = "application/x-npz"
EVENT_CONTENT_TYPES = (JSON, NDJSON, LIBSVM, NPZ)
_ALIASES = {
    "application/ndjson": NDJSON,
    "application/jsonl": NDJSON,
    "application/x-jsonlines": NDJSON,
    "application/x-libsvm": LIBSVM,
    "text/x-svmlight": LIBSVM,
    "application/octet-stream+npz": NPZ,
}
NPZ_ARRAYS = ("X", "y", "ids", "indptr", "indices", "data")


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type header (``application/json; charset=utf-8`` ->
    ``application/json``), with common aliases resolved."""
    bare = (content_type or "").split(";", 1)[0].strip().lower()
    return _ALIASES.get(bare, bare)


@dataclass(frozen=True)
class FeatureSpec:
    """What a model expects of its events."""

    n_features: int
    feature_mode: FeatureMode
    accept_sparse: bool = True

    def hasher(self) -> FeatureHasher:
        return _hasher(self.n_features)


_HASHERS: dict[int, FeatureHasher] = {}


def _hasher(n_features: int) -> FeatureHasher:
    hasher = _HASHERS.get(n_features)
    if hasher is None:
        hasher = _HASHERS[n_features] = FeatureHasher(n_features)
    return hasher


@dataclass
class Batch:
    """A validated batch: features (dense float64 or CSR), labels in {-1, +1} or None, ids.

    ``ids`` is None when no event has an id; otherwise one entry per event (None for an event
    without id, which is then never deduplicated).
    """

    X: np.ndarray | CSRMatrix
    y: np.ndarray | None
    ids: list[str | None] | None

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def take(self, rows: np.ndarray) -> Batch:
        """The events at ``rows`` (indices), in that order."""
        X = self.X.take_rows(rows) if isinstance(self.X, CSRMatrix) else self.X[rows]
        y = None if self.y is None else self.y[rows]
        ids = None if self.ids is None else [self.ids[i] for i in rows.tolist()]
        return Batch(X, y, ids)


# ---------------------------------------------------------------------------- errors
class _Locator:
    """Turns an event index into the error fields a client can act on."""

    def __init__(self, ids: Sequence[Any] | None = None, lines: Sequence[int] | None = None):
        self.ids = ids
        self.lines = lines

    def error(self, index: int, detail: str, *, malformed: bool = False, field: str | None = None):
        event_id = None
        if self.ids is not None and index < len(self.ids) and self.ids[index] is not None:
            event_id = str(self.ids[index])
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


def _row_of(message: str) -> int | None:
    """The row number a core ValueError names ("... row 3 ..."), if any."""
    marker = "row "
    position = message.find(marker)
    if position < 0:
        return None
    digits = ""
    for char in message[position + len(marker) :]:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


# ---------------------------------------------------------------------------- labels & ids
_LABEL_VALUES = {0, 1, -1}


def parse_labels(values: Sequence[Any], locate: _Locator) -> np.ndarray:
    """0/1, -1/+1 or bool -> int64 in {-1, +1}; the first bad value is named with its event."""
    for index, value in enumerate(values):
        if type(value) is bool:
            continue
        if type(value) not in (int, float) or value not in _LABEL_VALUES:
            shown = "missing" if value is None else repr(value)
            raise locate.error(
                index,
                f"label 'y' is {shown}; accepted labels: 0/1, -1/+1 or true/false",
                field="y",
            )
    labels = np.asarray(values, dtype=np.float64)
    if (labels == 0).any() and (labels == -1).any():
        raise InvalidInput(
            "labels mix 0 and -1 in one batch; use {0, 1} or {-1, +1}, not both", field="y"
        )
    return np.where(labels == 1, 1, -1).astype(np.int64)


def parse_ids(values: Sequence[Any], locate: _Locator) -> list[str | None] | None:
    if all(value is None for value in values):
        return None
    ids: list[str | None] = []
    for index, value in enumerate(values):
        kind = type(value)
        if kind is str:
            if not value or len(value) > 256:
                raise locate.error(index, "event id must be 1 to 256 characters", field="id")
            ids.append(value)
        elif kind is int:
            ids.append(str(value))
        elif value is None:
            ids.append(None)
        else:
            raise locate.error(
                index, f"event id must be a string or an integer, got {value!r}", field="id"
            )
    return ids


# ---------------------------------------------------------------------------- features
def dense_features(rows: list[Any], spec: FeatureSpec, locate: _Locator) -> np.ndarray:
    """A list of feature lists -> (n, n_features) float64, one numpy call on the happy path."""
    width = spec.n_features
    X = None
    # np.fromiter over the chained rows is ~30% faster than np.array(rows); the length check
    # first makes a ragged batch fall through to the per-event diagnosis below.
    if all(type(row) is list and len(row) == width for row in rows):
        try:
            X = np.fromiter(
                itertools.chain.from_iterable(rows), dtype=np.float64, count=len(rows) * width
            ).reshape(len(rows), width)
        except (TypeError, ValueError):
            X = None
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
                raise locate.error(
                    index, f"expected {spec.n_features} features, got {len(row)}", field="x"
                )
            for value in row:
                if type(value) not in (int, float):
                    raise locate.error(
                        index, f"feature values must be numbers, got {value!r}", field="x"
                    )
        raise InvalidInput("features could not be read as numbers", field="x")
    return _check_finite(X, locate)


def _check_finite(X: np.ndarray, locate: _Locator) -> np.ndarray:
    finite = np.isfinite(X)
    if not finite.all():
        row = int(np.flatnonzero(~finite.all(axis=1))[0])
        raise locate.error(row, "features contain NaN or infinity", field="x")
    return X


def sparse_features(rows: list[Any], spec: FeatureSpec, locate: _Locator) -> CSRMatrix:
    """``[{"indices": [...], "values": [...]}, ...]`` -> CSR, checked whole."""
    indices_lists = []
    values_lists = []
    for index, row in enumerate(rows):
        if type(row) is not dict or "indices" not in row or "values" not in row:
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
    try:
        if any(type(i) is not int for i in flat_indices):
            raise ValueError("indices")
        indices = np.array(flat_indices, dtype=np.int64)
        data = np.array(flat_values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        for index, (row_indices, row_values) in enumerate(
            zip(indices_lists, values_lists, strict=True)
        ):
            if any(type(i) is not int for i in row_indices):
                raise locate.error(index, "sparse indices must be integers", field="x") from None
            if any(type(v) not in (int, float) for v in row_values):
                raise locate.error(index, "sparse values must be numbers", field="x") from None
        raise InvalidInput("sparse features could not be read", field="x") from None
    return _check_csr(CSRMatrix(indptr, indices, data, spec.n_features), spec, locate)


def _check_csr(X: CSRMatrix, spec: FeatureSpec, locate: _Locator) -> CSRMatrix:
    if X.data.size and not np.isfinite(X.data).all():
        position = int(np.flatnonzero(~np.isfinite(X.data))[0])
        row = int(np.searchsorted(X.indptr, position, side="right") - 1)
        raise locate.error(row, "features contain NaN or infinity", field="x")
    if X.indices.size and (X.indices.min() < 0 or X.indices.max() >= spec.n_features):
        position = int(np.flatnonzero((X.indices < 0) | (X.indices >= spec.n_features))[0])
        row = int(np.searchsorted(X.indptr, position, side="right") - 1)
        raise locate.error(
            row,
            f"feature index {int(X.indices[position])} is outside [0, {spec.n_features})",
            field="x",
        )
    try:
        checked = as_features(X, spec.n_features, accept_sparse=True)
    except ValueError as error:
        bad_row = _row_of(str(error))
        if bad_row is not None:
            raise locate.error(bad_row, str(error), field="x") from None
        raise InvalidInput(str(error), field="x") from None
    assert isinstance(checked, CSRMatrix)
    return checked


def hashed_features(rows: list[Any], spec: FeatureSpec, locate: _Locator) -> CSRMatrix:
    """``[{"name": value}, ...]`` -> CSR through the stable feature hasher.

    A string value is one-hot encoded as the feature ``"name=value"`` with value 1.
    """
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
                else:
                    raise locate.error(
                        index,
                        f"feature {name!r} must be a number, a string or a boolean, got {value!r}",
                        field="x",
                    )
            row = converted
        prepared.append(row)
    try:
        X = spec.hasher().transform(prepared)
    except ValueError as error:
        row_number = _row_of(str(error))
        if row_number is not None:
            raise locate.error(row_number, str(error), field="x") from None
        raise InvalidInput(str(error), field="x") from None
    return X


def features_from_objects(rows: list[Any], spec: FeatureSpec, locate: _Locator):
    if spec.feature_mode == "dense":
        return dense_features(rows, spec, locate)
    if spec.feature_mode == "sparse":
        return sparse_features(rows, spec, locate)
    return hashed_features(rows, spec, locate)


# ---------------------------------------------------------------------------- JSON / NDJSON
def _check_size(n_events: int, max_events: int) -> None:
    if n_events == 0:
        raise InvalidInput("empty batch: no events", field="events")
    if n_events > max_events:
        raise PayloadTooLarge(
            f"batch of {n_events} events exceeds the limit of {max_events} events per request",
            field="events",
        )


def events_to_batch(
    events: list[Any],
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    lines: Sequence[int] | None = None,
) -> Batch:
    """Decoded event objects -> a validated :class:`Batch`."""
    _check_size(len(events), max_events)
    for index, event in enumerate(events):
        if type(event) is not dict:
            raise _Locator(None, lines).error(
                index, f"an event must be a JSON object, got {type(event).__name__}"
            )
    raw_ids = [event.get("id") for event in events]
    locate = _Locator(raw_ids, lines)
    ids = parse_ids(raw_ids, locate)
    rows = [event.get("x") for event in events]
    for index, row in enumerate(rows):
        if row is None:
            raise locate.error(index, "missing features 'x'", field="x")
    X = features_from_objects(rows, spec, locate)
    y = parse_labels([event.get("y") for event in events], locate) if labelled else None
    return Batch(X, y, ids)


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise MalformedBody(f"body is not valid JSON: {error}") from None


# Fast path for the common dense shape: simdjson turns each ``x`` array straight into float64
# bytes (``as_buffer``), so no Python float is made for a feature value.  With orjson, decoding
# 1,000 events of 50 features costs ~2.3 ms and building the array from the Python floats
# ~0.8 ms more; simdjson does both in ~1.3 ms, plus ~0.4 us per event of proxy access.  Both
# parsers round every number correctly, so the array is bit for bit the same.
#
# The fast path only accepts; it never rejects.  On anything but the plain shape (other keys,
# a nested array, a non-number feature, a bad id or label, invalid JSON ...) it returns None
# and the general path below parses the body again and produces its usual error.
_EVENT_LAYOUTS: dict[tuple[str, ...], tuple[bool, bool]] = {
    keys: ("id" in keys, "y" in keys)
    for keys in itertools.chain.from_iterable(
        itertools.permutations(("x", *others)) for others in ((), ("id",), ("y",), ("id", "y"))
    )
}  # event keys in any order -> (has id, has y); a repeated or unknown key is not listed
_OPEN_BRACKET = ord("[")
#: Below ~4 KB (a handful of events) the general path is as fast: a one-event /score body
#: (~1 KB) parses in ~7.5 us there against ~9 us here.
_FAST_PATH_MIN_BYTES = 4096
#: A parser keeps the buffers of the largest document it has parsed (~2.3x its size resident:
#: ~18 MB after an 8 MB body): one per thread is reused for bodies up to this size, a larger
#: body gets a parser of its own that is freed after.
_REUSED_PARSER_MAX_BYTES = 8 * 1024 * 1024
_parsers = threading.local()
_FAST_PATH_GIVES_UP = (
    ValueError,  # invalid JSON, a number out of range
    TypeError,  # a feature that is not a number (as_buffer)
    KeyError,
    AttributeError,
    ServiceError,  # a bad id or label, too many events
)


def _dense_json_fast(
    body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int
) -> Batch | None:
    """The batch of a dense-model JSON body of the plain shape, or None (see above)."""
    parser: simdjson.Parser | None = None
    if len(body) <= _REUSED_PARSER_MAX_BYTES:
        parser = getattr(_parsers, "parser", None)
    if parser is None:
        parser = simdjson.Parser()
        if len(body) <= _REUSED_PARSER_MAX_BYTES:
            _parsers.parser = parser
    try:
        return _read_dense_json(parser, body, spec, labelled=labelled, max_events=max_events)
    except RuntimeError:  # proxies of an earlier document still referenced: start afresh
        _parsers.parser = None
        return None
    except _FAST_PATH_GIVES_UP:
        return None


def _read_dense_json(
    parser: simdjson.Parser, body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int
) -> Batch | None:
    if body.startswith(b"\xef\xbb\xbf"):
        return None  # simdjson skips a byte-order mark, orjson refuses it
    document = parser.parse(body)
    if type(document) is simdjson.Object and tuple(document.keys()) == ("events",):
        events = document["events"]
    else:
        events = document
    if type(events) is not simdjson.Array:
        return None
    n_events = len(events)
    if not 0 < n_events <= max_events:
        return None
    # as_buffer flattens nested arrays ([[1], 2] reads as [1, 2]): the plain shape has exactly
    # one "[" per event plus the events list's own (a "[" inside a string only means a retry).
    if np.count_nonzero(np.frombuffer(body, dtype=np.uint8) == _OPEN_BRACKET) != n_events + 1:
        return None
    width = spec.n_features
    rows = []
    raw_ids: list[Any] = []
    raw_labels: list[Any] = []
    for event in events:
        if type(event) is not simdjson.Object:
            return None
        n_keys = len(event)
        if n_keys == 3 or (n_keys == 2 and labelled):
            # x, id and y / x and y: three (two) distinct keys, else a lookup raises KeyError
            has_id, has_label = n_keys == 3, True
        else:
            layout = _EVENT_LAYOUTS.get(tuple(event.keys()))  # ~0.3 us: only when ambiguous
            if layout is None:
                return None
            has_id, has_label = layout
        row = event["x"]
        if type(row) is not simdjson.Array or len(row) != width:
            return None
        rows.append(row.as_buffer(of_type="d"))
        raw_ids.append(event["id"] if has_id else None)
        raw_labels.append(event["y"] if has_label else None)
    del event, row, events, document  # proxies hold the parser's document
    X = np.frombuffer(bytearray().join(rows), dtype=np.float64)  # bytearray: writable
    if X.size != n_events * width:
        return None
    locate = _Locator(raw_ids)
    ids = parse_ids(raw_ids, locate)
    y = parse_labels(raw_labels, locate) if labelled else None
    return Batch(_check_finite(X.reshape(n_events, width), locate), y, ids)


def json_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    if spec.feature_mode == "dense" and len(body) >= _FAST_PATH_MIN_BYTES:
        batch = _dense_json_fast(body, spec, labelled=labelled, max_events=max_events)
        if batch is not None:
            return batch
    document = parse_json(body)
    if type(document) is dict:
        if "events" not in document:
            raise InvalidInput("expected an object with an 'events' list", field="events")
        events = document["events"]
    else:
        events = document
    if type(events) is not list:
        raise InvalidInput("'events' must be a list of event objects", field="events")
    return events_to_batch(events, spec, labelled=labelled, max_events=max_events)


class NDJSONReader:
    """Decodes an NDJSON body chunk by chunk, one event per line (blank lines skipped)."""

    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self.events: list[Any] = []
        self.lines: list[int] = []
        self._tail = b""
        self._line = 0

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk
        parts = data.split(b"\n")
        self._tail = parts.pop()
        for part in parts:
            self._decode(part)

    def _decode(self, part: bytes) -> None:
        self._line += 1
        if not part.strip():
            return
        try:
            event = orjson.loads(part)
        except orjson.JSONDecodeError as error:
            raise MalformedBody(
                f"line {self._line}: not valid JSON: {error}", line=self._line
            ) from None
        if len(self.events) >= self.max_events:
            raise PayloadTooLarge(
                f"more than {self.max_events} events in one request", line=self._line
            )
        self.events.append(event)
        self.lines.append(self._line)

    def finish(self, spec: FeatureSpec, *, labelled: bool) -> Batch:
        if self._tail.strip():
            self._decode(self._tail)
            self._tail = b""
        return events_to_batch(
            self.events, spec, labelled=labelled, max_events=self.max_events, lines=self.lines
        )


def ndjson_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    reader = NDJSONReader(max_events)
    reader.feed(body)
    return reader.finish(spec, labelled=labelled)


# ---------------------------------------------------------------------------- LIBSVM
def libsvm_events(
    body: bytes,
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    zero_based: bool = False,
) -> Batch:
    """LIBSVM / svmlight text -> batch; tokens of all lines converted by one numpy call."""
    if spec.feature_mode == "hashed":
        raise UnsupportedMediaType(
            "a hashed model takes named features: send application/json or application/x-ndjson",
            field="content-type",
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedBody(f"LIBSVM body is not UTF-8 text: {error}") from None
    labels: list[str] = []
    raw_ids: list[str | None] = []
    rests: list[str] = []
    counts: list[int] = []
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        content, _, comment = line.partition("#")
        fields = content.split(None, 1)  # label, then pairs; any whitespace separates
        if not fields:
            continue  # blank or comment-only line
        head, rest = fields[0], fields[1] if len(fields) > 1 else ""
        labels.append(head)
        raw_ids.append(comment.strip() or None)
        rests.append(rest)
        counts.append(rest.count(":"))
        lines.append(number)
    _check_size(len(labels), max_events)
    locate = _Locator(raw_ids, lines)
    tokens = " ".join(rests).replace(":", " ").split()
    try:
        if len(tokens) != 2 * sum(counts):
            raise ValueError("pairs")
        pairs = np.array(tokens, dtype=np.float64).reshape(-1, 2)
    except ValueError:
        pairs = None
    if pairs is None:
        for index, rest in enumerate(rests):
            for token in rest.split():
                key, colon, value = token.partition(":")
                try:
                    int(key)
                    float(value)
                    ok = bool(colon)
                except ValueError:
                    ok = False
                if not ok:
                    raise locate.error(
                        index,
                        f"malformed LIBSVM pair {token!r}; expected <index>:<value>",
                        malformed=True,
                    )
        raise MalformedBody("malformed LIBSVM body")
    columns = pairs[:, 0]
    if columns.size and (columns != np.floor(columns)).any():
        position = int(np.flatnonzero(columns != np.floor(columns))[0])
        row = int(np.searchsorted(np.cumsum(counts), position, side="right"))
        raise locate.error(row, "LIBSVM feature indices must be integers", malformed=True)
    indices = columns.astype(np.int64) - (0 if zero_based else 1)
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=indptr[1:])
    sparse = _check_csr(
        CSRMatrix(indptr, indices, np.ascontiguousarray(pairs[:, 1]), spec.n_features),
        spec,
        locate,
    )
    X: np.ndarray | CSRMatrix = sparse.toarray() if spec.feature_mode == "dense" else sparse
    y = None
    if labelled:
        values: list[Any] = []
        for index, label in enumerate(labels):
            try:
                number_value = float(label)
            except ValueError:
                raise locate.error(
                    index, f"label {label!r} is not a number; accepted: 0/1 or -1/+1", field="y"
                ) from None
            values.append(int(number_value) if number_value.is_integer() else number_value)
        y = parse_labels(values, locate)
    return Batch(X, y, parse_ids(raw_ids, locate))


# ---------------------------------------------------------------------------- NPZ
def _read_member(archive: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """One array of an archive opened by ``np.load(..., allow_pickle=False)``.

    Why not ``archive[name]``: numpy reads a member through zipfile in small chunks, which
    costs about as much as learning a 1,000-event batch.  Reading the member in one call and
    viewing the bytes after the .npy header is ~3x faster.  Same safety: the header's dtype is
    checked and an object dtype (the only one that would need unpickling) is refused; nothing
    is ever unpickled.
    """
    fmt = np.lib.format
    assert archive.zip is not None
    raw = archive.zip.read(f"{name}.npy")
    stream = io.BytesIO(raw)
    version = fmt.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = fmt.read_array_header_1_0(stream)
    else:
        shape, fortran_order, dtype = fmt.read_array_header_2_0(stream)
    if dtype.hasobject:
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - stream.tell() < count * dtype.itemsize:
        raise EOFError(f"array {name!r} is truncated")
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=stream.tell())
    if fortran_order:
        return flat.reshape(tuple(shape), order="F").copy(order="C")
    return flat.reshape(tuple(shape)).copy()  # writable, C-contiguous


def _npz_arrays(body: bytes) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` body, through ``np.load(..., allow_pickle=False)``."""
    try:
        archive = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise MalformedBody(f"body is not a readable .npz archive: {error}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise MalformedBody("body is a single .npy array; send an .npz archive (np.savez)")
    with archive:
        names = set(archive.files)
        unexpected = sorted(names - set(NPZ_ARRAYS))
        if unexpected:
            raise InvalidInput(
                f"unexpected array(s) {', '.join(map(repr, unexpected))}; accepted: "
                f"{', '.join(NPZ_ARRAYS)}",
                field=unexpected[0],
            )
        arrays = {}
        for name in names:
            try:
                arrays[name] = _read_member(archive, name)
            except ValueError as error:  # object arrays: "Object arrays cannot be loaded ..."
                raise InvalidInput(
                    f"array {name!r} cannot be loaded: {error}", field=name
                ) from None
            except (OSError, zipfile.BadZipFile, EOFError) as error:
                raise MalformedBody(f"array {name!r} is corrupt: {error}", field=name) from None
    return arrays


# Fast path for what ``np.savez`` writes (stored members, no encryption): each member is read
# straight from the body (one copy into a fresh array) instead of through np.load, zipfile's
# member reader (a copy) and the .npy header parser (``ast.literal_eval``, ~20-50 us a header;
# parsed headers are cached, a batch of the same shape has the same header).  The CRC-32 of each
# member is still checked, by ISA-L (the value of zlib.crc32 at ~0.02 ms per MB instead of
# ~0.25 ms, which was ~10% of a 1,000-event NPZ request).  Anything else (compressed members, a
# bad CRC, unexpected names, an object dtype ...) returns None and the general path answers.
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, name length, extra length
_NPY_MAGIC = b"\x93NUMPY"


@functools.lru_cache(maxsize=256)
def _npy_header(preamble: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of a .npy preamble (magic, version, header), by numpy's
    own parser, as ``_read_member`` reads it."""
    fmt = np.lib.format
    stream = io.BytesIO(preamble)
    version = fmt.read_magic(stream)
    if version == (1, 0):
        return fmt.read_array_header_1_0(stream)
    return fmt.read_array_header_2_0(stream)


def _npz_arrays_fast(body: bytes) -> dict[str, np.ndarray] | None:
    if not body.startswith(b"PK\x03\x04"):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            members = archive.infolist()
    except (ValueError, OSError, zipfile.BadZipFile, EOFError):
        return None
    view = memoryview(body)
    arrays: dict[str, np.ndarray] = {}
    for member in members:
        name = member.filename[:-4]
        if (
            not member.filename.endswith(".npy")
            or name not in NPZ_ARRAYS
            or name in arrays
            or member.compress_type != zipfile.ZIP_STORED
            or member.flag_bits & 0x1  # encrypted
            or member.compress_size != member.file_size
        ):
            return None
        start = member.header_offset
        if start + _LOCAL_HEADER.size > len(body):
            return None
        signature, name_length, extra_length = _LOCAL_HEADER.unpack_from(body, start)
        name_start = start + _LOCAL_HEADER.size
        data_start = name_start + name_length + extra_length
        data_end = data_start + member.file_size
        if (
            signature != b"PK\x03\x04"
            or view[name_start : name_start + name_length] != member.orig_filename.encode()
            or data_end > len(body)
            or crc32(view[data_start:data_end]) != member.CRC
            or view[data_start : data_start + 6] != _NPY_MAGIC
        ):
            return None
        major = body[data_start + 6]
        if major == 1:
            header_end = (
                data_start + 10 + int.from_bytes(view[data_start + 8 : data_start + 10], "little")
            )
        elif major in (2, 3):
            header_end = (
                data_start + 12 + int.from_bytes(view[data_start + 8 : data_start + 12], "little")
            )
        else:
            return None
        if header_end > data_end:
            return None
        try:
            shape, fortran_order, dtype = _npy_header(bytes(view[data_start:header_end]))
        except (ValueError, OSError, EOFError):
            return None
        count = int(np.prod(shape, dtype=np.int64))
        if dtype.hasobject or count < 0 or data_end - header_end < count * dtype.itemsize:
            return None
        flat = np.frombuffer(body, dtype=dtype, count=count, offset=header_end)
        if fortran_order:
            arrays[name] = flat.reshape(tuple(shape), order="F").copy(order="C")
        else:
            arrays[name] = flat.reshape(tuple(shape)).copy()  # writable, C-contiguous
    return arrays or None


def npz_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    """A ``.npz`` archive, loaded with ``allow_pickle=False``."""
    if spec.feature_mode == "hashed":
        raise UnsupportedMediaType(
            "a hashed model takes named features: send application/json or application/x-ndjson",
            field="content-type",
        )
    arrays = _npz_arrays_fast(body)
    if arrays is None:
        arrays = _npz_arrays(body)
    names = set(arrays)
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise InvalidInput(f"array {name!r} holds Python objects", field=name)
    raw_ids = arrays["ids"].tolist() if "ids" in arrays else None
    locate = _Locator(raw_ids)
    X: np.ndarray | CSRMatrix
    if "X" in arrays:
        dense = arrays["X"]
        if dense.ndim != 2:
            raise InvalidInput(f"'X' must be 2-d, got shape {dense.shape}", field="X")
        if not (np.issubdtype(dense.dtype, np.number) or dense.dtype == np.bool_) or np.issubdtype(
            dense.dtype, np.complexfloating
        ):
            raise InvalidInput(f"'X' must hold real numbers, got dtype {dense.dtype}", field="X")
        _check_size(dense.shape[0], max_events)
        if dense.shape[1] != spec.n_features:
            raise InvalidInput(
                f"expected {spec.n_features} features per event, got {dense.shape[1]}", field="X"
            )
        dense = _check_finite(np.ascontiguousarray(dense, dtype=np.float64), locate)
        if spec.feature_mode == "dense":
            X = dense
        else:
            rows, columns = np.nonzero(dense)
            indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
            X = CSRMatrix(indptr, columns.astype(np.int64), dense[rows, columns], spec.n_features)
    elif {"indptr", "indices", "data"} <= names:
        try:
            indptr = np.asarray(arrays["indptr"], dtype=np.int64)
            indices = np.asarray(arrays["indices"], dtype=np.int64)
            data = np.asarray(arrays["data"], dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"CSR arrays must be numeric: {error}", field="data") from None
        if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
            raise InvalidInput("CSR arrays must be 1-d", field="indptr")
        _check_size(max(len(indptr) - 1, 0), max_events)
        if (
            indptr[0] != 0
            or (np.diff(indptr) < 0).any()
            or indptr[-1] != len(indices)
            or len(indices) != len(data)
        ):
            raise InvalidInput(
                "malformed CSR: indptr must start at 0, never decrease and end at "
                "len(indices) == len(data)",
                field="indptr",
            )
        X = _check_csr(CSRMatrix(indptr, indices, data, spec.n_features), spec, locate)
        if spec.feature_mode == "dense":
            X = X.toarray()
    else:
        raise InvalidInput(
            "the archive needs 'X' (dense) or 'indptr', 'indices' and 'data' (CSR)", field="X"
        )
    n_events = int(X.shape[0])
    y = None
    if labelled:
        if "y" not in arrays:
            raise InvalidInput("the archive has no labels 'y'", field="y")
        labels = arrays["y"].reshape(-1)
        if labels.shape[0] != n_events:
            raise InvalidInput(f"got {labels.shape[0]} labels for {n_events} events", field="y")
        if labels.dtype == np.bool_:
            y = np.where(labels, 1, -1).astype(np.int64)
        elif not np.issubdtype(labels.dtype, np.number) or np.issubdtype(
            labels.dtype, np.complexfloating
        ):
            raise InvalidInput(f"labels must be numbers, got dtype {labels.dtype}", field="y")
        else:
            valid = (labels == 1) | (labels == 0) | (labels == -1)
            if not valid.all():
                index = int(np.flatnonzero(~valid)[0])
                raise locate.error(
                    index,
                    f"label {labels[index].item()!r} is not accepted: 0/1, -1/+1 or bool",
                    field="y",
                )
            if (labels == 0).any() and (labels == -1).any():
                raise InvalidInput("labels mix 0 and -1; use {0, 1} or {-1, +1}", field="y")
            y = np.where(labels == 1, 1, -1).astype(np.int64)
    ids = None
    if raw_ids is not None:
        if len(raw_ids) != n_events:
            raise InvalidInput(f"got {len(raw_ids)} ids for {n_events} events", field="ids")
        ids = parse_ids(raw_ids, locate)
    return Batch(X, y, ids)


# ---------------------------------------------------------------------------- dispatch
def parse_events(
    body: bytes,
    content_type: str | None,
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    zero_based: bool = False,
) -> Batch:
    """Parse a whole (already read) body of any supported content type."""
    kind = media_type(content_type)
    if kind == JSON:
        return json_events(body, spec, labelled=labelled, max_events=max_events)
    if kind == NDJSON:
        return ndjson_events(body, spec, labelled=labelled, max_events=max_events)
    if kind == LIBSVM:
        return libsvm_events(
            body, spec, labelled=labelled, max_events=max_events, zero_based=zero_based
        )
    if kind == NPZ:
        return npz_events(body, spec, labelled=labelled, max_events=max_events)
    raise UnsupportedMediaType(
        f"content type {content_type or '(none)'!r} is not accepted; send one of "
        f"{', '.join(EVENT_CONTENT_TYPES)}",
        field="content-type",
    )


def parse_label_items(body: bytes, max_events: int) -> tuple[list[str], np.ndarray]:
    """``[{"id": ..., "y": ...}]`` (or ``{"labels": [...]}``) -> (ids, labels in {-1, +1})."""
    document = parse_json(body)
    items = document.get("labels") if type(document) is dict else document
    if type(items) is not list:
        raise InvalidInput('expected a list of {"id": ..., "y": ...} objects', field="labels")
    _check_size(len(items), max_events)
    for index, item in enumerate(items):
        if type(item) is not dict:
            raise _Locator().error(index, 'a label must be an object {"id": ..., "y": ...}')
    raw_ids = [item.get("id") for item in items]
    locate = _Locator(raw_ids)
    ids = parse_ids(raw_ids, locate)
    if ids is None or any(event_id is None for event_id in ids):
        index = 0 if ids is None else ids.index(None)
        raise locate.error(index, "a label needs the event 'id' it belongs to", field="id")
    labels = parse_labels([item.get("y") for item in items], locate)
    return [str(event_id) for event_id in ids], labels
