"""Memory that only grows, replayed over the real ASGI app: Prometheus label sets, engine caches
and locks, models, remembered ids and kept ``/score`` records are all bounded; and small 4xx
fixes (ids with braces, the metrics stream's interval, a deleted model in a queue worker)."""

from __future__ import annotations

import numpy as np

from service.stores.memory import MemoryStore
from tests.service.conftest import PROBLEM, create_model, events_json, make_stream, put_snapshot

MIB = 2**20


def label_sets(client) -> set[tuple[str, ...]]:
    """Every label set of the app's Prometheus metrics labelled by model."""
    telemetry = client.app.state.telemetry
    return {labels for metric in telemetry._per_model for labels in metric._metrics}  # noqa: SLF001


def test_unknown_and_unauthenticated_ids_leave_no_labels_locks_or_cache(make_client):
    """1,200 requests for long random ids (401 without a key, 404 with one) leave nothing
    behind: a Prometheus label set or an engine lock per id would grow without bound."""
    client = make_client(api_keys="secret")
    key = {"x-api-key": "secret"}
    assert client.post("/v1/models", json={"id": "m", "n_features": 5}, headers=key
                       ).status_code == 201  # fmt: skip
    X, y = make_stream(30)
    assert client.post("/v1/models/m/events", json=events_json(X, y), headers=key
                       ).status_code == 200  # fmt: skip
    before = label_sets(client)
    rng = np.random.default_rng(0)
    ids = ["".join(rng.choice(list("abcdef0123456789"), 200)) for _ in range(600)]
    for model_id in ids:
        assert client.get(f"/v1/models/{model_id}/metrics").status_code == 401
        assert client.get(f"/v1/models/{model_id}/metrics", headers=key).status_code == 404
        assert client.post(f"/v1/models/{model_id}/events", json=events_json(X[:1], y[:1]),
                           headers=key).status_code == 404  # fmt: skip
    assert label_sets(client) - before == {
        ("GET", "/v1/models/{model_id}/metrics", "401", ""),
        ("GET", "/v1/models/{model_id}/metrics", "404", ""),
        ("POST", "/v1/models/{model_id}/events", "404", ""),
    }
    exposition = client.get("/metrics").text
    assert not any(model_id in exposition for model_id in ids[:50])
    repository = client.app.state.engine.repository
    assert set(repository._cache) == {"m"}  # noqa: SLF001
    assert set(repository._locks) <= {"m"}  # noqa: SLF001 - weakly held: none for unknown ids
    reporting = client.app.state.engine.reporting
    assert set(reporting._metrics) | set(reporting._regret) <= {"m"}  # noqa: SLF001


def test_a_deleted_model_loses_its_labels(client):
    create_model(client, "gone")
    X, y = make_stream(20)
    ids = [f"e{i}" for i in range(20)]
    assert client.post("/v1/models/gone/events", json=events_json(X, y, ids)).status_code == 200
    assert client.post("/v1/models/gone/score", json=events_json(X, None, ids)).status_code == 200
    assert client.get("/v1/models/gone/metrics").status_code == 200
    assert 'model="gone"' in client.get("/metrics").text
    assert client.delete("/v1/models/gone").status_code == 204
    assert client.get("/v1/models/gone/metrics").status_code == 404
    assert 'model="gone"' not in client.get("/metrics").text
    assert not [labels for labels in label_sets(client) if "gone" in labels]


def test_number_of_models_is_capped(make_client):
    client = make_client(max_models=3)
    for model_id in ("a", "b", "c"):
        create_model(client, model_id)
    response = client.post("/v1/models", json={"id": "d", "n_features": 5})
    assert response.status_code == 507
    assert response.headers["content-type"] == PROBLEM
    assert "AUCSTREAM_MAX_MODELS" in response.json()["detail"]
    snapshot = client.get("/v1/models/a/snapshot").content
    assert put_snapshot(client, "d", snapshot, replace=False).status_code == 507
    assert sorted(client.get("/v1/models").json()["models"]) == ["a", "b", "c"]
    # replacing or resetting a model is not a new one; after a delete there is room again
    assert put_snapshot(client, "a", snapshot, replace=True).status_code == 201
    assert client.post("/v1/models/b/reset").status_code == 200
    assert client.delete("/v1/models/c").status_code == 204
    create_model(client, "d")


def test_model_memory_is_capped(make_client):
    """``n_features`` 2**24 cost ~770 MB per create."""
    client = make_client()  # the default AUCSTREAM_MAX_MODEL_BYTES
    response = client.post(
        "/v1/models",
        json={"id": "huge", "n_features": 2**24, "feature_mode": "hashed", "learner": "spam"},
    )
    assert response.status_code == 507, response.text
    assert response.json()["field"] == "n_features"
    assert "AUCSTREAM_MAX_MODEL_BYTES" in response.json()["detail"]
    assert client.get("/v1/models/huge").status_code == 404
    small = make_client(max_model_bytes=4 * MIB)
    create_model(small, "fits", n_features=1000, learner="spam")
    snapshot = small.get("/v1/models/fits/snapshot").content
    response = small.post("/v1/models", json={"id": "wide", "n_features": 2**17, "learner": "spam"})
    assert response.status_code == 507
    assert put_snapshot(small, "copy", snapshot, replace=False).status_code == 201
    # what the windows will hold counts too: a million-event metrics window is 16 MB
    response = small.post("/v1/models", json={"id": "long", "n_features": 5, "window": 10**6})
    assert response.status_code == 507
    assert "once its windows are full" in response.json()["detail"]


def test_buffers_that_grow_as_they_fill_count_at_their_capacity(make_client):
    """pmb keeps its buffered rows sparse and grows them as they fill: empty at creation, but
    dense events fill every cell.  2PMB over 2**18 hashed features may come to hold ~418 MiB,
    over the default limit (it was counted at its empty size); 1PMB's ~214 MiB fits."""
    client = make_client()  # the default AUCSTREAM_MAX_MODEL_BYTES (256 MiB)
    hashed = {"n_features": 2**18, "feature_mode": "hashed", "learner": "pmb"}
    response = client.post("/v1/models", json={"id": "two", **hashed, "params": {"passes": 2}})
    assert response.status_code == 507, response.text
    assert "once its windows are full" in response.json()["detail"]
    assert client.get("/v1/models/two").status_code == 404
    response = client.post("/v1/models", json={"id": "one", **hashed, "params": {"passes": 1}})
    assert response.status_code == 201, response.text


def test_remembered_ids_per_request_are_capped(make_client):
    """100,000 ids of 256 characters in one request were remembered for 24 h (+31 MB)."""
    client = make_client(max_event_id_bytes=64 * 1024)
    create_model(client)
    X, y = make_stream(1000)
    long_ids = [f"{i:0256d}" for i in range(1000)]  # 256 KB of ids
    for path, body in (
        ("/v1/models/m/events", events_json(X, y, long_ids)),
        ("/v1/models/m/score", events_json(X, None, long_ids)),
    ):
        response = client.post(path, json=body)
        assert response.status_code == 413, response.text
        assert response.json()["field"] == "id"
        assert "AUCSTREAM_MAX_EVENT_ID_BYTES" in response.json()["detail"]
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0
    short_ids = [f"e{i}" for i in range(1000)]
    assert client.post("/v1/models/m/events", json=events_json(X, y, short_ids)
                       ).status_code == 200  # fmt: skip


def test_remembered_event_ids_are_capped_oldest_first(make_client):
    """``max_remembered_ids``: a model remembers at most that many ids; beyond it the oldest
    are forgotten (their events would be learned again), the newest still deduplicated."""
    client = make_client(max_remembered_ids=5)
    create_model(client)
    X, y = make_stream(8)
    ids = [f"e{i}" for i in range(8)]
    for rows in (slice(0, 4), slice(4, 8)):
        response = client.post("/v1/models/m/events", json=events_json(X[rows], y[rows], ids[rows]))
        assert response.json()["learned"] == 4
    again = client.post("/v1/models/m/events", json=events_json(X[3:], y[3:], ids[3:])).json()
    assert again["duplicates"] == 5 and again["learned"] == 0  # the last 5 ids: remembered
    oldest = client.post("/v1/models/m/events", json=events_json(X[:3], y[:3], ids[:3])).json()
    assert oldest["duplicates"] == 0 and oldest["learned"] == 3  # forgotten early
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 11


def test_records_kept_by_score_are_capped(make_client):
    client = make_client(max_pending_records=10)
    create_model(client)
    X, _ = make_stream(20)
    first = [f"a{i}" for i in range(8)]
    response = client.post("/v1/models/m/score", json=events_json(X[:8], None, first))
    assert response.status_code == 200
    more = [f"b{i}" for i in range(5)]
    response = client.post("/v1/models/m/score", json=events_json(X[:5], None, more))
    assert response.status_code == 507, response.text
    assert "AUCSTREAM_MAX_PENDING_RECORDS" in response.json()["detail"]
    # nothing of the refused request was kept; ids already kept can be scored again
    response = client.post("/v1/models/m/labels", json=[{"id": i, "y": 1} for i in more])
    assert response.json()["learned"] == 0
    assert client.post("/v1/models/m/score", json=events_json(X[:8], None, first)
                       ).status_code == 200  # fmt: skip
    # labels free room
    labels = [{"id": event_id, "y": i % 2} for i, event_id in enumerate(first)]
    assert client.post("/v1/models/m/labels", json=labels).status_code == 200
    assert client.post("/v1/models/m/score", json=events_json(X[:5], None, more)
                       ).status_code == 200  # fmt: skip


def test_scoring_one_id_again_and_again_keeps_memory_bounded():
    store = MemoryStore()
    store.create_model("m", {}, {}, "i1")
    for round_ in range(5000):
        store.put_pending("m", {"same": b"record"}, deadline=1000.0 + round_)
    model = store._models["m"]  # noqa: SLF001
    assert len(model.pending) == 1
    assert len(model.deadlines) <= 2 * len(model.pending) + 1024
    assert store.due_pending("m", now=1e9, limit=10) == ["same"]


# ------------------------------------------------------------------------- small 4xx fixes
def test_ids_with_braces_are_404_not_500(client):
    """On Redis, ``{`` / ``}`` in an id broke the key's hash tag (a 500); no model can have
    such an id (the creation pattern refuses it), so it names no model."""
    create_model(client)
    X, y = make_stream(2)
    for path in ("/v1/models/a{b}", "/v1/models/%7Bm%7D/metrics", "/v1/models/m}/snapshot"):
        response = client.get(path)
        assert response.status_code == 404, (path, response.text)
        assert response.headers["content-type"] == PROBLEM
    response = client.post("/v1/models/{m}/events", json=events_json(X, y))
    assert response.status_code == 404
    assert client.delete("/v1/models/{m}").status_code == 404
    response = client.put(
        "/v1/models/{m}/snapshot",
        content=client.get("/v1/models/m/snapshot").content,
        headers={"content-type": "application/zip"},
    )
    assert response.status_code == 422
    assert client.get("/v1/models/m").status_code == 200


def test_metrics_stream_interval_has_a_lower_bound(client):
    create_model(client)
    response = client.get("/v1/models/m/metrics/stream", params={"interval": 0.000001})
    assert response.status_code == 422
    assert response.json()["field"] == "query.interval"


def test_a_queue_worker_forgets_the_labels_of_a_deleted_model(make_app, make_worker, rclient):
    from tests.service.queue_helpers import drain

    app = make_app("queue")
    create_model(app, "gone")
    X, y = make_stream(20)
    assert app.post("/v1/models/gone/events", json=events_json(X, y)).status_code == 202
    worker = make_worker()
    drain(worker, rclient, ["gone"])
    rendered = worker.telemetry.render().decode()
    assert 'aucstream_events_learned_total{model="gone"}' in rendered
    assert app.delete("/v1/models/gone").status_code == 204
    worker.discover()
    assert 'model="gone"' not in worker.telemetry.render().decode()
