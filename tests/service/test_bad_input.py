"""Every kind of bad input gets the right 4xx problem and changes nothing
(docs/architecture.md §4)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.service.bad_input_helpers import BAD_INPUT, BAD_INPUT_FEATURES, NDJSON
from tests.service.conftest import create_model, events_json, make_stream


def _snapshot(client):
    stored = client.app.state.store.load("m")
    metrics = client.get("/v1/models/m/metrics").json()
    metrics.pop("throughput")
    return stored.version, stored.arrays, metrics


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_rejected_and_changes_nothing(client, case):
    create_model(client, n_features=BAD_INPUT_FEATURES)
    X, y = make_stream(200)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    before = _snapshot(client)

    request, status, fields = BAD_INPUT[case]
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
    create_model(client, n_features=BAD_INPUT_FEATURES)
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

    create_model(client, n_features=BAD_INPUT_FEATURES, scaling="none")
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
