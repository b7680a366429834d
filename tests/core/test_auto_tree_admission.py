"""``auto``'s served mix takes in a boosted candidate at its first fit (docs/algorithms/auto.md
(auto.14)), against the naive mix of the candidates run on their own and the install counts
those standalone candidates show."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import learner_class, make_learner
from core.learners._served_scale import SHRINK_EVENTS
from core.learners._tree_admission import awaiting_first_fit, events_to_first_fit_point
from core.preprocessing import scale_batch
from tests.core.auto_helpers import first_install, learn, naive_mix, rare_stream, standalone_scores
from tests.core.cases import states_equal


def test_the_boosted_candidate_joins_the_undecided_mix_at_its_first_fit_as_the_naive_mix():
    """No evaluation decides; the boosted candidate gets the mean share of logistic and
    ftrl_pauc at the event its standalone twin installs its first fit, the fast boosted one
    (it forgets) none; the served scores and new rows' scores are the naive mix's."""
    X, y = rare_stream(1)
    model = make_learner("auto", random_state=2)
    served, inputs = learn(model, X, y, [100, 150, 300, 150])
    installed = first_install(model, 2, X, y)
    assert installed is not None and 250 < installed < len(y)
    assert first_install(model, 4, X, y) is not None  # it fits too, and stays out
    reference = standalone_scores(model, inputs, y, X)
    expected, weights = naive_mix(reference, y, (0.0, 0.1), 5000, 1000, 0.1, first=50,
                                  min_positives=10, min_negatives=10,
                                  initial=np.array([0.5, 0.5, 0.0, 0.0, 0.0]),
                                  admissions={installed: [2]},
                                  steady=[True, True, False, False, False])  # fmt: skip
    np.testing.assert_allclose(served, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(weights, np.array([1, 1, 1, 0, 0]) / 3, rtol=1e-12)
    board = model.leaderboard()
    np.testing.assert_allclose([row["weight"] for row in board["candidates"]], weights)
    assert board["evaluated_at"] == 400 and board["leader"] == 0  # nothing decided
    # the share starts with the event after the install: the naive mix without it differs
    # from there on only
    without, _ = naive_mix(reference, y, (0.0, 0.1), 5000, 1000, 0.1, first=50,
                           min_positives=10, min_negatives=10,
                           initial=np.array([0.5, 0.5, 0.0, 0.0, 0.0]))  # fmt: skip
    np.testing.assert_allclose(served[:installed], without[:installed], rtol=1e-9, atol=1e-9)
    assert np.all(np.abs(served[installed:] - without[installed:]) > 1e-9)
    # new rows: the three shares over the statistics of every event learned
    # (the linear candidates score the rows auto scaled, the boosted one the rows as posted)
    rows = [scale_batch("standard", model.state_, X, learn=False)] * 2 + [X]
    terms = [
        (model._candidates[k].decision_function(rows[k]) - reference[k].mean()) / reference[k].std()
        for k in (0, 1, 2)
    ]
    shrink = len(y) / (len(y) + SHRINK_EVENTS)
    np.testing.assert_allclose(model.decision_function(X), shrink * sum(terms) / 3, rtol=1e-9,
                               atol=1e-9)  # fmt: skip


@pytest.mark.parametrize(
    "sizes",
    [[700], [1] * 700, [7, 243, 1, 63, 1, 385], [250, 64, 386], [313, 2, 385]],
    ids=["whole", "singles", "uneven", "at_the_fit_points", "across_the_install"],
)
def test_the_admission_holds_bit_for_bit_across_batchings(sizes):
    X, y = rare_stream(3)
    whole = make_learner("auto", random_state=0)
    expected, _ = learn(whole, X, y, [len(y)])
    model = make_learner("auto", random_state=0)
    served, _ = learn(model, X, y, sizes)
    np.testing.assert_array_equal(served, expected)
    states_equal(model.get_state(), whole.get_state())
    assert model._own_state["served_weights"][2] > 0.0


def test_a_state_saved_while_the_first_fit_is_pending_continues_bit_for_bit():
    X, y = rare_stream(4)
    model = make_learner("auto", random_state=1)
    model.prequential_step(X[:280], y[:280])
    assert model._candidates[2].fit_due() and model._own_state["served_weights"][2] == 0.0
    twin = learner_class("auto").from_state(model.get_params(), model.get_state())
    np.testing.assert_array_equal(
        twin.prequential_step(X[280:], y[280:]), model.prequential_step(X[280:], y[280:])
    )
    states_equal(twin.get_state(), model.get_state())
    assert twin._own_state["served_weights"][2] > 0.0


def test_no_admission_with_temperature_zero_or_for_a_candidate_that_forgets():
    X, y = rare_stream(5)
    leader = make_learner("auto", temperature=0.0, random_state=0)
    leader.prequential_step(X, y)
    assert awaiting_first_fit(leader._candidates, leader._own_state["served_weights"], 0.0) == []
    np.testing.assert_array_equal(leader._own_state["served_weights"], [0.5, 0.5, 0, 0, 0])
    forgetting = make_learner(
        "auto",
        track_drift=False,
        candidates=[
            {"learner": "logistic"},
            {"learner": "boosted_embedded", "params": {"params": {"half_life": 100.0}}},
        ],
    )
    forgetting.prequential_step(X, y)
    assert forgetting._candidates[1].fits_ > 0
    np.testing.assert_array_equal(forgetting._own_state["served_weights"], [1.0, 0.0])


def test_the_fit_points_ahead_are_where_the_candidate_alone_falls_due_and_installs():
    """events_to_first_fit_point against the boosted candidate learning alone, one event at a
    time: the fall-due, then the install, exactly where it says."""
    X, y = rare_stream(6)
    candidate = make_learner("boosted_embedded", scaling="standard").initialize(X.shape[1])
    assert awaiting_first_fit([candidate], np.zeros(1), 0.1) == [0]
    seen, points = 0, []
    while candidate.fits_ == 0:
        ahead = events_to_first_fit_point(candidate, y[seen:])
        assert ahead is not None
        for t in range(seen, seen + ahead):
            due, fits = candidate.fit_due(), candidate.fits_
            candidate.prequential_step(X[t : t + 1], y[t : t + 1])
            if t + 1 < seen + ahead:  # nothing happens before the point ahead
                assert (candidate.fit_due(), candidate.fits_) == (due, fits)
        seen += ahead
        points.append((seen, candidate.fit_due(), candidate.fits_))
    positives_at_due = int(y[: points[0][0]].sum())
    assert points[0][1:] == (True, 0) and positives_at_due >= 2 and points[0][0] >= 250
    assert points[1][1:] == (False, 1) and points[1][0] - points[0][0] == 32  # L(N)
    assert events_to_first_fit_point(candidate, y[:0]) is None
