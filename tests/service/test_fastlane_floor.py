"""What the cheaper per-request layer (``service.fastlane``, issue 38's ``/healthz`` floor) must
keep: ``/healthz``'s one prebuilt answer is never changed by sending it, the lane sets the
``route`` FastAPI's router sets, and every request is still counted and timed."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Histogram

from service.routers import system
from service.telemetry import _LATENCY_BOUNDS, Telemetry
from tests.service.conftest import create_model, started_apps
from tests.service.exposition_helpers import sample


def test_healthz_answer_is_shared_and_never_changed_by_the_headers_added():
    """One ``Response`` answers every ``/healthz``: the request id added to each answer (JSON
    logs) and HEAD's empty body go on that answer's messages only."""
    shared_headers = list(system._OK.raw_headers)
    with started_apps(store="memory", log_format="json") as build:
        client = build()
        for number in range(3):
            answer = client.get("/healthz", headers={"X-Request-ID": f"probe-{number}"})
            assert answer.status_code == 200 and answer.content == b'{"status":"ok"}'
            assert answer.headers.get_list("x-request-id") == [f"probe-{number}"]
            assert "cache-control" not in answer.headers  # no-store is for /v1 only
        head = client.head("/healthz")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == "15"
        assert len(head.headers.get_list("x-request-id")) == 1
        assert client.get("/v1/learners").headers["cache-control"] == "no-store"
    assert system._OK.raw_headers == shared_headers


def test_lane_answers_get_no_store_and_the_request_id():
    """The lane sends a whole body's two messages itself: ``/v1`` answers, problems included,
    carry ``no-store`` and (JSON logs) the request id, once."""
    with started_apps(store="memory", log_format="json") as build:
        client = build()
        create_model(client, n_features=2)
        for body, status in (({"events": [{"x": [1, 2]}]}, 200), ({"events": [{"x": [1]}]}, 422)):
            answer = client.post("/v1/models/m/score", json=body, headers={"X-Request-ID": "r1"})
            assert answer.status_code == status, answer.text
            assert answer.headers.get_list("cache-control") == ["no-store"]
            assert answer.headers.get_list("x-request-id") == ["r1"]
        plain = client.post("/v1/models/m/score", json={"events": [{"x": [1, 2]}]})
        assert len(plain.headers["x-request-id"]) == 32  # one made up: a uuid's hex


def _routed(client: TestClient, method: str, path: str, body: bytes = b"") -> Any:
    """``scope["route"]`` after the app answered a request (the scope it was given)."""
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
        "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "root_path": "",
        "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    client.portal.call(client.app, scope, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 200, sent
    return scope["route"]


def test_the_lane_sets_the_route_fastapi_sets():
    """Whoever reads ``scope["route"]`` (the request metrics, the JSON log) gets the same
    object from the lane as from FastAPI's router."""
    with started_apps(store="memory") as build:
        client = build()
        create_model(client, n_features=2)
        app = client.app
        lane = app.lane_routes  # type: ignore[attr-defined]
        score = b'{"events": [{"x": [1, 2]}]}'
        requests = (("GET", "/healthz", b""), ("POST", "/v1/models/m/score", score))
        by_lane = [_routed(client, *request) for request in requests]
        app.lane_routes = []  # type: ignore[attr-defined]
        try:
            by_fastapi = [_routed(client, *request) for request in requests]
        finally:
            app.lane_routes = lane  # type: ignore[attr-defined]
        for laned, routed in zip(by_lane, by_fastapi, strict=True):
            assert laned is routed


def test_a_route_without_parameters_is_found_by_its_path():
    """``/healthz`` is matched by a lookup of its method and path (under a ``root_path`` too);
    the lookup follows the list of lane routes when it is replaced."""
    with started_apps(store="memory") as build:
        app = build().app

        def taken(method: str, path: str, root_path: str = "") -> str | None:
            scope = {"type": "http", "method": method, "path": path, "root_path": root_path}
            route = app.lane_route(scope)  # type: ignore[attr-defined]
            return None if route is None else route.route.path

        assert taken("GET", "/healthz") == "/healthz"
        assert taken("GET", "/api/healthz", root_path="/api") == "/healthz"
        assert taken("GET", "/v1/models/healthz/score") is None
        for method, path in (("POST", "/healthz"), ("GET", "/healthz/"), ("GET", "/Healthz")):
            assert taken(method, path) is None, (method, path)
        lane = app.lane_routes  # type: ignore[attr-defined]
        app.lane_routes = [route for route in lane if route.fixed_path is None]  # type: ignore[attr-defined]
        try:
            assert taken("GET", "/healthz") is None
            assert taken("POST", "/v1/models/m/score") == "/v1/models/{model_id}/score"
        finally:
            app.lane_routes = lane  # type: ignore[attr-defined]
        assert taken("GET", "/healthz") == "/healthz"


def test_every_healthz_is_counted_and_timed():
    with started_apps(store="memory") as build:
        client = build()
        for _ in range(5):
            assert client.get("/healthz").status_code == 200
        assert client.head("/healthz").status_code == 200
        text = client.get("/metrics").text
        labels = {"route": "/healthz", "status": "200", "model": ""}
        assert sample(text, "aucstream_http_requests_total", method="GET", **labels) == 5.0
        assert sample(text, "aucstream_http_requests_total", method="HEAD", **labels) == 1.0
        timed = sample(
            text, "aucstream_http_request_duration_seconds_count", method="GET", route="/healthz"
        )
        assert timed == 5.0


def test_request_timing_lands_in_the_buckets_observe_would_choose():
    """``Telemetry.count_request`` adds to the histogram's values directly: the same samples as
    prometheus_client's ``observe``, bounds included."""
    telemetry = Telemetry()
    reference = Histogram("reference", "", ["method", "route"], buckets=_LATENCY_BOUNDS[:-1],
                          registry=CollectorRegistry())  # fmt: skip
    seconds = (0.0, 0.0004, 0.0005, 0.00051, 0.001, 0.3, 1, 5.0, 5.0001, 100.0)
    for value in seconds:
        telemetry.count_request("GET", "/healthz", 200, "", value)
        reference.labels("GET", "/healthz").observe(value)
    counted = {
        (sample.name.removeprefix("aucstream_http_request_duration_seconds"),
         sample.labels.get("le")): sample.value
        for metric in telemetry.registry.collect()
        if metric.name == "aucstream_http_request_duration_seconds"
        for sample in metric.samples
        if not sample.name.endswith("_created")
    }  # fmt: skip
    observed = {
        (sample.name.removeprefix("reference"), sample.labels.get("le")): sample.value
        for metric in reference.collect()
        for sample in metric.samples
        if not sample.name.endswith("_created")
    }
    assert counted == observed and counted[("_count", None)] == len(seconds)
    requests = telemetry.registry.get_sample_value(
        "aucstream_http_requests_total",
        {"method": "GET", "route": "/healthz", "status": "200", "model": ""},
    )
    assert requests == len(seconds)
