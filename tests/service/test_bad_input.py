"""Every kind of bad input gets the right 4xx problem and changes nothing
(docs/architecture.md §4)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tests.service.conftest import create_model, events_json, make_stream, npz_bytes

N_FEATURES = 5


def _snapshot(client):
    stored = client.app.state.store.load("m")
    metrics = client.get("/v1/models/m/metrics").json()
    metrics.pop("throughput")
    return stored.version, stored.arrays, metrics


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


CASES = {
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


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_rejected_and_changes_nothing(client, case):
    create_model(client, n_features=N_FEATURES)
    X, y = make_stream(200)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    before = _snapshot(client)

    request, status, fields = CASES[case]
    response = client.post("/v1/models/m/events", **request)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]
    for key, value in fields.items():
        assert problem.get(key) == value, (key, problem)

    after = _snapshot(client)
    assert after[0] == before[0]  # version
    assert after[2] == before[2]  # metrics
    assert set(after[1]) == set(before[1])
    for name in before[1]:
        np.testing.assert_array_equal(after[1][name], before[1][name], err_msg=name)


def test_unknown_model_is_404(client):
    for method, path in [
        ("post", "/v1/models/nope/events"),
        ("post", "/v1/models/nope/score"),
        ("post", "/v1/models/nope/labels"),
        ("get", "/v1/models/nope"),
        ("get", "/v1/models/nope/metrics"),
        ("get", "/v1/models/nope/weights"),
        ("delete", "/v1/models/nope"),
    ]:
        kwargs = {"json": {"events": []}} if method == "post" else {}
        response = getattr(client, method)(path, **kwargs)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["title"] == "Model not found"


def test_too_large_body_and_batch(make_client):
    client = make_client(max_body_bytes=4096, max_batch_events=10)
    create_model(client, n_features=N_FEATURES)
    X, y = make_stream(200)
    client.post("/v1/models/m/events", json=events_json(X[:5], y[:5]))
    before = _snapshot(client)
    big = client.post("/v1/models/m/events", json=events_json(X, y))
    assert big.status_code == 413 and big.json()["title"] == "Request body too large"
    many = client.post("/v1/models/m/events", json={"events": [{"x": [0] * 5, "y": 1}] * 11})
    assert many.status_code == 413

    def chunked():  # no Content-Length: the limit holds while reading
        for _ in range(100):
            yield b" " * 100

    streamed = client.post("/v1/models/m/events", content=chunked(), headers=NDJSON)
    assert streamed.status_code == 413
    after = _snapshot(client)
    assert after[0] == before[0] and after[2] == before[2]


def test_bad_model_creation_names_the_field(client):
    cases = [
        ({"id": "m", "n_features": 3, "learner": "nope"}, "learner"),
        ({"id": "m", "n_features": 3, "params": {"eta0": -1}}, "params.eta0"),
        ({"id": "m", "n_features": 3, "params": {"etaa": 1}}, "params.etaa"),
        ({"id": "m", "n_features": 0}, "n_features"),
        ({"id": "m", "n_features": 3, "feature_mode": "wide"}, "feature_mode"),
        ({"id": "m", "n_features": 3, "pauc_range": [0.3, 0.1]}, "pauc_range"),
        ({"id": "m", "n_features": 3, "scaling": "zscore"}, "scaling"),
        ({"id": "bad id!", "n_features": 3}, "id"),
        ({"id": "m", "n_features": 3, "surprise": 1}, "surprise"),
    ]
    for body, field in cases:
        response = client.post("/v1/models", json=body)
        assert response.status_code == 422, (body, response.text)
        problem = response.json()
        assert response.headers["content-type"] == "application/problem+json"
        assert problem["field"] == field, (body, problem)
    assert client.get("/v1/models").json() == {"models": []}


def test_a_batch_that_makes_the_model_diverge_is_rejected_whole(client, monkeypatch):
    from core.learners import learner_class

    create_model(client, n_features=N_FEATURES, scaling="none")
    X, y = make_stream(50)
    client.post("/v1/models/m/events", json=events_json(X, y))
    before = _snapshot(client)
    cls = learner_class("spam")
    original = cls._learn

    # injected failure at the kernel call, which every learning path makes (prequential_step,
    # and learn_rounds with the regret window on): learns, then reports an infinite score
    def diverging(self, X, y, scores):
        original(self, X, y, scores)
        if len(scores):
            scores[-1] = np.inf

    monkeypatch.setattr(cls, "_learn", diverging)
    response = client.post("/v1/models/m/events", json=events_json(X[:4], y[:4]))
    assert response.status_code == 422, response.text
    assert "not finite" in response.json()["detail"]
    assert response.json()["event"] == 3  # the event whose score was not finite
    monkeypatch.undo()
    after = _snapshot(client)
    assert after[0] == before[0] and after[2] == before[2]
    for name in before[1]:
        np.testing.assert_array_equal(after[1][name], before[1][name], err_msg=name)
