"""Ids with ``{`` / ``}``: Redis keys carry the model id as a hash tag ``aucs:{<model>}:...``,
so braces in a model id must never reach a key name (404: no model can have such an id), and
event ids (zset members and hash fields, never key names) work as any other id."""

from __future__ import annotations

import pytest

from tests.service.conftest import create_model

BRACED = ["a{b}", "{x}", "}{", "m{", "m}"]


@pytest.mark.parametrize("model_id", BRACED)
def test_a_model_id_with_braces_is_not_found_on_every_route(client, model_id):
    event = {"events": [{"x": [1.0, 2.0], "y": 1}]}
    for method, suffix, body in (
        ("GET", "", None),
        ("DELETE", "", None),
        ("POST", "/reset", None),
        ("GET", "/metrics", None),
        ("GET", "/metrics/roc", None),
        ("GET", "/weights", None),
        ("GET", "/snapshot", None),
        ("POST", "/events", event),
        ("POST", "/score", event),
        ("POST", "/labels", [{"id": "e1", "y": 1}]),
    ):
        response = client.request(method, f"/v1/models/{model_id}{suffix}", json=body)
        assert response.status_code == 404, (method, suffix, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    refused = client.post("/v1/models", json={"id": model_id, "n_features": 2})
    assert refused.status_code == 422 and refused.json()["field"] == "id"


def test_event_ids_with_braces_are_learned_scored_and_labelled(client):
    create_model(client, n_features=2)
    learned = client.post(
        "/v1/models/m/events",
        json={"events": [{"id": "e{1}", "x": [1.0, 2.0], "y": 1},
                         {"id": "}{", "x": [0.0, 1.0], "y": 0}]},
    )  # fmt: skip
    assert learned.status_code == 200 and learned.json()["learned"] == 2
    again = client.post(
        "/v1/models/m/events", json={"events": [{"id": "e{1}", "x": [1.0, 2.0], "y": 1}]}
    )
    assert again.json()["duplicate_ids"] == ["e{1}"]
    scored = client.post("/v1/models/m/score", json={"events": [{"id": "{s}", "x": [1.0, 0.0]}]})
    assert scored.status_code == 200 and scored.json()["kept"] == 1
    labelled = client.post("/v1/models/m/labels", json=[{"id": "{s}", "y": 1}])
    assert labelled.status_code == 200
    assert labelled.json()["results"] == [{"id": "{s}", "status": "learned"}]
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 3
