"""``auto``'s parameters: the leaderboard shows the effective ones, bad ones are refused
naming the field, and a state of another tournament or without the mix's arrays is refused."""

from __future__ import annotations

import json

import pytest
from sklearn.base import clone

from core.errors import InvalidParameter, InvalidState
from core.learners import learner_class, make_learner
from core.learners._candidates import FTRL_PAUC_UPDATE_EVERY
from tests.core.auto_helpers import BAD_FIRST, MIX, SMALL, stream


def test_leaderboard_is_json_and_shows_effective_parameters():
    X, y = stream(8)
    model = make_learner("auto", pauc_range=[0.0, 0.3], random_state=4, **SMALL)
    model.partial_fit(X, y)
    board = json.loads(json.dumps(model.leaderboard()))
    assert board["pauc_range"] == [0.0, 0.3]
    assert board["n_seen"] == 400 and board["window"] == 60 and board["evaluated_at"] == 400
    learners = [row["learner"] for row in board["candidates"]]
    assert learners == ["logistic", "ftrl_pauc", "boosted_embedded"]
    # the parameters that differ from the learner's defaults (ftrl_pauc's alpha = 0 and
    # scaling "none" do not)
    ftrl = board["candidates"][1]["params"]
    assert ftrl == {"beta": 0.3, "random_state": 4, "update_every": FTRL_PAUC_UPDATE_EVERY}
    assert sum(row["leader"] for row in board["candidates"]) == 1
    assert all(0.0 <= row["window_pauc"] <= 1.0 for row in board["candidates"])
    assert "beta" not in board["candidates"][0]["params"]  # logistic's beta is no FPR


def test_leaderboard_lists_the_same_parameters_when_every_one_is_explicit():
    """A model read back from the store runs candidates whose every parameter is explicit
    (service.engine.model.stored_params): its leaderboard lists what the model built from
    its creation request lists, the parameters that differ from the defaults."""
    X, y = stream(9)
    created = make_learner("auto", pauc_range=[0.0, 0.3], random_state=4, **SMALL)
    created.partial_fit(X, y)
    explicit = [
        {"learner": spec["learner"],
         "params": learner_class(spec["learner"])(**spec["params"]).get_params()}
        for spec in created.candidate_specs()
    ]  # fmt: skip
    stored = make_learner(
        "auto", candidates=explicit, pauc_range=[0.0, 0.3], random_state=4, **SMALL
    ).partial_fit(X, y)
    shown = [row["params"] for row in created.leaderboard()["candidates"]]
    assert [row["params"] for row in stored.leaderboard()["candidates"]] == shown
    assert all(len(params) < 8 for params in shown)  # not every parameter


def test_a_wrapped_pauc_learner_takes_the_model_s_range_too():
    """tree_embedded around pmb: the wrapper's pauc_range reaches pmb's alpha / beta."""
    candidates = [
        {"learner": "logistic"},
        {"learner": "tree_embedded", "params": {"learner": "pmb"}},
    ]
    model = make_learner("auto", candidates=candidates, pauc_range=(0.0, 0.05))
    assert model.candidate_specs()[1]["params"]["pauc_range"] == [0.0, 0.05]
    X, y = stream(5, n=1200)
    model.partial_fit(X, y)
    inner = model._candidates[1]._inner
    assert (inner.alpha, inner.beta) == (0.0, 0.05)


def test_explicit_pauc_range_equal_to_the_model_s_is_accepted():
    candidates = [{"learner": "pmb", "params": {"beta": 0.2, "alpha": 0.0}}]
    model = make_learner("auto", candidates=candidates, pauc_range=(0.0, 0.2))
    assert model.candidate_specs()[0]["params"]["beta"] == 0.2
    # Prec@k pmb is not a pAUC learner: its beta is left alone
    precision = [{"learner": "pmb", "params": {"loss": "prec_at_k", "beta": 0.5}}]
    assert make_learner("auto", candidates=precision).candidate_specs()[0]["params"]["beta"] == 0.5


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"candidates": [{"learner": "logistic"}, {"learner": "nope"}]}, "candidates[1].learner"),
        ({"candidates": [{"learner": "spam", "params": {"nope": 1}}]}, "candidates[0].params.nope"),
        ({"candidates": [{"learner": "spam", "params": {"eta0": -1.0}}]}, "candidates[0].params"),
        ({"candidates": [{"learner": "spam"}, {"learner": "pmb", "params": {"beta": 0.3}}]},
         "candidates[1].params.beta"),
        ({"candidates": [{"learner": "ftrl_pauc", "params": {"alpha": 0.05}}]},
         "candidates[0].params.alpha"),
        ({"candidates": [{"learner": "spam", "params": {"scaling": "standard"}}]},
         "candidates[0].params.scaling"),
        ({"candidates": [{"learner": "tree_embedded",
                          "params": {"learner": "pmb", "pauc_range": [0.0, 0.3]}}]},
         "candidates[0].params.pauc_range"),
        ({"candidates": [{"learner": "tree_embedded", "params": {"pauc_range": "wide"}}]},
         "candidates[0].params.pauc_range"),
        ({"candidates": [{"learner": "auto"}]}, "candidates[0].learner"),
        ({"candidates": [{"learner": "svm_pauc"}]}, "candidates[0].learner"),
        ({"candidates": [{"learner": 3}]}, "candidates[0].learner"),
        ({"candidates": [{"learner": "spam", "param": {}}]}, "candidates[0]"),
        ({"candidates": [{"learner": "spam", "params": [1]}]}, "candidates[0].params"),
        ({"candidates": ["spam"]}, "candidates[0]"),
        ({"candidates": []}, "candidates"),
        ({"candidates": {"learner": "spam"}}, "candidates"),
        ({"pauc_range": [0.2, 0.1]}, "pauc_range"),
        ({"pauc_range": 0.1}, "pauc_range"),
        ({"pauc_range": [0.0, float("nan")]}, "pauc_range"),
    ],
)  # fmt: skip
def test_candidate_errors_name_the_field(params, field):
    with pytest.raises(InvalidParameter) as raised:
        make_learner("auto", **params)
    assert raised.value.param.startswith(field)
    assert str(raised.value).startswith(field)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"window": 1}, "window"),
        ({"evaluate_every": 0}, "evaluate_every"),
        ({"window": 10, "evaluate_every": 20}, "evaluate_every <= window"),
        ({"margin": -0.1}, "margin"),
        ({"patience": 0}, "patience"),
        ({"min_positives": 0}, "min_positives"),
        ({"min_negatives": 1.5}, "min_negatives"),
        ({"first_evaluation": 0}, "first_evaluation"),
    ],
)
def test_bad_tracking_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_learner("auto", **params)


def test_a_candidate_that_cannot_hold_the_features_is_named():
    # ftrl_pauc's reservoirs are dense rows (pmb's sparse buffer, whose memory follows the
    # events' non-zeros, holds any width)
    with pytest.raises(InvalidParameter, match=r"candidates\[1\].*ftrl_pauc keeps") as raised:
        candidates = [{"learner": "logistic"}, {"learner": "ftrl_pauc"}]
        make_learner("auto", candidates=candidates).initialize(2**20)
    assert raised.value.param == "candidates[1]"


def test_clone_and_params_are_json():
    model = make_learner("auto", candidates=BAD_FIRST, pauc_range=[0.0, 0.05])
    json.dumps(model.get_params())
    assert clone(model).get_params() == model.get_params()


@pytest.mark.parametrize("candidates", [None, [{"learner": "logistic"}, {"learner": "pmb"}]])
def test_a_state_of_another_tournament_is_refused_naming_the_array(candidates):
    """One state format: a state learned by another tournament than the parameters name (a
    default tournament that changed, another candidate list) is refused, InvalidState naming
    the first array missing or unexpected; nothing is rebuilt from it."""
    X, y = stream(12, n=300)
    other = [{"learner": "logistic"}, {"learner": "ftrl_pauc"}]
    saved = make_learner("auto", candidates=other, **MIX)
    saved.partial_fit(X[:200], y[:200])
    params = dict(saved.get_params(), candidates=candidates)
    with pytest.raises(InvalidState, match="missing|unexpected") as caught:
        learner_class("auto").from_state(params, saved.get_state())
    assert caught.value.field.startswith("c")


def test_a_state_without_the_mix_arrays_is_refused():
    X, y = stream(13)
    model = make_learner("auto", candidates=BAD_FIRST, **MIX).partial_fit(X[:300], y[:300])
    state = {key: value for key, value in model.get_state().items() if key != "score_mean"}
    with pytest.raises(InvalidState, match="missing \\['score_mean'\\]") as caught:
        learner_class("auto").from_state(model.get_params(), state)
    assert caught.value.field == "score_mean"
