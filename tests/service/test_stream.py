"""The WebSocket stream (``/v1/models/{id}/stream``) through a real uvicorn server and the
package's client: what it learns and scores equals the REST routes, bit for bit."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from service.client import StreamClient, StreamClosed, StreamError
from tests.service.conftest import events_json, make_stream
from tests.service.test_uvicorn import uvicorn_server

MODEL = {"n_features": 5, "learner": "spam", "scaling": "none", "regret_window": 0}


@pytest.fixture(scope="module")
def server():
    with uvicorn_server(AUCSTREAM_STORE="memory") as url:
        yield url


def create(http: httpx.Client, model_id: str) -> None:
    assert http.post("/v1/models", json={"id": model_id, **MODEL}).status_code == 201


def weights(http: httpx.Client, model_id: str) -> np.ndarray:
    return np.array(http.get(f"/v1/models/{model_id}/weights").json()["coef"])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_stream_learns_and_scores_as_rest_does(server, binary):
    X, y = make_stream(400, seed=4)
    ids = [f"e{i}" for i in range(400)]
    suffix = "b" if binary else "j"
    with httpx.Client(base_url=server) as http:
        create(http, f"rest-{suffix}")
        create(http, f"ws-{suffix}")
        for start in range(0, 400, 100):
            part = slice(start, start + 100)
            body = events_json(X[part], y[part], ids=ids[part])
            assert http.post(f"/v1/models/rest-{suffix}/events", json=body).status_code == 200
        with StreamClient(server, f"ws-{suffix}", binary=binary) as stream:
            totals = stream.learn_events(X, y, ids)  # one message per event, pipelined
            assert totals.learned == 400 and totals.problems == []
            again = stream.learn_batches([(X[:50], y[:50], ids[:50])])  # ids make it harmless
            assert again.duplicates == 50 and again.learned == 0
            scores = stream.score(X[:20], keep=False)
        streamed, posted = weights(http, f"ws-{suffix}"), weights(http, f"rest-{suffix}")
        np.testing.assert_array_equal(streamed, posted)
        rest = http.post(f"/v1/models/rest-{suffix}/score", json=events_json(X[:20])).json()
        np.testing.assert_array_equal(scores, np.array(rest["scores"]))


def test_delayed_labels_and_a_refused_message_over_the_stream(server):
    X, y = make_stream(200, seed=5)
    with httpx.Client(base_url=server) as http:
        create(http, "late")
        stream = StreamClient(server, "late").connect()
        stream.learn(X[:150], y[:150])
        stream.score(X[150:], ids=[f"s{i}" for i in range(50)])  # kept for their labels
        stream.label([f"s{i}" for i in range(50)], y[150:])
        bad = X[:3].copy()
        bad[1, 2] = np.nan
        with pytest.raises(StreamError) as refused:
            stream.learn(bad, y[:3])
        assert refused.value.problem["status"] == 422
        assert refused.value.problem["detail"].startswith("event 1")  # orjson sends NaN as null
        stream.close()
        counts = http.get("/v1/models/late/metrics").json()["counts"]
    assert counts["events_learned"] == 200 and counts["labels_joined"] == 50


def test_the_stream_needs_a_key_when_keys_are_set():
    with uvicorn_server(AUCSTREAM_STORE="memory", AUCSTREAM_API_KEYS="secret") as url:
        headers = {"X-API-Key": "secret"}
        with httpx.Client(base_url=url, headers=headers) as http:
            assert http.post("/v1/models", json={"id": "k", **MODEL}).status_code == 201
        with pytest.raises(StreamClosed) as closed, StreamClient(url, "k") as stream:
            stream.score(np.zeros((1, 5)), keep=False)
        assert closed.value.code == 1008
        with StreamClient(url, "k", api_key="secret") as stream:
            assert stream.score(np.zeros((1, 5)), keep=False).shape == (1,)
