"""Edges of what requests may carry and get: feature names with control characters, HEAD on
the GET routes, repeated JSON keys, and reason codes of hashed models."""

from __future__ import annotations

import time

import httpx
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
