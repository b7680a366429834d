"""Every online learner is served: created over HTTP, learns, scores, and its whole state
round-trips through the store (Redis: one hash field per array) bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import available_learners, learner_class, make_learner
from tests.service.conftest import create_model, events_json, make_stream

ONLINE = [n for n in available_learners() if getattr(learner_class(n), "online", True)]


@pytest.mark.parametrize("name", ONLINE)
def test_learner_served_bit_for_bit(client, name):
    create_model(client, name, n_features=4, learner=name)  # default scaling: standard
    X, y = make_stream(60, n_features=4, seed=2)
    first = client.post(f"/v1/models/{name}/events?scores=true", json=events_json(X[:30], y[:30]))
    assert first.status_code == 200, first.text
    # a fresh process cache: the second batch is learned from the state read back from the store
    client.app.state.engine._cache.clear()
    second = client.post(f"/v1/models/{name}/events?scores=true", json=events_json(X[30:], y[30:]))
    assert second.status_code == 200, second.text

    reference = make_learner(name, scaling="standard")
    reference.initialize(4)
    expected = np.concatenate(
        [reference.prequential_step(X[:30], y[:30]), reference.prequential_step(X[30:], y[30:])]
    )
    got = np.array(first.json()["scores"] + second.json()["scores"])
    np.testing.assert_array_equal(got, expected)
    stored = client.app.state.store.load(name).arrays
    for key, value in reference.get_state().items():
        np.testing.assert_array_equal(stored[f"learner:{key}"], value, err_msg=key)
        assert stored[f"learner:{key}"].dtype == value.dtype
    scores = client.post(f"/v1/models/{name}/score", json=events_json(X[:5])).json()["scores"]
    np.testing.assert_array_equal(scores, reference.decision_function(X[:5]))


def test_batch_solver_is_refused(client):
    response = client.post("/v1/models", json={"id": "b", "n_features": 3, "learner": "svm_pauc"})
    assert response.status_code == 422 and response.json()["field"] == "learner"
