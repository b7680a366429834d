"""JSON ingest, score and metrics end to end through the real app, on both stores."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from core.metrics import PrequentialWindow
from tests.service.conftest import create_model, events_json, make_stream


def test_json_ingest_learns_like_the_learner_and_reports_metrics(client):
    create_model(client, n_features=5, scaling="none", params={"random_state": 0})
    X, y = make_stream(300)
    response = client.post("/v1/models/m/events?scores=true", json=events_json(X, y))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["learned"] == 300 and body["duplicates"] == 0 and body["version"] == 2

    reference = make_learner("spam", random_state=0)
    reference.initialize(5)
    expected_scores = reference.prequential_step(X, y)
    np.testing.assert_array_equal(np.array(body["scores"]), expected_scores)

    weights = client.get("/v1/models/m/weights").json()
    np.testing.assert_array_equal(np.array(weights["coef"]), reference.coef_)

    window = PrequentialWindow(10_000, 10_000)
    window.update(expected_scores, y)
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["window"]["auc"] == pytest.approx(window.auc(), abs=0)
    assert metrics["window"]["pauc"] == pytest.approx(window.pauc(0.0, 0.1), abs=0)
    assert metrics["counts"]["events_learned"] == 300
    assert metrics["counts"]["positives"] == int(y.sum())

    scores = client.post("/v1/models/m/score", json=events_json(X[:7])).json()
    np.testing.assert_array_equal(np.array(scores["scores"]), reference.decision_function(X[:7]))


def test_model_crud(client):
    info = create_model(client, "a", n_features=3)
    assert info["config"]["scaling"] == "standard"  # [CHOICE] auto -> standard for dense
    assert (
        create_model(client, "b", n_features=3, feature_mode="hashed")["config"]["scaling"]
        == "scale"
    )
    assert client.get("/v1/models").json() == {"models": ["a", "b"]}
    again = client.post("/v1/models", json={"id": "a", "n_features": 3})
    assert again.status_code == 409
    assert again.headers["content-type"] == "application/problem+json"
    assert client.get("/v1/models/a").json()["version"] == 1
    assert client.delete("/v1/models/a").status_code == 204
    assert client.get("/v1/models/a").status_code == 404
    assert client.get("/v1/models").json() == {"models": ["b"]}


def test_duplicates_are_skipped_and_reported(client):
    create_model(client, n_features=5)
    X, y = make_stream(6)
    ids = ["a", "b", "c", "d", "e", "f"]
    first = client.post("/v1/models/m/events", json=events_json(X[:3], y[:3], ids[:3])).json()
    assert first["learned"] == 3
    # b repeats an earlier event; e repeats inside this batch; g/h have no id (always learned)
    body = events_json(X[1:6], y[1:6], ["b", "d", "e", "e", "f"])
    body["events"].append({"x": X[0].tolist(), "y": int(y[0])})
    second = client.post("/v1/models/m/events?scores=true", json=body).json()
    assert second["learned"] == 4 and second["duplicates"] == 2
    assert second["duplicate_ids"] == ["b", "e"]
    scores = second["scores"]
    assert scores[0] is None and scores[3] is None
    assert all(isinstance(value, float) for value in scores[1:3] + scores[4:])
    counts = client.get("/v1/models/m").json()["counts"]
    assert counts["events_learned"] == 7 and counts["duplicates"] == 2


def test_a_batch_of_only_duplicates_changes_nothing(client):
    """A client's retry of a batch already learned is acknowledged and changes nothing: the
    version, the counters and every stored array stay as they were (no commit)."""
    create_model(client, n_features=5)
    X, y = make_stream(6)
    body = events_json(X, y, [f"r{i}" for i in range(6)])
    first = client.post("/v1/models/m/events", json=body).json()
    before = client.get("/v1/models/m").json()
    stored = client.app.state.store.load("m").arrays
    retry = client.post("/v1/models/m/events", json=body).json()
    assert retry["learned"] == 0 and retry["duplicates"] == 6
    assert retry["version"] == first["version"] == before["version"]
    assert client.get("/v1/models/m").json() == before
    after = client.app.state.store.load("m").arrays
    assert after.keys() == stored.keys()
    for name, value in stored.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
