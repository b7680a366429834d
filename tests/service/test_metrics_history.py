"""The metrics history kept by the server: a point per minute and per hour written by the
first commit of each, bounded rings, committed with the model (survives a restart), read by
``GET /v1/models/{id}/metrics/history``."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from service.engine.history import RESOLUTIONS, record
from tests.service.clock_helpers import HOUR_START, FixedClock
from tests.service.conftest import create_model, events_json, make_stream


def _learn(client, X, y) -> np.ndarray:
    response = client.post("/v1/models/m/events?scores=true", json=events_json(X, y))
    assert response.status_code == 200, response.text
    return np.array(response.json()["scores"])


def _two_points(client, n_events: int, later: float) -> tuple[np.ndarray, np.ndarray]:
    """Model ``m`` learns the first half of a stream at HOUR_START and the rest ``later`` seconds
    after: a point for each when they are minutes apart.  Returns the stream."""
    client.app.state.engine.clock = FixedClock(HOUR_START)
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(n_events)
    half = n_events // 2
    _learn(client, X[:half], y[:half])
    client.app.state.engine.clock = FixedClock(HOUR_START + later)
    _learn(client, X[half:], y[half:])
    return X, y


def test_a_point_per_minute_and_per_hour_with_the_window_metrics(client):
    clock = FixedClock(HOUR_START + 5)
    client.app.state.engine.clock = clock
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(400, seed=3)
    scores = []
    # (time of the batch, events learned by then): 4 batches in minute 0, then minutes 1 and
    # 2, then the next hour
    plan = [(5, 50), (20, 100), (59, 150), (60, 200), (150, 250), (3600 + 1, 300),
            (3600 + 30, 400)]  # fmt: skip
    plan = [(HOUR_START + seconds, upto) for seconds, upto in plan]
    done = 0
    for when, upto in plan:
        clock.now = when
        scores.extend(_learn(client, X[done:upto], y[done:upto]))
        done = upto
    scores = np.array(scores)

    minute = client.get("/v1/models/m/metrics/history").json()
    assert minute["resolution"] == "minute" and minute["interval_seconds"] == 60
    assert minute["capacity"] == RESOLUTIONS["minute"][1]
    assert minute["last_learned_at"] == HOUR_START + 3600 + 30
    # the first commit of each minute writes the point: minutes 0, 1, 2 and 60
    written = [
        (HOUR_START + 5, 50),
        (HOUR_START + 60, 200),
        (HOUR_START + 150, 250),
        (HOUR_START + 3601, 300),
    ]
    assert [(p["time"], p["events_learned"]) for p in minute["points"]] == written
    for point, (_, n_events) in zip(minute["points"], written, strict=True):
        assert point["positives"] == int(y[:n_events].sum())
        # the window holds every event so far: a naive reference over them
        assert point["auc"] == pytest.approx(roc_auc_score(y[:n_events], scores[:n_events]))
        assert 0.0 <= point["pauc"] <= 1.0 and 0.0 <= point["recall_at_target_fpr"] <= 1.0

    hour = client.get("/v1/models/m/metrics/history?resolution=hour").json()
    assert [p["time"] for p in hour["points"]] == [HOUR_START + 5, HOUR_START + 3601]
    assert hour["points"][1] == minute["points"][3]

    since = client.get(f"/v1/models/m/metrics/history?since={HOUR_START + 60}").json()
    assert [p["time"] for p in since["points"]] == [HOUR_START + 150, HOUR_START + 3601]


def test_undefined_metrics_are_null(client):
    client.app.state.engine.clock = FixedClock(HOUR_START)
    create_model(client, n_features=5, scaling="none")
    X, _ = make_stream(10)
    _learn(client, X, np.zeros(10, dtype=np.int64))
    (point,) = client.get("/v1/models/m/metrics/history").json()["points"]
    assert point["auc"] is None and point["pauc"] is None and point["positives"] == 0
    assert point["events_learned"] == 10


def test_bad_queries_are_refused(client):
    create_model(client, n_features=5)
    for query in ("resolution=second", "since=-1", "since=nan", "since=soon"):
        response = client.get(f"/v1/models/m/metrics/history?{query}")
        assert response.status_code == 422, query
        assert response.headers["content-type"] == "application/problem+json"
    assert client.get("/v1/models/nope/metrics/history").status_code == 404


def test_the_rings_are_bounded_and_keep_the_newest(client):
    create_model(client, n_features=5, scaling="none")
    client.app.state.engine.clock = FixedClock(HOUR_START)
    X, y = make_stream(20)
    _learn(client, X, y)
    repository = client.app.state.engine.repository
    loaded = repository.load("m")
    minutes = RESOLUTIONS["minute"][1]
    for step in range(1, minutes + 100):
        record(loaded.history, loaded, HOUR_START + 60 * step)
    ring = loaded.history["minute"]
    assert ring.shape == (minutes, 7)  # never grows
    from service.engine.history import points

    kept = points(loaded.history, "minute", None)
    assert len(kept) == minutes
    assert [p["time"] for p in kept] == [HOUR_START + 60 * s for s in range(100, minutes + 100)]
    hours = points(loaded.history, "hour", None)
    assert [p["time"] for p in hours] == [HOUR_START + 3600 * h for h in range(0, 26)]


@pytest.mark.parametrize("store_kind", ["sqlite", "redis"], indirect=True)
def test_the_history_survives_a_restart(make_client):
    first = make_client()
    X, y = _two_points(first, 100, later=120)
    before = first.get("/v1/models/m/metrics/history").json()
    assert len(before["points"]) == 2
    first.__exit__(None, None, None)

    second = make_client()  # a new process's cache: the model is read from the store
    assert second.get("/v1/models/m/metrics/history").json() == before
    second.app.state.engine.clock = FixedClock(HOUR_START + 180)
    _learn(second, X[:10], y[:10])
    after = second.get("/v1/models/m/metrics/history").json()["points"]
    assert [p["time"] for p in after] == [HOUR_START, HOUR_START + 120, HOUR_START + 180]


def test_a_snapshot_carries_the_history_and_a_corrupt_one_is_refused(client):
    from tests.service.conftest import put_snapshot, read_snapshot, write_snapshot

    _two_points(client, 60, later=60)
    history = client.get("/v1/models/m/metrics/history").json()
    manifest, arrays = read_snapshot(client.get("/v1/models/m/snapshot").content)
    assert {"history:minute", "history:hour", "history:points"} <= arrays.keys()

    assert put_snapshot(client, "copy", write_snapshot(manifest, arrays)).status_code == 201
    copied = client.get("/v1/models/copy/metrics/history").json()
    assert copied["points"] == history["points"]

    # one state format: a state without its history is refused, naming it
    without = {name: array for name, array in arrays.items() if not name.startswith("history:")}
    response = put_snapshot(client, "without", write_snapshot(manifest, without))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "history:"

    minute = arrays["history:minute"]
    for key, bad in [
        (
            "history:minute",
            np.where(np.arange(minute.size).reshape(minute.shape) == 1, 2.0, minute),
        ),
        ("history:minute", np.full_like(minute, np.inf)),
        ("history:hour", np.zeros((745, 7))),  # a ring grows up to its 744 points
        ("history:hour", np.zeros((0, 7))),  # and holds every point until then
        ("history:hour", np.zeros((3, 6))),
        ("history:points", np.array([-1, 0], dtype=np.int64)),
    ]:
        response = put_snapshot(client, "m", write_snapshot(manifest, {**arrays, key: bad}))
        assert response.status_code == 422, (key, response.text)
        assert response.json()["field"] == key
    part = {name: a for name, a in arrays.items() if name != "history:hour"}
    response = put_snapshot(client, "m", write_snapshot(manifest, part))
    assert response.status_code == 422 and response.json()["field"] == "history:hour"
    assert client.get("/v1/models/m/metrics/history").json()["points"] == history["points"]
