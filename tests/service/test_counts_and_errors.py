"""Counts that add up and errors that say what is wrong."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tests.service.clock_helpers import FixedClock
from tests.service.conftest import create_model, events_json, make_stream

LIBSVM = {"content-type": "text/x-libsvm"}
NDJSON = {"content-type": "application/x-ndjson"}


def _version(client, model="m") -> int:
    return client.get(f"/v1/models/{model}").json()["version"]


# ---------------------------------------------------------------------- counts
def test_duplicate_labels_reach_the_duplicates_count(client):
    """A label for an event already learned, or repeated in one request, is a duplicate in
    the response and in ``counts.duplicates`` (when the request learned anything), as a
    repeated event is."""
    create_model(client, n_features=5)
    X, y = make_stream(6)
    ids = [f"s{i}" for i in range(6)]
    client.post("/v1/models/m/score", json=events_json(X, ids=ids))
    first = client.post("/v1/models/m/labels", json=[{"id": "s0", "y": 1}, {"id": "s1", "y": 0}])
    assert first.json()["learned"] == 2
    again = client.post(
        "/v1/models/m/labels",
        json=[{"id": "s0", "y": 1}, {"id": "s2", "y": 1}, {"id": "s2", "y": 1}],
    ).json()
    assert [r["status"] for r in again["results"]] == ["duplicate", "learned", "duplicate"]
    mixed = events_json(X[:2], y[:2], ids=["s1", "new"])  # 1 more duplicate, 1 learned
    assert client.post("/v1/models/m/events", json=mixed).json()["duplicates"] == 1
    counts = client.get("/v1/models/m/metrics").json()["counts"]
    assert counts["duplicates"] == 3 and counts["labels_joined"] == 3
    assert counts["events_learned"] == 4
    # a request of nothing but duplicates (a retry) changes nothing: no commit, no count
    version = _version(client)
    only_duplicates = client.post("/v1/models/m/labels", json=[{"id": "s1", "y": 0}]).json()
    assert only_duplicates["learned"] == 0
    assert only_duplicates["results"][0]["status"] == "duplicate"
    retried = client.post("/v1/models/m/events", json=mixed).json()
    assert retried["duplicates"] == 2 and retried["version"] == version
    assert client.get("/v1/models/m/metrics").json()["counts"]["duplicates"] == 3
    assert _version(client) == version


@pytest.mark.parametrize("default_label", [0, None])
def test_a_timed_out_label_is_counted_once(client, default_label):
    """``labels_defaulted``: learned with the default label; ``labels_expired``: forgotten
    (no default label, or the event was learned meanwhile).  Disjoint."""
    clock = FixedClock()
    engine = client.app.state.engine
    engine.clock = clock
    create_model(client, n_features=5, label_ttl_seconds=30, default_label=default_label)
    X, y = make_stream(6, seed=5)
    ids = [f"t{i}" for i in range(6)]
    client.post("/v1/models/m/score", json=events_json(X, ids=ids))
    client.post("/v1/models/m/labels", json=[{"id": "t0", "y": 1}])  # joined in time
    client.post("/v1/models/m/events", json=events_json(X[1:2], y[1:2], ids=["t1"]))
    clock.now += 31
    assert engine.sweep_all() == 5  # t1 .. t5 timed out
    counts = client.get("/v1/models/m/metrics").json()["counts"]
    defaulted = 4 if default_label is not None else 0  # t1 was learned by /events
    assert counts["labels_defaulted"] == defaulted
    assert counts["labels_expired"] == 5 - defaulted
    assert counts["events_learned"] == 2 + defaulted
    assert counts["labels_joined"] == 1


# ---------------------------------------------------------------------- POST /v1/models
@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_model_creation_refuses_bad_json_and_other_media_types_like_events(make_client):
    client = make_client()
    broken = client.post(
        "/v1/models",
        content=b'{"id": "m", "n_features": 3',
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 400, broken.text
    problem = broken.json()
    assert problem["title"] == "Malformed request body" and "field" not in problem
    assert "not valid JSON" in problem["detail"]
    assert broken.headers["content-type"] == "application/problem+json"
    nan = client.post(
        "/v1/models",
        content=b'{"id": "m", "n_features": 3, "pauc_range": [NaN, 0.1]}',
        headers={"content-type": "application/json"},
    )
    assert nan.status_code == 400 and "NaN at character" in nan.json()["detail"]
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"content-type": content_type} if content_type else {}
        refused = client.post(
            "/v1/models", content=b'{"id": "m", "n_features": 3}', headers=headers
        )
        assert refused.status_code == 415, (content_type, refused.text)
        assert refused.json()["field"] == "content-type"
    assert client.get("/v1/models").json()["models"] == []
    for body, field in (
        ({"id": "m", "n_features": "3"}, "n_features"),  # numbers are numbers
        ({"id": "m", "n_features": 3, "default_label": False}, "default_label"),
        ({"id": "m", "n_features": 3, "pauc_range": ["0", "0.1"]}, "pauc_range.0"),
        (
            {"id": "m", "n_features": 3, "learner": "pmb", "params": {"passes": True}},
            "params.passes",
        ),
    ):
        invalid = client.post("/v1/models", json=body)
        assert invalid.status_code == 422 and invalid.json()["field"] == field, invalid.text


# ---------------------------------------------------------------------- LIBSVM numbering
@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_libsvm_errors_number_lines_and_features_as_the_file_does(make_client):
    client = make_client()
    create_model(client, n_features=3)
    for body, query, line, words in (
        (b"1 1:1 3:1\n\n0 4:1.0\n", "", 3, "feature index 4 is outside [1, 3]"),
        (b"1 0:1\n", "", 1, "feature index 0 is outside [1, 3]"),
        (b"0 1:1\n1 2:1 3:1 2:5\n", "", 2, "feature index 2 is repeated"),
        (b"1 1:1 2:nan\n", "", 1, "feature 2 is missing (NaN)"),
        (b"1 3:1\n", "?zero_based=true", 1, "feature index 3 is outside [0, 2]"),
        (b"1 0:1 0:2\n", "?zero_based=true", 1, "feature index 0 is repeated"),
    ):
        response = client.post(f"/v1/models/m/events{query}", content=body, headers=LIBSVM)
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["line"] == line and words in problem["detail"], problem
        assert problem["detail"].startswith(f"line {line}: ")
    assert (
        "?zero_based=true"
        in client.post("/v1/models/m/events", content=b"1 0:1\n", headers=LIBSVM).json()["detail"]
    )
    assert _version(client) == 1


# ---------------------------------------------------------------------- JSON messages
@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"nan"])
def test_python_non_finite_literals_get_their_own_message(make_client, literal):
    client = make_client()
    create_model(client, n_features=2)
    body = b'{"events": [{"x": [1.0, ' + literal + b'], "y": 1}]}'
    response = client.post(
        "/v1/models/m/events", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert f"{literal.decode()} at character" in detail and "json.dumps" in detail
    lines = b'{"x": [1, 2], "y": 1}\n{"x": [' + literal + b', 2], "y": 0}\n'
    response = client.post("/v1/models/m/events", content=lines, headers=NDJSON)
    assert response.status_code == 400 and response.json()["line"] == 2
    assert response.json()["detail"].startswith(
        f"line 2: body is not valid JSON: {literal.decode()}"
    )
    assert _version(client) == 1


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_a_huge_id_is_not_echoed(make_client):
    client = make_client()
    create_model(client, n_features=2)
    huge = "i" * 100_000
    for body in (
        {"events": [{"id": huge, "x": [1, 2], "y": 1}]},
        {"events": [{"id": "ok", "x": [1, 2], "y": 1, huge: 1}]},
    ):
        response = client.post("/v1/models/m/events", json=body)
        assert response.status_code == 422 and len(response.content) < 1_000, response.text[:300]
        assert "(100,000 characters)" in response.text
    labels = client.post("/v1/models/m/labels", json=[{"id": huge, "y": 1}])
    assert labels.status_code == 422 and len(labels.content) < 1_000


# ---------------------------------------------------------------------- strict events
def _bodies(events: list[dict]) -> list[tuple[bytes, str]]:
    """``events`` as a small JSON body, a large one (>= 4 KB: the dense fast path) and
    NDJSON; the bad event is the last."""
    padding = [{"x": [0.5, 1.5], "y": 1, "id": f"p{i}"} for i in range(200)]
    return [
        (orjson.dumps({"events": events}), "application/json"),
        (orjson.dumps({"events": padding + events}), "application/json"),
        (b"\n".join(orjson.dumps(event) for event in events), "application/x-ndjson"),
    ]


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_unknown_keys_are_refused_naming_the_key(make_client):
    client = make_client()
    create_model(client, n_features=2)
    for route in ("events", "score"):
        for body, content_type in _bodies([{"x": [1, 2], "y": 1, "weight": 3}]):
            response = client.post(
                f"/v1/models/m/{route}", content=body, headers={"content-type": content_type}
            )
            assert response.status_code == 422, (route, content_type, response.text)
            problem = response.json()
            assert problem["field"] == "weight" and "unknown key 'weight'" in problem["detail"]
    top = client.post("/v1/models/m/events", json={"events": [{"x": [1, 2], "y": 1}], "model": "m"})
    assert top.status_code == 422 and top.json()["field"] == "model"
    label = client.post("/v1/models/m/labels", json={"labels": [{"id": "a", "y": 1, "ts": 5}]})
    assert label.status_code == 422 and label.json()["field"] == "ts"
    create_model(client, "s", n_features=4, feature_mode="sparse")
    sparse = {"x": {"indices": [0], "values": [1.0], "shape": 4}, "y": 1}
    assert client.post("/v1/models/s/events", json={"events": [sparse]}).status_code == 422
    assert _version(client) == 1 and _version(client, "s") == 1


@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_a_number_in_a_string_is_not_a_feature(make_client):
    client = make_client()
    create_model(client, n_features=2)
    for route in ("events", "score"):
        for body, content_type in _bodies([{"x": [1, "1.5"], "y": 1}]):
            response = client.post(
                f"/v1/models/m/{route}", content=body, headers={"content-type": content_type}
            )
            assert response.status_code == 422, (route, content_type, response.text)
            assert "got '1.5'" in response.json()["detail"]
    create_model(client, "s", n_features=4, feature_mode="sparse")
    sparse = {"x": {"indices": [0, 2], "values": [1.0, "1.5"]}, "y": 1}
    response = client.post("/v1/models/s/events", json={"events": [sparse]})
    assert response.status_code == 422 and response.json()["field"] == "x"
    assert _version(client) == 1 and _version(client, "s") == 1
    # a string stays a category for a hashed model (one-hot "name=value")
    create_model(client, "h", n_features=64, feature_mode="hashed")
    named = {"x": {"amount": 1.5, "country": "FR"}, "y": 1}
    assert client.post("/v1/models/h/events", json={"events": [named]}).status_code == 200
    assert np.isfinite(
        client.post("/v1/models/h/score", json={"events": [named]}).json()["scores"]
    ).all()


def test_problem_types_are_pinned():
    """A problem's ``type`` (and the rejection counters' label) comes from its error class's
    name: renaming a class must fail here, not silently change the API."""
    from service.body_guard import ClientClosedRequest, RequestTimeout
    from service.errors import ServiceError

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    problems = {cls.slug: cls.status for cls in subclasses(ServiceError)}
    assert {ClientClosedRequest.slug, RequestTimeout.slug} <= problems.keys()
    assert problems == {
        "malformed-body": 400, "invalid-input": 422, "unauthorized": 401, "forbidden": 403,
        "model-not-found": 404, "model-exists": 409, "model-changed": 409,
        "payload-too-large": 413, "queue-full": 429, "too-many-streams": 429,
        "insufficient-storage": 507, "unsupported-media-type": 415, "store-unavailable": 503,
        "replicas-unconfirmed": 503, "store-lost-data": 503, "store-replaced": 503,
        "streams-full": 503,
        "warming-up": 503, "contention": 503, "corrupt-state": 500, "request-timeout": 408,
        "client-closed-request": 499, "host-not-allowed": 400, "request-head-too-large": 431,
    }  # fmt: skip
