"""Prometheus: per-model window AUC / pAUC gauges (set from a metrics summary already
computed, gone when the model is deleted), and one view across uvicorn workers
(``aucstream serve --workers 2``: prometheus_client's multiprocess mode)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.multiprocess import MultiProcessCollector

from loadtest.local import free_port, stop, wait_ready
from tests.service.conftest import create_model, events_json, make_stream, started_apps

ROOT = Path(__file__).resolve().parents[2]


def gauge(text: str, name: str, model: str) -> float | None:
    match = re.search(rf'^{name}{{model="{re.escape(model)}"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_window_gauges_follow_the_metrics_and_go_with_the_model(client):
    create_model(client, "m", n_features=5)
    create_model(client, "one-class", n_features=5)
    X, y = make_stream(300)
    client.post("/v1/models/m/events", json=events_json(X, y, ids=list(range(300))))
    client.post("/v1/models/one-class/events", json=events_json(X[:5], [0] * 5, ids=list(range(5))))
    # nothing computed yet: no gauge (the scrape computes nothing)
    assert gauge(client.get("/metrics").text, "aucstream_model_window_auc", "m") is None
    window = client.get("/v1/models/m/metrics").json()["window"]
    assert window["auc"] is not None and window["pauc"] is not None
    client.get("/v1/models/one-class/metrics")
    text = client.get("/metrics").text
    assert gauge(text, "aucstream_model_window_auc", "m") == window["auc"]
    assert gauge(text, "aucstream_model_window_pauc", "m") == window["pauc"]
    assert math.isnan(gauge(text, "aucstream_model_window_auc", "one-class"))
    # a learn changes the window: the gauge follows at the next metrics computation
    client.post("/v1/models/m/events", json=events_json(X[:50], 1 - y[:50], ids=range(300, 350)))
    window = client.get("/v1/models/m/metrics").json()["window"]
    assert gauge(client.get("/metrics").text, "aucstream_model_window_auc", "m") == window["auc"]
    assert client.delete("/v1/models/m").status_code == 204
    text = client.get("/metrics").text
    assert 'model="m"' not in text
    assert gauge(text, "aucstream_model_window_pauc", "one-class") is not None


def _healthz_counts(directory: Path) -> dict[str, float]:
    """Per worker process: /healthz requests counted in its own file."""
    counts = {}
    for path in directory.glob("counter_*.db"):
        total = 0.0
        for metric in MultiProcessCollector.merge([str(path)], accumulate=True):
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("route") == "/healthz":
                    total += sample.value
        counts[path.name] = total
    return counts


def test_metrics_aggregate_the_counters_of_every_uvicorn_worker(empty_redis, tmp_path):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"left by a previous run")  # must be wiped
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUCSTREAM_WARMUP": "false",
           "PROMETHEUS_MULTIPROC_DIR": str(directory)}  # fmt: skip
    command = [sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main())",
               "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2",
               "--redis-url", empty_redis, "--log-level", "warning"]  # fmt: skip
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(url, process, timeout=300, answers=6, interval=0.1)
        assert not (directory / "counter_999999.db").exists()
        sent = 0
        lock = threading.Lock()

        def hammer() -> None:
            nonlocal sent
            for _ in range(10):
                # a new connection each time, so either worker may take it
                assert httpx.get(f"{url}/healthz", timeout=60).status_code == 200
                with lock:
                    sent += 1

        deadline = time.monotonic() + 300  # a hang detector, not a clock a loaded machine meets
        while sum(1 for count in _healthz_counts(directory).values() if count > 0) < 2:
            assert time.monotonic() < deadline, _healthz_counts(directory)
            threads = [threading.Thread(target=hammer) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        per_worker = _healthz_counts(directory)
        assert sum(per_worker.values()) == sent
        assert max(per_worker.values()) < sent  # both workers served some
        pattern = re.compile(
            r'^aucstream_http_requests_total\{method="GET",model="",route="/healthz",'
            r'status="200"\} (\S+)$', re.MULTILINE
        )  # fmt: skip
        for _ in range(6):  # whichever worker answers the scrape: the sum of both
            match = pattern.search(httpx.get(f"{url}/metrics", timeout=10).text)
            assert match and float(match.group(1)) == sent
        # per-model gauges: set by the worker that computed the metrics, seen through any;
        # a deleted model's series leave every worker's view
        with httpx.Client(base_url=url, timeout=30) as http:
            body = {"id": "m", "learner": "spam", "n_features": 5}
            assert http.post("/v1/models", json=body).status_code == 201
            X, y = make_stream(200)
            http.post("/v1/models/m/events", json=events_json(X, y, ids=list(range(200))))
            window = http.get("/v1/models/m/metrics").json()["window"]
        for _ in range(6):
            text = httpx.get(f"{url}/metrics", timeout=10).text
            assert gauge(text, "aucstream_model_window_auc", "m") == window["auc"]
        assert httpx.delete(f"{url}/v1/models/m", timeout=10).status_code == 204
        for _ in range(6):
            assert 'model="m"' not in httpx.get(f"{url}/metrics", timeout=10).text
    finally:
        stop(process)


def test_the_warm_up_refusal_is_counted_as_every_refusal():
    """A /v1 request refused while the kernels warm up (503 warming-up) is counted in
    aucstream_requests_rejected_total, as every other problem is."""
    with started_apps(store="memory") as build:
        client = build()
        client.app.state.warm = threading.Event()  # the warm-up still running
        for _ in range(2):
            refused = client.get("/v1/models")
            assert refused.status_code == 503 and refused.json()["type"].endswith("/warming-up")
        text = client.get("/metrics").text
        assert 'aucstream_requests_rejected_total{problem="warming-up"} 2.0' in text, text
        client.app.state.warm.set()
        assert client.get("/v1/models").status_code == 200
