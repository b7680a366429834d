"""``/score?reasons=k``: each event's k largest feature contributions (docs/algorithms/reasons.md)
over JSON and NDJSON, named or by column, for a linear learner (checked against the raw-space
weights of ``GET .../weights``) and the default ``auto``; bad ``k`` is a 422."""

from __future__ import annotations

import httpx
import numpy as np
import orjson
import pytest

from service.schemas import ScoreResponse
from tests.service.conftest import create_model, events_json, make_stream, started_apps
from tests.service.server_helpers import exchange, stream_socket, uvicorn_server

NAMES = ["amount", "age", "hour", "merchant_risk", "distance"]


@pytest.fixture(scope="module")
def memory_client():
    with started_apps(store="memory") as build:
        yield build()


def learned(client, model_id, **config):
    create_model(client, model_id, n_features=5, **config)
    X, y = make_stream(400, seed=4)
    X[:, 0] = 900.0 * X[:, 0] + 2500.0  # a raw amount: the scaler's reference matters
    response = client.post(f"/v1/models/{model_id}/events", json=events_json(X, y))
    assert response.status_code == 200, response.text
    return make_stream(12, seed=8)[0] * np.array([900.0, 1, 1, 1, 1]) + [2500.0, 0, 0, 0, 0]


def check_reasons(body, k, features):
    """Each event's reasons sum to its score, largest first, k of the model's features."""
    assert len(body["reasons"]) == len(body["scores"])
    for score, reasons in zip(body["scores"], body["reasons"], strict=True):
        contributions = [item["contribution"] for item in reasons["contributions"]]
        assert len(contributions) == k
        assert all(item["feature"] in features for item in reasons["contributions"])
        magnitudes = np.abs(contributions)
        assert np.all(magnitudes[:-1] >= magnitudes[1:])
        total = sum(contributions) + reasons["others"] + reasons["baseline"]
        assert total == pytest.approx(score, rel=1e-9, abs=1e-9)


def test_a_linear_models_reasons_are_its_raw_weights_times_x_minus_the_running_mean(
    memory_client,
):
    client = memory_client
    X = learned(client, "linear", learner="logistic", scaling="standard", feature_names=NAMES)
    response = client.post("/v1/models/linear/score?reasons=3", json=events_json(X))
    assert response.status_code == 200, response.text
    body = response.json()
    check_reasons(body, 3, NAMES)
    weights = client.get("/v1/models/linear/weights").json()
    raw_coef = np.array(weights["raw_coef"])
    # the reference (the running mean) is the same for every event: the baseline too, and
    # the differences between two events' contributions are the raw weights times theirs
    baseline = body["reasons"][0]["baseline"]
    assert all(r["baseline"] == pytest.approx(baseline, rel=1e-12) for r in body["reasons"])
    first, second = body["reasons"][0], body["reasons"][1]
    for j, name in enumerate(NAMES):
        got = [
            {i["feature"]: i["contribution"] for i in r["contributions"]}.get(name)
            for r in (first, second)
        ]
        if None not in got:
            expected = raw_coef[j] * (X[0, j] - X[1, j])
            assert got[0] - got[1] == pytest.approx(expected, rel=1e-9, abs=1e-9)


def ndjson_reasons(client, model: str, k: int, events: list[dict]) -> list:
    """The reasons ``/score?reasons=k`` gives ``events`` sent as NDJSON, one per line."""
    lines = b"\n".join(orjson.dumps(event) for event in events)
    response = client.post(
        f"/v1/models/{model}/score?reasons={k}",
        content=lines,
        headers={"content-type": "application/x-ndjson"},
    )
    assert response.status_code == 200, response.text
    return response.json()["reasons"]


def test_the_default_auto_explains_over_json_and_ndjson_with_names(memory_client):
    client = memory_client
    X = learned(client, "auto", learner="auto", feature_names=NAMES)
    body = client.post("/v1/models/auto/score?reasons=2", json=events_json(X)).json()
    check_reasons(body, 2, NAMES)
    assert ndjson_reasons(client, "auto", 2, [{"x": row.tolist()} for row in X]) == body["reasons"]
    # named events give the same reasons
    named = [{"x": dict(zip(NAMES, row.tolist(), strict=True))} for row in X]
    assert (
        client.post("/v1/models/auto/score?reasons=2", json={"events": named}).json()["reasons"]
        == body["reasons"]
    )


def test_without_names_the_reasons_give_columns_and_k_is_capped_at_the_width(memory_client):
    client = memory_client
    X = learned(client, "plain", learner="spam")
    response = client.post("/v1/models/plain/score?reasons=20", json=events_json(X[:2]))
    assert response.status_code == 200, response.text
    body = response.json()
    check_reasons(body, 5, range(5))
    written = ScoreResponse.model_validate_json(response.content).model_dump_json()
    assert response.content == written.encode()
    without = client.post("/v1/models/plain/score", json=events_json(X[:2])).json()
    assert without["reasons"] is None and without["scores"] == body["scores"]


def test_a_hashed_model_names_its_columns_by_the_events_names(memory_client):
    """Each hash column by the names of the event that fell in it (a string value as
    ``name=value``), over JSON and NDJSON; a column none of its names fell in (only the
    scaler's reference or a collision could put one in the top k) would stay its index."""
    client = memory_client
    create_model(client, "hashed", n_features=64, feature_mode="hashed", learner="spam")
    events = [
        {"x": {"amount": 2.0, "country": "FR", "new": True}, "y": 1},
        {"x": {"age": 3.0, "country": "DE", "amount": 0.5}, "y": 0},
    ] * 20
    assert client.post("/v1/models/hashed/events", json={"events": events}).status_code == 200
    asked = [{"x": event["x"]} for event in events[:2]]
    body = client.post("/v1/models/hashed/score?reasons=3", json={"events": asked}).json()
    check_reasons(body, 3, ["amount", "country=FR", "new", "age", "country=DE"])
    assert {item["feature"] for item in body["reasons"][0]["contributions"]} == {
        "amount", "country=FR", "new"
    }  # fmt: skip
    assert ndjson_reasons(client, "hashed", 3, asked) == body["reasons"]


def test_only_columns_that_contribute_are_reasons(memory_client):
    """A hashed model padded an event's reasons with columns none of its names fell in, each
    contributing 0 (their index as the feature); now fewer than k when fewer contribute."""
    client = memory_client
    create_model(
        client, "sparse-reasons", n_features=64, feature_mode="hashed", learner="spam",
        scaling="none",
    )  # fmt: skip
    events = [{"x": {"amount": 2.0, "new": True}, "y": 1}, {"x": {"age": 3.0}, "y": 0}] * 20
    assert (
        client.post("/v1/models/sparse-reasons/events", json={"events": events}).status_code == 200
    )
    asked = [{"x": {"amount": 1.5, "new": True}}, {"x": {"age": 1.0}}, {"x": {}}]
    body = client.post("/v1/models/sparse-reasons/score?reasons=5", json={"events": asked}).json()
    named = [[item["feature"] for item in reasons["contributions"]] for reasons in body["reasons"]]
    assert sorted(named[0]) == ["amount", "new"] and named[1] == ["age"] and named[2] == []
    for score, reasons in zip(body["scores"], body["reasons"], strict=True):
        assert all(item["contribution"] != 0.0 for item in reasons["contributions"])
        total = sum(item["contribution"] for item in reasons["contributions"])
        assert total + reasons["others"] + reasons["baseline"] == pytest.approx(score, abs=1e-9)
    assert ndjson_reasons(client, "sparse-reasons", 5, asked) == body["reasons"]


@pytest.mark.parametrize("k", ["-1", "21", "two", "1.5", ""])
def test_a_bad_k_is_a_422_naming_the_query(memory_client, k):
    client = memory_client
    create_model(client, f"bad{k}", n_features=2)
    response = client.post(
        f"/v1/models/bad{k}/score?reasons={k}", json={"events": [{"id": "a", "x": [1, 2]}]}
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["field"] == "query.reasons"
    assert "from 0 to 20" in response.json()["detail"]


def test_the_streams_json_score_replies_carry_the_same_reasons():
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        X = learned(http, "streamed", learner="auto", feature_names=NAMES)
        rest = http.post("/v1/models/streamed/score?reasons=2", json=events_json(X)).json()
        events = events_json(X)["events"]
        frame = orjson.dumps([
            {"seq": 1, "op": "score", "events": events[:4], "reasons": 2},
            {"seq": 2, "op": "score", "events": events[4:], "reasons": 2},
            {"seq": 3, "op": "score", "events": events[:1]},
            {"seq": 4, "op": "score", "events": events[:1], "reasons": 21},
            {"seq": 5, "op": "learn", "events": [{"x": X[0].tolist(), "y": 1}], "reasons": 1},
        ]).decode()  # fmt: skip
        with stream_socket(url, "streamed") as ws:
            replies = {reply["seq"]: reply for reply in exchange(ws, frame)}
        assert replies[1]["reasons"] + replies[2]["reasons"] == rest["reasons"]
        assert replies[1]["scores"] + replies[2]["scores"] == rest["scores"]
        assert "reasons" not in replies[3]
        for seq in (4, 5):
            problem = replies[seq]["problem"]
            assert problem["status"] == 422 and problem["field"] == "reasons", problem
