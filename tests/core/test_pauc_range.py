"""The model's pAUC range reaches the pAUC learners (core.learners.pauc_params_for)."""

import numpy as np
import pytest

from core.errors import InvalidParameter
from core.learners import available_learners, is_pauc_learner, make_learner, pauc_params_for

PAUC_LEARNERS = ("ftrl_pauc", "pmb", "svm_pauc", "poise")


def test_the_pauc_learners_are_those_that_say_so():
    found = {name for name in available_learners() if is_pauc_learner(name)}
    assert found == set(PAUC_LEARNERS)
    # logistic's alpha / beta are FTRL-Proximal's step parameters, not an FPR range
    assert pauc_params_for("logistic", (0.0, 0.02), {"alpha": 0.5}) == {"alpha": 0.5}


def test_auto_takes_the_range_itself_and_hands_it_to_its_pauc_candidates():
    params = pauc_params_for("auto", (0.0, 0.02), {})
    assert params == {"pauc_range": [0.0, 0.02]}
    learner = make_learner("auto", **params)
    specs = {spec["learner"]: spec["params"] for spec in learner.candidate_specs()}
    assert (specs["ftrl_pauc"]["alpha"], specs["ftrl_pauc"]["beta"]) == (0.0, 0.02)
    assert "beta" not in specs["logistic"] or specs["logistic"]["beta"] == 1.0
    with pytest.raises(InvalidParameter, match="contradicts") as caught:
        pauc_params_for("auto", (0.0, 0.02), {"pauc_range": [0.0, 0.1]})
    assert caught.value.param == "pauc_range"
    assert pauc_params_for("auto", (0, 0.02), {"pauc_range": [0, 0.02]}) == params


@pytest.mark.parametrize("name", PAUC_LEARNERS)
def test_the_range_sets_alpha_and_beta(name):
    params = pauc_params_for(name, (0.01, 0.02), {"random_state": 3})
    assert params == {"random_state": 3, "alpha": 0.01, "beta": 0.02}
    learner = make_learner(name, **params)
    assert (learner.alpha, learner.beta) == (0.01, 0.02)


@pytest.mark.parametrize("name", PAUC_LEARNERS)
@pytest.mark.parametrize("param, value", [("beta", 0.3), ("alpha", 0.005), ("beta", "0.02")])
def test_an_explicit_contradicting_parameter_is_refused_naming_both(name, param, value):
    with pytest.raises(InvalidParameter) as caught:
        pauc_params_for(name, [0.0, 0.02], {param: value})
    assert caught.value.param == param
    assert f"params.{param}" in str(caught.value)
    assert "pauc_range" in str(caught.value)


@pytest.mark.parametrize("name", PAUC_LEARNERS)
def test_an_explicit_parameter_equal_to_the_range_is_accepted(name):
    assert pauc_params_for(name, (0, 0.02), {"alpha": 0, "beta": 0.02}) == {
        "alpha": 0.0,
        "beta": 0.02,
    }


@pytest.mark.parametrize("name", ["spam", "solam", "oam", "opauc"])
def test_other_learners_keep_their_parameters(name):
    params = {"random_state": 1}
    effective = pauc_params_for(name, (0.0, 0.02), params)
    assert effective == params
    assert effective is not params  # a copy: the caller's dict is not the stored one


def test_no_range_keeps_the_learner_defaults():
    assert pauc_params_for("ftrl_pauc", None, {"lam": 0.01}) == {"lam": 0.01}
    assert pauc_params_for("pmb", None, {"beta": 0.3}) == {"beta": 0.3}


@pytest.mark.parametrize("bad", [(0.2, 0.1), (0.1, 0.1), (-0.1, 0.1), (0.0, 1.5), (0.1,), "x"])
def test_a_bad_range_is_refused(bad):
    with pytest.raises(InvalidParameter) as caught:
        pauc_params_for("ftrl_pauc", bad, {})
    assert caught.value.param == "pauc_range"


def test_an_unknown_learner_is_a_value_error():
    with pytest.raises(ValueError, match="unknown learner"):
        pauc_params_for("nope", (0.0, 0.1), {})


@pytest.mark.parametrize("name", ["ftrl_pauc", "pmb"])
def test_the_learner_optimises_the_range(name):
    """A narrower range changes what the learner learns (the range is not just a label)."""
    rng = np.random.default_rng(0)
    y = (rng.random(3000) < 0.1).astype(int)
    X = rng.normal(size=(3000, 6)) + y[:, None] * np.array([1.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    X[:, 2] += 3.0 * (rng.random(3000) < 0.05)  # a few far-out negatives and positives
    coefs = [
        make_learner(name, **pauc_params_for(name, pauc_range, {"random_state": 0}))
        .partial_fit(X, y)
        .coef_
        for pauc_range in ((0.0, 0.01), (0.0, 0.5))
    ]
    assert not np.allclose(coefs[0], coefs[1])
