"""Every kind of bad request body (docs/architecture.md §4) with the status and problem fields
it must get, shared by test_bad_input.py (sync mode) and test_queue.py (queue mode)."""

from __future__ import annotations

import io

import numpy as np

from tests.service.conftest import events_json, make_stream, npz_bytes

#: the width of the model the bad requests are sent to
BAD_INPUT_FEATURES = 5


def _object_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, X=np.array([[1, 2, 3, 4, 5]], dtype=object), y=np.array([1]))
    return buffer.getvalue()


def _good_rows(n=3):
    X, y = make_stream(n, seed=9)
    return X, y


def _json_with(bad_event) -> dict:
    X, y = _good_rows()
    body = events_json(X, y, ids=["g0", "g1", "g2"])
    body["events"].append(bad_event)
    return body


JSON = {"content-type": "application/json"}
NDJSON = {"content-type": "application/x-ndjson"}
LIBSVM = {"content-type": "text/x-libsvm"}
NPZ = {"content-type": "application/x-npz"}


def _sent(headers: dict, content: bytes) -> dict:
    """The request keywords of a raw body sent with ``headers``."""
    return {"content": content, "headers": headers}


BAD_INPUT = {
    # name: (request kwargs, status, expected problem fields)
    "malformed-json": (_sent(JSON, b'{"events": ['), 400, {}),
    "json-nan-literal": (_sent(JSON, b'{"events": [{"x": [NaN, 1, 2, 3, 4], "y": 1}]}'), 400, {}),
    "json-infinite-number": (
        _sent(JSON, b'{"events": [{"x": [1e999, 1, 2, 3, 4], "y": 1}]}'),
        400,
        {},
    ),
    "json-not-events": ({"json": {"evnts": []}}, 422, {"field": "events"}),
    "json-empty": ({"json": {"events": []}}, 422, {"field": "events"}),
    "wrong-dimension": (
        {"json": _json_with({"id": "bad", "x": [1, 2], "y": 1})},
        422,
        {"event": 3, "event_id": "bad", "field": "x"},
    ),
    "string-feature": (
        {"json": _json_with({"x": [1, 2, "a", 4, 5], "y": 1})},
        422,
        {"event": 3, "field": "x"},
    ),
    "missing-x": ({"json": _json_with({"y": 1})}, 422, {"event": 3, "field": "x"}),
    "bad-label": (
        {"json": _json_with({"id": "b", "x": [1, 2, 3, 4, 5], "y": 2})},
        422,
        {"event": 3, "event_id": "b", "field": "y"},
    ),
    "missing-label": (
        {"json": _json_with({"x": [1, 2, 3, 4, 5]})},
        422,
        {"event": 3, "field": "y"},
    ),
    "string-label": (
        {"json": _json_with({"x": [1, 2, 3, 4, 5], "y": "1"})},
        422,
        {"event": 3, "field": "y"},
    ),
    "mixed-0-and-minus-1": (
        {"json": {"events": [{"x": [1, 2, 3, 4, 5], "y": 0}, {"x": [1, 2, 3, 4, 5], "y": -1}]}},
        422,
        {"field": "y"},
    ),
    "bad-id": (
        {"json": _json_with({"id": 1.5, "x": [1, 2, 3, 4, 5], "y": 1})},
        422,
        {"event": 3, "field": "id"},
    ),
    "malformed-ndjson-line": (
        _sent(NDJSON, b'{"x": [1,2,3,4,5], "y": 1}\n\n{"x": [1,2\n'),
        400,
        {"line": 3},
    ),
    "ndjson-bad-label-line": (
        _sent(NDJSON, b'{"x": [1,2,3,4,5], "y": 1}\n{"x": [1,2,3,4,5], "y": 7}\n'),
        422,
        {"line": 2, "field": "y"},
    ),
    "malformed-libsvm-line": (_sent(LIBSVM, b"1 1:0.5 2:1\n-1 3:x\n"), 400, {"line": 2}),
    "libsvm-nan": (_sent(LIBSVM, b"1 1:0.5\n-1 2:nan\n"), 422, {"line": 2}),
    "libsvm-index-out-of-range": (_sent(LIBSVM, b"1 1:0.5\n-1 9:1\n"), 422, {"line": 2}),
    "libsvm-bad-label": (_sent(LIBSVM, b"1 1:0.5\nspam 2:1\n"), 422, {"line": 2, "field": "y"}),
    "npz-object-array": (_sent(NPZ, _object_npz()), 422, {"field": "X"}),
    "npz-nan": (
        {
            "content": npz_bytes(
                X=np.array([[1, 2, 3, 4, 5], [1, np.nan, 3, 4, 5.0]]), y=np.array([1, 0])
            ),
            "headers": NPZ,
        },
        422,
        {"event": 1},
    ),
    "npz-wrong-width": (
        _sent(NPZ, npz_bytes(X=np.ones((2, 4)), y=np.array([1, 0]))),
        422,
        {"field": "X"},
    ),
    "npz-no-labels": (_sent(NPZ, npz_bytes(X=np.ones((2, 5)))), 422, {"field": "y"}),
    "npz-bad-label": (
        _sent(NPZ, npz_bytes(X=np.ones((2, 5)), y=np.array([1, 3]))),
        422,
        {"event": 1, "field": "y"},
    ),
    "npz-extra-array": (
        {
            "content": npz_bytes(X=np.ones((2, 5)), y=np.array([1, 0]), evil=np.ones(1)),
            "headers": NPZ,
        },
        422,
        {"field": "evil"},
    ),
    "npz-corrupt": (_sent(NPZ, b"PK\x03\x04 not really a zip"), 400, {}),
    "wrong-content-type": (
        {"content": b"x=1", "headers": {"content-type": "text/plain"}},
        415,
        {"field": "content-type"},
    ),
    "no-content-type": ({"content": b"{}", "headers": {"content-type": ""}}, 415, {}),
}
