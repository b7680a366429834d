"""A replay with the regret window on (service/engine/replay.py): the entries whose rounds
later ones push out of the window share learner calls, and the model still equals, array for
array, the one of a process that never stopped."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners._base import OnlineLearner
from core.regret import RegretWindow
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from tests.service.clock_helpers import TickingClock
from tests.service.log_helpers import engine_without_checkpoints, labelled_stream, state_of


def _traffic(engine, n_features: int) -> None:
    """One-event entries, a batch, merged requests (several rounds in one entry), kept scores
    and their labels, and one-event entries again."""
    X, y = labelled_stream(140, n_features=n_features, seed=5)
    for k in range(60):
        engine.learn("m", Batch(X[k : k + 1], y[k : k + 1], [f"e{k}"]))
    parts = [Batch(X[60:63], y[60:63], None), Batch(X[63:70], y[63:70], None)]
    engine.learning.learn_group("m", parts, [False, False])
    engine.learn("m", Batch(X[70:90], y[70:90], None))
    kept = [f"s{k}" for k in range(10)]
    engine.score("m", Batch(X[90:100], None, kept))
    engine.labels("m", kept[:5], y[90:95])
    for k in range(100, 140):
        engine.learn("m", Batch(X[k : k + 1], y[k : k + 1], [f"e{k}"]))


@pytest.mark.parametrize("regret_window", [8, 64, 500])
@pytest.mark.parametrize("learner", ["auto", "spam", "spdam"])
def test_a_replay_with_the_regret_window_equals_the_model_that_never_stopped(
    logging_store, learner, regret_window
):
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    config = ModelCreate(id="m", n_features=4, learner=learner, regret_window=regret_window)
    create_model(live, config)
    _traffic(live, 4)
    expected = state_of(live, "m")
    assert len(logging_store.load("m").entries) > 100
    actual = state_of(engine_without_checkpoints(logging_store, clock), "m")
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def test_only_the_window_s_rounds_are_recorded_and_they_share_one_learner_call(
    logging_store, monkeypatch
):
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(live, ModelCreate(id="m", n_features=4, learner="spam", regret_window=8))
    _traffic(live, 4)
    calls = []
    learner_calls = []
    original = RegretWindow.update_rounds
    original_learn_rounds = OnlineLearner.learn_rounds

    def update_rounds(self, X, y, scores, weights, sizes):
        calls.append(len(sizes))
        return original(self, X, y, scores, weights, sizes)

    def learn_rounds(self, X, y, stops, **kwargs):
        learner_calls.append(len(stops))
        return original_learn_rounds(self, X, y, stops, **kwargs)

    monkeypatch.setattr(RegretWindow, "update_rounds", update_rounds)
    monkeypatch.setattr(OnlineLearner, "learn_rounds", learn_rounds)
    state_of(engine_without_checkpoints(logging_store, clock), "m")
    # before the last 8 one-event entries, at once, the rounds up to the labels (60 one-event
    # entries, a merged entry of 2 rounds, a batch), the labels (recorded scores: an entry of
    # its own) and the 32 one-event entries after them; then the last 8, one learner call cut
    # at each of their rounds, each with its rows and served weights, recorded together
    assert calls == [63, 1, 32, 8]
    assert learner_calls == [8]
