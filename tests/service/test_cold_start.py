"""Cold start: ``/readyz`` turns ready only after the whole warm-up (regret kernels included)
and ``/healthz`` answers while it runs.  The real warm-up runs (numba's cache is warm in the
test session); only a pause is injected before its last group, to hold the app mid warm-up."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

import core.warmup
from tests.service.conftest import create_model


def test_readyz_waits_for_the_whole_warm_up_and_healthz_answers_during_it(
    make_client, monkeypatch, caplog
):
    real_regret = core.warmup._compile_regret
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    def paused_regret(*args):
        entered.set()
        release.wait(60)
        seconds = real_regret(*args)
        finished.set()
        return seconds

    monkeypatch.setattr(core.warmup, "_compile_regret", paused_regret)
    caplog.set_level(logging.INFO, logger="aucstream")
    client = make_client(warmup=True)
    assert entered.wait(300), "the warm-up never reached the regret kernels"
    # every learner and the metrics are loaded; the regret kernels are not: not ready yet
    latencies = []
    for _ in range(20):
        started = time.perf_counter()
        assert client.get("/healthz").json() == {"status": "ok"}
        latencies.append(time.perf_counter() - started)
        not_ready = client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json()["checks"] == {"store": "ok", "kernels": "compiling"}
    # a health check held behind the warm-up would wait for ``release`` (60 s); the bound only
    # has to tell that apart from a busy machine's first request (1.1 s seen in CI)
    assert max(latencies) < 10.0, latencies
    # meanwhile the API refuses work instead of compiling kernels inside requests
    refused = client.post("/v1/models", json={"id": "m", "learner": "spam", "n_features": 5})
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["type"].endswith("/warming-up")
    assert client.get("/v1/models").status_code == 503
    scored = client.post("/v1/models/m/score", json={"events": [{"x": [1, 2, 3, 4, 5]}]})
    assert scored.status_code == 503 and scored.headers["retry-after"] == "5"  # the short lane
    assert client.get("/metrics").status_code == 200
    release.set()
    deadline = time.monotonic() + 120
    while (ready := client.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, ready.text
        time.sleep(0.02)
    assert finished.is_set()  # ready only once the real regret warm-up returned
    messages = [record.getMessage() for record in caplog.records if record.name == "aucstream"]
    assert any(message.startswith("compiling or loading the numba kernels") for message in messages)
    for group in ("spam", "opauc", "metrics", "regret"):
        assert any(message.startswith(f"kernels of {group} ready in ") for message in messages)
    assert any(message.startswith("all kernels ready in ") for message in messages)
    # the first regret report after the warm-up compiles nothing (it took 25-43 s when the
    # regret kernels were left out of the warm-up)
    create_model(client, n_features=5)
    rng = np.random.default_rng(0)
    events = [
        {"id": str(i), "x": rng.normal(size=5).tolist(), "y": int(i % 3 == 0)} for i in range(200)
    ]
    assert client.post("/v1/models/m/events", json={"events": events}).status_code == 200
    started = time.perf_counter()
    report = client.get("/v1/models/m/metrics").json()
    assert report["regret"] is not None, report
    assert time.perf_counter() - started < 5.0
