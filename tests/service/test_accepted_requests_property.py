"""No sequence of requests leaves a model the server then refuses to load.

Random sequences of ``/events`` and ``/score`` requests on the real ASGI app, with legal
values at the edges (the feature bound, subnormals, mixed magnitudes, runs of one extreme
value) and nulls, under every ``missing_values`` policy and every learner the service serves
(the registry's online learners; ``auto`` with more examples: it is what a model created with
no parameters runs).  A request is either accepted or refused with a 422 that changes nothing
(a null refused as missing); after each one the model scores, reports its metrics, and its
snapshot exported then imported gives a model that scores the same.  (The library path has
no missing values: ``core`` refuses NaN; tests/core/test_extreme_values.py drives every
learner through extreme values.)
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.validation import FEATURE_BOUND
from service.models import servable_learners
from tests.service.conftest import put_snapshot, started_apps

N_FEATURES = 3
POLICIES = ["refuse", "zero", "mean"]

#: legal values (within the feature bound): extremes first (the ones hypothesis draws most
#: often), subnormals, mixed magnitudes
LEGAL = [FEATURE_BOUND, -FEATURE_BOUND, 9.999999999999999e99, 1e99, -1e99, 1e50, -1e50]
LEGAL += [5e-324, -5e-324, 2.2e-308, 1e-200, 0.0, -0.0, 1.0, -1.0, 3.5, 1e10, 1.7e18]


@st.composite
def request_sequences(draw):
    """1 to 5 ``/events`` or ``/score`` requests of 1 to 3 events, each sent 1, 4 or 16 times
    over; the values of one sequence come from a palette of 1 to 3 legal values and null, so
    that runs of one extreme value in a feature (what rounds a sum of them past the bound)
    are common."""
    palette = draw(st.lists(st.sampled_from(LEGAL), min_size=1, max_size=3, unique=True))
    value = st.sampled_from([*palette, None])  # None: a missing value (JSON null)
    row = st.lists(value, min_size=N_FEATURES, max_size=N_FEATURES)
    request = st.tuples(
        st.sampled_from(["events", "score"]),
        st.lists(st.tuples(row, st.booleans()), min_size=1, max_size=3),
        st.sampled_from([16, 4, 1]),
    )
    return draw(st.lists(request, min_size=1, max_size=5))


#: ordinary events, scored after every request (with a null under a policy that fills it)
PROBE = [[0.5, -1.0, 2.0], [1.0, 1.0, 1.0]]
PROBE_WITH_NULL = [[None, -1.0, 2.0], [1.0, 1.0, None]]

_model_ids = itertools.count()


@pytest.fixture(scope="module")
def client():
    with started_apps(store="memory") as build:
        yield build()


def _problem(response) -> str:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    return response.json()["detail"]


def _scores(client, model_id: str, rows) -> list[float]:
    body = {"events": [{"x": row} for row in rows]}
    response = client.post(f"/v1/models/{model_id}/score", json=body)
    assert response.status_code == 200, response.text
    scores = response.json()["scores"]
    assert all(np.isfinite(scores)), scores
    return scores


def _probe(policy: str):
    return PROBE if policy == "refuse" else PROBE + PROBE_WITH_NULL


def _state(client, model_id: str, policy: str):
    """What a refused request must leave as it was: the version, the counts, and the scores
    of the probe (its nulls filled with the current means under ``mean``)."""
    model = client.get(f"/v1/models/{model_id}").json()
    return model["version"], model["counts"], _scores(client, model_id, _probe(policy))


def _check_usable(client, model_id: str, policy: str) -> None:
    """The model scores, reports, and round-trips through its snapshot."""
    probe = _probe(policy)
    scores = _scores(client, model_id, probe)
    assert client.get(f"/v1/models/{model_id}/metrics").status_code == 200
    exported = client.get(f"/v1/models/{model_id}/snapshot")
    assert exported.status_code == 200, exported.text
    imported = put_snapshot(client, f"{model_id}-copy", exported.content)
    assert imported.status_code in (200, 201), imported.text
    assert _scores(client, f"{model_id}-copy", probe) == scores


def drive(client, learner: str, policy: str, requests) -> None:
    model_id = f"p{next(_model_ids)}"
    create = {"id": model_id, "n_features": N_FEATURES, "learner": learner,
              "missing_values": policy}  # fmt: skip
    assert client.post("/v1/models", json=create).status_code == 201
    try:
        for path, events, repeat in requests:
            body = {"events": [{"x": x, "y": int(y)} for x, y in events] * repeat}
            before = _state(client, model_id, policy)
            response = client.post(f"/v1/models/{model_id}/{path}", json=body)
            has_null = any(value is None for x, _ in events for value in x)
            if response.status_code != 200:
                detail = _problem(response)
                if policy == "refuse" and has_null:
                    assert "is missing (null)" in detail, detail
                else:  # a learner's overflow, or a score too large for its weights
                    assert ("beyond" in detail) or ("not finite" in detail), detail
                assert _state(client, model_id, policy) == before
            else:
                assert not (policy == "refuse" and has_null), response.text
            _check_usable(client, model_id, policy)
    finally:
        client.delete(f"/v1/models/{model_id}")
        client.delete(f"/v1/models/{model_id}-copy")


PROPERTY = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.mark.parametrize("policy", POLICIES)
@settings(PROPERTY, max_examples=25)
@given(requests=request_sequences())
def test_the_default_learner_stays_usable_after_any_requests(client, policy, requests):
    drive(client, "auto", policy, requests)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("learner", [name for name in servable_learners() if name != "auto"])
@settings(PROPERTY, max_examples=4)
@given(requests=request_sequences())
def test_every_learner_stays_usable_after_any_requests(client, learner, policy, requests):
    drive(client, learner, policy, requests)
