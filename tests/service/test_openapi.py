"""The OpenAPI document says what the app does: problem+json errors, every request body with
examples that work, learner params generated from the learners' declarations, security
schemes, typed metrics, and ``Allow`` / ``OPTIONS`` that list every method of a path."""

from __future__ import annotations

import inspect

import pytest
from pydantic import BaseModel

from core.learners import available_learners, learner_class
from service.metrics_schema import MetricsResponse
from service.openapi import PROBLEM_MEDIA_TYPE
from tests.service.conftest import create_model, events_json, make_stream

EVENT_TYPES = {"application/json", "application/x-ndjson", "text/x-libsvm", "application/x-npz"}


@pytest.fixture
def document(make_client) -> dict:
    return make_client().get("/openapi.json").json()


def _operations(document: dict):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield path, method, operation


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_every_error_is_a_documented_problem(document):
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert set(schemas["Problem"]["required"]) == {"type", "title", "status", "detail"}
    for path, method, operation in _operations(document):
        for status, response in operation["responses"].items():
            if int(status) >= 400 and path != "/readyz":  # a probe's 503 is its JSON report
                content = response["content"]
                assert list(content) == [PROBLEM_MEDIA_TYPE], (path, method, status)
                assert content[PROBLEM_MEDIA_TYPE]["schema"]["$ref"].endswith("/Problem")
        if path.startswith("/v1/"):
            assert {"401", "503"} <= set(operation["responses"]), (path, method)
            if "{model_id}" in path:
                assert "404" in operation["responses"], (path, method)
            if method != "get":
                assert "403" in operation["responses"], (path, method)
    statuses = {
        ("/v1/models", "post"): {"201", "400", "409", "415", "422", "507"},
        ("/v1/models/{model_id}/events", "post"): {"200", "202", "400", "413", "415", "429"},
        ("/v1/models/{model_id}/score", "post"): {"200", "400", "413", "415", "422", "507"},
        ("/v1/models/{model_id}/labels", "post"): {"200", "202", "400", "415", "422", "429"},
        ("/v1/models/{model_id}/snapshot", "put"): {"201", "400", "409", "413", "415", "507"},
    }
    for (path, method), expected in statuses.items():
        assert expected <= set(document["paths"][path][method]["responses"]), (path, method)


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_every_request_body_is_documented(document):
    paths = document["paths"]
    for path in ("/v1/models/{model_id}/events", "/v1/models/{model_id}/score"):
        content = paths[path]["post"]["requestBody"]["content"]
        assert set(content) == EVENT_TYPES
        for media_type, entry in content.items():
            assert entry["schema"], (path, media_type)
            if media_type != "application/x-npz":  # binary: described, no example
                assert entry["example"], (path, media_type)
    labels = paths["/v1/models/{model_id}/labels"]["post"]["requestBody"]["content"]
    assert labels["application/json"]["example"]["labels"]
    snapshot = paths["/v1/models/{model_id}/snapshot"]["put"]["requestBody"]["content"]
    assert snapshot["application/zip"]["schema"]["format"] == "binary"
    event = document["components"]["schemas"]["Event"]
    assert event["required"] == ["x", "y"] and event["additionalProperties"] is False
    metrics = paths["/v1/models/{model_id}/metrics"]["get"]["responses"]["200"]["content"]
    assert metrics["application/json"]["schema"]["$ref"].endswith("/MetricsResponse")


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_the_documented_examples_work(make_client):
    """Each request example of the document, sent as it is, is accepted."""
    client = make_client()
    paths = client.get("/openapi.json").json()["paths"]
    create = paths["/v1/models"]["post"]["requestBody"]["content"]["application/json"]
    assert client.post("/v1/models", json=create["example"]).status_code == 201
    model = create["example"]["id"]
    for path in ("events", "score"):  # /score keeps tx-3 and tx-4 for the labels example
        content = paths[f"/v1/models/{{model_id}}/{path}"]["post"]["requestBody"]["content"]
        for media_type in ("application/json", "application/x-ndjson", "text/x-libsvm"):
            example = content[media_type]["example"]
            response = client.post(
                f"/v1/models/{model}/{path}",
                **(
                    {"json": example}
                    if media_type == "application/json"
                    else {"content": example.encode(), "headers": {"content-type": media_type}}
                ),
            )
            assert response.status_code == 200, (path, media_type, response.text)
    assert client.get(f"/v1/models/{model}").json()["counts"]["events_learned"] == 2
    labels = paths["/v1/models/{model_id}/labels"]["post"]["requestBody"]["content"]
    results = client.post(f"/v1/models/{model}/labels", json=labels["application/json"]["example"])
    assert [r["status"] for r in results.json()["results"]] == ["learned", "learned"]


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_learner_params_are_generated_from_the_declarations(make_client):
    """One ModelCreate variant per online learner (``GET /v1/learners``), whose ``params``
    schema has exactly the learner's declared parameters (``scaling`` is a model field), and
    whose defaults, sent back, create the model."""
    client = make_client()
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    body = document["paths"]["/v1/models"]["post"]["requestBody"]["content"]["application/json"]
    listed = client.get("/v1/learners").json()["learners"]
    variants = {ref["$ref"].rsplit("/", 1)[1] for ref in body["schema"]["oneOf"]}
    assert variants == {f"ModelCreate_{name}" for name in listed}
    assert set(listed) < set(available_learners())  # a batch solver is not offered
    for name in listed:
        variant = schemas[f"ModelCreate_{name}"]
        assert variant["properties"]["learner"]["const"] == name
        assert ("learner" in variant["required"]) == (name != "auto")
        params = schemas[variant["properties"]["params"]["$ref"].rsplit("/", 1)[1]]
        declared = learner_class(name)._parameter_constraints
        assert set(params["properties"]) == set(declared) - {"scaling"}
        assert params["additionalProperties"] is False
        defaults = {
            key: value["default"]
            for key, value in params["properties"].items()
            if "default" in value
        }
        signature = inspect.signature(learner_class(name).__init__).parameters
        for key, value in defaults.items():
            assert signature[key].default == value, (name, key)
        created = client.post(
            "/v1/models", json={"id": name, "n_features": 4, "learner": name, "params": defaults}
        )
        assert created.status_code == 201, (name, created.text)
    eta0 = schemas["Params_spam"]["properties"]["eta0"]
    assert eta0 == {"type": "number", "exclusiveMinimum": 0, "default": 8.0}
    assert schemas["Params_spam"]["properties"]["penalty"]["enum"] == ["l2", "elastic_net"]
    assert schemas["Params_spam"]["properties"]["random_state"]["anyOf"][-1] == {"type": "null"}


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_security_schemes_follow_the_settings(make_client):
    open_document = make_client().get("/openapi.json").json()
    keyed = make_client(api_keys=["k-0123456789abcdef"]).get("/openapi.json").json()
    for document in (open_document, keyed):
        schemes = document["components"]["securitySchemes"]
        assert schemes["ApiKey"] == {"type": "apiKey", "in": "header", "name": "X-API-Key"}
        assert schemes["Bearer"]["scheme"] == "bearer"
        assert "security" not in document["paths"]["/healthz"]["get"]
    assert {} in open_document["paths"]["/v1/models"]["get"]["security"]  # keys optional
    assert keyed["paths"]["/v1/models"]["get"]["security"] == [{"ApiKey": []}, {"Bearer": []}]


def _assert_declared(model: type[BaseModel], data: dict, where: str = "metrics") -> None:
    """Every key of ``data`` is a field of ``model`` (recursively), and the values validate."""
    assert set(data) <= set(model.model_fields), (where, set(data) - set(model.model_fields))
    model.model_validate(data)
    for name, value in data.items():
        annotation = model.model_fields[name].annotation
        nested = [
            kind
            for kind in getattr(annotation, "__args__", (annotation,))
            if isinstance(kind, type) and issubclass(kind, BaseModel)
        ]
        if nested and isinstance(value, dict):
            _assert_declared(nested[0], value, f"{where}.{name}")


def test_metrics_are_what_the_typed_response_declares(client):
    """An ``auto`` model (leaderboard) with regret: every key the report sends is declared,
    and the declared required fields are all there."""
    client.post("/v1/models", json={"id": "m", "n_features": 5, "regret_window": 200})
    X, y = make_stream(400, seed=2)
    for start in range(0, 400, 100):
        client.post(
            "/v1/models/m/events", json=events_json(X[start : start + 100], y[start : start + 100])
        )
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["regret"] is not None and "leaderboard" in metrics
    _assert_declared(MetricsResponse, metrics)
    create_model(client, "plain", n_features=5, regret_window=0)
    plain = client.get("/v1/models/plain/metrics").json()
    assert plain["regret"] is None and plain["regret_reason"]
    _assert_declared(MetricsResponse, plain)


def test_queue_mode_metrics_are_declared_too(make_app):
    client = make_app("queue")
    create_model(client, n_features=5)
    X, y = make_stream(10)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 202
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["queue"]["events"] == 10
    _assert_declared(MetricsResponse, metrics)


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_options_and_405_list_every_method_of_the_path(make_client):
    client = make_client()
    for path, allow in (
        ("/v1/models", "GET, HEAD, POST, OPTIONS"),
        ("/v1/models/m", "GET, HEAD, DELETE, OPTIONS"),
        ("/v1/models/m/snapshot", "GET, HEAD, PUT, OPTIONS"),
        ("/v1/models/m/events", "POST, OPTIONS"),
    ):
        options = client.options(path)
        assert options.status_code == 204 and options.headers["allow"] == allow, path
        refused = client.patch(path)
        assert refused.status_code == 405 and refused.headers["allow"] == allow, path
        assert refused.headers["content-type"] == PROBLEM_MEDIA_TYPE
    assert client.post("/healthz").headers["allow"] == "GET, HEAD, OPTIONS"
