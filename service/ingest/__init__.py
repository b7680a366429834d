"""Request bodies -> validated batches ``(X, y, ids)``: one module per content type (shapes in
docs/api.md) behind :func:`parse_events`, delayed labels through :func:`parse_label_items`.
Every check (:mod:`~service.ingest.fields`) runs on the whole batch before anything is learned.
"""

from __future__ import annotations

from typing import Any

from service.errors import UnsupportedMediaType
from service.ingest.batch import Batch, FeatureSpec, concatenate
from service.ingest.fields import MAX_DENSE_CELLS, MAX_INFLATED_BYTES
from service.ingest.json import joined_labels, json_events, label_items, parse_label_items
from service.ingest.libsvm import libsvm_events
from service.ingest.ndjson import NDJSONReader, ndjson_events
from service.ingest.npz import npz_events

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


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type header, aliases resolved."""
    bare = (content_type or "").split(";", 1)[0].strip().lower()
    return _ALIASES.get(bare, bare)


def parse_events(
    body: bytes,
    content_type: str | None,
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    zero_based: bool = False,
    max_dense_cells: int = MAX_DENSE_CELLS,
    max_inflated_bytes: int = MAX_INFLATED_BYTES,
) -> Batch:
    """A whole (already read) body of any accepted content type; ``max_dense_cells`` bounds the
    dense copy of sparse input, ``max_inflated_bytes`` an NPZ body inflated (413 beyond)."""
    kind = media_type(content_type)
    if kind in (LIBSVM, NPZ) and spec.feature_mode == "hashed":
        raise UnsupportedMediaType(
            "a hashed model takes named features: send application/json or application/x-ndjson",
            field="content-type",
        )
    common: dict[str, Any] = {"labelled": labelled, "max_events": max_events}
    if kind == JSON:
        return json_events(body, spec, **common)
    if kind == NDJSON:
        return ndjson_events(body, spec, **common)
    if kind == LIBSVM:
        return libsvm_events(
            body, spec, **common, zero_based=zero_based, max_dense_cells=max_dense_cells
        )
    if kind == NPZ:
        common["max_inflated_bytes"] = max_inflated_bytes
        return npz_events(body, spec, **common, max_dense_cells=max_dense_cells)
    raise UnsupportedMediaType(
        f"content type {content_type or '(none)'!r} is not accepted; send one of "
        f"{', '.join(EVENT_CONTENT_TYPES)}",
        field="content-type",
    )


__all__ = [
    "JSON",
    "NDJSON",
    "NPZ",
    "Batch",
    "FeatureSpec",
    "NDJSONReader",
    "concatenate",
    "joined_labels",
    "json_events",
    "label_items",
    "libsvm_events",
    "media_type",
    "parse_events",
    "parse_label_items",
]
