"""Delayed labels: scores now, labels later (out of order, duplicated, unknown, expired);
metrics use the scores recorded at scoring time."""

from __future__ import annotations

import numpy as np

from core.learners import make_learner
from core.metrics import PrequentialWindow
from tests.service.clock_helpers import FixedClock
from tests.service.conftest import create_model, events_json, make_stream


def test_labels_join_recorded_scores(client):
    clock = FixedClock()
    client.app.state.engine.clock = clock
    create_model(client, n_features=5, scaling="none", label_ttl_seconds=100)
    X, y = make_stream(40, seed=4)
    ids = [f"e{i}" for i in range(10)]

    reference = make_learner("spam")
    reference.initialize(5)
    window = PrequentialWindow(10_000, 10_000)

    # a first labelled batch so the model is not at zero
    first = client.post("/v1/models/m/events?scores=true", json=events_json(X[10:20], y[10:20]))
    window.update(reference.prequential_step(X[10:20], y[10:20]), y[10:20])
    np.testing.assert_array_equal(first.json()["scores"], window.contents()[0])

    scored = client.post("/v1/models/m/score", json=events_json(X[:10], ids=ids)).json()
    assert scored["kept"] == 10
    recorded = np.array(scored["scores"])
    np.testing.assert_array_equal(recorded, reference.decision_function(X[:10]))

    # the model moves on before the labels come
    client.post("/v1/models/m/events", json=events_json(X[20:40], y[20:40]))
    window.update(reference.prequential_step(X[20:40], y[20:40]), y[20:40])

    clock.now += 50
    labels = [
        {"id": "e7", "y": int(y[7])},
        {"id": "e2", "y": int(y[2])},
        {"id": "e2", "y": int(y[2])},
        {"id": "zz", "y": 1},
        {"id": "e5", "y": int(y[5])},
    ]
    response = client.post("/v1/models/m/labels", json=labels)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["learned"] == 3
    assert [(r["id"], r["status"]) for r in body["results"]] == [
        ("e7", "learned"),
        ("e2", "learned"),
        ("e2", "duplicate"),
        ("zz", "unknown"),
        ("e5", "learned"),
    ]
    order = [7, 2, 5]
    reference.partial_fit(X[order], y[order])
    window.update(recorded[order], y[order])

    again = client.post("/v1/models/m/labels", json={"labels": [{"id": "e7", "y": 0}]}).json()
    assert again["results"] == [{"id": "e7", "status": "duplicate"}] and again["learned"] == 0

    clock.now += 60  # past the 100 s TTL of e0..e9 (e7, e2, e5 are learned)
    late = client.post("/v1/models/m/labels", json=[{"id": "e0", "y": 1}, {"id": "e2", "y": 1}])
    assert [r["status"] for r in late.json()["results"]] == ["expired", "duplicate"]
    late = client.post("/v1/models/m/labels", json=[{"id": "e1", "y": 1}])
    assert late.json()["results"] == [{"id": "e1", "status": "expired"}]

    coef = np.array(client.get("/v1/models/m/weights").json()["coef"])
    np.testing.assert_array_equal(coef, reference.coef_)
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["window"]["auc"] == window.auc()
    assert metrics["window"]["events"] == 33
    counts = metrics["counts"]
    assert counts["labels_joined"] == 3 and counts["labels_expired"] == 7
    assert counts["events_learned"] == 33 and counts["labels_defaulted"] == 0


def test_default_label_after_the_ttl(client):
    clock = FixedClock()
    engine = client.app.state.engine
    engine.clock = clock
    create_model(client, n_features=5, scaling="none", label_ttl_seconds=30, default_label=0)
    X, _ = make_stream(6, seed=5)
    ids = [f"t{i}" for i in range(6)]
    recorded = np.array(
        client.post("/v1/models/m/score", json=events_json(X, ids=ids)).json()["scores"]
    )
    client.post("/v1/models/m/labels", json=[{"id": "t0", "y": 1}])
    clock.now += 31
    assert engine.sweep_all() == 5
    statuses = client.post("/v1/models/m/labels", json=[{"id": "t3", "y": 1}]).json()
    assert statuses["results"] == [{"id": "t3", "status": "expired"}]

    reference = make_learner("spam")
    reference.initialize(5)
    reference.partial_fit(X[:1], np.array([1]))
    reference.partial_fit(X[1:], -np.ones(5, dtype=np.int64))
    np.testing.assert_array_equal(
        np.array(client.get("/v1/models/m/weights").json()["coef"]), reference.coef_
    )
    window = PrequentialWindow(10, 10)
    window.update(recorded, [1, 0, 0, 0, 0, 0])
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["window"]["auc"] == window.auc()
    assert metrics["counts"]["labels_defaulted"] == 5
    assert metrics["counts"]["negatives"] == 5 and metrics["counts"]["positives"] == 1


def test_labels_need_json_and_ids(client):
    create_model(client, n_features=5)
    bad = client.post("/v1/models/m/labels", content=b"1", headers={"content-type": "text/plain"})
    assert bad.status_code == 415
    # the words of every JSON route's refusal (one rule: body.require_json_media)
    assert bad.json()["detail"] == "send the body as application/json, not text/plain"
    assert bad.json()["field"] == "content-type"
    missing = client.post("/v1/models/m/labels", json=[{"y": 1}])
    assert missing.status_code == 422 and missing.json()["field"] == "id"
    label = client.post("/v1/models/m/labels", json=[{"id": "a", "y": 5}])
    assert label.status_code == 422 and label.json()["field"] == "y"


def test_delayed_labels_on_a_hashed_model(client):
    """Sparse (hashed) features survive the trip through the pending store exactly."""
    from core.hashing import FeatureHasher

    create_model(client, n_features=32, feature_mode="hashed", scaling="none")
    rows = [{"amount": 12.5, "country": "FR"}, {"amount": 3.0, "merchant": "m9", "night": True},
            {}]  # fmt: skip
    scored = client.post(
        "/v1/models/m/score", json={"events": [{"id": f"h{i}", "x": r} for i, r in enumerate(rows)]}
    ).json()
    assert scored["kept"] == 3
    response = client.post("/v1/models/m/labels", json=[{"id": "h2", "y": 0}, {"id": "h0", "y": 1},
                                                        {"id": "h1", "y": 0}])  # fmt: skip
    assert response.json()["learned"] == 3
    reference = make_learner("spam")
    reference.initialize(32)
    X = FeatureHasher(32).transform(
        [{}, {"amount": 12.5, "country=FR": 1.0}, {"amount": 3.0, "merchant=m9": 1.0, "night": 1.0}]
    )
    reference.partial_fit(X, np.array([-1, 1, -1]))
    np.testing.assert_array_equal(
        np.array(client.get("/v1/models/m/weights").json()["coef"]), reference.coef_
    )
