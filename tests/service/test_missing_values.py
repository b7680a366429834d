"""A model's ``missing_values`` policy: ``refuse`` (the default: a 422 naming the event and the
feature, nothing learned) or ``zero`` (a missing value is read as 0), the same over JSON (small
and large bodies), NDJSON, NPZ, named features, sparse and hashed events, and the stream's JSON
messages."""

from __future__ import annotations

import httpx
import numpy as np
import orjson
import pytest

from tests.service.body_helpers import LINEAR, with_holes
from tests.service.conftest import create_model, events_json, npz_bytes
from tests.service.server_helpers import exchange, stream_socket, uvicorn_server


def _scores(client, model_id: str, X) -> list[float]:
    return client.post(f"/v1/models/{model_id}/score", json=events_json(X)).json()["scores"]


def test_missing_values_are_refused_by_default_naming_event_and_feature(client):
    create_model(client, **LINEAR)
    assert client.get("/v1/models/m").json()["config"]["missing_values"] == "refuse"
    body, _, _, holes = with_holes(40)
    response = client.post("/v1/models/m/events", json=body)
    assert response.status_code == 422
    problem = response.json()
    row, column = np.argwhere(holes)[0]
    assert problem["event"] == row and problem["field"] == "x"
    assert problem["detail"].startswith(f"event {row} (id 'e{row}'): feature {column} is missing")
    assert '"missing_values": "zero"' in problem["detail"]
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0


def test_a_refused_missing_value_is_named_by_its_feature_name_in_every_form(client):
    """A model with feature names names the missing feature by its name, whether the event
    gives ``x`` by name or as a list, and a NaN of NPZ (or of a CSR body) is reported as a
    missing value too, not as "NaN or infinity"."""
    names = ["amount", "n_items", "hour"]
    create_model(client, "named", n_features=3, feature_names=names, **LINEAR)
    create_model(client, "sparse", n_features=3, feature_names=names, feature_mode="sparse",
                 **LINEAR)  # fmt: skip
    create_model(client, "plain", n_features=3, **LINEAR)
    good = {"x": [1.0, 2.0, 3.0], "y": 1}
    npz = {"content-type": "application/x-npz"}
    with_nan = npz_bytes(X=np.array([[1.0, 2.0, 3.0], [4.0, np.nan, 6.0]]), y=np.array([1, 0]))
    sparse_nan = npz_bytes(indptr=np.array([0, 2]), indices=np.array([0, 2]),
                           data=np.array([1.0, np.nan]), y=np.array([1]))  # fmt: skip
    named_null = {"json": {"events": [good, {"x": {"amount": 1, "n_items": None, "hour": 3}}]}}
    listed_null = {"json": {"events": [good, {"x": [1, None, 3], "y": 0}]}}
    sparse_null = {"json": {"events": [{"x": {"indices": [0, 2], "values": [1.0, None]}}]}}
    sparse_named_null = {"json": {"events": [{"x": {"hour": None}, "y": 1}]}}
    cases = [
        ("named", named_null, "event 1: feature 'n_items' is missing (null)"),
        ("named", listed_null, "event 1: feature 'n_items' is missing (null)"),
        ("named", {"content": with_nan, "headers": npz}, "event 1: feature 'n_items' is missing"),
        ("plain", {"content": with_nan, "headers": npz}, "event 1: feature 1 is missing (NaN)"),
        ("sparse", sparse_null, "event 0: feature 'hour' is missing (null)"),
        ("sparse", sparse_named_null, "event 0: feature 'hour' is missing (null)"),
        ("sparse", {"content": sparse_nan, "headers": npz}, "event 0: feature 'hour' is missing"),
    ]
    for model_id, request, start in cases:
        for path in ("events", "score"):
            response = client.post(f"/v1/models/{model_id}/{path}", **request)
            assert response.status_code == 422, (model_id, path, response.text)
            detail = response.json()["detail"]
            assert detail.startswith(start), (model_id, path, detail)
            assert "missing_values 'refuse'" in detail, detail
    for model_id in ("named", "sparse", "plain"):
        assert client.get(f"/v1/models/{model_id}").json()["counts"]["events_learned"] == 0


@pytest.mark.parametrize("n_events", [3, 200], ids=["small-body", "fast-path-size"])
def test_zero_policy_learns_a_missing_value_as_0_over_json_and_ndjson(client, n_events):
    """Bit for bit what a model given the zeros learns, whatever the body's path."""
    body, zeros, y, _ = with_holes(n_events)
    for model_id in ("holes", "ndjson", "zeros"):
        create_model(client, model_id, missing_values="zero", **LINEAR)
    assert client.post("/v1/models/holes/events", json=body).json()["learned"] == n_events
    lines = b"\n".join(orjson.dumps(event) for event in body["events"])
    ndjson = client.post("/v1/models/ndjson/events", content=lines,
                         headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert ndjson.json()["learned"] == n_events
    client.post("/v1/models/zeros/events", json=events_json(zeros, y))
    expected = _scores(client, "zeros", zeros)
    assert _scores(client, "holes", zeros) == expected == _scores(client, "ndjson", zeros)
    # /score fills the same way
    scored = client.post(
        "/v1/models/holes/score", json={"events": [{"x": e["x"]} for e in body["events"]]}
    )
    assert scored.json()["scores"] == expected


def test_zero_policy_reads_nan_in_npz_as_0_but_refuses_infinity(client):
    create_model(client, "holes", missing_values="zero", **LINEAR)
    create_model(client, "zeros", **LINEAR)
    _, zeros, y, holes = with_holes(30)
    with_nan = np.where(holes, np.nan, zeros)
    headers = {"content-type": "application/x-npz"}
    sent = client.post(
        "/v1/models/holes/events", content=npz_bytes(X=with_nan, y=y), headers=headers
    )
    assert sent.status_code == 200 and sent.json()["learned"] == 30
    client.post("/v1/models/zeros/events", content=npz_bytes(X=zeros, y=y), headers=headers)
    assert _scores(client, "holes", zeros) == _scores(client, "zeros", zeros)
    infinite = with_nan.copy()
    infinite[4, 1] = np.inf
    refused = client.post("/v1/models/holes/events", content=npz_bytes(X=infinite, y=y),
                          headers=headers)  # fmt: skip
    assert refused.status_code == 422 and refused.json()["event"] == 4


def test_zero_policy_on_named_sparse_and_hashed_events(client):
    names = ["amount", "n_items", "hour"]
    create_model(
        client, "named", n_features=3, feature_names=names, missing_values="zero", **LINEAR
    )
    create_model(client, "named-zeros", n_features=3, **LINEAR)
    events = [
        {"x": {"amount": 12.5, "n_items": None, "hour": 3}, "y": 1},
        {"x": {"amount": 4.0, "hour": 22}, "y": 0},
    ]  # an absent name is missing too
    assert client.post("/v1/models/named/events", json={"events": events}).json()["learned"] == 2
    filled = [{"x": [12.5, 0, 3], "y": 1}, {"x": [4.0, 0, 22], "y": 0}]
    client.post("/v1/models/named-zeros/events", json={"events": filled})
    probe = np.array([[1.0, 2.0, 3.0]])
    assert _scores(client, "named", probe) == _scores(client, "named-zeros", probe)

    create_model(
        client, "sparse", n_features=4, feature_mode="sparse", missing_values="zero", **LINEAR
    )
    sparse = [{"x": {"indices": [0, 2], "values": [1.5, None]}, "y": 1}]
    assert client.post("/v1/models/sparse/events", json={"events": sparse}).json()["learned"] == 1
    create_model(client, "sparse-refuses", n_features=4, feature_mode="sparse", **LINEAR)
    refused = client.post("/v1/models/sparse-refuses/events", json={"events": sparse})
    assert refused.status_code == 422 and "is missing (null)" in refused.json()["detail"]

    for model_id, policy in (("hashed", "zero"), ("hashed-refuses", "refuse")):
        create_model(client, model_id, n_features=64, feature_mode="hashed",
                     missing_values=policy, **LINEAR)  # fmt: skip
    hashed = [{"x": {"amount": 3.0, "country": "FR", "age": None}, "y": 1},
              {"x": {"amount": 1.0, "country": None}, "y": 0}]  # fmt: skip
    assert client.post("/v1/models/hashed/events", json={"events": hashed}).json()["learned"] == 2
    refused = client.post("/v1/models/hashed-refuses/events", json={"events": hashed})
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("event 0: feature 'age' is missing (null)")


def test_a_bad_policy_is_refused_and_named(client):
    response = client.post(
        "/v1/models", json={"id": "m", "n_features": 2, "missing_values": "mean-ish"}
    )
    assert response.status_code == 422 and "missing_values" in response.json()["field"]
    schema = client.get("/openapi.json").json()["components"]["schemas"]["ModelCreate"]
    assert schema["properties"]["missing_values"]["enum"] == ["refuse", "zero", "mean"]


@pytest.fixture(scope="module")
def server():
    with uvicorn_server(AUCSTREAM_STORE="memory") as url:
        yield url


def test_stream_json_messages_follow_the_policy(server):
    body, zeros, y, _ = with_holes(20)
    with httpx.Client(base_url=server, timeout=60) as http:
        for model_id, policy in (("holes", "zero"), ("refuses", "refuse"), ("zeros", "zero")):
            model = {"id": model_id, "n_features": 5, "missing_values": policy, **LINEAR}
            created = http.post("/v1/models", json=model)
            assert created.status_code == 201, created.text
        http.post("/v1/models/zeros/events", json=events_json(zeros, y))
        message = orjson.dumps({"seq": 1, "op": "learn", "events": body["events"]}).decode()
        with stream_socket(server, "holes") as ws:
            [reply] = exchange(ws, message)
            assert reply.get("learned") == 20, reply
        with stream_socket(server, "refuses") as ws:
            [reply] = exchange(ws, message)
            assert (
                reply["problem"]["status"] == 422
                and "is missing (null)" in reply["problem"]["detail"]
            )
        probe = events_json(zeros)
        assert (http.post("/v1/models/holes/score", json=probe).json()["scores"]
                == http.post("/v1/models/zeros/score", json=probe).json()["scores"])  # fmt: skip


def test_zero_policy_reads_a_nan_libsvm_value_as_an_absent_pair(client):
    body = b"1 1:0.5 2:nan 3:1\n0 1:1 2:NaN 3:2\n1 2:-nan 1:3\n"
    expected = b"1 1:0.5 3:1\n0 1:1 3:2\n1 1:3\n"
    headers = {"content-type": "text/x-libsvm"}
    for model_id, policy in (("holes", "zero"), ("zeros", "zero"), ("refuses", "refuse")):
        create_model(client, model_id, n_features=3, missing_values=policy, **LINEAR)
    assert (
        client.post("/v1/models/holes/events", content=body, headers=headers).json()["learned"] == 3
    )
    client.post("/v1/models/zeros/events", content=expected, headers=headers)
    probe = np.array([[1.0, 2.0, 3.0]])
    assert _scores(client, "holes", probe) == _scores(client, "zeros", probe)
    refused = client.post("/v1/models/refuses/events", content=body, headers=headers)
    assert refused.status_code == 422 and "feature 2 is missing (NaN)" in refused.json()["detail"]
