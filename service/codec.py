"""The binary formats of event batches kept in Redis, pending records and stream entries:
persisted, so neither layout may change (docs/architecture.md, "Stores": the layouts).  Decoding
raises ValueError on bytes that do not fit their declared counts (a corrupt entry)."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence

import numpy as np
import orjson

from core.csr import CSRMatrix
from service.ingest.batch import Batch

StreamFields = dict[str, bytes]


# ---------------------------------------------------------------------------- primitives
def le_bytes(array: np.ndarray, dtype: str) -> bytes:
    """``array`` as raw bytes of ``dtype`` (``"<i8"``, ``"<f8"``)."""
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


# ---------------------------------------------------------------------------- pending records
_RECORD_HEADER = struct.Struct("<dq")  # pre-update score, nnz (-1 for a dense row)


def encode_pending(X: np.ndarray | CSRMatrix, scores: np.ndarray) -> list[bytes]:
    """One record per event: its score and its (unscaled) features."""
    records = []
    if isinstance(X, CSRMatrix):
        for row in range(X.shape[0]):
            start, stop = int(X.indptr[row]), int(X.indptr[row + 1])
            records.append(
                _RECORD_HEADER.pack(float(scores[row]), stop - start)
                + le_bytes(X.indices[start:stop], "<i8")
                + le_bytes(X.data[start:stop], "<f8")
            )
    else:
        rows = np.ascontiguousarray(X, dtype="<f8")
        for row in range(rows.shape[0]):
            records.append(_RECORD_HEADER.pack(float(scores[row]), -1) + rows[row].tobytes())
    return records


def decode_pending(
    records: Sequence[bytes], n_features: int, dense: bool
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """Records -> (features in the model's layout, recorded scores)."""
    size = _RECORD_HEADER.size
    heads = [_RECORD_HEADER.unpack_from(record) for record in records]
    scores = np.array([score for score, _ in heads], dtype=np.float64)
    if dense:
        rows = [np.frombuffer(record, dtype="<f8", offset=size) for record in records]
        return np.array(rows, dtype=np.float64).reshape(-1, n_features), scores
    counts = [nnz for _, nnz in heads]
    pairs = list(zip(records, counts, strict=True))
    indices = [np.frombuffer(record, "<i8", nnz, size) for record, nnz in pairs]
    values = [np.frombuffer(record, "<f8", nnz, size + 8 * nnz) for record, nnz in pairs]
    X = CSRMatrix(
        np.array([0, *itertools.accumulate(counts)], dtype=np.int64),
        np.concatenate(indices or [np.zeros(0, np.int64)]),
        np.concatenate(values or [np.zeros(0)]),
        n_features,
    )
    return X, scores


# ---------------------------------------------------------------------------- stream entries
def _parts(n_events: int, entry_events: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the entries a batch of ``n_events`` is split into (one at least)."""
    return [
        (start, min(start + entry_events, n_events))
        for start in range(0, max(n_events, 1), entry_events)
    ]


def encode_events(batch: Batch, entry_events: int) -> list[tuple[int, StreamFields]]:
    """A validated labelled batch -> ``[(n_events, stream fields)]``, one per entry."""
    assert batch.y is not None
    entries = []
    for start, stop in _parts(len(batch), entry_events):
        rows = np.arange(start, stop, dtype=np.int64)
        part = batch if len(rows) == len(batch) else batch.take(rows)
        assert part.y is not None
        fields: StreamFields = {
            "kind": b"events",
            "n": str(len(part)).encode(),
            "d": str(int(part.X.shape[1])).encode(),
            "y": le_bytes(part.y, "<i8"),
        }
        if isinstance(part.X, CSRMatrix):
            fields["indptr"] = le_bytes(part.X.indptr, "<i8")
            fields["indices"] = le_bytes(part.X.indices, "<i8")
            fields["data"] = le_bytes(part.X.data, "<f8")
        else:
            fields["X"] = le_bytes(part.X, "<f8")
        if part.ids is not None:
            fields["ids"] = orjson.dumps(part.ids)
        entries.append((len(part), fields))
    return entries


def encode_labels(
    ids: Sequence[str], labels: np.ndarray, entry_events: int
) -> list[tuple[int, StreamFields]]:
    """Delayed labels -> ``[(n_labels, stream fields)]``, one per entry."""
    entries = []
    for start, stop in _parts(len(ids), entry_events):
        part = list(ids[start:stop])
        fields = {
            "kind": b"labels",
            "n": str(len(part)).encode(),
            "y": le_bytes(labels[start:stop], "<i8"),
            "ids": orjson.dumps(part),
        }
        entries.append((len(part), fields))
    return entries


def _field(fields: dict[bytes, bytes], name: str, dtype: str, count: int) -> np.ndarray:
    """A writable copy of field ``name`` read as ``dtype``; ValueError unless it holds ``count``."""
    array = np.frombuffer(fields[name.encode()], dtype=dtype).copy()
    if len(array) != count:
        raise ValueError(f"field {name!r} holds {len(array)} values, expected {count}")
    return array


def _ids(fields: dict[bytes, bytes], n_events: int) -> list[str | None] | None:
    raw = fields.get(b"ids")
    if raw is None:
        return None
    ids = orjson.loads(raw)
    if type(ids) is not list or len(ids) != n_events:
        raise ValueError(f"field 'ids' is not a list of {n_events} ids")
    return [None if value is None else str(value) for value in ids]


def decode_events(fields: dict[bytes, bytes]) -> Batch:
    """An ``events`` entry's fields -> the batch the API validated (ValueError if corrupt)."""
    n_events = int(fields[b"n"])
    n_features = int(fields[b"d"])
    y = _field(fields, "y", "<i8", n_events)
    X: np.ndarray | CSRMatrix
    if b"X" in fields:
        X = _field(fields, "X", "<f8", n_events * n_features).reshape(n_events, n_features)
    else:
        indptr = _field(fields, "indptr", "<i8", n_events + 1)
        indices = _field(fields, "indices", "<i8", int(indptr[-1]))
        data = _field(fields, "data", "<f8", int(indptr[-1]))
        X = CSRMatrix(indptr, indices, data, n_features)
    return Batch(X, y, _ids(fields, n_events))


def decode_labels(fields: dict[bytes, bytes]) -> tuple[list[str], np.ndarray]:
    """A ``labels`` entry's fields -> ``(ids, labels in {-1, +1})`` (ValueError if corrupt)."""
    n_events = int(fields[b"n"])
    ids = _ids(fields, n_events)
    if ids is None or any(event_id is None for event_id in ids):
        raise ValueError("a labels entry needs an id per label")
    return [str(event_id) for event_id in ids], _field(fields, "y", "<i8", n_events)
