"""POISE's pAUC game (docs/algorithms/poise.md): the kernel against a naive stream (also over
every configuration: tests/core/test_naive_references.py), the reservoir size from the Beta
order statistic, the pAUC range reaching the learner, ranking quality."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from core.learners import make_learner, pauc_params_for
from core.learners.poise import reservoir_size
from core.metrics import pauc
from tests.core.naive.poise import NaivePOISE, rank


def test_many_steps_and_replacements_match_the_naive_game():
    rng = np.random.default_rng(5)
    y = np.where(rng.random(1500) < 0.1, 1, -1)
    X = rng.normal(size=(1500, 4)) + 0.8 * (y[:, None] > 0)
    X[::17] = np.round(X[::17])
    params = {"beta": 0.2, "max_negatives": 40, "positive_capacity": 15, "random_state": 2}
    model = make_learner("poise", **params)
    reference = NaivePOISE(4, 0.0, 0.2, 0.3, True, 0.1, 40, 15, 2, auc_weight=30.0,
                           auc_positives=8)  # fmt: skip
    assert model.average and reference.average is not None  # the served model is the average
    assert (model.auc_weight, model.auc_positives) == (30.0, 8)  # the defaults: both terms
    for batch in np.array_split(np.arange(1500), 7):
        np.testing.assert_allclose(
            model.prequential_step(X[batch], y[batch]), reference.learn(X[batch], y[batch]),
            rtol=1e-10, atol=1e-10,
        )  # fmt: skip
    assert model.state_["adversary_seen"][0] > 40 and model.state_["pos_seen"][0] > 15
    assert model.state_["n_updates"][0] == reference.updates > 100
    assert 0 < model.state_["auc_steps"][0] == reference.auc_steps < reference.updates
    np.testing.assert_allclose(model.coef_, reference.served(), rtol=1e-10, atol=1e-10)
    assert not np.allclose(model.coef_, model.state_["w"])  # the average is not the iterate


@pytest.mark.parametrize("fraction", [0.01, 0.02, 0.05, 0.1, 0.2])
def test_reservoir_gives_the_order_statistic_its_mean_and_spread(fraction):
    """k-th largest of m uniforms: Beta(k, m - k + 1) for the fraction above it (poise.4)."""
    m = reservoir_size(0.0, fraction, 0.1, 10**6)
    k = rank(fraction, m)
    above = stats.beta(k, m - k + 1)
    assert above.mean() == pytest.approx(fraction, rel=0.01)
    assert above.std() == pytest.approx(fraction / 10, rel=0.02)
    assert {0.01: 9898, 0.02: 4898, 0.05: 1898, 0.1: 898, 0.2: 398}[fraction] == m


def test_the_lower_bound_sizes_the_reservoir_and_the_cap_applies():
    assert reservoir_size(0.02, 0.05, 0.1, 10**6) == 4898
    assert reservoir_size(0.0, 0.001, 0.1, 10000) == 10000
    assert make_learner("poise", alpha=0.02, beta=0.05).n_negatives == 4898


@pytest.mark.parametrize("beta", [5e-324, 1e-310, 1e-300])
def test_a_tiny_range_takes_the_cap_instead_of_dividing_by_zero(beta):
    # sd_ratio**2 * beta underflows to 0 for a subnormal beta: the size is the cap
    assert reservoir_size(0.0, beta, 0.1, 10000) == 10000
    learner = make_learner("poise", alpha=0.0, beta=beta, max_negatives=50)
    learner.initialize(3)
    assert learner.n_negatives == 50


def test_the_models_pauc_range_reaches_poise():
    params = pauc_params_for("poise", (0.02, 0.05), {"lam": 0.1})
    assert params == {"lam": 0.1, "alpha": 0.02, "beta": 0.05}
    learner = make_learner("poise", **params)
    assert learner.optimises_pauc and learner.n_negatives == 4898


def test_no_step_without_a_positive_or_an_earlier_negative():
    model = make_learner("poise")
    X = np.random.default_rng(0).normal(size=(50, 3))
    start = model.initialize(3).coef_
    model.partial_fit(X, -np.ones(50, dtype=int))
    np.testing.assert_array_equal(model.coef_, start)
    assert model.state_["adversary_fill"][0] == 50


def test_learns_the_top_of_a_rare_positive_stream():
    rng = np.random.default_rng(3)
    y = np.where(rng.random(20000) < 0.05, 1, -1)
    X = rng.normal(size=(20000, 10)) + 1.2 * (y[:, None] > 0) * np.linspace(1, -1, 10)
    model = make_learner("poise").fit(X[:15000], y[:15000])
    held_out = pauc(y[15000:], model.decision_function(X[15000:]), 0.0, 0.1)
    best = pauc(y[15000:], X[15000:] @ np.linspace(1, -1, 10), 0.0, 0.1)
    assert held_out > 0.9 * best


def test_a_first_step_many_half_lives_into_the_stream_does_not_flip_the_model():
    """2,000 negatives before the first positive with half_life = 50: the scaled step counter
    of (poise.12) is 1 * 50 / 2001 there: below 1 the shrink 1 - eta lam turned negative (w
    flipped), at 1 a step without active pairs left w = 0, where the adversary never fires
    again (pAUC 0.1 here).  Kept at min(k, 2), the model ranks the positives' direction
    first.  The game alone (``auc_weight=0``): the all-negatives term steps on every negative,
    so its steps are never rarer than one per half-life."""
    rng = np.random.default_rng(4)
    direction = np.array([1.0, 0.5, 0.0])
    y = np.r_[np.full(2000, -1), np.where(rng.random(2000) < 0.2, 1, -1)]
    X = rng.normal(size=(4000, 3)) + 1.5 * (y[:, None] > 0) * direction
    params = {"half_life": 50.0, "beta": 0.2, "max_negatives": 40, "positive_capacity": 20,
              "auc_weight": 0.0}  # fmt: skip
    model, reference = make_learner("poise", **params), NaivePOISE(3, 0.0, 0.2, 0.3, True, 0.1,
                                                                   40, 20, None, 50.0)  # fmt: skip
    np.testing.assert_allclose(model.prequential_step(X, y), reference.learn(X, y),
                               rtol=1e-10, atol=1e-10)  # fmt: skip
    assert model.state_["n_updates"][0] > 0
    X_test = rng.normal(size=(2000, 3))
    y_test = np.where(rng.random(2000) < 0.2, 1, -1)
    X_test += 1.5 * (y_test[:, None] > 0) * direction
    assert pauc(y_test, model.decision_function(X_test), 0.0, 0.2) > 0.3


def test_a_state_without_the_auc_term_s_array_is_refused_naming_it():
    """One state format: a state that lacks ``auc_steps`` (alone, or as a part of
    ``tree_embedded`` and ``auto``) is refused, naming the array; nothing is rebuilt."""
    from core.errors import InvalidState
    from core.learners import learner_class

    rng = np.random.default_rng(10)
    y = np.where(rng.random(400) < 0.15, 1, -1)
    X = rng.normal(size=(400, 3)) + 0.8 * (y[:, None] > 0)
    alone = make_learner("poise", beta=0.2).partial_fit(X, y)
    embedded = make_learner("tree_embedded", n_fit_events=60, max_depth=2).partial_fit(X, y)
    tournament = make_learner(
        "auto", candidates=[{"learner": "logistic"}, {"learner": "poise"}]
    ).partial_fit(X, y)
    for model, key in ((alone, "auc_steps"), (embedded, "inner:auc_steps"),
                       (tournament, "c1:auc_steps")):  # fmt: skip
        state = {k: v for k, v in model.get_state().items() if k != key}
        with pytest.raises(InvalidState, match=f"missing \\['{key}'\\]") as caught:
            learner_class(model.name).from_state(model.get_params(), state)
        assert caught.value.field == key
