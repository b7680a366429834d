"""Through real uvicorn processes: end to end on the memory store, and two workers sharing one
Redis, or one SQLite file, with eight concurrent clients (no update lost, none applied twice)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from service import cli
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.service.conftest import events_json, make_stream, npz_bytes
from tests.service.server_helpers import uvicorn_server


def test_end_to_end_through_uvicorn_memory_store(tmp_path, capsys):
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        assert http.post("/v1/models", json={"id": "fraud", "n_features": 5}).status_code == 201
        X, y = make_stream(500)
        ndjson = b"\n".join(orjson.dumps(e) for e in events_json(X[:250], y[:250])["events"])
        response = http.post(
            "/v1/models/fraud/events",
            content=ndjson,
            headers={"content-type": "application/x-ndjson"},
        )
        assert response.status_code == 200 and response.json()["learned"] == 250
        response = http.post(
            "/v1/models/fraud/events",
            content=npz_bytes(X=X[250:], y=y[250:]),
            headers={"content-type": "application/x-npz"},
        )
        assert response.status_code == 200 and response.json()["learned"] == 250
        scores = http.post("/v1/models/fraud/score", json=events_json(X[:3])).json()["scores"]
        assert len(scores) == 3
        metrics = http.get("/v1/models/fraud/metrics").json()
        assert metrics["counts"]["events_learned"] == 500
        assert metrics["window"]["auc"] > 0.8
        bad = http.post(
            "/v1/models/fraud/events", content=b"{", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 400 and bad.headers["content-type"] == "application/problem+json"
        assert "aucstream_http_requests_total" in http.get("/metrics").text

        path = tmp_path / "replay.npz"
        np.savez(path, X=X, y=y)
        assert (
            cli.main(
                [
                    "replay",
                    str(path),
                    "--model",
                    "replayed",
                    "--url",
                    url,
                    "--batch-size",
                    "100",
                    "--quiet",
                ]
            )
            == 0
        )
        assert "500 events learned" in capsys.readouterr().out
        assert http.get("/v1/models/replayed").json()["counts"]["events_learned"] == 500


@pytest.mark.parametrize("shared_store", ["redis", "sqlite"])
def test_two_workers_one_store_eight_clients_lose_nothing(request, tmp_path, shared_store):
    """Two uvicorn workers share a Redis, or an SQLite file on this machine."""
    if shared_store == "redis":
        redis_url = request.getfixturevalue("empty_redis")
        env = {"AUCSTREAM_REDIS_URL": redis_url}
        open_store: Callable[[], Any] = lambda: RedisStore.from_url(redis_url)  # noqa: E731
    else:
        env = {"AUCSTREAM_STORE": "sqlite", "AUCSTREAM_DATA_DIR": str(tmp_path / "data")}
        open_store = lambda: SQLiteStore.open(tmp_path / "data")  # noqa: E731
    n_clients, n_batches, batch_size = 8, 8, 40
    X, y = make_stream(n_clients * n_batches * batch_size, seed=11)
    batches = []
    for number in range(n_clients * n_batches):
        rows = slice(number * batch_size, (number + 1) * batch_size)
        ids = [f"ev-{i}" for i in range(rows.start, rows.stop)]
        batches.append(orjson.dumps(events_json(X[rows], y[rows], ids)))

    with uvicorn_server(2, **env) as url:
        with httpx.Client(base_url=url, timeout=60) as http:
            created = http.post(
                "/v1/models",
                json={"id": "shared", "n_features": 5, "scaling": "none", "learner": "spam"},
            )
            assert created.status_code == 201

        def post_all(results: list) -> None:
            def worker(index: int) -> None:
                with httpx.Client(base_url=url, timeout=60) as http:
                    for batch in batches[index::n_clients]:
                        response = http.post(
                            "/v1/models/shared/events",
                            content=batch,
                            headers={"content-type": "application/json"},
                        )
                        assert response.status_code == 200, response.text
                        results.append(response.json())

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        first: list = []
        post_all(first)
        second: list = []
        post_all(second)  # the same events again: every one is a duplicate
        with httpx.Client(base_url=url, timeout=60) as http:
            metrics = http.get("/v1/models/shared/metrics").json()
            version = http.get("/v1/models/shared").json()["version"]

    n_events = len(X)
    assert len(first) == len(second) == n_clients * n_batches
    assert sum(r["learned"] for r in first) == n_events
    assert sum(r["learned"] for r in second) == 0
    assert sum(r["duplicates"] for r in second) == n_events
    assert metrics["counts"]["events_learned"] == n_events
    # the second round was all retries: acknowledged, counted in the responses, and nothing
    # committed (the model's duplicate counter and version are those of the first round)
    assert metrics["counts"]["duplicates"] == 0
    assert metrics["since_start"]["events"] == n_events
    # one committed write per group of concurrent requests a worker merged (at most one per
    # learning request; the retries of the second round wrote nothing)
    assert 1 < version <= 1 + n_clients * n_batches
    # the learner's own counters and class sums saw every event exactly once
    store = open_store()
    state = store.load("shared").arrays
    assert state["learner:n_seen"][0] == n_events
    assert state["learner:n_pos"][0] == int(y.sum())
    np.testing.assert_allclose(state["learner:class_sum_pos"], X[y == 1].sum(axis=0), rtol=1e-9)
    every_id = [f"ev-{i}" for i in range(n_events)]
    assert store.seen("shared", every_id, time.time()).all()
    store.close()
