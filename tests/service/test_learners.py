"""Every online learner is served: created over HTTP, learns, scores, and its whole state
round-trips through the store (Redis: one hash field per array) bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import available_learners, learner_class, make_learner
from tests.service.conftest import create_model, events_json, make_stream, stored_arrays

# online learners and window solvers (spdam): those a model may run
ONLINE = [
    n for n in available_learners() if learner_class(n).online or learner_class(n).streams_on_window
]


@pytest.mark.parametrize("name", ONLINE)
def test_learner_served_bit_for_bit(client, name):
    create_model(client, name, n_features=4, learner=name)  # default scaling: standard
    X, y = make_stream(60, n_features=4, seed=2)
    first = client.post(f"/v1/models/{name}/events?scores=true", json=events_json(X[:30], y[:30]))
    assert first.status_code == 200, first.text
    # a fresh process cache: the second batch is learned from the state read back from the store
    client.app.state.engine.repository.clear()
    second = client.post(f"/v1/models/{name}/events?scores=true", json=events_json(X[30:], y[30:]))
    assert second.status_code == 200, second.text

    # models created over HTTP run auto with track_drift (docs/algorithms/auto.md (auto.8))
    extra = {"track_drift": True} if name == "auto" else {}
    reference = make_learner(name, scaling="standard", **extra)
    reference.initialize(4)
    expected = np.concatenate(
        [reference.prequential_step(X[:30], y[:30]), reference.prequential_step(X[30:], y[30:])]
    )
    got = np.array(first.json()["scores"] + second.json()["scores"])
    np.testing.assert_array_equal(got, expected)
    stored = stored_arrays(client, name)
    for key, value in reference.get_state().items():
        np.testing.assert_array_equal(stored[f"learner:{key}"], value, err_msg=key)
        assert stored[f"learner:{key}"].dtype == value.dtype
    scores = client.post(f"/v1/models/{name}/score", json=events_json(X[:5])).json()["scores"]
    np.testing.assert_array_equal(scores, reference.decision_function(X[:5]))


def test_seed_learners_are_listed_as_servable(client):
    assert {"spdam", "poise"} <= set(ONLINE)


def test_batch_solver_is_refused(client):
    response = client.post("/v1/models", json={"id": "b", "n_features": 3, "learner": "svm_pauc"})
    assert response.status_code == 422 and response.json()["field"] == "learner"


def test_low_rank_opauc_on_sparse_events_is_served_bit_for_bit(client):
    """``opauc`` with ``rank=k`` on a sparse model keeps a factored sketch (buffered sparse
    rows, integer index arrays): its whole state survives the store between requests and a
    snapshot export / import, and the served scores equal one in-process learner's."""
    from scipy.sparse import csr_matrix

    from tests.service.body_helpers import libsvm_text

    n_features = 40
    create_model(client, "low", n_features=n_features, feature_mode="sparse",
                 learner="opauc", params={"rank": 2}, scaling="none")  # fmt: skip
    rng = np.random.default_rng(11)
    X = rng.normal(size=(90, n_features)) * (rng.random((90, n_features)) < 0.15)
    y = (rng.random(90) < 0.4).astype(np.int64)
    X[y == 1, :3] += 1.0
    reference = make_learner("opauc", rank=2, scaling="none")
    reference.initialize(n_features)
    expected, got = [], []
    for start, stop in ((0, 40), (40, 70)):
        client.app.state.engine.repository.clear()  # learn from the state read back from the store
        response = client.post(
            "/v1/models/low/events?scores=true",
            content=libsvm_text(X[start:stop], y[start:stop]),
            headers={"content-type": "text/x-libsvm"},
        )
        assert response.status_code == 200, response.text
        got += response.json()["scores"]
        expected += list(reference.prequential_step(csr_matrix(X[start:stop]),
                                                    y[start:stop]))  # fmt: skip
    np.testing.assert_array_equal(got, expected)
    stored = stored_arrays(client, "low")
    for key, value in reference.get_state().items():
        np.testing.assert_array_equal(stored[f"learner:{key}"], value, err_msg=key)
        assert stored[f"learner:{key}"].dtype == value.dtype
    exported = client.get("/v1/models/low/snapshot").content
    imported = client.put("/v1/models/copy/snapshot", content=exported,
                          headers={"content-type": "application/zip"})  # fmt: skip
    assert imported.status_code == 201, imported.text
    rest = {"content": libsvm_text(X[70:], y[70:]), "headers": {"content-type": "text/x-libsvm"}}
    tail = reference.prequential_step(csr_matrix(X[70:]), y[70:])
    for model in ("low", "copy"):
        scores = client.post(f"/v1/models/{model}/events?scores=true", **rest).json()["scores"]
        np.testing.assert_array_equal(scores, tail)


def test_a_stored_model_without_an_array_of_its_layout_is_refused_naming_it(client):
    """One state format: a stored poise model whose arrays lack ``auc_steps`` (as a version
    before the all-negatives term would have stored it) is refused on load, InvalidState
    naming the array; nothing is rebuilt from it."""
    from core.errors import InvalidState
    from service.engine.model import from_store
    from service.stores.base import StoredState

    create_model(client, "p", n_features=4, learner="poise")
    X, y = make_stream(120, n_features=4, seed=6)
    assert client.post("/v1/models/p/events", json=events_json(X, y)).status_code == 200
    stored = client.app.state.store.load("p")
    old = StoredState(
        version=stored.version,
        incarnation=stored.incarnation,
        config=stored.config,
        arrays={k: v for k, v in stored.arrays.items() if k != "learner:auc_steps"},
    )
    with pytest.raises(InvalidState, match=r"missing \['auc_steps'\]") as caught:
        from_store(old)
    assert caught.value.field == "learner:auc_steps"  # the stored array's name
    assert from_store(stored).learner.state_["auc_steps"].shape == (1,)


def test_learners_endpoint_lists_every_servable_learner(client):
    """GET /v1/learners names exactly the learners POST /v1/models accepts: the window solver
    spdam included, the batch solver svm_pauc not."""
    listed = client.get("/v1/learners").json()["learners"]
    assert listed == sorted(ONLINE)
    assert "spdam" in listed and "svm_pauc" not in listed
