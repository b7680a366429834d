"""Extreme finite values over HTTP: no request can make a stored state non-finite.

Each case on the real app, with what it does unguarded: two events of huge features would
break a default model for good (``scaler_m2 = inf``, then 500 ``corrupt-state``); a score of
+-DBL_MAX features would be served as ``null`` and kept, then every ``/labels`` call including
it a plain-text 500 and the expiry sweep failing forever; snapshots with -1e308 or wrapping
counters would be accepted.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from service.client import StreamClient, StreamError
from service.codec import encode_pending
from tests.service.clock_helpers import FixedClock
from tests.service.conftest import (
    PROBLEM,
    events_json,
    make_stream,
    put_snapshot,
    read_snapshot,
    write_snapshot,
)
from tests.service.server_helpers import uvicorn_server

DBL_MAX = np.finfo(np.float64).max
STORES = pytest.mark.parametrize("store_kind", ["memory", "sqlite", "redis"], indirect=True)


def assert_refused(response, event: int | None = None):
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    if event is not None:
        assert problem["event"] == event, problem
    return problem


def assert_state_finite(client, model_id: str):
    _, arrays = read_snapshot(client.get(f"/v1/models/{model_id}/snapshot").content)
    for key, value in arrays.items():
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), key


def trained(client, model_id: str, **config):
    client.post("/v1/models", json={"id": model_id, "n_features": 3, **config})
    X, y = make_stream(60, n_features=3)
    assert client.post(f"/v1/models/{model_id}/events", json=events_json(X, y)).status_code == 200


# ------------------------------------------------------------------------- events
@STORES
def test_the_issue_event_is_refused_by_a_default_model_which_goes_on(client):
    trained(client, "a")
    for x in ([DBL_MAX, 1e308, 0.0], [1e200, 0.0, 0.0], [0.0, -1.5e100, 1.0]):
        response = client.post("/v1/models/a/events", json={"events": [{"x": x, "y": 1}]})
        problem = assert_refused(response, event=0)
        assert "feature bound" in problem["detail"]
    assert_state_finite(client, "a")
    X, y = make_stream(5, n_features=3, seed=2)
    assert client.post("/v1/models/a/events", json=events_json(X, y)).status_code == 200
    assert client.get("/v1/models/a/metrics").status_code == 200
    scores = client.post("/v1/models/a/score", json=events_json(X)).json()["scores"]
    assert all(np.isfinite(scores))


@STORES
def test_an_unscaled_model_refuses_the_event_that_would_overflow_it_by_number(client):
    """Legal features on which an unscaled learner's weights overflow: the batch is refused
    naming the event at fault (found on the error path), nothing is learned, the model goes
    on."""
    trained(client, "s", learner="spdam", scaling="none")
    before = client.get("/v1/models/s").json()["version"]
    X, y = make_stream(5, n_features=3, seed=3)
    rows = events_json(X, y)["events"] + [{"x": [1e99, -1e99, 5e98], "y": 1}]
    problem = assert_refused(client.post("/v1/models/s/events", json={"events": rows}))
    assert problem["event"] == 5, problem
    assert "beyond" in problem["detail"]
    assert client.get("/v1/models/s").json()["version"] == before
    assert_state_finite(client, "s")
    X, y = make_stream(5, n_features=3, seed=2)
    assert client.post("/v1/models/s/events", json=events_json(X, y)).status_code == 200
    assert all(np.isfinite(client.post("/v1/models/s/score", json=events_json(X)).json()["scores"]))


# ------------------------------------------------------------------------- score and labels
@STORES
def test_a_score_of_extreme_features_is_refused_and_nothing_is_kept(client):
    trained(client, "k", learner="spam")
    body = {
        "events": [
            {"x": [1.0, 2.0, 3.0], "id": "good"},
            {"x": [DBL_MAX, -DBL_MAX, 0.0], "id": "bad"},
        ]
    }
    problem = assert_refused(client.post("/v1/models/k/score", json=body))
    assert problem["event"] == 1 and problem["event_id"] == "bad"
    labels = [{"id": "good", "y": 1}, {"id": "bad", "y": 0}]
    response = client.post("/v1/models/k/labels", json=labels)
    assert response.status_code == 200, response.text
    assert [r["status"] for r in response.json()["results"]] == ["unknown", "unknown"]


@STORES
def test_a_kept_record_that_cannot_be_learned_is_dropped_alone(client):
    """A record kept with a non-finite score (damaged in the store):
    its label is ``expired``, the good labels of the same call are learned, and the sweep
    forgets it instead of failing on it forever."""
    clock = FixedClock()
    engine = client.app.state.engine
    engine.clock = clock
    trained(client, "d", learner="spam", default_label=0, label_ttl_seconds=100)
    X = np.array([[1.0, 2.0, 3.0], [DBL_MAX, -DBL_MAX, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])
    scores = np.array([0.25, np.nan, 0.5, np.inf])
    store = engine.repository.store
    records = dict(zip(["good", "bad", "later", "stale"], encode_pending(X, scores), strict=True))
    store.put_pending("d", records, clock() + 100, None)
    response = client.post(
        "/v1/models/d/labels", json=[{"id": "good", "y": 1}, {"id": "bad", "y": 0}]
    )
    assert response.status_code == 200, response.text
    statuses = {r["id"]: r["status"] for r in response.json()["results"]}
    assert statuses == {"good": "learned", "bad": "expired"}
    assert response.json()["learned"] == 1
    clock.now += 101  # "later" and "stale" are due: one learnable, one not
    assert engine.sweep_all() == 2
    counts = client.get("/v1/models/d").json()["counts"]
    assert counts["labels_defaulted"] == 1
    assert counts["labels_expired"] == 2
    assert_state_finite(client, "d")
    assert engine.sweep_all() == 0


# ------------------------------------------------------------------------- snapshots
def exported(client, model_id: str):
    return read_snapshot(client.get(f"/v1/models/{model_id}/snapshot").content)


@STORES
def test_snapshots_with_extreme_finite_values_are_refused_by_name(client):
    trained(client, "a")
    trained(client, "r", learner="spam", regret_window=50)
    for model_id, key in (
        ("a", "learner:score_mean"),
        ("a", "learner:c1:w"),
        ("a", "learner:c0:mean"),
        ("a", "learner:scaler_mean"),
        ("r", "learner:w_unscaled"),
        ("r", "regret:features"),
    ):
        manifest, arrays = exported(client, model_id)
        assert key in arrays, sorted(arrays)
        bad = arrays[key].copy()
        bad.reshape(-1)[0] = -1e308
        response = put_snapshot(client, model_id, write_snapshot(manifest, {**arrays, key: bad}))
        problem = assert_refused(response)
        if not key.startswith("regret:"):
            assert problem["field"] == key, (key, problem)
    X, y = make_stream(5, n_features=3, seed=2)
    for model_id in ("a", "r"):
        assert (
            client.post(f"/v1/models/{model_id}/events", json=events_json(X, y)).status_code == 200
        )
        assert (
            client.post(f"/v1/models/{model_id}/labels", json=[{"id": "x", "y": 1}]).status_code
            == 200
        )


@STORES
def test_snapshots_with_wrapping_or_inconsistent_counters_are_refused(client):
    trained(client, "c", learner="spam")
    manifest, arrays = exported(client, "c")
    for key, value in (
        ("stats:negatives", 2**63 - 1),
        ("stats:events_learned", 2**63 - 1),
        ("stats:negatives", 2**62),
        ("stats:negatives", int(arrays["stats:negatives"][0]) + 1),
    ):
        bad = np.array([value], dtype=np.int64)
        response = put_snapshot(client, "c", write_snapshot(manifest, {**arrays, key: bad}))
        problem = assert_refused(response)
        assert problem["field"].startswith("stats:"), problem


@STORES
def test_a_snapshot_that_cannot_learn_ordinary_events_is_refused(client):
    """Every array within its own bounds, but a weight and a class sum whose product
    overflows on the first event: the probe batch finds it before the state is accepted."""
    trained(client, "p", learner="spam", scaling="none")
    manifest, arrays = exported(client, "p")
    changed = dict(arrays)
    changed["learner:class_sum_pos"] = np.full_like(arrays["learner:class_sum_pos"], 1e240)
    changed["learner:class_sum_neg"] = np.full_like(arrays["learner:class_sum_neg"], -1e240)
    response = put_snapshot(client, "p", write_snapshot(manifest, changed))
    problem = assert_refused(response)
    assert "ordinary events" in problem["detail"], problem
    assert (
        put_snapshot(client, "copy", write_snapshot(manifest, arrays), replace=False).status_code
        == 201
    )


# ------------------------------------------------------------------------- the WebSocket stream
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_extreme_events_over_the_stream_are_refused_by_event(binary):
    """The stream (JSON and binary frames, which no JSON parser checks) reaches the same
    checks: events and scores of extreme features are refused naming the event, nothing is
    kept or learned, and the model goes on."""
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        assert http.post("/v1/models", json={"id": "w", "n_features": 3}).status_code == 201
        X, y = make_stream(60, n_features=3, seed=6)
        with StreamClient(url, "w", binary=binary) as stream:
            stream.learn(X, y)
            bad = X[:3].copy()
            bad[1] = [DBL_MAX, 1e308, 0.0]
            with pytest.raises(StreamError) as refused:
                stream.learn(bad, y[:3])
            assert refused.value.problem["status"] == 422
            assert refused.value.problem["detail"].startswith("event 1")
            with pytest.raises(StreamError) as refused_score:
                stream.score(bad, ids=["a", "b", "c"])
            assert refused_score.value.problem["status"] == 422
            assert refused_score.value.problem.get("event") == 1
            scores = stream.score(X[:5], keep=False)
        assert np.isfinite(scores).all()
        counts = http.get("/v1/models/w/metrics").json()["counts"]
        assert counts["events_learned"] == 60
        labels = http.post("/v1/models/w/labels", json=[{"id": "b", "y": 1}]).json()
        assert labels["results"] == [{"id": "b", "status": "unknown"}]
