"""The lane of ``POST .../events``, ``POST .../score`` and ``GET /healthz``
(``service.fastlane``): the same answers, problems, metrics and 500s as through FastAPI's stack;
every other request still goes through FastAPI."""

from __future__ import annotations

import pytest
from fastapi.responses import Response
from fastapi.testclient import TestClient

from service.app import create_app
from service.schemas import LabelsResponse, LearnResponse, ScoreResponse
from service.settings import Settings
from tests.service.conftest import create_model, started_apps
from tests.service.exposition_helpers import sample


@pytest.fixture
def memory_client():
    with started_apps(store="memory") as build:
        yield build()


def test_lane_takes_the_marked_routes_only(memory_client):
    client = memory_client
    create_model(client, n_features=2)
    app = client.app

    def takes(method: str, path: str, root_path: str = "") -> bool:
        scope = {"type": "http", "method": method, "path": path, "root_path": root_path}
        return app.lane_route(scope) is not None  # type: ignore[attr-defined]

    assert takes("POST", "/v1/models/m/score") and takes("POST", "/v1/models/m/events")
    assert takes("POST", "/api/v1/models/m/score", root_path="/api")
    assert takes("GET", "/healthz") and takes("POST", "/v1/models/m/labels")
    for method, path in (
        ("GET", "/readyz"),
        ("POST", "/healthz"),
        ("GET", "/v1/models/m/score"),
        ("POST", "/v1/models/m/score/"),
        ("POST", "/v1/models/a/b/score"),
        ("POST", "/v1/models//score"),
        ("POST", "/v2/models/m/score"),
    ):
        assert not takes(method, path), (method, path)
    # what the lane leaves goes through FastAPI as before
    assert client.get("/v1/models/m/score").status_code == 405
    assert client.get("/v1/models/m/score").headers["allow"] == "POST, OPTIONS"
    assert client.post("/v1/models/a/b/score", json={}).status_code == 404
    assert client.get("/v1/models/m/weights").status_code == 200


def test_lane_bodies_are_what_the_response_models_write(memory_client):
    """The routes write their bodies with orjson: the same bytes as the documented models."""
    client = memory_client
    create_model(client, n_features=3)
    event = {"id": "a", "x": [0.1, -2.5e-7, 3e20], "y": 1}
    for response, model in (
        (client.post("/v1/models/m/events?scores=true", json={"events": [event]}), LearnResponse),
        # a duplicate: learned nothing, its score is null
        (client.post("/v1/models/m/events?scores=true", json={"events": [event]}), LearnResponse),
        (
            client.post("/v1/models/m/events", json={"events": [{**event, "id": "b"}]}),
            LearnResponse,
        ),
        (
            client.post("/v1/models/m/score", json={"events": [event, {"x": [1, 2, 3]}]}),
            ScoreResponse,
        ),
        (
            client.post(
                "/v1/models/m/score?probabilities=true&keep=false",
                json={"events": [event, {"x": [1, 2, 3]}]},
            ),
            ScoreResponse,
        ),
        (
            client.post("/v1/models/m/labels", json=[{"id": "a", "y": 1}, {"id": "c", "y": 0}]),
            LabelsResponse,
        ),
    ):
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        assert (
            response.content
            == model.model_validate_json(response.content).model_dump_json().encode()
        )
    assert client.post("/v1/models/m/events?scores=true", json={"events": [event]}).json()[
        "scores"
    ] == [None]


def test_lane_problems_and_errors_are_answered_and_counted():
    with started_apps(store="memory") as build:
        client = build()
        create_model(client, n_features=2)
        bad = client.post("/v1/models/m/score", json={"events": [{"x": [1]}]})
        assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
        missing = client.post("/v1/models/nope/events", json={"events": [{"x": [1, 2], "y": 1}]})
        assert missing.status_code == 404 and missing.json()["field"] == "model_id"
        text = client.get("/metrics").text
        assert sample(text, "aucstream_requests_rejected_total", problem="invalid-input") == 1.0
        assert sample(text, "aucstream_requests_rejected_total", problem="model-not-found") == 1.0
        route = "/v1/models/{model_id}/score"
        assert sample(text, "aucstream_http_requests_total", route=route, status="422") == 1.0

    # an unexpected exception: Starlette's 500 page (the server logs the traceback), counted
    app = create_app(Settings(store="memory", warmup=False))
    with TestClient(app, raise_server_exceptions=False) as client:
        create_model(client, n_features=2)

        def broken(*args, **kwargs):
            raise RuntimeError("boom")

        app.state.engine.score = broken
        failed = client.post("/v1/models/m/score", json={"events": [{"x": [1, 2]}]})
        assert failed.status_code == 500 and failed.text == "Internal Server Error"
        text = client.get("/metrics").text
        route = "/v1/models/{model_id}/score"
        assert sample(text, "aucstream_http_requests_total", route=route, status="500") == 1.0


def test_request_metrics_of_a_deleted_then_recreated_model(memory_client):
    """The metrics' children are kept between requests (``Telemetry.child``): the ones of a
    deleted model go with it, and a model created again under its id counts afresh."""
    client = memory_client
    for round_ in range(2):
        create_model(client, n_features=2)
        for _ in range(3):
            assert (
                client.post("/v1/models/m/score", json={"events": [{"x": [1, 2]}]}).status_code
                == 200
            )
        text = client.get("/metrics").text
        assert sample(text, "aucstream_events_scored_total", model="m") == 3.0, round_
        route = "/v1/models/{model_id}/score"
        assert sample(text, "aucstream_http_requests_total", route=route, model="m") == 3.0
        assert client.delete("/v1/models/m").status_code == 204
        assert 'model="m"' not in client.get("/metrics").text


def test_every_documented_query_parameter_of_the_lane_is_read(memory_client):
    """The lane reads the routes' one declaration: each query parameter the OpenAPI document
    lists for a lane route is parsed (a bad value is its own 422), none keeps its default
    silently."""
    client = memory_client
    create_model(client, n_features=2)
    paths = client.get("/openapi.json").json()["paths"]
    checked = set()
    for route in client.app.lane_routes:  # type: ignore[attr-defined]
        path = route.route.path
        for method in route.methods:
            operation = paths[path][method.lower()]
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "query":
                    continue
                name = parameter["name"]
                url = path.replace("{model_id}", "m") + f"?{name}=not-a-value"
                response = client.request(method, url, json={"events": [{"x": [1, 2], "y": 1}]})
                assert response.status_code == 422, (path, name, response.text)
                assert response.json()["field"] == f"query.{name}", (path, name)
                checked.add((path, name))
    assert {name for _, name in checked} == {
        "scores",
        "zero_based",
        "keep",
        "probabilities",
        "reasons",
    }
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0


def test_every_documented_parameter_of_the_event_routes_reaches_the_handler(memory_client):
    """``POST .../events`` and ``.../score`` are declared once: each parameter their OpenAPI
    operation lists, sent with a value other than its default, is the value the handler gets
    (a parameter the document lists and the server dropped would arrive as its default)."""
    client = memory_client
    create_model(client, n_features=2)
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    received: list[dict] = []

    async def recorder(**arguments):
        received.append(arguments)
        return Response(b"{}", media_type="application/json")

    routes = {
        route.route.path: route
        for route in client.app.lane_routes  # type: ignore[attr-defined]
        if route.route.path.endswith(("/events", "/score"))
    }
    assert set(routes) == {"/v1/models/{model_id}/events", "/v1/models/{model_id}/score"}
    documented = {}
    for path, route in routes.items():
        route.endpoint = recorder
        parameters = paths[path]["post"]["parameters"]
        assert {p["name"] for p in parameters if p["in"] == "path"} == {"model_id"}
        for parameter in parameters:
            if parameter["in"] != "query":
                continue
            name, schema = parameter["name"], parameter["schema"]
            sent: bool | int = (
                not schema["default"]
                if schema["type"] == "boolean"
                else min(schema["default"] + 1, schema.get("maximum", 10**9))
            )
            url = path.replace("{model_id}", "m") + f"?{name}={str(sent).lower()}"
            received.clear()
            assert client.post(url, content=b"").status_code == 200, (path, name)
            assert received[0]["model_id"] == "m"
            assert received[0][name] == sent and received[0][name] != schema["default"], name
            documented.setdefault(path, set()).add(name)
    assert documented == {
        "/v1/models/{model_id}/events": {"scores", "zero_based"},
        "/v1/models/{model_id}/score": {"keep", "zero_based", "probabilities", "reasons"},
    }
