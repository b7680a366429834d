"""``application/json``: ``{"events": [{"id": "e1", "x": ..., "y": 1}, ...]}`` (or a bare list),
and delayed labels ``{"labels": [{"id": ..., "y": ...}]}``.  A dense model's plain events take
faster roads to the same batch; every other body, and every error, takes the general path
(:mod:`service.ingest.objects`).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Sequence
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
)

# The fast path: simdjson turns each ``x`` array straight into float64 bytes (``as_buffer``),
# no Python float made, bit for bit what orjson gives (both round correctly).  It only
# accepts: on anything but the plain shape it returns None and the general path says why.
_EVENT_LAYOUTS: dict[tuple[str, ...], tuple[bool, bool]] = {
    keys: ("id" in keys, "y" in keys)
    for keys in itertools.chain.from_iterable(
        itertools.permutations(("x", *others)) for others in ((), ("id",), ("y",), ("id", "y"))
    )
}  # event keys in any order -> (has id, has y); a repeated or unknown key is not listed
_OPEN_BRACKET = ord("[")
#: below ~4 KB (a handful of events) the general path is as fast
_FAST_PATH_MIN_BYTES = 4096
#: a parser keeps the buffers of the largest document it parsed: one per thread is reused up
#: to this size, a larger body gets one of its own
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
    reused = len(body) <= _REUSED_PARSER_MAX_BYTES
    parser = getattr(_parsers, "parser", None) if reused else None
    if parser is None:
        parser = simdjson.Parser()
        if reused:
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
    # as_buffer flattens nested arrays: the plain shape has one "[" per event and the list's
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
    unknown = unknown_key(document, accepted) if type(document) is dict else None
    if unknown is not None:
        raise InvalidInput(unknown[1], field=unknown[0])


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
    """The batch of one plain event for a dense model without the general path's per-batch
    costs (as much as scoring one event), or None; like ``_dense_json_fast`` it only accepts."""
    if type(event) is not dict or not event.keys() <= EVENT_KEYS:
        return None
    row = event.get("x")
    width = spec.n_features
    if type(row) is not list or len(row) != width:
        return None
    label = event.get("y")
    if (labelled or label is not None) and not fields.is_label(label):
        return None  # /score does not use a label, but refuses one that is not a label
    try:
        event_id = fields.as_id(event.get("id"))
        # a TypeError on anything but numbers; a finite sum proves every value finite
        if not math.isfinite(sum(row)):
            return None
        X = np.fromiter(row, dtype=np.float64, count=width).reshape(1, width)
    except (TypeError, ValueError, OverflowError):
        return None
    if first_out_of_range(X) is not None:  # beyond the feature bound: the general path says so
        return None
    y = np.array([1 if label == 1 else -1], dtype=np.int64) if labelled else None
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


def joined_labels(parts: Sequence[tuple[list[str], np.ndarray]]) -> tuple[list[str], np.ndarray]:
    """Several label requests ``(ids, labels)`` as one, in order, for one engine call (the
    ``/labels`` requests of a group, a stream's run, a worker's entries), each already in
    {-1, +1} (:func:`label_items` maps {0, 1} to it; a queued entry holds it)."""
    ids = [event_id for part_ids, _ in parts for event_id in part_ids]
    return ids, np.concatenate([part_labels for _, part_labels in parts])
