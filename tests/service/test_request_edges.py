"""Edges of what requests may carry and get: feature names with control characters, HEAD on
the GET routes, repeated JSON keys, and reason codes of hashed models."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest

from tests.service.conftest import live_server, started_apps

PROBLEM = "application/problem+json"


@pytest.fixture
def client():
    with started_apps(store="memory") as build:
        yield build()


@pytest.mark.parametrize("name", ["a\x00b", "line\nbreak", "esc\x1b[31m", "del\x7f", "c1\x85"])
def test_a_feature_name_with_a_control_character_is_refused(client, name):
    names = ["amount", name, "country"]
    response = client.post("/v1/models", json={"id": "m", "n_features": 3, "feature_names": names})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["field"] == "feature_names"
    assert repr(name) in problem["detail"] and "control character" in problem["detail"]
    assert client.get("/v1/models").json() == {"models": []}


def test_printable_names_in_any_script_are_kept(client):
    names = ["montant €", "país", "金额"]
    response = client.post("/v1/models", json={"id": "m", "n_features": 3, "feature_names": names})
    assert response.status_code == 201, response.text
    assert client.get("/v1/models/m").json()["config"]["feature_names"] == names


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models",
        "/v1/models/m",
        "/v1/models/m/metrics",
        "/v1/models/m/weights",
        "/healthz",
        "/metrics",
        "/dashboard",
        "/v1/learners",
    ],  # fmt: skip
)
def test_head_answers_as_get_without_a_body(client, path):
    assert client.post("/v1/models", json={"id": "m", "n_features": 3}).status_code == 201
    got = client.get(path)
    head = client.head(path)
    assert head.status_code == got.status_code == 200, head.text
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    if "content-length" in got.headers and path != "/metrics":  # metrics change between reads
        assert head.headers["content-length"] == got.headers["content-length"]


def test_head_of_an_unknown_model_and_of_a_post_only_route(client):
    missing = client.head("/v1/models/nope")
    assert missing.status_code == 404 and missing.content == b""
    refused = client.head("/v1/models/nope/events")
    assert refused.status_code == 405
    assert "HEAD" not in refused.headers["allow"] and "POST" in refused.headers["allow"]
    assert "HEAD" in client.options("/v1/models").headers["allow"]


def test_head_of_the_metrics_stream_through_uvicorn_ends_after_the_headers():
    with live_server() as (url, _), httpx.Client(base_url=url, timeout=10) as http:
        assert http.post("/v1/models", json={"id": "m", "n_features": 3}).status_code == 201
        started = time.monotonic()
        head = http.head("/v1/models/m/metrics/stream")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"].startswith("text/event-stream")
        assert time.monotonic() - started < 5
        assert http.head("/v1/models/m").status_code == 200
        assert 'method="HEAD",route="/v1/models/{model_id}"' in http.get("/metrics").text


def events_with_repeated_label(n_events: int) -> bytes:
    """``n_events`` events; the last one says ``"y": 0`` and then ``"y": 1``."""
    events = [orjson.dumps({"id": f"e{i}", "x": [0.5, 1.0, -1.0], "y": 0}) for i in range(n_events)]
    events[-1] = events[-1][:-1] + b',"y":1}'
    return b'{"events":[' + b",".join(events) + b"]}"


def assert_repeated_key_refused(response, key: str) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["field"] == key and f"the key {key!r} appears twice" in problem["detail"]


@pytest.mark.parametrize("n_events", [1, 3, 500])  # the one-event, general and simdjson paths
def test_a_repeated_key_in_an_event_is_refused_and_changes_nothing(client, n_events):
    assert client.post("/v1/models", json={"id": "m", "n_features": 3}).status_code == 201
    body = events_with_repeated_label(n_events)
    json_type = {"content-type": "application/json"}
    for route in ("events", "score"):
        response = client.post(f"/v1/models/m/{route}", content=body, headers=json_type)
        assert_repeated_key_refused(response, "y")
    lines = b"\n".join(orjson.dumps(event) for event in orjson.loads(body)["events"])
    lines += b'\n{"x": [1, 2, 3], "x": [3, 2, 1]}'
    ndjson = {"content-type": "application/x-ndjson"}
    response = client.post("/v1/models/m/events", content=lines, headers=ndjson)
    assert_repeated_key_refused(response, "x")
    assert response.json()["line"] == n_events + 1
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0


def test_repeated_keys_anywhere_else_are_refused(client):
    json_type = {"content-type": "application/json"}
    created = client.post(
        "/v1/models", content=b'{"id": "m", "n_features": 3, "n_features": 4}', headers=json_type
    )
    assert_repeated_key_refused(created, "n_features")
    nested = b'{"id": "m", "n_features": 3, "params": {"eta0": 0.1, "eta0": 5}}'
    assert_repeated_key_refused(
        client.post("/v1/models", content=nested, headers=json_type), "eta0"
    )
    assert client.get("/v1/models").json() == {"models": []}
    assert client.post("/v1/models", json={"id": "m", "n_features": 3}).status_code == 201
    top = b'{"events": [], "events": [{"x": [1, 2, 3], "y": 1}]}'
    assert_repeated_key_refused(
        client.post("/v1/models/m/events", content=top, headers=json_type), "events"
    )
    labels = b'{"labels": [{"id": "a", "y": 1, "id": "b"}]}'
    response = client.post("/v1/models/m/labels", content=labels, headers=json_type)
    assert_repeated_key_refused(response, "id")


def test_colons_and_escapes_in_strings_are_not_repeats(client):
    names = ["a:b", "c\\u003a", 'q"uote:']
    body = orjson.dumps({"id": "m", "n_features": 3, "feature_names": names})
    body = body.replace(b"c\\\\u003a", b"c\\u003a")  # a colon written as an escape
    created = client.post("/v1/models", content=body, headers={"content-type": "application/json"})
    assert created.status_code == 201, created.text
    assert client.get("/v1/models/m").json()["config"]["feature_names"] == ["a:b", "c:", 'q"uote:']
    event = b'{"x": {"a:b" : 1, "c:": 2, "q\\"uote:": 3}, "id": "id:1", "y": 1}'
    learned = client.post(
        "/v1/models/m/events", content=b'{"events": [' + event + b"]}",
        headers={"content-type": "application/json"},
    )  # fmt: skip
    assert learned.status_code == 200, learned.text
