"""The random state declared once (``core.learners._random_draws``): a learner that says
``draws_random = True`` holds ``rng_state``, seeded by ``random_state`` and declared, in its
own state and in a composite's, and one that does not holds none."""

from __future__ import annotations

import numpy as np
import pytest

from core._kernels.random import seed_state
from core.learners import available_learners, learner_class, make_learner
from core.learners._state import RNG_STATE
from core.learners.pmb import PMB
from core.learners.solam import SOLAM
from tests.core.cases import stream

#: the learners whose kernels draw random numbers (reservoirs, a solver's shuffles)
DRAWING = {"ftrl_pauc", "oam", "pmb", "poise", "spdam"}


class DrawingSolam(SOLAM):
    """A learner that inherits its state hooks from one that does not draw."""

    draws_random = True


def test_the_learners_that_draw_are_the_ones_that_say_so():
    assert {name for name in available_learners() if learner_class(name).draws_random} == DRAWING


@pytest.mark.parametrize("name", sorted(available_learners()))
def test_a_learner_holds_and_declares_a_generator_if_it_draws(name):
    learner = learner_class(name)(random_state=12)
    state = learner.initialize(4).state_
    invariants = learner._state_invariants(4)
    if learner.draws_random:
        assert state["rng_state"].dtype == np.uint64
        np.testing.assert_array_equal(state["rng_state"], seed_state(12))
        assert invariants["rng_state"] is RNG_STATE
    else:
        assert "rng_state" not in state
        assert "rng_state" not in invariants


def test_no_seed_is_seed_zero():
    assert PMB().initialize(3).state_["rng_state"].tolist() == [0]


def test_inherited_hooks_of_a_learner_that_did_not_draw_add_the_generator():
    X, y = stream(3)
    learner = DrawingSolam(random_state=7).partial_fit(X, y)
    assert learner.state_["rng_state"].tolist() == [7]
    assert "rng_state" not in SOLAM().initialize(3).state_
    again = DrawingSolam.from_state(learner.get_params(), learner.get_state())
    np.testing.assert_array_equal(again.decision_function(X), learner.decision_function(X))
    state = learner.get_state()
    state["rng_state"] = state["rng_state"].astype(np.int64)
    with pytest.raises(ValueError, match="rng_state"):
        DrawingSolam.from_state(learner.get_params(), state)


def test_a_subclass_cannot_stop_drawing():
    with pytest.raises(TypeError, match="draws_random"):

        class Quiet(PMB):  # noqa: F841 (refused when it is defined)
            draws_random = False


def test_a_composite_declares_the_generators_of_its_parts():
    candidates = [{"learner": name, "params": {"random_state": 5}} for name in ("oam", "pmb")]
    X, y = stream(3)
    auto = make_learner("auto", candidates=candidates).partial_fit(X, y)
    invariants = auto._state_invariants(auto.n_features_in_)
    for prefix in ("c0:", "c1:"):
        assert invariants[prefix + "rng_state"] is RNG_STATE
    again = learner_class("auto").from_state(auto.get_params(), auto.get_state())
    np.testing.assert_array_equal(again.decision_function(X), auto.decision_function(X))
