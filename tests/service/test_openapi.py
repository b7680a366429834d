"""The OpenAPI document says what the app does: problem+json errors, every request body with
examples that work, learner params generated from the learners' declarations, security
schemes, typed metrics, and ``Allow`` / ``OPTIONS`` that list every method of a path."""

from __future__ import annotations

import inspect
import json

import jsonschema
import orjson
import pytest
from pydantic import BaseModel

from core.learners import available_learners, learner_class
from service.metrics_schema import MetricsResponse
from service.openapi import PROBLEM_MEDIA_TYPE
from tests.service.conftest import create_model, events_json, make_stream
from tests.service.exposition_helpers import sse_messages

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


# ---------------------------------------------------------------------- document == server
LIBSVM, NDJSON, JSON = "text/x-libsvm", "application/x-ndjson", "application/json"
_DENSE_EVENT = {"x": [1.0, 2.0, 3.0], "y": 1}
#: (route, content type, body, whether it is valid): on each, the document and the server
#: (a dense model of 3 features) agree; ``/labels`` on ids that were never scored, which the
#: server reports ``unknown`` (200)
AGREEMENT = [
    ("score", LIBSVM, "garbage\n", False),  # was scored as an event of zeros
    ("score", LIBSVM, "1:5 2:1\n", True),  # no label: 1:5 is a pair
    ("score", LIBSVM, "1 1:5 2:1 # tx-1\n", True),
    ("score", LIBSVM, "\u0084", False),  # Unicode whitespace
    ("events", LIBSVM, "1 1:5", True),  # the last line's newline is optional
    ("events", LIBSVM, "", False),
    ("events", LIBSVM, "\n# comment only\n", False),
    ("events", LIBSVM, "1 1:2:3 5\n", False),
    ("events", LIBSVM, "1 1.0:5\n", False),
    ("events", LIBSVM, "1 +1:5\n", False),
    ("events", LIBSVM, "1 1:1_0\n", False),
    ("events", LIBSVM, "1 1:\u0663\n", False),  # an Arabic-Indic digit
    ("events", LIBSVM, "1e0 1:5\n", False),
    ("events", LIBSVM, "+1 1:5e-3 3:.5\n-1 2:7.\n", True),
    ("events", LIBSVM, "1 1:5 # " + "a" * 257 + "\n", False),
    ("events", LIBSVM, "1 1:5 # " + "a" * 256 + "\n", True),
    ("events", NDJSON, "", False),
    ("events", JSON, {"events": [_DENSE_EVENT, {**_DENSE_EVENT, "y": 0}]}, True),
    ("events", JSON, {"events": [{**_DENSE_EVENT, "y": 0}, {**_DENSE_EVENT, "y": -1}]}, False),
    ("events", JSON, {"events": [{**_DENSE_EVENT, "y": False}, {**_DENSE_EVENT, "y": -1}]}, False),
    ("score", JSON, {"events": [{**_DENSE_EVENT, "y": "fraud"}]}, False),
    ("score", JSON, {"events": [{**_DENSE_EVENT, "y": None}]}, True),
    ("labels", JSON, [], False),
    ("labels", JSON, {"labels": []}, False),
    ("labels", JSON, [{"id": "a", "y": 0}, {"id": "b", "y": -1}], False),
    ("labels", JSON, [{"id": 162.0, "y": 1}], True),  # JSON's integer 162
    ("labels", JSON, [{"id": 2**64 - 1, "y": 1}, {"id": -(2**63), "y": 1}], True),
    ("labels", JSON, [{"id": 2**64, "y": 1}], False),
    ("labels", JSON, [{"id": -(2**63) - 1, "y": 1}], False),
    ("models", JSON, {"id": "f", "n_features": 1, "feature_names": []}, False),
    ("models", JSON, {"id": "f", "n_features": 1, "feature_names": [""]}, False),
    ("models", JSON, {"id": "f", "n_features": 1, "feature_names": ["a" * 129]}, False),
    ("models", JSON, {"id": "f", "n_features": 2, "feature_names": ["a", "a"]}, False),
    ("models", JSON, {"id": "f", "n_features": 2, "feature_names": ["a", "b"]}, True),
]


def _validator(document: dict, schema: dict) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "components": document["components"]})


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_the_document_is_exactly_as_strict_as_the_server(make_client):
    client = make_client()
    document = client.get("/openapi.json").json()
    create_model(client, "d", n_features=3)
    for route, media_type, body, valid in AGREEMENT:
        path = "/v1/models" if route == "models" else f"/v1/models/{{model_id}}/{route}"
        operation = document["paths"][path]["post"]
        schema = operation["requestBody"]["content"][media_type]["schema"]
        if media_type == NDJSON:
            lines = [line for line in body.splitlines() if line.strip()]
            instance = [orjson.loads(line) for line in lines]
        else:
            instance = body
        assert _validator(document, schema).is_valid(instance) is valid, (route, body)
        content = json.dumps(body).encode() if media_type == JSON else body.encode()
        response = client.post(
            path.replace("{model_id}", "d"), content=content, headers={"content-type": media_type}
        )
        assert response.is_success is valid, (route, body, response.text)
        if not valid:
            assert response.status_code in (400, 422), (route, body, response.text)
            assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
        if route == "models" and valid:
            assert client.delete("/v1/models/f").status_code == 204


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_a_label_less_libsvm_line_keeps_its_first_feature(make_client):
    """``/score`` takes LIBSVM lines without a label: ``1:5 2:1`` is two pairs (its first
    pair was taken for an unused label), scored as the same event in JSON."""
    client = make_client()
    create_model(client, "d", n_features=3)
    X, y = make_stream(200, n_features=3)
    client.post("/v1/models/d/events", json=events_json(X, y))
    as_json = client.post("/v1/models/d/score", json={"events": [{"x": [5.0, 1.0, 0.0]}]})
    for body in ("1:5 2:1\n", "1 1:5 2:1\n", "0 1:5 2:1"):
        as_text = client.post(
            "/v1/models/d/score", content=body.encode(), headers={"content-type": LIBSVM}
        )
        assert as_text.json()["scores"] == as_json.json()["scores"], body


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_the_metrics_stream_sends_what_the_document_declares(make_client):
    """Each message of a stream, ``metrics`` and the last ``deleted``, validates against the
    document's schema of the stream, its data against the message's content schema."""
    client = make_client()
    document = client.get("/openapi.json").json()
    stream = document["paths"]["/v1/models/{model_id}/metrics/stream"]["get"]
    schema = stream["responses"]["200"]["content"]["text/event-stream"]["schema"]
    create_model(client, n_features=5)
    with client.stream("GET", "/v1/models/m/metrics/stream?interval=0.1") as response:
        messages = sse_messages(response.iter_lines())
        received = [next(messages)]
        assert client.delete("/v1/models/m").status_code == 204
        received.extend(messages)
    assert [message["event"] for message in received] == ["metrics", "deleted"]
    for message in received:
        _validator(document, schema).validate(message)
        (variant,) = [
            variant
            for variant in schema["oneOf"]
            if variant["properties"]["event"]["const"] == message["event"]
        ]
        content_schema = variant["properties"]["data"]["contentSchema"]
        _validator(document, content_schema).validate(orjson.loads(message["data"]))
