"""``auto``'s default tournament: the candidates it chooses by the model's width, the same
as a model created over HTTP, and its boosted tree candidate served as the naive mix says."""

from __future__ import annotations

import numpy as np

from core.learners import learner_class, make_learner
from core.learners._candidates import WIDE_FEATURES
from tests.core.auto_helpers import first_install, naive_mix, standalone_scores, stream
from tests.core.cases import states_equal


def test_the_library_default_is_the_http_model_s():
    """One default: ``make_learner("auto")`` runs what a model created over HTTP with dense
    features runs (drift tracking, the fast candidate, standard scaling)."""
    model = make_learner("auto").initialize(4)
    assert model.track_drift is True and model.scaling == "standard"
    assert "drift_since" in model.state_ and "scaler_mean" in model.state_
    assert [spec["learner"] for spec in model.candidate_specs()] == [
        "logistic", "ftrl_pauc", "boosted_embedded", "logistic", "boosted_embedded",
    ]  # fmt: skip
    assert model.candidate_specs()[3]["params"]["half_life"] == 2000
    plain = make_learner("auto", track_drift=False).initialize(4)
    assert not any(key.startswith("drift") for key in plain.state_)
    assert len(plain.candidate_specs()) == 3


def test_the_default_tournament_follows_the_model_s_width():
    narrow = make_learner("auto", track_drift=False).initialize(WIDE_FEATURES)
    wide = make_learner("auto", track_drift=True).initialize(WIDE_FEATURES + 1)
    assert [spec["learner"] for spec in narrow.candidate_specs()] == [
        "logistic",
        "ftrl_pauc",
        "tree_embedded",
    ]
    assert [spec["learner"] for spec in wide.candidate_specs()] == [
        "logistic",
        "pmb",
        "logistic",
        "logistic",
    ]
    # the third: the Laplace solver on the columns in use, 128 slots whatever the width
    assert wide.candidate_specs()[2]["params"]["max_columns"] == 128
    assert wide.state_["c2:covariance"].shape == (129, 129)
    assert "c1:buffer_fill" in wide.state_ and "c1:n_solver_steps" in narrow.state_
    # the width-chosen tournament round-trips through the state
    twin = learner_class("auto").from_state(wide.get_params(), wide.get_state())
    assert twin.candidate_specs() == wide.candidate_specs()


def test_the_third_candidate_is_boosted_up_to_its_width_limit_then_a_tree():
    """Up to TREE_REFIT_FEATURES the third candidate is the boosted one, its buffer empty
    until events come (it grows as it fills, up to 8,000 rows); wider, the tree embedding
    fitted once on 2,000 (the buffer stays within what the first fit takes at 1,000
    features), relearning at its fit, depth 8."""
    from core.learners._candidates import TREE_REFIT_FEATURES

    boosted = make_learner("auto").initialize(TREE_REFIT_FEATURES)
    once = make_learner("auto").initialize(TREE_REFIT_FEATURES + 1)
    assert boosted.candidate_specs()[2]["learner"] == "boosted_embedded"
    assert once.candidate_specs()[2]["learner"] == "tree_embedded"
    assert boosted.state_["c2:buffer_X"].shape == (0, TREE_REFIT_FEATURES)  # grows as it fills
    assert once.state_["c2:buffer_X"].shape == (2000, TREE_REFIT_FEATURES + 1)
    assert once.candidate_specs()[2]["params"].get("refit_events") is None
    assert once.candidate_specs()[2]["params"]["relearn"] is True
    assert once.state_["c2:tree_left"].shape == (511,)  # depth 8
    for model in (boosted, once):
        twin = learner_class("auto").from_state(model.get_params(), model.get_state())
        assert twin.candidate_specs() == model.candidate_specs()


def test_the_default_tournament_fits_its_tree_and_serves_the_naive_mix_of_its_candidates():
    """The default's third candidate (logistic on boosted trees' leaves) fits its trees from the
    250th, 375th, 563rd, 845th, 1,268th and 1,902nd events inside auto as it does alone: auto's
    served scores are the naive mix of the three candidates run on their own, batch sizes do not
    matter, and a state saved after the fits continues bit for bit."""
    X, y = stream(21, n=2600, n_features=4, positive_rate=0.1)
    X[:, 3] = X[:, 0] * X[:, 1]  # an interaction: something for the tree's paths to find
    params = {"random_state": 3, "window": 800, "evaluate_every": 400, "temperature": 0.05}
    model = make_learner("auto", **params)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 1500), slice(1500, 2001), slice(2001, 2300)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    assert [spec["learner"] for spec in model.candidate_specs()][2] == "boosted_embedded"
    # due at 250 (installed L(N) = 32 events later), 375, 563, 845, 1,268, 1,902 (each half
    # as many events again as the last learned; L = 32, 32, 35, 52, 79, 118)
    assert model._candidates[2].fit_points_ == (1902, 2020)
    reference = standalone_scores(model, inputs, y, X)
    # before the window decides, logistic and ftrl_pauc share the mix; the tree candidates
    # and the forgetting one have none (auto.11)
    # and the boosted candidate joins the mix at its first fit if it holds no share (auto.14)
    initial = np.array([0.5, 0.5, 0.0, 0.0, 0.0])
    admissions = {first_install(model, 2, X, y): [2]}
    expected, weights = naive_mix(reference, y[:2300], (0.0, 0.1), 800, 400, 0.05, first=50,
                                  min_positives=10, min_negatives=10, initial=initial,
                                  admissions=admissions, steady=initial > 0)  # fmt: skip
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        [row["weight"] for row in model.leaderboard()["candidates"]], weights, rtol=1e-12
    )
    assert model.raw_weights() is None  # the leaves are not linear in x
    # one event at a time through the fit, and a round trip after it
    singles = make_learner("auto", **params)
    one_by_one = [singles.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(2300)]
    np.testing.assert_array_equal(np.concatenate(one_by_one), np.concatenate(served))
    twin = learner_class("auto").from_state(model.get_params(), model.get_state())
    np.testing.assert_array_equal(
        twin.prequential_step(X[2300:], y[2300:]), model.prequential_step(X[2300:], y[2300:])
    )
    states_equal(twin.get_state(), model.get_state())
