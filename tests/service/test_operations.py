"""Metrics stream, ROC, snapshots, reset, API keys, health and Prometheus endpoints."""

from __future__ import annotations

import contextlib
import io
import time
import zipfile

import numpy as np
import orjson
import pytest

from core.metrics import PrequentialWindow
from tests.service.conftest import create_model, events_json, make_stream
from tests.service.exposition_helpers import sse_messages


def test_metrics_stream_pushes_changes(client):
    create_model(client, n_features=5)
    X, y = make_stream(60)
    client.post("/v1/models/m/events", json=events_json(X[:30], y[:30]))
    with client.stream("GET", "/v1/models/m/metrics/stream?max_events=2&interval=0.1") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        messages = sse_messages(stream.iter_lines())
        first = next(messages)
        # the model changes only after the first message arrived
        client.post("/v1/models/m/events", json=events_json(X[30:], y[30:]))
        second = next(messages)
        assert next(messages, None) is None  # max_events=2 closes the stream
    assert first["event"] == second["event"] == "metrics"
    first_data, second_data = orjson.loads(first["data"]), orjson.loads(second["data"])
    assert first_data["counts"]["events_learned"] == 30
    assert second_data["counts"]["events_learned"] == 60
    assert int(second["id"]) == second_data["version"] > first_data["version"]
    assert client.get("/v1/models/nope/metrics/stream").status_code == 404


def test_metrics_stream_of_a_deleted_model_ends_with_a_deleted_message(client):
    create_model(client, n_features=5)
    with client.stream("GET", "/v1/models/m/metrics/stream?interval=0.1") as stream:
        messages = sse_messages(stream.iter_lines())
        assert next(messages)["event"] == "metrics"
        assert client.delete("/v1/models/m").status_code == 204
        last = next(messages)
        assert next(messages, None) is None  # the stream ends cleanly after it
    assert last["event"] == "deleted"
    assert orjson.loads(last["data"])["status"] == 404


@pytest.mark.parametrize("interval", ["0.000001", "0.05", "0", "-1", "61"])
def test_metrics_stream_refuses_an_interval_out_of_bounds(client, interval):
    """Below 0.1 s a stream would read the model's metrics in a busy loop."""
    create_model(client, n_features=5)
    response = client.get(f"/v1/models/m/metrics/stream?interval={interval}")
    assert response.status_code == 422
    assert response.json()["field"] == "query.interval"


def test_roc_of_the_window(client):
    create_model(client, n_features=5, window=50)
    X, y = make_stream(80)
    scores = client.post("/v1/models/m/events?scores=true", json=events_json(X, y)).json()["scores"]
    window = PrequentialWindow(50)
    window.update(scores, y)
    fpr, tpr, _ = window.roc_curve()
    roc = client.get("/v1/models/m/metrics/roc").json()
    assert roc["n_events"] == 50
    np.testing.assert_array_equal(roc["fpr"], fpr)
    np.testing.assert_array_equal(roc["tpr"], tpr)


def test_snapshot_round_trip_continues_bit_for_bit(client):
    create_model(client, n_features=5, params={"random_state": 1})
    X, y = make_stream(100)
    client.post("/v1/models/m/events", json=events_json(X[:50], y[:50], ids=list(range(50))))
    exported = client.get("/v1/models/m/snapshot")
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        assert manifest["format"] == "aucstream-snapshot" and manifest["format_version"] == 1
        assert "learner:w" in manifest["arrays"] or any(
            name.startswith("learner:") for name in manifest["arrays"]
        )
        for entry in manifest["arrays"].values():
            np.load(io.BytesIO(archive.read(entry["file"])), allow_pickle=False)

    imported = client.put(
        "/v1/models/copy/snapshot",
        content=exported.content,
        headers={"content-type": "application/zip"},
    )
    assert imported.status_code == 201, imported.text
    assert imported.json()["counts"]["events_learned"] == 50
    conflict = client.put(
        "/v1/models/copy/snapshot",
        content=exported.content,
        headers={"content-type": "application/zip"},
    )
    assert conflict.status_code == 409
    assert "already exists" in conflict.json()["detail"]
    assert "?replace=true" in conflict.json()["detail"]  # the way past the conflict
    for model in ("m", "copy"):
        client.post(f"/v1/models/{model}/events", json=events_json(X[50:], y[50:]))
    original = client.get("/v1/models/m/metrics").json()
    copy = client.get("/v1/models/copy/metrics").json()
    for key in ("window", "since_start", "counts"):
        assert original[key] == copy[key]
    assert (
        client.get("/v1/models/m/weights").json()["coef"]
        == client.get("/v1/models/copy/weights").json()["coef"]
    )


def test_snapshot_import_refuses_pickles_and_garbage(client):
    create_model(client, n_features=5)
    exported = client.get("/v1/models/m/snapshot").content
    with zipfile.ZipFile(io.BytesIO(exported)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        files = {name: archive.read(name) for name in archive.namelist()}
    name, entry = next(iter(manifest["arrays"].items()))
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    files[entry["file"]] = pickled.getvalue()
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w") as archive:
        for path, content in files.items():
            archive.writestr(path, content)
    headers = {"content-type": "application/zip"}
    response = client.put("/v1/models/x/snapshot", content=evil.getvalue(), headers=headers)
    assert response.status_code == 422 and response.json()["field"] == name
    assert client.put("/v1/models/x/snapshot", content=b"junk", headers=headers).status_code == 400
    assert (
        client.put(
            "/v1/models/x/snapshot", content=exported, headers={"content-type": "application/json"}
        ).status_code
        == 415
    )
    assert client.get("/v1/models/x").status_code == 404


def test_reset_forgets_everything(client):
    create_model(client, n_features=5)
    X, y = make_stream(30)
    client.post("/v1/models/m/events", json=events_json(X, y, ids=list(range(30))))
    reset = client.post("/v1/models/m/reset")
    assert reset.status_code == 200 and reset.json()["counts"]["events_learned"] == 0
    assert client.get("/v1/models/m/weights").json()["coef"] == [0.0] * 5
    again = client.post("/v1/models/m/events", json=events_json(X, y, ids=list(range(30))))
    assert again.json()["learned"] == 30  # ids were forgotten too


def test_api_keys(make_client):
    client = make_client(api_keys=["rw-key"], read_only_api_keys=["ro-key"])
    body = {"id": "m", "n_features": 3}
    assert client.post("/v1/models", json=body).status_code == 401
    assert client.post("/v1/models", json=body, headers={"x-api-key": "wrong"}).status_code == 401
    assert client.post("/v1/models", json=body, headers={"x-api-key": "ro-key"}).status_code == 403
    created = client.post("/v1/models", json=body, headers={"authorization": "Bearer rw-key"})
    assert created.status_code == 201
    assert client.get("/v1/models/m", headers={"x-api-key": "ro-key"}).status_code == 200
    assert client.get("/v1/models/m").status_code == 401
    assert client.get("/healthz").status_code == 200  # probes stay open
    # Prometheus lists every model's metrics: a key is needed, a read-only one is enough
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"authorization": "Bearer ro-key"}).status_code == 200
    # /events and /score are plain routes that check the key themselves (service.fastlane)
    event = {"events": [{"x": [1.0, 0.0, 2.0], "y": 1}]}
    for path in ("/v1/models/m/events", "/v1/models/m/score"):
        assert client.post(path, json=event).status_code == 401
        assert client.post(path, json=event, headers={"x-api-key": "wrong"}).status_code == 401
        assert client.post(path, json=event, headers={"x-api-key": "ro-key"}).status_code == 403
        assert client.post(path, json=event, headers={"x-api-key": "rw-key"}).status_code == 200
    counts = client.get("/v1/models/m", headers={"x-api-key": "ro-key"}).json()["counts"]
    assert counts["events_learned"] == 1


def test_hot_routes_read_query_flags_as_fastapi_does(make_client):
    """``/events`` and ``/score`` parse their boolean query parameters by hand: the same
    spellings as FastAPI's ``bool`` parameters, and a 422 naming the parameter otherwise."""
    client = make_client()
    create_model(client, n_features=2)
    event = {"events": [{"x": [1.0, 2.0], "y": 1, "id": "a"}]}
    bad = client.post("/v1/models/m/events?scores=maybe", json=event)
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
    assert bad.json()["field"] == "query.scores" and "'maybe'" in bad.json()["detail"]
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0
    assert client.post("/v1/models/m/events?scores=YES", json=event).json()["scores"] == [0.0]
    assert client.post("/v1/models/m/events?scores=off", json=event).json()["scores"] is None
    scored = client.post("/v1/models/m/score?keep=0", json={"events": [{"x": [1, 2], "id": "b"}]})
    assert scored.status_code == 200 and scored.json()["kept"] == 0
    kept = client.post("/v1/models/m/score", json={"events": [{"x": [1, 2], "id": "b"}]})
    assert kept.json()["kept"] == 1
    assert client.post("/v1/models/m/score?keep=2", json=event).json()["field"] == "query.keep"
    assert client.get("/v1/models/m/events").status_code == 405


def test_health_readiness_and_prometheus(make_client, monkeypatch):
    import threading

    import service.app

    compiled = threading.Event()
    # the real warm-up compiles every kernel (minutes on a cold numba cache): stand in for it
    monkeypatch.setattr(service.app, "warm_up", lambda ready, bar_stream: compiled.wait(30))
    client = make_client(warmup=True)
    assert client.get("/healthz").json() == {"status": "ok"}
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"] == {"store": "ok", "kernels": "compiling"}
    compiled.set()
    deadline = time.monotonic() + 30
    while (ready := client.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, ready.text
        time.sleep(0.02)
    assert ready.json()["checks"] == {"store": "ok", "kernels": "ok"}
    create_model(client, n_features=5)
    X, y = make_stream(20)
    client.post("/v1/models/m/events", json=events_json(X, y, ids=list(range(20))))
    client.post("/v1/models/m/events", json=events_json(X[:3], y[:3], ids=[0, 1, 2]))
    client.post("/v1/models/m/events", json={"events": [{"x": [1], "y": 1}]})
    text = client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain")
    body = text.text
    assert 'aucstream_events_learned_total{model="m"} 20.0' in body
    assert 'aucstream_events_duplicate_total{model="m"} 3.0' in body
    assert 'aucstream_requests_rejected_total{problem="invalid-input"} 1.0' in body
    assert 'route="/v1/models/{model_id}/events"' in body
    assert "aucstream_stale_writes_retried 0.0" in body
    # two requests reached the model (the third was refused as it was parsed), one after the
    # other: two groups of one
    assert "aucstream_coalesced_groups 2.0" in body
    assert "aucstream_coalesced_requests 2.0" in body
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path, parameters, schema in (
        ("/v1/models/{model_id}/events", {"model_id", "scores", "zero_based"}, "LearnResponse"),
        (
            "/v1/models/{model_id}/score",
            {"model_id", "keep", "zero_based", "probabilities", "reasons"},
            "ScoreResponse",
        ),
    ):  # documented as FastAPI declares them, although served by plain routes
        post = paths[path]["post"]
        assert {parameter["name"] for parameter in post["parameters"]} == parameters
        content = post["responses"]["200"]["content"]["application/json"]
        assert content["schema"]["$ref"].endswith(f"/{schema}")
        assert "application/x-npz" in post["requestBody"]["content"]


def test_readyz_fails_when_redis_does_not_answer_and_hides_its_address(caplog):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    settings = Settings(store="redis", redis_url="redis://127.0.0.1:1/0", warmup=False)
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"]["store"] == "unavailable"
        problem = client.get("/v1/models")
        assert problem.status_code == 503 and problem.json()["title"] == "Store unavailable"
        for answer in (response, problem):  # the address is for the logs only
            assert "127.0.0.1" not in answer.text and ":1" not in answer.text
    assert any("127.0.0.1" in record.getMessage() for record in caplog.records)


def _serve_with_workers(tmp_path, port: int):
    """``aucstream serve --workers 2`` on the SQLite store, with its own temporary directory."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "AUCSTREAM_WARMUP": "false",
           "TMPDIR": str(tmp_path / "tmp")}  # fmt: skip
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--workers",
               "2", "--data-dir", str(tmp_path / "data"), "--log-level", "warning"]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _children(server) -> list[int]:
    from pathlib import Path

    children = Path("/proc") / str(server.pid) / "task" / str(server.pid) / "children"
    return [int(pid) for pid in children.read_text().split()]


def _wait_for_orphans_to_stop(workers: list[int], seconds: float) -> None:
    """Wait for the orphaned ``workers`` to end (a graceful shutdown, slow on a busy machine),
    failing after ``seconds``; any left are killed."""
    import os
    import signal
    from pathlib import Path

    try:
        deadline = time.monotonic() + seconds
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            assert time.monotonic() < deadline, "orphaned workers still running"
            time.sleep(0.1)
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_workers_of_a_server_killed_while_they_start_stop_too(tmp_path):
    """A server ``kill -9``'d while its workers are still importing leaves them with another
    parent before their start-up could note the server's pid: they stop all the same."""
    import signal

    from loadtest.local import free_port

    (tmp_path / "tmp").mkdir()
    killed = _serve_with_workers(tmp_path, free_port())
    deadline = time.monotonic() + 60
    while len(workers := _children(killed)) < 2:  # spawned, not yet serving
        assert time.monotonic() < deadline and killed.poll() is None, "no workers started"
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    _wait_for_orphans_to_stop(workers, 90)


def test_a_killed_multi_worker_server_leaves_no_worker_nor_metrics_directory_behind(tmp_path):
    """The workers of a ``kill -9``'d multi-worker server stop by themselves, and its metrics
    directory (which it could not remove) is removed by the next server's start; a running
    server's directory is left alone."""
    import signal
    from pathlib import Path

    from loadtest.local import free_port, stop, wait_ready

    (tmp_path / "tmp").mkdir()

    def metrics_dirs() -> set[Path]:
        return set((tmp_path / "tmp").glob("aucstream-prometheus-*"))

    port = free_port()
    killed = _serve_with_workers(tmp_path, port)
    wait_ready(f"http://127.0.0.1:{port}", killed, timeout=300, answers=4, interval=0.1)
    workers = _children(killed)
    (first,) = metrics_dirs()
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    # uvicorn's workers, orphaned, stop by themselves (else the port stays taken)
    _wait_for_orphans_to_stop(workers, 90)
    assert metrics_dirs() == {first}  # nothing could remove it

    port = free_port()
    running = _serve_with_workers(tmp_path, port)
    try:
        wait_ready(f"http://127.0.0.1:{port}", running, timeout=300, answers=4, interval=0.1)
        (second,) = metrics_dirs()
        assert second != first
        # a server starting beside a running one leaves the running one's directory alone
        port = free_port()
        beside = _serve_with_workers(tmp_path, port)
        try:
            wait_ready(f"http://127.0.0.1:{port}", beside, timeout=300, answers=4, interval=0.1)
            assert second in metrics_dirs() and len(metrics_dirs()) == 2
        finally:
            stop(beside)
    finally:
        stop(running)
    assert metrics_dirs() == set()  # a server stopped normally removes its own
