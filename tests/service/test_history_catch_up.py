"""The metrics history catches up with a model gone quiet: the events learned after the point
of their minute are shown by a point the app's timer (in queue mode, the worker's) writes once
the next minute has begun, through the model's lock and a versioned commit; a model whose
history shows every event writes nothing (service/engine/history.py)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.service.clock_helpers import HOUR_START, FixedClock
from tests.service.conftest import ON_REDIS_AND_CLUSTER, create_model, events_json, make_stream

#: the timer's period in these tests (seconds of real time)
TICK = 0.05


def _learn(client, X, y) -> None:
    response = client.post("/v1/models/m/events", json=events_json(X, y))
    assert response.status_code == 200, response.text


def _points(client, resolution="minute") -> list[tuple[float, int]]:
    response = client.get(f"/v1/models/m/metrics/history?resolution={resolution}")
    assert response.status_code == 200, response.text
    return [(p["time"], p["events_learned"]) for p in response.json()["points"]]


def _wait_for(condition, timeout=120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(TICK)


def _version(client) -> int:
    return client.get("/v1/models/m").json()["version"]


def test_a_quiet_models_last_events_get_their_point(make_client):
    client = make_client(history_catch_up_seconds=TICK)
    engine = client.app.state.engine
    clock = engine.clock = FixedClock(HOUR_START + 5)
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(100, seed=1)
    _learn(client, X[:50], y[:50])  # the first commit of the minute writes the point
    clock.now = HOUR_START + 30
    _learn(client, X[50:], y[50:])  # shown by no point yet
    assert engine.repository.history_behind() == ["m"]
    time.sleep(10 * TICK)  # the minute of the last point: nothing to write yet
    assert _points(client) == [(HOUR_START + 5, 50)]
    version = _version(client)

    clock.now = HOUR_START + 65  # a new minute: the timer writes the point the next batch would
    _wait_for(lambda: len(_points(client)) == 2)
    assert _points(client) == [(HOUR_START + 5, 50), (HOUR_START + 65, 100)]
    assert _version(client) == version + 1
    point = client.get("/v1/models/m/metrics/history").json()["points"][-1]
    window = client.get("/v1/models/m/metrics").json()["window"]
    assert point["auc"] == pytest.approx(window["auc"])
    assert point["positives"] == int(y.sum())
    # the hour ring is still behind: its point comes with the next hour
    assert _points(client, "hour") == [(HOUR_START + 5, 50)]
    assert engine.repository.history_behind() == ["m"]

    clock.now = HOUR_START + 3600 + 7
    _wait_for(lambda: len(_points(client, "hour")) == 2)
    assert _points(client, "hour") == [(HOUR_START + 5, 50), (HOUR_START + 3607, 100)]
    assert _points(client)[-1] == (HOUR_START + 3607, 100)
    _wait_for(lambda: engine.repository.history_behind() == [])
    version = _version(client)

    clock.now = HOUR_START + 7200 + 9  # caught up: an idle model writes nothing more
    time.sleep(10 * TICK)
    assert len(_points(client)) == 3 and _version(client) == version


@pytest.mark.parametrize("store_kind", ["sqlite", "redis"], indirect=True)
def test_two_processes_write_one_point_with_both_their_events(make_client):
    """Two server processes on one store learn the same model in one minute: each has the
    model behind, both timers fire in the next minute, and the history gets one point that
    shows the events of both (the second timer finds it written under the model's lock)."""
    first, second = make_client(), make_client()  # the timers start slow: no race yet
    clocks = [FixedClock(HOUR_START + 5), FixedClock(HOUR_START + 5)]
    first.app.state.engine.clock, second.app.state.engine.clock = clocks
    create_model(first, n_features=5, scaling="none")
    X, y = make_stream(150, seed=2)
    _learn(first, X[:50], y[:50])
    for clock in clocks:
        clock.now = HOUR_START + 30
    _learn(first, X[50:100], y[50:100])
    _learn(second, X[100:], y[100:])
    engines = [client.app.state.engine for client in (first, second)]
    assert [engine.repository.history_behind() for engine in engines] == [["m"], ["m"]]
    for clock in clocks:
        clock.now = HOUR_START + 70
    threads = [threading.Thread(target=engine.catch_up_history) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _points(first) == [(HOUR_START + 5, 50), (HOUR_START + 70, 150)]
    assert _points(second) == _points(first)
    # both still wait for the hour's point; neither writes another minute point
    assert sum(engine.catch_up_history() for engine in engines) == 0
    assert _points(first) == [(HOUR_START + 5, 50), (HOUR_START + 70, 150)]


@ON_REDIS_AND_CLUSTER
def test_in_queue_mode_the_worker_writes_the_point(make_app, make_worker):
    app = make_app()
    create_model(app, n_features=5, scaling="none")
    worker = make_worker(history_catch_up_seconds=0.001)
    clock = worker.engine.clock = FixedClock(HOUR_START + 5)
    X, y = make_stream(100, seed=3)

    def learned() -> int:
        return app.get("/v1/models/m").json()["counts"]["events_learned"]

    response = app.post("/v1/models/m/events", json=events_json(X[:50], y[:50]))
    assert response.status_code == 202, response.text
    _wait_for(lambda: worker.step() >= 0 and learned() == 50)
    clock.now = HOUR_START + 30
    app.post("/v1/models/m/events", json=events_json(X[50:], y[50:]))
    _wait_for(lambda: worker.step() >= 0 and learned() == 100)
    assert _points(app) == [(HOUR_START + 5, 50)]
    assert app.app.state.engine.repository.history_behind() == []  # the API never writes

    clock.now = HOUR_START + 61
    _wait_for(lambda: worker.step() >= 0 and len(_points(app)) == 2)
    assert _points(app) == [(HOUR_START + 5, 50), (HOUR_START + 61, 100)]
