"""``auto``'s mix before the window first decides (docs/algorithms/auto.md (auto.11)): equal
shares of the candidates that neither grow trees nor forget, none for the others."""

from __future__ import annotations

import numpy as np

from core.learners import make_learner
from core.learners._served_scale import SHRINK_EVENTS
from core.learners._tournament import initial_weights


def stream(seed, n=120, n_features=4):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + y[:, None] * np.array([1.0, -0.5, 0.0, 0.3])
    return X, y


def test_the_default_tournament_starts_with_its_two_steady_candidates():
    """logistic and ftrl_pauc share the mix; the boosted candidate (it grows trees), the
    fast logistic (it forgets) and the fast boosted candidate have no share; a window with
    too few positives decides nothing, so the weights stay so, and the served scores are
    the mix of the first two candidates' standardised scores alone."""
    X, y = stream(1)
    y[:] = 0
    y[::40] = 1  # 3 positives: below min_positives, no evaluation decides
    model = make_learner("auto", random_state=0)
    served = model.prequential_step(X, y)
    names = [spec["learner"] for spec in model.candidate_specs()]
    assert names == ["logistic", "ftrl_pauc", "boosted_embedded", "logistic", "boosted_embedded"]
    np.testing.assert_array_equal(model._own_state["served_weights"], [0.5, 0.5, 0, 0, 0])
    assert [row["weight"] for row in model.leaderboard()["candidates"]] == [0.5, 0.5, 0, 0, 0]
    alone = []
    for spec in model.candidate_specs()[:2]:
        params = {**spec["params"], "scaling": "standard"}
        alone.append(make_learner(spec["learner"], **params).prequential_step(X, y))
    expected = np.zeros(len(y))
    for scores in alone:
        for t in range(2, len(y)):
            spread = scores[:t].std()
            shrink = t / (t + SHRINK_EVENTS)
            if spread > 0:
                expected[t] += 0.5 * (scores[t] - scores[:t].mean()) / spread * shrink
    np.testing.assert_allclose(served, expected, rtol=1e-9, atol=1e-9)


def test_a_tournament_of_steady_candidates_or_of_trees_alone_starts_equal():
    linear = make_learner("auto", candidates=[{"learner": "logistic"}, {"learner": "pmb"}])
    trees = make_learner(
        "auto",
        candidates=[
            {"learner": "boosted_embedded"},
            {"learner": "logistic", "params": {"half_life": 50.0}},
        ],
    )
    X, y = stream(2, n=10)
    for model in (linear, trees):
        model.partial_fit(X, y)
        weights = model._own_state["served_weights"]
        np.testing.assert_array_equal(weights, np.full(len(weights), 1.0 / len(weights)))
    mixed = [make_learner("logistic"), make_learner("boosted_embedded"), make_learner("pmb")]
    np.testing.assert_array_equal(initial_weights(mixed), [0.5, 0.0, 0.5])
