"""Each event rule is stated once (service.ingest.fields, core.validation) and refuses the same
fault with the same message from every path: the four content types, the stream's JSON and
binary frames, and delayed labels (an infinity only where it can be written).  Only the
location differs (``line`` for the line-based types), and the missing value's spelling as sent
(null in JSON, NaN in numbers); LIBSVM is read with ``?zero_based=true``, so that it numbers
the features as the others do."""

from __future__ import annotations

import io
import re

import numpy as np
import orjson
import pytest

from core.validation import width_refused
from service.ingest import fields
from service.stream.protocol import encode_binary
from tests.service.conftest import started_apps

N_FEATURES = 3
GOOD = ([0.1, 0.2, 0.3], 1, "g")
LONG_ID = "x" * 300
BOUND = (
    "features contain 1e+200, beyond the feature bound of +-1e+100: rescale such features (e.g. "
    "take their logarithm)"
)
LABEL = "label 'y' is 2; accepted labels: 0/1, -1/+1 or true/false"
#: fault -> (the bad event (x, y, id), the detail that refuses it)
FAULTS = {
    "long id": (([0.5, 0.5, 0.5], 1, LONG_ID), fields.ID_REFUSED),
    "beyond the bound": (([0.5, 1e200, 0.5], 1, "a"), BOUND),
    "missing value": (([0.5, None, 0.5], 1, "a"), "feature 1 is missing ({shown}): "),
    "infinity": (
        ([0.5, float("inf"), 0.5], 1, "a"),
        "feature 1 is inf; values must be finite numbers",
    ),
    "label": (([0.5, 0.5, 0.5], 2, "a"), LABEL),
    "width": (([0.5, 0.5], 1, "a"), width_refused(N_FEATURES, 2)),
}
PATHS = ["json", "ndjson", "libsvm", "npz", "stream-json", "stream-binary", "labels",
         "stream-json-labels", "stream-binary-labels"]  # fmt: skip
LOCATION = re.compile(r"^(event|line) (\d+)(?: \(id '[^']*'\))?: ")


@pytest.fixture(scope="module")
def client():
    with started_apps(store="memory") as build:
        client = build()
        model = {"id": "m", "n_features": N_FEATURES}
        assert client.post("/v1/models", json=model).status_code == 201
        yield client
        assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0


def as_json(event) -> dict:
    x, y, event_id = event
    return {"x": x, "y": y, "id": event_id}


def as_arrays(events):
    width = max(len(x) for x, _, _ in events)
    X = np.array([[np.nan if v is None else v for v in x] for x, _, _ in events])
    assert X.shape[1] == width  # a short row would make a ragged array
    return X, np.array([y for _, y, _ in events]), [i for _, _, i in events]


def libsvm_line(event) -> str:
    x, y, event_id = event
    pairs = " ".join(f"{k}:{'nan' if v is None else repr(v)}" for k, v in enumerate(x))
    return f"{y} {pairs} # {event_id}"


def refusal(client, path: str, events) -> dict:
    """The problem that refuses ``events`` (the bad one second) on ``path``."""
    url = "/v1/models/m/events"
    if path == "json":
        response = client.post(url, json={"events": [as_json(e) for e in events]})
    elif path == "ndjson":
        body = b"\n".join(orjson.dumps(as_json(e)) for e in events)
        response = client.post(url, content=body, headers={"content-type": "application/x-ndjson"})
    elif path == "libsvm":
        body = "\n".join(libsvm_line(e) for e in events).encode()
        headers = {"content-type": "text/x-libsvm"}
        response = client.post(url + "?zero_based=true", content=body, headers=headers)
    elif path == "npz":
        X, y, ids = as_arrays(events)
        buffer = io.BytesIO()
        np.savez(buffer, X=X, y=y, ids=np.array(ids))
        headers = {"content-type": "application/x-npz"}
        response = client.post(url, content=buffer.getvalue(), headers=headers)
    elif path == "labels":
        labels = [{"id": event_id, "y": y} for _, y, event_id in events]
        response = client.post("/v1/models/m/labels", json=labels)
    else:
        with client.websocket_connect("/v1/models/m/stream") as socket:
            if path == "stream-json":
                message = {"seq": 0, "op": "learn", "events": [as_json(e) for e in events]}
                socket.send_text(orjson.dumps(message).decode())
            elif path == "stream-json-labels":
                labels = [{"id": event_id, "y": y} for _, y, event_id in events]
                socket.send_text(orjson.dumps({"seq": 0, "op": "label", "labels": labels}).decode())
            elif path == "stream-binary-labels":
                y, ids = np.array([y for _, y, _ in events]), [i for _, _, i in events]
                socket.send_bytes(encode_binary("label", 0, None, y, ids))
            else:
                X, y, ids = as_arrays(events)
                socket.send_bytes(encode_binary("learn", 0, X, y, ids))
            (reply,) = orjson.loads(socket.receive_text())
        return reply["problem"]
    return response.json()


def expected_detail(fault: str, path: str) -> str:
    detail = FAULTS[fault][1]
    if fault == "missing value":
        shown = "NaN" if path in ("libsvm", "npz", "stream-binary") else "null"
        detail = detail.format(shown=shown) + fields.MISSING_REFUSED
    return detail


def cases():
    for fault in FAULTS:
        for path in PATHS:
            if path.endswith("labels") and fault not in ("long id", "label"):
                continue  # a label carries no features
            if fault == "width" and path == "libsvm":
                continue  # LIBSVM rows have no width: an index beyond is its own fault
            if fault == "infinity" and path not in ("libsvm", "npz", "stream-binary"):
                continue  # JSON has no way to write one
            yield fault, path


@pytest.mark.parametrize(("fault", "path"), list(cases()))
def test_one_fault_one_message_from_every_path(client, fault, path):
    events = [GOOD, FAULTS[fault][0]]
    try:
        problem = refusal(client, path, events)
    except ValueError:  # a ragged array: NPZ and binary frames of one width per batch
        X = np.zeros((2, 2))
        problem = refusal_of_arrays(client, path, X)
    assert problem["status"] == 422, problem
    location = LOCATION.match(problem["detail"])
    detail = problem["detail"][location.end() :] if location else problem["detail"]
    assert detail == expected_detail(fault, path)
    if fault == "width" and path in ("npz", "stream-binary"):
        return  # the array (message) has one width: no event is at fault alone
    assert location is not None, problem["detail"]
    line_based = path in ("ndjson", "libsvm")
    assert location.groups() == (("line", "2") if line_based else ("event", "1"))


def refusal_of_arrays(client, path: str, X: np.ndarray) -> dict:
    y, ids = np.array([1, 1]), ["g", "a"]
    if path == "npz":
        buffer = io.BytesIO()
        np.savez(buffer, X=X, y=y, ids=np.array(ids))
        headers = {"content-type": "application/x-npz"}
        return client.post("/v1/models/m/events", content=buffer.getvalue(), headers=headers).json()
    with client.websocket_connect("/v1/models/m/stream") as socket:
        socket.send_bytes(encode_binary("learn", 0, X, y, ids))
        (reply,) = orjson.loads(socket.receive_text())
    return reply["problem"]


def test_the_openapi_document_states_the_id_rule(client):
    document = client.get("/openapi.json").text
    assert f'"maxLength":{fields.MAX_ID_CHARACTERS}' in document.replace(" ", "")
