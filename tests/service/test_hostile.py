"""Hostile input replayed over the real ASGI app (issue 12, items 1-3): each attack is refused
with a problem response, leaves the state as it was, and keeps memory bounded.

1. Corrupt states: a snapshot whose arrays break the learner's invariants (huge fills, negative
   counts, NaN weights, wrong lengths) is a 422 naming the array; a corrupt state found in the
   store is a 500 ``corrupt-state`` problem for that model only, and never reaches a kernel.
2. Bombs: compressed uploads and headers that claim huge arrays are refused from the zip's
   central directory and the ``.npy`` headers, before anything is inflated or allocated.
3. Memory that only grows: Prometheus label sets, engine caches and locks, models, remembered
   ids and kept ``/score`` records are all bounded.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import orjson
import pytest

from core.learners import available_learners, learner_class
from service.app import create_app
from service.settings import Settings
from service.stores.memory import MemoryStore
from tests.service.conftest import create_model, events_json, make_stream

ONLINE = [name for name in available_learners() if learner_class(name).online]
PROBLEM = "application/problem+json"


# ------------------------------------------------------------------------- snapshot helpers
def read_snapshot(body: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        arrays = {
            name: np.load(io.BytesIO(archive.read(entry["file"])), allow_pickle=False)
            for name, entry in manifest["arrays"].items()
        }
    return manifest, arrays


def write_snapshot(manifest: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """A snapshot whose manifest entries describe ``arrays`` as they are (so only the values,
    not the manifest, are at fault)."""
    manifest = {**manifest, "arrays": {}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            payload = io.BytesIO()
            np.save(payload, array, allow_pickle=False)
            archive.writestr(f"arrays/{name}.npy", payload.getvalue())
            manifest["arrays"][name] = {
                "file": f"arrays/{name}.npy",
                "dtype": array.dtype.str,
                "shape": list(array.shape),
            }
        archive.writestr("manifest.json", orjson.dumps(manifest))
    return buffer.getvalue()


def put_snapshot(client, model_id: str, body: bytes, replace: bool = True):
    return client.put(
        f"/v1/models/{model_id}/snapshot",
        content=body,
        params={"replace": str(replace).lower()},
        headers={"content-type": "application/zip"},
    )


def corruptions(array: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Out-of-range versions of a state array: huge and negative counters, NaN and infinite
    floats, a wrong length."""
    changed = []
    flat = array.reshape(-1)
    values: list = []
    if array.dtype.kind == "i":
        values = [2**62, -2]  # 2**40 is a valid count; the issue's 2**40 fill: above
    elif array.dtype.kind == "f":
        values = [np.nan, np.inf]
    for value in values if flat.size else []:
        bad = array.copy()
        bad.reshape(-1)[0] = value
        changed.append((f"{value}", bad))
    changed.append(("longer", np.zeros(flat.size + 1, dtype=array.dtype)))
    return changed


def learned_model(client, name: str, model_id: str = "m"):
    create_model(client, model_id, n_features=5, learner=name)
    X, y = make_stream(120, seed=1)
    response = client.post(f"/v1/models/{model_id}/events", json=events_json(X, y))
    assert response.status_code == 200, response.text


# ------------------------------------------------------------------------- 1. corrupt states
def test_issue_case_oam_fill_neg_is_refused_and_the_process_survives(client):
    """Issue 12 item 1: export an oam snapshot, set learner:fill_neg to 2**40, PUT it back:
    this was a 201, and the next event killed the process (SIGSEGV)."""
    learned_model(client, "oam")
    exported = client.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    arrays["learner:fill_neg"] = np.array([2**40], dtype=np.int64)
    for model_id, replace in (("m", True), ("other", False)):
        response = put_snapshot(client, model_id, write_snapshot(manifest, arrays), replace)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == PROBLEM
        problem = response.json()
        assert problem["field"] == "learner:fill_neg"
        assert "2**40" in problem["detail"] or "1099511627776" in problem["detail"]
    assert client.get("/v1/models/other").status_code == 404
    # unchanged, and still learning
    assert read_snapshot(client.get("/v1/models/m/snapshot").content)[1].keys() == arrays.keys()
    np.testing.assert_array_equal(
        read_snapshot(client.get("/v1/models/m/snapshot").content)[1]["learner:fill_neg"],
        read_snapshot(exported)[1]["learner:fill_neg"],
    )
    X, y = make_stream(3, seed=2)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200


@pytest.mark.parametrize("name", ONLINE)
def test_every_corrupt_learner_array_of_a_snapshot_is_a_422_naming_it(client, name):
    """Every learner state array, made out of range in every way, is refused by name; the
    model is unchanged and goes on learning (the kernels never saw the state)."""
    learned_model(client, name)
    exported = client.get("/v1/models/m/snapshot").content
    manifest, arrays = read_snapshot(exported)
    learner_arrays = [key for key in arrays if key.startswith("learner:")]
    assert learner_arrays
    for key in learner_arrays:
        for label, bad in corruptions(arrays[key]):
            response = put_snapshot(client, "m", write_snapshot(manifest, {**arrays, key: bad}))
            assert response.status_code == 422, (key, label, response.text)
            assert response.headers["content-type"] == PROBLEM
            assert response.json()["field"] == key, (key, label, response.json())
    _, after = read_snapshot(client.get("/v1/models/m/snapshot").content)
    for key, array in arrays.items():
        if not key.startswith("stats:times"):
            np.testing.assert_array_equal(after[key], array, err_msg=key)
    X, y = make_stream(20, seed=3)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    # the untouched snapshot is still accepted: the refusals above were about the values
    assert put_snapshot(client, "copy", exported, replace=False).status_code == 201


def test_a_snapshot_of_another_width_or_window_is_refused(client):
    learned_model(client, "spam")
    manifest, arrays = read_snapshot(client.get("/v1/models/m/snapshot").content)
    wider = {**manifest, "model": {**manifest["model"], "n_features": 6}}
    response = put_snapshot(client, "m", write_snapshot(wider, arrays))
    assert response.status_code == 422
    assert response.json()["field"] == "learner:n_features"
    bigger = {**manifest, "model": {**manifest["model"], "window": 500}}
    response = put_snapshot(client, "m", write_snapshot(bigger, arrays))
    assert response.status_code == 422
    assert response.json()["field"] == "window:window_parameters"


def corrupt_stored_state(client, store_kind: str, rclient, model_id: str, key: str, value):
    """Write ``value`` into the stored array ``key`` behind the service's back (a damaged or
    forged store entry), with a new version so every process reloads it."""
    if store_kind == "memory":
        model = client.app.state.store._models[model_id]  # noqa: SLF001 - the test's forgery
        model.arrays[key] = np.asarray(value)
        model.version += 1
        return
    from service.stores import keys

    array = np.asarray(value)
    rclient.hset(keys.state(model_id), key, array.tobytes())
    rclient.hset(keys.layout(model_id), key, f"{array.dtype.str}|{array.shape[0]}")
    rclient.incr(keys.version(model_id))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("learner:fill_neg", np.array([2**40], dtype=np.int64)),
        ("learner:count_pos", np.array([-5], dtype=np.int64)),
        ("learner:w", np.full(5, np.nan)),
        ("learner:buffer_pos", np.zeros(3)),  # wrong length
    ],
    ids=["huge-fill", "negative-count", "nan-weights", "wrong-length"],
)
def test_a_corrupt_stored_state_is_a_problem_for_that_model_only(
    store_kind, redis_url, request, key, value
):
    store = MemoryStore() if store_kind == "memory" else None
    settings = Settings(store=store_kind, redis_url=redis_url, warmup=False)
    rclient = request.getfixturevalue("rclient") if store_kind == "redis" else None
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings, store=store)) as client:
        for model_id in ("bad", "good"):
            create_model(client, model_id, learner="oam", params={"buffer_size_neg": 100})
            X, y = make_stream(40, seed=4)
            assert (
                client.post(f"/v1/models/{model_id}/events", json=events_json(X, y)).status_code
                == 200
            )
        corrupt_stored_state(client, store_kind, rclient, "bad", key, value)
        X, y = make_stream(2, seed=5)
        for method, path, body in (
            ("POST", "/v1/models/bad/events", events_json(X, y)),
            ("POST", "/v1/models/bad/score", events_json(X)),
            ("GET", "/v1/models/bad/metrics", None),
            ("GET", "/v1/models/bad/snapshot", None),
        ):
            response = client.request(method, path, json=body)
            assert response.status_code == 500, (path, response.text)
            assert response.headers["content-type"] == PROBLEM
            problem = response.json()
            assert problem["type"].endswith("/corrupt-state")
            assert problem["field"] == key
            assert "'bad'" in problem["detail"]
        # the other model and the process are fine
        assert client.get("/healthz").status_code == 200
        assert client.post("/v1/models/good/events", json=events_json(X, y)).status_code == 200
        # the corrupt model can be reset (or deleted) and then learns again
        assert client.post("/v1/models/bad/reset").status_code == 200
        assert client.post("/v1/models/bad/events", json=events_json(X, y)).status_code == 200
