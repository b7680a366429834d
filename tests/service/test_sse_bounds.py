"""The server-sent metrics stream is bounded: streams per client (API key, or address without
keys) and in total, each refused with a problem naming its setting and ``Retry-After``; and an
interval below the server's minimum is raised to it.  Through a real uvicorn."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import orjson
import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.service.conftest import events_json, make_stream
from tests.service.server_helpers import live_url

WRITER = "sse-bounds-writer"
READERS = ("sse-bounds-reader-a", "sse-bounds-reader-b", "sse-bounds-reader-c")
STREAM = "/v1/models/m/metrics/stream"


def create(url: str, headers: dict[str, str] | None = None) -> None:
    body = {"id": "m", "learner": "spam", "n_features": 5}
    assert httpx.post(url + "/v1/models", json=body, headers=headers, timeout=60).status_code == 201


def key(value: str) -> dict[str, str]:
    return {"X-API-Key": value}


def refused(http: httpx.Client, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """The answer to a stream request that must be refused (read whole); a stream that opens
    instead is closed, and fails the test."""
    with http.stream("GET", path, headers=headers) as response:
        assert response.status_code != 200, "the stream opened"
        response.read()
        return response


def wait_until_open(http: httpx.Client, headers: dict[str, str], timeout: float = 120.0) -> None:
    """Until a stream opens for ``headers`` (a closed one frees its slot when the server next
    checks it); the stream opened is closed again."""
    deadline = time.monotonic() + timeout
    while True:
        with http.stream("GET", STREAM, headers=headers) as response:
            if response.status_code == 200:
                return
            assert response.status_code in (429, 503)
        assert time.monotonic() < deadline, "the closed stream's slot was never given back"
        time.sleep(0.2)


def test_streams_are_capped_per_api_key_and_in_total():
    env = {
        "AUCSTREAM_API_KEYS": WRITER,
        "AUCSTREAM_READ_ONLY_API_KEYS": ",".join(READERS),
        "AUCSTREAM_SSE_MAX_STREAMS_PER_CLIENT": "2",
        "AUCSTREAM_SSE_MAX_STREAMS": "3",
        "AUCSTREAM_SSE_RETRY_AFTER_SECONDS": "7",
    }
    reader_a, reader_b, reader_c = (key(reader) for reader in READERS)
    with live_url(**env) as url, httpx.Client(base_url=url, timeout=30) as http:
        create(url, key(WRITER))
        # refused requests take no slot: an unknown model, an unknown key
        for _ in range(3):
            assert refused(http, "/v1/models/nope/metrics/stream", reader_a).status_code == 404
            assert refused(http, STREAM, key("unknown")).status_code == 401
        with contextlib.ExitStack() as open_streams:
            first = open_streams.enter_context(http.stream("GET", STREAM, headers=reader_a))
            open_streams.enter_context(http.stream("GET", STREAM, headers=reader_a))
            assert first.status_code == 200
            # (kept: a line iterator dropped would close its stream)
            first_lines = first.iter_lines()
            assert next(first_lines) == "event: metrics"

            third = refused(http, STREAM, reader_a)
            assert third.status_code == 429
            assert third.headers["content-type"] == "application/problem+json"
            assert third.headers["retry-after"] == "7"
            problem = third.json()
            assert problem["type"].endswith("/too-many-streams")
            assert "AUCSTREAM_SSE_MAX_STREAMS_PER_CLIENT=2" in problem["detail"]
            assert READERS[0] not in problem["detail"]  # the key is never echoed

            # another key has its own allowance, up to the process's total
            other = open_streams.enter_context(http.stream("GET", STREAM, headers=reader_b))
            assert other.status_code == 200
            full = refused(http, STREAM, reader_c)
            assert full.status_code == 503 and full.headers["retry-after"] == "7"
            assert full.json()["type"].endswith("/streams-full")
            assert "AUCSTREAM_SSE_MAX_STREAMS=3" in full.json()["detail"]
            # the rest of the API still answers
            assert http.get("/v1/models/m", headers=reader_c).status_code == 200

            first.close()  # the client leaves: its slot comes back
            wait_until_open(http, reader_a)
        # every stream closed: every slot back, for a key never refused too
        wait_until_open(http, reader_c)


def test_streams_are_capped_per_client_address_without_keys():
    env = {"AUCSTREAM_SSE_MAX_STREAMS_PER_CLIENT": "1", "AUCSTREAM_SSE_MAX_STREAMS": "10"}
    with (
        live_url(**env) as url,
        httpx.Client(base_url=url, timeout=30) as local,
        # another loopback address: another client
        httpx.Client(
            base_url=url, timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2")
        ) as remote,
    ):
        create(url)
        with local.stream("GET", STREAM) as held:
            assert held.status_code == 200
            second = refused(local, STREAM)
            assert second.status_code == 429 and second.headers["retry-after"] == "5"
            assert "the client address 127.0.0.1" in second.json()["detail"]
            with remote.stream("GET", STREAM) as elsewhere:
                assert elsewhere.status_code == 200


def test_an_interval_below_the_minimum_is_raised_to_it():
    """The model changes all the time: a stream sends a message at each check, so the time
    its messages take tells the interval used.  The server sleeps the interval between two
    checks, so load only lengthens it: the bound asserted is a lower one (a count of messages
    within 3.5 s, asserted at least 3, was a clock a loaded machine could miss)."""
    env = {"AUCSTREAM_SSE_MIN_INTERVAL_SECONDS": "1"}
    with live_url(**env) as url, httpx.Client(base_url=url, timeout=30) as http:
        create(url)
        X, y = make_stream(20)
        # the first batch may compile the learner's kernels: before the stream starts
        assert http.post("/v1/models/m/events", json=events_json(X, y), timeout=900).is_success
        stop_learning = threading.Event()

        def learn() -> None:
            with httpx.Client(base_url=url, timeout=30) as writer:
                while not stop_learning.is_set():
                    writer.post("/v1/models/m/events", json=events_json(X, y))
                    time.sleep(0.02)

        learner = threading.Thread(target=learn)
        learner.start()
        try:
            versions, received = [], []
            with http.stream("GET", STREAM + "?interval=0.1") as stream:
                assert stream.status_code == 200
                headers = stream.headers
                for line in stream.iter_lines():
                    if line.startswith("data: "):
                        versions.append(orjson.loads(line[6:])["version"])
                        received.append(time.monotonic())
                    if len(versions) == 6:
                        break
        finally:
            stop_learning.set()
            learner.join()
        # the first message is sent at once; the next five each come after a check: four
        # intervals between the second and the sixth, >= 4 s at 1 s and ~0.4 s at 0.1 s (2.5
        # leaves room for the client reading the second message late)
        assert received[5] - received[1] >= 2.5, (versions, received)
        assert versions == sorted(set(versions))
        assert headers["x-stream-interval"] == "1"  # the interval used
        assert headers["cache-control"] == "no-store"
    # the server's own interval may not be set below the minimum either
    with pytest.raises(ValidationError, match="AUCSTREAM_SSE_MIN_INTERVAL_SECONDS"):
        Settings(store="memory", stream_interval_seconds=0.5, sse_min_interval_seconds=1)
