"""A dense model created over HTTP scales a rare count as the library's ``auto`` does: the
floor of ``standard`` scaling (docs/algorithms/scaling.md (scaling.2)) and the two arrays it
keeps are the same on both sides."""

from __future__ import annotations

import numpy as np

from core.learners import make_learner
from tests.core.scaling_helpers import mixed
from tests.service.conftest import events_json


def test_a_dense_model_over_http_scales_a_rare_count_as_the_library(client):
    X = mixed(1200, seed=5)
    y = (X[:, 4] + 2.0 * X[:, 0] > 6.0).astype(np.int64)
    response = client.post(
        "/v1/models", json={"id": "m", "n_features": 6, "params": {"random_state": 2}}
    )
    assert response.status_code == 201, response.text
    assert response.json()["config"]["scaling"] == "standard"
    scores = []
    for start in range(0, len(y), 300):
        batch = slice(start, start + 300)
        response = client.post(
            "/v1/models/m/events?scores=true", json=events_json(X[batch], y[batch])
        )
        assert response.status_code == 200, response.text
        scores.extend(response.json()["scores"])

    reference = make_learner("auto", random_state=2, pauc_range=[0.0, 0.1])
    reference.initialize(6)
    np.testing.assert_array_equal(scores, reference.prequential_step(X, y))
    arrays = client.app.state.engine.repository.rebuilt("m").arrays()
    for key in ("scaler_present", "scaler_magnitude"):
        np.testing.assert_array_equal(arrays[f"learner:{key}"], reference.state_[key])
    assert reference.state_["scaler_magnitude"][0] == -1.0  # the count is a number
    served = client.post("/v1/models/m/score", json=events_json(X[:9])).json()["scores"]
    np.testing.assert_array_equal(served, reference.decision_function(X[:9]))
