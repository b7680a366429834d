"""``/score?probabilities=true``: each score's calibrated probability from the model's online
calibrator (docs/algorithms/calibration.md), learned in the same engine call as the learner on
the pre-update scores of ``/events`` and on the kept scores of delayed labels; its state is
committed with the model and survives every store and a snapshot bit for bit; on every store."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from core.learners import make_learner
from core.metrics.calibration import OnlineCalibrator
from service.engine.model import CALIBRATION_PREFIX
from tests.service.conftest import (
    create_model,
    events_json,
    put_snapshot,
    read_snapshot,
    stored_arrays,
    write_snapshot,
)

N_FEATURES = 4
PROBLEM = "application/problem+json"


def stream(n, seed=0):
    """8 % positives from a logistic model: spam's margins are not probabilities."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES))
    logits = X @ np.array([1.5, -1.0, 0.7, 0.0]) - 3.0
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return X, y


def calibration_arrays(client, model_id="m"):
    arrays = stored_arrays(client, model_id)
    return {
        name[len(CALIBRATION_PREFIX) :]: value
        for name, value in arrays.items()
        if name.startswith(CALIBRATION_PREFIX)
    }


def test_probabilities_are_the_calibrators_of_the_prequential_scores(client):
    create_model(client, n_features=N_FEATURES)
    X, y = stream(2400)
    learner = make_learner("spam", scaling="standard").initialize(N_FEATURES)
    calibrator = OnlineCalibrator()
    for start in range(0, 2000, 250):
        rows = slice(start, start + 250)
        response = client.post("/v1/models/m/events", json=events_json(X[rows], y[rows]))
        assert response.status_code == 200, response.text
        calibrator.update(learner.prequential_step(X[rows], y[rows]), 2 * y[rows] - 1)
    state = calibration_arrays(client)
    for key, value in calibrator.get_state().items():
        np.testing.assert_allclose(state[key], value, rtol=1e-12, atol=1e-12, err_msg=key)
    body = events_json(X[2000:2100])
    answered = client.post("/v1/models/m/score?probabilities=true&keep=false", json=body).json()
    expected = calibrator.probabilities(learner.decision_function(X[2000:2100]))
    np.testing.assert_allclose(answered["probabilities"], expected, rtol=1e-10, atol=1e-12)
    assert all(0.0 <= p <= 1.0 for p in answered["probabilities"])
    # calibrated: on these margins the raw sigmoid is far off, the calibrator close
    truth = y[2000:2100].mean()
    assert abs(np.mean(answered["probabilities"]) - truth) < 0.06
    plain = client.post("/v1/models/m/score", json=body).json()
    assert plain["probabilities"] is None and plain["scores"] == answered["scores"]
    # delayed labels feed the calibrator the score given at /score time
    ids = [f"d{i}" for i in range(300)]
    kept = client.post("/v1/models/m/score", json=events_json(X[2100:], ids=ids)).json()
    labels = [{"id": i, "y": int(label)} for i, label in zip(ids, y[2100:], strict=True)]
    assert client.post("/v1/models/m/labels", json=labels).status_code == 200
    calibrator.update(np.array(kept["scores"]), 2 * y[2100:] - 1)
    state = calibration_arrays(client)
    np.testing.assert_allclose(state["theta"], calibrator.theta, rtol=1e-12, atol=1e-12)
    assert state["counters"][0] == 2300
    fed = np.concatenate([y[:2000], y[2100:]])
    assert state["labels"].tolist() == [int((fed == 0).sum()), int(fed.sum())]


def test_a_new_model_answers_the_base_rate_until_it_has_seen_both_classes(client):
    """(calibration.8) through the API: before any label every event gets 1/2, whatever its
    score; with negatives only, their running base rate; with labels of both classes the
    committed calibrator's Platt probability, shrunk toward the base rate by a weight that
    grows with them."""
    create_model(client, n_features=N_FEATURES)
    X, y = stream(3000, seed=4)
    X[:5] *= 40.0  # outlying features: margins far from 0

    def served(rows):
        body = events_json(X[rows])
        response = client.post("/v1/models/m/score?probabilities=true&keep=false", json=body)
        assert response.status_code == 200, response.text
        return np.array(response.json()["scores"]), np.array(response.json()["probabilities"])

    np.testing.assert_array_equal(served(slice(0, 5))[1], 0.5)
    negatives = np.flatnonzero(y == 0)[:40]
    assert client.post("/v1/models/m/events", json=events_json(X[negatives], y[negatives]))
    np.testing.assert_allclose(served(slice(0, 5))[1], 0.5 / 41, rtol=1e-12)
    weights = []
    for start, stop in ((100, 400), (400, 3000)):
        body = events_json(X[start:stop], y[start:stop])
        assert client.post("/v1/models/m/events", json=body).status_code == 200
        scores, probabilities = served(slice(0, 5))
        committed = calibration_arrays(client)
        n_negative, n_positive = committed["labels"].tolist()
        base_rate = (n_positive + 0.5) / (n_negative + n_positive + 1.0)
        evidence = n_positive * n_negative / (n_positive + n_negative)
        weights.append(evidence / (evidence + committed["parameters"][1]))
        committed["parameters"] = np.array([committed["parameters"][0], 0.0])
        platt = OnlineCalibrator.from_state(committed).probabilities(scores)
        expected = weights[-1] * platt + (1.0 - weights[-1]) * base_rate
        np.testing.assert_allclose(probabilities, expected, rtol=1e-12, atol=1e-15)
    assert 0.0 < weights[0] < weights[1] < 1.0


def test_calibrator_state_round_trips_bit_for_bit_through_a_snapshot(client):
    create_model(client, n_features=N_FEATURES)
    X, y = stream(1500, seed=1)
    assert (
        client.post("/v1/models/m/events", json=events_json(X[:1200], y[:1200])).status_code == 200
    )
    exported = client.get("/v1/models/m/snapshot").content
    _, arrays = read_snapshot(exported)
    stored = calibration_arrays(client)
    assert set(stored) == {"parameters", "theta", "curvature", "moments", "counters", "labels"}
    for key, value in stored.items():
        assert arrays[CALIBRATION_PREFIX + key].tobytes() == value.tobytes(), key
    assert put_snapshot(client, "copy", exported, replace=False).status_code == 201
    for key, value in calibration_arrays(client, "copy").items():
        assert value.tobytes() == stored[key].tobytes(), key
    body = events_json(X[1200:])
    original, copy = (
        client.post(f"/v1/models/{model_id}/score?probabilities=true&keep=false", json=body).json()
        for model_id in ("m", "copy")
    )
    assert original["scores"] == copy["scores"]
    assert original["probabilities"] == copy["probabilities"]


def test_a_state_without_its_calibrator_is_refused_naming_it(client):
    create_model(client, n_features=N_FEATURES)
    X, y = stream(600, seed=2)
    assert client.post("/v1/models/m/events", json=events_json(X[:500], y[:500])).status_code == 200
    exported = client.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    without = {k: v for k, v in arrays.items() if not k.startswith(CALIBRATION_PREFIX)}
    response = put_snapshot(client, "m", write_snapshot(manifest, without))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == CALIBRATION_PREFIX
    _, after = read_snapshot(client.get("/v1/models/m/snapshot").content)  # unchanged
    assert after.keys() == arrays.keys()


@pytest.mark.parametrize(
    "key, value",
    [
        ("theta", np.array([np.nan, 0.0])),
        ("curvature", np.array([1.0, 5.0, 1.0])),
        ("moments", np.array([1.0, 0.0, -2.0])),
        ("labels", np.array([5, 5], dtype=np.int64)),  # not the 300 events fed
        ("parameters", np.array([0.999, -3.0])),
    ],
)
def test_a_corrupt_calibrator_in_a_snapshot_is_a_422_naming_it(client, key, value):
    create_model(client, n_features=N_FEATURES)
    X, y = stream(300, seed=3)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    exported = client.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    arrays[CALIBRATION_PREFIX + key] = value
    response = put_snapshot(client, "m", write_snapshot(manifest, arrays))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["field"] == CALIBRATION_PREFIX + key
    _, after = read_snapshot(client.get("/v1/models/m/snapshot").content)  # unchanged
    assert after.keys() == read_snapshot(exported)[1].keys()
    for name, array in read_snapshot(exported)[1].items():
        assert after[name].tobytes() == array.tobytes(), name


def test_a_bad_probabilities_flag_is_a_422_naming_it(client):
    create_model(client, n_features=N_FEATURES)
    response = client.post(
        "/v1/models/m/score?probabilities=maybe", json=events_json(np.zeros((1, N_FEATURES)))
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["field"] == "query.probabilities"


@pytest.fixture(scope="module")
def server():
    from tests.service.server_helpers import uvicorn_server

    with uvicorn_server(AUCSTREAM_STORE="memory") as url:
        yield url


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_the_stream_answers_the_probabilities_rest_does(server, binary):
    import httpx

    from service.client import StreamClient
    from tests.service.server_helpers import exchange, stream_socket

    model_id = f"p-{'b' if binary else 'j'}"
    X, y = stream(900, seed=4)
    with httpx.Client(base_url=server, timeout=60) as http:
        body = {"id": model_id, "n_features": N_FEATURES, "learner": "spam"}
        assert http.post("/v1/models", json=body).status_code == 201
        assert http.post(f"/v1/models/{model_id}/events", json=events_json(X[:800], y[:800]))
        rest = http.post(
            f"/v1/models/{model_id}/score?probabilities=true&keep=false",
            json=events_json(X[800:]),
        ).json()
        with StreamClient(server, model_id, binary=binary) as client:
            scores, probabilities = client.score_probabilities(X[800:], keep=False)
            plain = client.score(X[800:], keep=False)
    np.testing.assert_array_equal(scores, rest["scores"])
    np.testing.assert_array_equal(probabilities, rest["probabilities"])
    np.testing.assert_array_equal(plain, scores)
    # a message that asks and one that does not, in one frame: only the first gets them
    frame = orjson.dumps(
        [
            {"seq": 1, "op": "score", "x": X[800].tolist(), "keep": False, "probabilities": True},
            {"seq": 2, "op": "score", "x": X[801].tolist(), "keep": False},
            {"seq": 3, "op": "learn", "x": X[801].tolist(), "y": 1, "probabilities": True},
            {"seq": 4, "op": "score", "x": X[801].tolist(), "probabilities": "yes"},
        ]
    ).decode()  # a text frame
    with stream_socket(server, model_id) as ws:
        replies = exchange(ws, frame)
    assert len(replies) == 4, replies
    first, second, learn, bad = replies
    assert first["probabilities"] == rest["probabilities"][:1]
    assert "probabilities" not in second and second["scores"] == rest["scores"][1:2]
    assert learn["status"] == 422 and learn["problem"]["field"] == "probabilities"
    assert bad["status"] == 422 and bad["problem"]["field"] == "probabilities"


def test_a_drift_reset_restarts_the_calibrator_with_the_learner(client):
    """``on_drift="reset"``: the calibrator mapped the old learner's scores, so it restarts
    too, and is fed only the events after the detecting batch."""
    from tests.service.drift_helpers import DRIFT_FEATURES, flipping_stream, post_stream

    create_model(client, n_features=DRIFT_FEATURES, learner="logistic", on_drift="reset")
    X, y = flipping_stream()
    post_stream(client, X, y, 250)
    drift = client.get("/v1/models/m/metrics").json()["drift"]
    assert drift["detected"] >= 1
    last = drift["last_detected_at"]
    fed_since_reset = len(y) - (last // 250 + 1) * 250  # the batches after the detecting one
    assert calibration_arrays(client)["counters"][0] == fed_since_reset
