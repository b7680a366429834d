"""Drift detection on the live metrics (docs/algorithms/drift.md): reported in
GET /v1/models/{id}/metrics (with the log of recent drifts the dashboard marks), the Prometheus
counter and the server-sent stream, kept in the model's state, and ``on_drift="reset"``; on
every store."""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest

from core.learners import make_learner
from core.metrics.drift import DriftDetector
from service.engine.model import (
    DRIFT_LOG_CAPACITY,
    DRIFT_PREFIX,
    initial_stats,
    log_drifts,
    recent_drifts,
)
from tests.service.conftest import (
    create_model,
    put_snapshot,
    read_snapshot,
    stored_arrays,
    write_snapshot,
)
from tests.service.drift_helpers import (
    CHANGE,
    DRIFT_FEATURES,
    flipping_stream,
    post_stream,
    prometheus_value,
)


def reference(X, y, batch, reset):
    """The same batches through the core learner and detector (a reset after a detecting
    batch when ``reset``)."""
    learner = make_learner("logistic", scaling="standard").initialize(DRIFT_FEATURES)
    detector = DriftDetector()
    found = []
    for start in range(0, len(y), batch):
        rows = slice(start, start + batch)
        new = detector.update(learner.prequential_step(X[rows], y[rows]), y[rows])
        found += new
        if new and reset:
            learner.initialize(DRIFT_FEATURES)
    return found, learner


@pytest.mark.parametrize("on_drift", ["none", "reset"])
def test_a_flip_is_reported_where_the_core_detector_reports_it(client, on_drift):
    create_model(client, n_features=DRIFT_FEATURES, learner="logistic", on_drift=on_drift)
    X, y = flipping_stream()
    before = time.time()
    post_stream(client, X, y, 250)
    after = time.time()
    expected, learner = reference(X, y, 250, reset=on_drift == "reset")
    assert expected and CHANGE <= expected[0] < CHANGE + 2000  # found, soon, not before
    drift = client.get("/v1/models/m/metrics").json()["drift"]
    assert drift["detected"] == len(expected)
    assert drift["last_detected_at"] == expected[-1]
    # the log the dashboard marks: each drift's event and when the service detected it
    assert [mark["event"] for mark in drift["recent"]] == expected
    times = [mark["time"] for mark in drift["recent"]]
    assert before <= times[0] and times[-1] <= after and times == sorted(times)
    assert drift["events"] == len(y) and drift["on_drift"] == on_drift
    # the learner that served is the one the core reference ends with (reset or not)
    coef = np.array(client.get("/v1/models/m/weights").json()["coef"])
    np.testing.assert_allclose(coef, learner.coef_, rtol=1e-10, atol=1e-12)
    text = client.get("/metrics").text
    assert prometheus_value(text, "aucstream_drift_detected_total", "m") == len(expected)


def test_detector_state_is_committed_with_the_model_and_streamed(client):
    create_model(client, n_features=DRIFT_FEATURES, learner="logistic")
    X, y = flipping_stream(seed=1)
    post_stream(client, X[:4500], y[:4500], 500)
    arrays = stored_arrays(client, "m")
    stored = {k[len(DRIFT_PREFIX) :]: v for k, v in arrays.items() if k.startswith(DRIFT_PREFIX)}
    detector = DriftDetector.from_state(stored)
    assert detector.detections >= 1 and detector.counters[0] == 4500
    with client.stream("GET", "/v1/models/m/metrics/stream?max_events=1") as response:
        body = b"".join(response.iter_bytes())
    message = orjson.loads(body.split(b"data: ", 1)[1].split(b"\n", 1)[0])
    assert message["drift"]["detected"] == detector.detections
    assert message["drift"]["last_detected_at"] == detector.last_detection


def test_no_drift_on_a_stable_stream(client):
    create_model(client, n_features=DRIFT_FEATURES, learner="logistic")
    X, y = flipping_stream()
    post_stream(client, X[:CHANGE], y[:CHANGE], 300)
    drift = client.get("/v1/models/m/metrics").json()["drift"]
    assert drift["detected"] == 0 and drift["last_detected_at"] is None and drift["recent"] == []
    assert drift["mean_loss"] is not None and drift["statistic"] < drift["threshold"]


def test_bad_on_drift_is_refused_naming_the_field(client):
    response = client.post(
        "/v1/models", json={"id": "m", "n_features": 3, "learner": "logistic", "on_drift": "panic"}
    )
    assert response.status_code == 422
    assert "on_drift" in response.text
    assert client.get("/v1/models/m").status_code == 404


def test_the_drift_log_keeps_the_last_drifts_oldest_first():
    stats = initial_stats()
    assert recent_drifts(stats) == []
    log_drifts(stats, [100], now=1000.0)
    log_drifts(stats, [], now=1001.0)  # a batch without a drift logs nothing
    assert recent_drifts(stats) == [{"event": 100, "time": 1000.0}]
    found = [(200 + 10 * i, 2000.0 + i // 2) for i in range(DRIFT_LOG_CAPACITY + 5)]
    for i in range(0, len(found), 2):  # two drifts in some batches, as a big batch may hold
        batch = found[i : i + 2]
        log_drifts(stats, [event for event, _ in batch], now=batch[0][1])
    kept = [{"event": event, "time": when} for event, when in found[-DRIFT_LOG_CAPACITY:]]
    assert recent_drifts(stats) == kept
    assert int(stats["drifts_logged"][0]) == len(found) + 1


def test_the_drift_log_travels_in_snapshots_and_a_state_without_it_is_refused(client):
    create_model(client, n_features=DRIFT_FEATURES, learner="logistic")
    X, y = flipping_stream(seed=2)
    post_stream(client, X, y, 500)
    drift = client.get("/v1/models/m/metrics").json()["drift"]
    assert drift["recent"] and len(drift["recent"]) == drift["detected"]
    manifest, arrays = read_snapshot(client.get("/v1/models/m/snapshot").content)

    assert put_snapshot(client, "copy", write_snapshot(manifest, arrays)).status_code == 201
    copied = client.get("/v1/models/copy/metrics").json()["drift"]
    assert copied["recent"] == drift["recent"]  # the unix times bit for bit, through JSON

    # one state format: a state without the log is refused, naming the first array missing
    log = {"stats:drift_events", "stats:drift_times", "stats:drifts_logged"}
    assert log <= arrays.keys()
    without = {name: array for name, array in arrays.items() if name not in log}
    response = put_snapshot(client, "without", write_snapshot(manifest, without))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "stats:drift_events"
    assert client.get("/v1/models/without").status_code == 404
