"""A model's ``pauc_range`` is the range its pAUC learners optimise, on both stores."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from tests.service.conftest import create_model, events_json, make_stream


@pytest.mark.parametrize("learner", ["ftrl_pauc", "pmb"])
def test_the_models_range_reaches_the_pauc_learner(client, learner):
    info = create_model(
        client, learner=learner, pauc_range=[0.0, 0.02], scaling="none", params={"random_state": 3}
    )
    params = info["config"]["params"]
    assert (params["alpha"], params["beta"]) == (0.0, 0.02)
    # the effective hyper-parameters are what GET shows, and what the model learns with
    assert client.get("/v1/models/m").json()["config"]["params"] == params

    X, y = make_stream(400, seed=5)
    response = client.post("/v1/models/m/events?scores=true", json=events_json(X, y))
    assert response.status_code == 200, response.text
    reference = make_learner(learner, random_state=3, alpha=0.0, beta=0.02, scaling="none")
    reference.initialize(5)
    np.testing.assert_array_equal(response.json()["scores"], reference.prequential_step(X, y))


def test_an_explicit_range_equal_to_the_models_is_accepted(client):
    info = create_model(client, learner="pmb", pauc_range=[0.0, 0.05], params={"beta": 0.05})
    assert info["config"]["params"]["beta"] == 0.05


@pytest.mark.parametrize(
    ("learner", "params", "field"),
    [
        ("ftrl_pauc", {"beta": 0.3}, "params.beta"),
        ("pmb", {"beta": 0.3}, "params.beta"),
        ("ftrl_pauc", {"alpha": 0.01, "beta": 0.02}, "params.alpha"),
    ],
)
def test_a_contradicting_learner_range_is_refused_naming_both_fields(
    client, learner, params, field
):
    body = {"id": "m", "n_features": 5, "learner": learner, "params": params}
    response = client.post("/v1/models", json={**body, "pauc_range": [0.0, 0.02]})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == field
    assert "pauc_range" in problem["detail"] and field in problem["detail"]
    assert client.get("/v1/models").json() == {"models": []}


def test_learners_without_a_range_keep_their_parameters(client):
    info = create_model(client, learner="spam", pauc_range=[0.0, 0.02], params={"l2": 0.001})
    assert "beta" not in info["config"]["params"]
    assert info["config"]["params"]["l2"] == 0.001
