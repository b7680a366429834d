"""Regret and metric gap in GET /v1/models/{id}/metrics, on both stores
(docs/algorithms/regret.md, docs/architecture.md §4)."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from core.regret import RegretWindow, learner_inputs
from service.engine.model import REGRET_PREFIX
from service.engine.reporting import REGRET_C, REGRET_TOL
from service.schemas import ModelCreate
from tests.service.conftest import create_model, events_json, make_stream, stored_arrays

KEYS = {
    "regret",
    "regret_per_event",
    "online_loss",
    "hindsight_loss",
    "prequential_pauc",
    "hindsight_pauc",
    "pauc_gap",
    "n_events",
    "rounds",
}


def _regret_arrays(client, model="m"):
    arrays = stored_arrays(client, model)
    return {name: value for name, value in arrays.items() if name.startswith(REGRET_PREFIX)}


def _reference(learner_name, params, batches, capacity, n_features, pauc_range=(0.0, 0.1)):
    """The same stream through the core learner and RegretWindow, batch by batch."""
    learner = make_learner(learner_name, **params)
    learner.initialize(n_features)
    window = RegretWindow(capacity, n_features)
    for X, y in batches:
        rows, served = learner_inputs(learner, X), learner.coef_
        window.update(rows, y, learner.prequential_step(X, y), served)
    return window.summary(*pauc_range, C=REGRET_C, tol=REGRET_TOL)


@pytest.mark.parametrize("learner", ["spam", "pmb", "ftrl_pauc", "oam", "solam", "opauc"])
def test_metrics_report_the_regret_of_the_core_window(client, learner):
    create_model(client, learner=learner, regret_window=150, pauc_range=[0.0, 0.2])
    X, y = make_stream(400, seed=3)
    sizes = [1, 1, 7, 40, 3, 100, 1, 60, 87, 100]
    batches, start = [], 0
    for size in sizes:
        batches.append((X[start : start + size], y[start : start + size]))
        response = client.post("/v1/models/m/events", json=events_json(*batches[-1]))
        assert response.status_code == 200, response.text
        start += size
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["regret_reason"] is None
    regret = metrics["regret"]
    assert KEYS <= set(regret)
    params = client.get("/v1/models/m").json()["config"]
    expected, reason = _reference(
        learner,
        {**params["params"], "scaling": params["scaling"]},
        batches,
        150,
        5,
        (0.0, 0.2),
    )
    assert reason is None
    for key in KEYS - {"n_events", "rounds"}:
        assert regret[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key
    # trimmed at round boundaries like the core window (100 + 87 > 150: the last round only)
    assert (regret["n_events"], regret["rounds"]) == (expected["n_events"], expected["rounds"])
    assert regret["n_events"] <= 150
    assert regret["pauc_gap"] == pytest.approx(
        regret["hindsight_pauc"] - regret["prequential_pauc"]
    )
    assert regret["regret"] == pytest.approx(regret["online_loss"] - regret["hindsight_loss"])


@pytest.mark.parametrize("learner", ["auto", "tree_embedded"])
def test_a_model_not_linear_in_its_features_reports_the_pauc_gap_without_a_regret(client, learner):
    """The default auto (a tree-embedded candidate) and tree_embedded do not score by their
    ``coef_``: the online loss of the rounds' weights would describe another model, so it and
    the regret are null with a note; the pAUC gap, from the events' own prequential scores and
    the same hindsight comparator, equals the core window's."""
    body = {"id": "m", "n_features": 5, "regret_window": 150, "pauc_range": [0.0, 0.2]}
    if learner != "auto":
        body["learner"] = learner
    assert client.post("/v1/models", json=body).status_code == 201
    X, y = make_stream(300, seed=4)
    batches = [(X[:120], y[:120]), (X[120:], y[120:])]
    for batch in batches:
        assert client.post("/v1/models/m/events", json=events_json(*batch)).status_code == 200
    regret = client.get("/v1/models/m/metrics").json()["regret"]
    assert regret["regret"] is None and regret["regret_per_event"] is None
    assert regret["online_loss"] is None and "not linearly" in regret["online_loss_note"]
    config = client.get("/v1/models/m").json()["config"]
    expected, reason = _reference(
        config["learner"], {**config["params"], "scaling": config["scaling"]}, batches, 150, 5,
        (0.0, 0.2),
    )  # fmt: skip
    assert reason is None
    for key in ("hindsight_loss", "prequential_pauc", "hindsight_pauc", "pauc_gap"):
        assert regret[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-12), key


def test_a_linear_auto_keeps_its_regret(client):
    candidates = [{"learner": "logistic", "params": {"base_rate_offset": True}},
                  {"learner": "ftrl_pauc"}]  # fmt: skip
    body = {"id": "m", "n_features": 5, "regret_window": 150, "params": {"candidates": candidates}}
    assert client.post("/v1/models", json=body).status_code == 201
    X, y = make_stream(300, seed=4)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    regret = client.get("/v1/models/m/metrics").json()["regret"]
    assert regret["regret"] is not None and regret["online_loss_note"] is None


def test_regret_window_setting_defaults_validation_and_off(client):
    created = create_model(client)
    assert created["config"]["regret_window"] == 1000
    # a learner not linear in its features has no regret: no window unless one is asked for
    created = create_model(client, "tree", learner="auto")
    assert created["config"]["regret_window"] == 0
    metrics = client.get("/v1/models/tree/metrics").json()
    assert metrics["regret"] is None and "not linear" in metrics["regret_reason"]
    assert not any(name.startswith(REGRET_PREFIX) for name in _regret_arrays(client, "tree"))
    linear = {"candidates": [{"learner": "logistic"}, {"learner": "spam"}]}
    created = create_model(client, "linear", learner="auto", params=linear)
    assert created["config"]["regret_window"] == 1000
    asked = create_model(client, "asked", learner="boosted_embedded", regret_window=200)
    assert asked["config"]["regret_window"] == 200
    created = create_model(client, "wide", n_features=2000, feature_mode="sparse")
    assert created["config"]["regret_window"] == 0
    metrics = client.get("/v1/models/wide/metrics").json()
    assert metrics["regret"] is None and "off" in metrics["regret_reason"]
    assert not any(name.startswith(REGRET_PREFIX) for name in _regret_arrays(client, "wide"))
    assert create_model(client, "mid", n_features=300)["config"]["regret_window"] == 0
    assert (
        create_model(client, "ok", n_features=300, regret_window=800)["config"]["regret_window"]
        == 800
    )
    for bad in (-1, 5_001):
        response = client.post(
            "/v1/models", json={"id": "x", "n_features": 5, "regret_window": bad}
        )
        assert response.status_code == 422 and response.json()["field"] == "regret_window"
    response = client.post(
        "/v1/models",
        json={"id": "x", "n_features": 2**20, "feature_mode": "hashed", "regret_window": 10},
    )
    problem = response.json()
    assert response.status_code == 422 and problem["field"] == "regret_window"
    assert "regret_window * n_features" in problem["detail"]
    # a request without one leaves it to the learner's linearity (default_regret_window)
    assert ModelCreate(id="new", n_features=10).regret_window is None


def test_sparse_models_densify_their_regret_rows(client):
    create_model(client, "s", n_features=6, feature_mode="sparse", regret_window=50)
    rng = np.random.default_rng(4)
    events = []
    for _ in range(60):
        label = int(rng.random() < 0.4)
        indices = sorted(rng.choice(6, size=2, replace=False).tolist())
        values = (rng.normal(size=2) + 2 * label * (np.array(indices) == 0)).tolist()
        events.append({"x": {"indices": indices, "values": values}, "y": label})
    for start in range(0, 60, 10):
        response = client.post("/v1/models/s/events", json={"events": events[start : start + 10]})
        assert response.status_code == 200, response.text
    arrays = _regret_arrays(client, "s")
    assert arrays["regret:features"].shape == (50, 6)
    regret = client.get("/v1/models/s/metrics").json()["regret"]
    assert regret["n_events"] == 50 and regret["rounds"] == 5


def test_undefined_regret_has_a_reason_and_the_solve_is_cached_per_version(client):
    create_model(client)
    X, y = make_stream(40, seed=5)
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["regret"] is None
    assert metrics["regret_reason"] == "the regret window holds no event"
    negatives = y == 0
    client.post("/v1/models/m/events", json=events_json(X[negatives], y[negatives]))
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["regret_reason"] == "the regret window holds no positive event"
    client.post("/v1/models/m/events", json=events_json(X[~negatives], y[~negatives]))
    engine = client.app.state.engine
    engine.reporting.throttle = 0.0  # solve every new version (see the throttle test)
    first = client.get("/v1/models/m/metrics").json()
    assert first["regret"] is not None and not engine.regret_pending("m")
    again = client.get("/v1/models/m/metrics").json()
    assert again["regret"] == first["regret"]  # same solve_seconds: served from the cache
    client.post("/v1/models/m/events", json=events_json(X[:3], y[:3]))
    assert engine.regret_pending("m")
    later = client.get("/v1/models/m/metrics").json()
    assert later["regret"]["rounds"] == first["regret"]["rounds"] + 1


def test_a_rejected_batch_leaves_the_regret_state_unchanged(client):
    create_model(client, regret_window=30)
    X, y = make_stream(60, seed=6)
    client.post("/v1/models/m/events", json=events_json(X[:40], y[:40]))
    before, metrics = _regret_arrays(client), client.get("/v1/models/m/metrics").json()
    bad_rows = [
        {"events": [{"x": [1.0, 2.0], "y": 1}]},  # wrong dimension
        {"events": [{"x": X[0].tolist(), "y": 1}, {"x": X[1].tolist(), "y": 7}]},  # bad label
    ]
    for body in bad_rows:
        assert client.post("/v1/models/m/events", json=body).status_code == 422
    # a failure inside learning, after a first merged round was learned (queue worker path):
    # the merged rounds are one learner call, whose second round diverges
    engine = client.app.state.engine
    loaded = engine.model("m")
    original = type(loaded.learner).learn_rounds
    calls = []

    def diverging(self, rows, labels, stops, **options):
        calls.append(list(stops))
        learned = original(self, rows, labels, stops, **options)
        learned.scores[stops[0] :] = np.nan
        return learned

    from service.ingest import Batch

    batch = Batch(X[40:50], np.where(y[40:50] > 0, 1, -1), None)
    # monkeypatch, not an assignment: putting ``original`` back on the learner's class would
    # leave it an override of its own, which later tests patching OnlineLearner never reach
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(loaded.learner), "learn_rounds", diverging)
        with pytest.raises(Exception, match="not finite") as refused:
            engine.learn("m", batch, rounds=[4, 6])
        assert refused.value.event == 4  # the first event of the round at fault
    assert calls == [[4, 10]]
    after = _regret_arrays(client)
    assert after.keys() == before.keys()
    for name, value in before.items():
        assert value.dtype == after[name].dtype and value.tobytes() == after[name].tobytes()
    metrics_after = client.get("/v1/models/m/metrics").json()
    assert metrics_after["regret"] == metrics["regret"]


def test_merged_rounds_equal_separate_requests(make_client):
    """A queue worker learns several entries in one engine call: each is its own round."""
    client = make_client()
    create_model(client, "a", regret_window=100)
    create_model(client, "b", regret_window=100)
    X, y = make_stream(90, seed=7)
    sizes = [5, 30, 1, 20, 34]
    start = 0
    for size in sizes:
        client.post(
            "/v1/models/a/events",
            json=events_json(X[start : start + size], y[start : start + size]),
        )
        start += size
    from service.ingest import Batch

    client.app.state.engine.learn("b", Batch(X, np.where(y > 0, 1, -1), None), rounds=sizes)
    a, b = _regret_arrays(client, "a"), _regret_arrays(client, "b")
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    assert client.get("/v1/models/a/metrics").json()["regret"]["rounds"] == 5


def test_delayed_labels_are_rounds_with_the_scores_given_at_scoring_time(client):
    create_model(client, regret_window=100)
    X, y = make_stream(30, seed=8)
    client.post("/v1/models/m/events", json=events_json(X[:20], y[:20]))
    ids = [f"e{i}" for i in range(20, 30)]
    scored = client.post("/v1/models/m/score", json=events_json(X[20:], ids=ids)).json()
    for start in range(0, 10, 5):
        labels = [{"id": ids[i], "y": int(y[20 + i])} for i in range(start, start + 5)]
        assert client.post("/v1/models/m/labels", json=labels).status_code == 200
    arrays = _regret_arrays(client)
    np.testing.assert_allclose(arrays["regret:scores"][20:], scored["scores"])
    regret = client.get("/v1/models/m/metrics").json()["regret"]
    assert regret["rounds"] == 3 and regret["n_events"] == 30


def test_snapshot_export_import_keeps_the_regret_window(client):
    create_model(client, regret_window=80)
    X, y = make_stream(120, seed=9)
    for start in range(0, 100, 25):
        client.post(
            "/v1/models/m/events", json=events_json(X[start : start + 25], y[start : start + 25])
        )
    exported = client.get("/v1/models/m/snapshot").content
    imported = client.put(
        "/v1/models/copy/snapshot", content=exported, headers={"content-type": "application/zip"}
    )
    assert imported.status_code == 201, imported.text
    original, copy = _regret_arrays(client, "m"), _regret_arrays(client, "copy")
    assert original.keys() == copy.keys() and len(original) == 7
    for name, value in original.items():
        assert value.dtype == copy[name].dtype and value.tobytes() == copy[name].tobytes()
    for model in ("m", "copy"):
        client.post(f"/v1/models/{model}/events", json=events_json(X[100:], y[100:]))
    first = client.get("/v1/models/m/metrics").json()["regret"]
    second = client.get("/v1/models/copy/metrics").json()["regret"]
    for section in (first, second):
        section.pop("solve_seconds"), section.pop("version")
    assert first == second


def test_re_solving_is_throttled_and_the_served_version_is_named(client):
    create_model(client)
    X, y = make_stream(60, seed=10)
    client.post("/v1/models/m/events", json=events_json(X[:40], y[:40]))
    engine = client.app.state.engine
    engine.reporting.throttle = 1e9  # never solve again for this incarnation
    first = client.get("/v1/models/m/metrics").json()
    assert first["regret"]["version"] == first["version"]
    client.post("/v1/models/m/events", json=events_json(X[40:], y[40:]))
    assert not engine.regret_pending("m")
    later = client.get("/v1/models/m/metrics").json()
    assert later["version"] > first["version"]
    assert later["regret"] == first["regret"]  # the last solution, naming its version
    engine.reporting.throttle = 0.0
    fresh = client.get("/v1/models/m/metrics").json()
    assert fresh["regret"]["version"] == later["version"]
    assert fresh["regret"]["n_events"] == 60
    client.post("/v1/models/m/reset")  # a new incarnation is never served an old solution
    assert client.get("/v1/models/m/metrics").json()["regret_reason"] == (
        "the regret window holds no event"
    )
