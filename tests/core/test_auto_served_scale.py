"""The served scale of auto's mix (docs/algorithms/auto.md (auto.9)): after ``n`` events,
``n / (n + N) * sum_k w_k (s_k - m_k) / sd_k``, checked against plain loops over the
candidates run alone, on the first events where the factor matters most."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from core.learners._served_scale import SHRINK_EVENTS
from core.preprocessing import scale_batch
from tests.core.auto_helpers import learn, standalone_scores, stream

#: two steady candidates (auto.11: one half each); 45 events end before the first evaluation
#: (50), so the weights stay the start's
STEADY = [{"learner": "logistic"}, {"learner": "pmb"}]
EVENTS = 45


def naive_served(scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(auto.9) event by event: each candidate's score minus the mean of its scores before it,
    over their population standard deviation (0 while fewer than two or no spread), weighted,
    times ``t / (t + N)`` after ``t`` events."""
    served = np.zeros(scores.shape[1])
    for t in range(scores.shape[1]):
        total = 0.0
        for k in range(scores.shape[0]):
            past = [float(score) for score in scores[k, :t]]
            if t < 2:
                continue
            mean = sum(past) / t
            spread = (sum((score - mean) ** 2 for score in past) / t) ** 0.5
            if weights[k] > 0 and spread > 0:
                total += weights[k] * (scores[k, t] - mean) / spread
        served[t] = total * t / (t + SHRINK_EVENTS)
    return served


@pytest.mark.parametrize("sizes", [[EVENTS], [1] * EVENTS, [1, 2, 3, 30, 9]])
def test_the_first_events_are_served_shrunk_as_the_naive_loop(sizes):
    X, y = stream(5, n=EVENTS)
    model = make_learner("auto", candidates=STEADY, random_state=0)
    served, inputs = learn(model, X, y, sizes)
    reference = standalone_scores(model, inputs, y)
    weights = np.array([0.5, 0.5])
    np.testing.assert_array_equal(model._own_state["served_weights"], weights)
    expected = naive_served(reference, weights)
    np.testing.assert_allclose(served, expected, rtol=1e-9, atol=1e-12)

    # new rows: the same mix with the statistics, and the factor, of every event learned
    rows = scale_batch(model.scaling, model.state_, X, learn=False)
    shrink = EVENTS / (EVENTS + SHRINK_EVENTS)
    terms = [
        (model._candidates[k].decision_function(rows) - reference[k].mean()) / reference[k].std()
        for k in (0, 1)
    ]
    np.testing.assert_allclose(
        model.decision_function(X), shrink * 0.5 * (terms[0] + terms[1]), rtol=1e-9, atol=1e-12
    )
    expected_coef = shrink * sum(
        0.5 / reference[k].std() * model._candidates[k].coef_ for k in (0, 1)
    )
    np.testing.assert_allclose(model.coef_, expected_coef, rtol=1e-9, atol=1e-12)


def test_a_row_scored_before_it_is_learned_is_served_the_same():
    """``decision_function`` after ``n`` events and the prequential score of event ``n + 1``
    take the same factor and statistics (no online scaling: it takes the row itself first)."""
    X, y = stream(6, n=EVENTS)
    model = make_learner("auto", candidates=STEADY, scaling="none", random_state=0)
    model.initialize(X.shape[1])
    for t in range(EVENTS):
        before = model.decision_function(X[t : t + 1])
        served = model.prequential_step(X[t : t + 1], y[t : t + 1])
        np.testing.assert_allclose(served, before, rtol=1e-9, atol=1e-12)
