"""``application/json``: ``{"events": [{"id": "e1", "x": ..., "y": 1}, ...]}`` (a bare list of
events is accepted too), and the ``{"labels": [{"id": ..., "y": ...}]}`` of delayed labels.

A dense-model body of the plain shape takes a faster road (simdjson straight into float64, see
``_dense_json_fast``) that gives the same batch and leaves every other body, and every error,
to the general path (:mod:`service.ingest.objects`).
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import Any

import numpy as np
import simdjson

from core.validation import first_out_of_range
from service.errors import InvalidInput, ServiceError
from service.ingest import fields
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.fields import Locator
from service.ingest.objects import (
    EVENT_KEYS,
    events_to_batch,
    located_objects,
    parse_json,
    unknown_key,
    unknown_key_detail,
)

# Fast path for the common dense shape: simdjson turns each ``x`` array straight into float64
# bytes (``as_buffer``), so no Python float is made for a feature value: decoding and building
# the array together cost less than orjson's decoding alone (loadtest/README.md).  Both parsers
# round every number correctly, so the array is bit for bit the same.
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
#: Below ~4 KB (a handful of events) the general path is as fast (a one-event /score body is
#: a little faster there).
_FAST_PATH_MIN_BYTES = 4096
#: A parser keeps the buffers of the largest document it has parsed (about twice its size
#: resident): one per thread is reused for bodies up to this size, a larger body gets a parser
#: of its own that is freed after.
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
    locate = Locator(raw_ids)
    ids = fields.parse_ids(raw_ids, locate)
    if labelled:
        y = fields.labels_from_values(raw_labels, locate)
    else:
        y = None
        fields.check_unused_labels(raw_labels, locate)
    return Batch(fields.dense(X.reshape(n_events, width), spec, locate), y, ids)


_BODY_KEYS = frozenset({"events"})
_LABELS_KEYS = frozenset({"labels"})
_LABEL_KEYS = frozenset({"id", "y"})


def _refuse_other_keys(document: Any, accepted: frozenset[str]) -> None:
    """A top-level object has its one list and nothing else."""
    if type(document) is dict:
        key = unknown_key(document, accepted)
        if key is not None:
            raise InvalidInput(unknown_key_detail(key, accepted), field=fields.shown_id(key))


def json_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    if spec.feature_mode == "dense" and len(body) >= _FAST_PATH_MIN_BYTES:
        batch = _dense_json_fast(body, spec, labelled=labelled, max_events=max_events)
        if batch is not None:
            return batch
    document = parse_json(body)
    if type(document) is dict:
        if "events" not in document:
            raise InvalidInput("expected an object with an 'events' list", field="events")
        _refuse_other_keys(document, _BODY_KEYS)
        events = document["events"]
    else:
        events = document
    if type(events) is not list:
        raise InvalidInput("'events' must be a list of event objects", field="events")
    if len(events) == 1 and spec.feature_mode == "dense" and max_events >= 1:
        batch = _one_dense_event(events[0], spec, labelled)
        if batch is not None:
            return batch
    return events_to_batch(events, spec, labelled=labelled, max_events=max_events)


def _one_dense_event(event: Any, spec: FeatureSpec, labelled: bool) -> Batch | None:
    """The batch of a body of one event of the plain shape for a dense model, or None: the
    general path's batch without its per-batch costs (the locator, the label coercion), which
    are as much as scoring one event.  Like ``_dense_json_fast`` it only accepts: anything else
    goes to the general path, which gives its usual error."""
    if type(event) is not dict or not event.keys() <= EVENT_KEYS:
        return None
    row = event.get("x")
    width = spec.n_features
    if type(row) is not list or len(row) != width:
        return None
    event_id = event.get("id")
    if event_id is not None:
        if type(event_id) is int:
            event_id = str(event_id)
        elif type(event_id) is not str or not fields.id_fits(event_id):
            return None
    y = None
    label = event.get("y")
    if (labelled or label is not None) and not fields.is_label(label):
        return None  # /score does not use a label, but refuses one that is not a label
    if labelled:
        y = np.array([1 if label == 1 else -1], dtype=np.int64)
    try:
        # a TypeError on anything but numbers (as in objects.dense_features); a finite sum
        # proves every value finite (as in core.validation.first_nonfinite)
        if not math.isfinite(sum(row)):
            return None
        X = np.fromiter(row, dtype=np.float64, count=width).reshape(1, width)
    except (TypeError, ValueError, OverflowError):
        return None
    if first_out_of_range(X) is not None:  # beyond the feature bound: the general path says so
        return None
    return Batch(X, y, None if event_id is None else [event_id])


def parse_label_items(body: bytes, max_events: int) -> tuple[list[str], np.ndarray]:
    """``[{"id": ..., "y": ...}]`` (or ``{"labels": [...]}``) -> (ids, labels in {-1, +1})."""
    document = parse_json(body)
    items = document.get("labels") if type(document) is dict else document
    if type(items) is list:
        _refuse_other_keys(document, _LABELS_KEYS)
    return label_items(items, max_events)


def label_items(items: Any, max_events: int) -> tuple[list[str], np.ndarray]:
    """Decoded ``[{"id": ..., "y": ...}]`` items -> (ids, labels in {-1, +1}) (the body of
    ``/labels``, or a stream message's)."""
    if type(items) is not list:
        raise InvalidInput('expected a list of {"id": ..., "y": ...} objects', field="labels")
    fields.check_size(len(items), max_events, "labels")
    raw_ids, locate = located_objects(
        items, _LABEL_KEYS, lambda _: 'a label must be an object {"id": ..., "y": ...}'
    )
    ids = fields.label_ids(raw_ids, locate)
    return ids, fields.labels_from_values([item.get("y") for item in items], locate)
