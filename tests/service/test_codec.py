"""The binary batch formats kept in Redis (:mod:`service.codec`) read bytes written by earlier
versions, and write exactly those bytes: pending records and stream entries are persisted, so
their layout never changes.  The literals below were written by the code before the codec
module existed (``service/engine.py`` and ``service/queue.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from core.csr import CSRMatrix
from service import codec
from service.ingest import Batch

# score 0.25, dense row [0.5, -1.0, 2.0]
DENSE_RECORD = bytes.fromhex(
    "000000000000d03fffffffffffffffff000000000000e03f000000000000f0bf0000000000000040"
)
# score -0.75, sparse row {4: 1.5, 1: -3.0} (indices kept in the order given)
SPARSE_RECORD = bytes.fromhex(
    "000000000000e8bf0200000000000000040000000000000001000000000000000000000000"
    "00f83f00000000000008c0"
)
CSR = CSRMatrix(np.array([0, 2]), np.array([4, 1]), np.array([1.5, -3.0]), 6)
DENSE_ENTRY = {
    "kind": b"events",
    "n": b"2",
    "d": b"2",
    "y": b"\x01\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",
    "X": b"\x00\x00\x00\x00\x00\x00\xf0?\x00\x00\x00\x00\x00\x00\x00@"
    b"\x00\x00\x00\x00\x00\x00\x08@\x00\x00\x00\x00\x00\x00\x10@",
    "ids": b'["a",null]',
}
CSR_ENTRY = {
    "kind": b"events",
    "n": b"1",
    "d": b"6",
    "y": b"\x01\x00\x00\x00\x00\x00\x00\x00",
    "indptr": b"\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00",
    "indices": b"\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00",
    "data": b"\x00\x00\x00\x00\x00\x00\xf8?\x00\x00\x00\x00\x00\x00\x08\xc0",
}
LABELS_ENTRY = {
    "kind": b"labels",
    "n": b"2",
    "y": b"\x01\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",
    "ids": b'["x","y"]',
}


def _as_read(fields: dict[str, bytes]) -> dict[bytes, bytes]:
    """Fields as a stream read returns them (bytes names)."""
    return {name.encode(): value for name, value in fields.items()}


def test_pending_records_keep_their_bytes():
    assert codec.encode_pending(np.array([[0.5, -1.0, 2.0]]), np.array([0.25])) == [DENSE_RECORD]
    assert codec.encode_pending(CSR, np.array([-0.75])) == [SPARSE_RECORD]
    X, scores = codec.decode_pending([DENSE_RECORD], 3, dense=True)
    np.testing.assert_array_equal(X, [[0.5, -1.0, 2.0]])
    np.testing.assert_array_equal(scores, [0.25])
    X, scores = codec.decode_pending([SPARSE_RECORD, SPARSE_RECORD], 6, dense=False)
    assert isinstance(X, CSRMatrix)
    np.testing.assert_array_equal(X.indptr, [0, 2, 4])
    np.testing.assert_array_equal(X.indices, [4, 1, 4, 1])
    np.testing.assert_array_equal(X.data, [1.5, -3.0, 1.5, -3.0])
    np.testing.assert_array_equal(scores, [-0.75, -0.75])


def test_stream_entries_keep_their_bytes():
    dense = Batch(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1, -1]), ["a", None])
    assert codec.encode_events(dense, 10) == [(2, DENSE_ENTRY)]
    assert codec.encode_events(Batch(CSR, np.array([1]), None), 10) == [(1, CSR_ENTRY)]
    assert codec.encode_labels(["x", "y"], np.array([1, -1]), 10) == [(2, LABELS_ENTRY)]
    read = codec.decode_events(_as_read(DENSE_ENTRY))
    np.testing.assert_array_equal(read.X, dense.X)
    np.testing.assert_array_equal(read.y, [1, -1])
    assert read.ids == ["a", None]
    sparse = codec.decode_events(_as_read(CSR_ENTRY)).X
    assert isinstance(sparse, CSRMatrix) and sparse.n_features == 6
    np.testing.assert_array_equal(sparse.toarray(), CSR.toarray())
    ids, labels = codec.decode_labels(_as_read(LABELS_ENTRY))
    assert ids == ["x", "y"] and labels.tolist() == [1, -1]


def test_a_batch_is_split_into_entries_and_corrupt_entries_are_refused():
    X = np.arange(10.0).reshape(5, 2)
    entries = codec.encode_events(Batch(X, np.ones(5, dtype=np.int64), None), 2)
    assert [n for n, _ in entries] == [2, 2, 1]
    parts = [codec.decode_events(_as_read(fields)).X for _, fields in entries]
    np.testing.assert_array_equal(np.concatenate(parts), X)
    with pytest.raises(ValueError, match="field 'X' holds 3 values, expected 4"):
        codec.decode_events(_as_read({**DENSE_ENTRY, "X": DENSE_ENTRY["X"][:24]}))
    with pytest.raises(ValueError, match="needs an id per label"):
        codec.decode_labels(_as_read({**LABELS_ENTRY, "ids": b'["x",null]'}))
