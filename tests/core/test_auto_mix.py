"""``auto``'s served mix (docs/algorithms/auto.md (auto.9)-(auto.13)) against its naive
reference, across batchings and a round trip, and the weights and temperatures it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import learner_class, make_learner
from core.learners._served_scale import SHRINK_EVENTS
from core.metrics import auc
from core.preprocessing import scale_batch
from tests.core.auto_helpers import BAD_FIRST, MIX, SMALL, naive_mix, standalone_scores, stream
from tests.core.cases import states_equal


@pytest.mark.parametrize("scaling", ["none", "standard"])
def test_the_mix_agrees_with_the_naive_reference(scaling):
    X, y = stream(11)
    model = make_learner("auto", candidates=BAD_FIRST, scaling=scaling, **MIX)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 1), slice(1, 7), slice(7, 150), slice(150, 151), slice(151, None)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    reference = standalone_scores(model, inputs, y)
    expected, weights = naive_mix(reference, y, (0.0, 0.1), MIX["window"],
                                  MIX["evaluate_every"], MIX["temperature"])  # fmt: skip
    # Welford's running mean and spread against numpy's two-pass ones: rounding only
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-9)
    board = model.leaderboard()
    np.testing.assert_allclose([row["weight"] for row in board["candidates"]], weights, rtol=1e-12)
    assert board["temperature"] == MIX["temperature"]
    # the bad first candidate's share fell below 1e-3 and was dropped; of the others, the mix
    # of their shares did not beat the better one on the last window, which is served alone
    assert weights[0] == 0.0 and sorted(weights[1:]) == [0.0, 1.0]
    # scoring new rows: the same mix with the statistics of every event learned, shrunk after
    # all of them
    scaled = scale_batch(scaling, model.state_, X, learn=False)
    shrink = len(y) / (len(y) + SHRINK_EVENTS)
    expected_scores = shrink * sum(
        weights[k]
        * (model._candidates[k].decision_function(scaled) - reference[k].mean())
        / reference[k].std()
        for k in (1, 2)
    )
    np.testing.assert_allclose(model.decision_function(X), expected_scores, rtol=1e-9, atol=1e-9)
    # coef_ is the linear part of that mix (both candidates are linear)
    expected_coef = shrink * sum(
        weights[k] / reference[k].std() * model._candidates[k].coef_ for k in (1, 2)
    )
    np.testing.assert_allclose(model.coef_, expected_coef, rtol=1e-9, atol=1e-12)


def test_evaluations_that_decide_nothing_shed_candidates_clearly_behind_as_the_naive_mix():
    """(auto.13) on windows with fewer positives than the guard asks: the evaluations at 20,
    40, ... events compare the later half extended back to 40 positives (or the whole window),
    and the useless first candidate (a constant score) leaves the equal start's mix there, pair
    by pair as the naive reference says, before any evaluation decides."""
    X, y = stream(16, n=400)
    params = dict(MIX, min_positives=40)
    model = make_learner("auto", candidates=BAD_FIRST, **params)
    reference = _served_as_the_naive_mix(model, X, y, (90, 230), min_positives=40)
    undecided = make_learner("auto", candidates=BAD_FIRST, **params)
    undecided.prequential_step(X[:100], y[:100])
    # after 100 events the later half holds ~12 positives: nothing decided, and the constant
    # candidate, whose AUC is 0.5, is out of the mix while the other two keep equal shares
    early_weights = [row["weight"] for row in undecided.leaderboard()["candidates"]]
    np.testing.assert_allclose(early_weights, [0.0, 0.5, 0.5], rtol=1e-12)
    _, naive_early = naive_mix(reference[:, :100], y[:100], (0.0, 0.1), MIX["window"],
                               MIX["evaluate_every"], 0.05, min_positives=40)  # fmt: skip
    np.testing.assert_allclose(naive_early, early_weights, rtol=1e-12)


def test_a_full_window_compares_its_later_half_when_that_passes_the_guard_as_the_naive_mix():
    """Past the window (60 events) a deciding evaluation compares the window's later half, as
    the naive reference says, where those 30 events hold the guard's 7 positives, and the
    whole window where they do not: both happen on this stream."""
    X, y = stream(17, n=600)
    params = dict(MIX, min_positives=7)
    model = make_learner("auto", candidates=BAD_FIRST, **params)
    halves = [int(np.sum(y[t - 30 : t])) for t in range(80, 601, 20)]
    assert min(halves) < 7 <= max(halves)  # the later half passes the guard, and fails it
    reference = _served_as_the_naive_mix(model, X, y, (130, 131), min_positives=7)
    # the last evaluation's metrics are those of the events it compared
    compared = slice(570 if halves[-1] >= 7 else 540, 600)
    for k, row in enumerate(model.leaderboard()["candidates"]):
        assert row["window_auc"] == pytest.approx(auc(y[compared], reference[k, compared]))


def test_the_mix_holds_bit_for_bit_across_batchings_and_a_round_trip():
    X, y = stream(12, n=500)
    one = make_learner("auto", candidates=BAD_FIRST, **MIX)
    whole = make_learner("auto", candidates=BAD_FIRST, **MIX)
    singles = np.concatenate([one.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(250)])
    twin = learner_class("auto").from_state(one.get_params(), one.get_state())
    singles = np.concatenate([singles, twin.prequential_step(X[250:], y[250:])])
    np.testing.assert_array_equal(singles, whole.prequential_step(X, y))
    states_equal(twin.get_state(), whole.get_state())
    np.testing.assert_array_equal(twin.decision_function(X), whole.decision_function(X))


def test_mix_weights_that_do_not_sum_to_one_are_refused():
    X, y = stream(14)
    model = make_learner("auto", candidates=BAD_FIRST, **MIX).partial_fit(X, y)
    state = model.get_state()
    state["served_weights"] = np.array([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="served_weights.*sums to 1.5"):
        learner_class("auto").from_state(model.get_params(), state)


def test_temperature_zero_serves_the_leader_and_negative_is_refused():
    X, y = stream(15)
    leader_only = make_learner("auto", candidates=BAD_FIRST, **SMALL).partial_fit(X, y)
    board = leader_only.leaderboard()
    assert [row["weight"] for row in board["candidates"]] == [
        float(row["leader"]) for row in board["candidates"]
    ]
    with pytest.raises(ValueError, match="temperature"):
        make_learner("auto", temperature=-0.1).partial_fit(X, y)


def _served_as_the_naive_mix(model, X, y, cuts, min_positives):
    """Learns ``X, y`` in three batches split at ``cuts``; checks the served scores and the
    final weights against the naive mix (``MIX``'s settings) and returns the candidates'
    standalone scores."""
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, cuts[0]), slice(*cuts), slice(cuts[1], None)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    reference = standalone_scores(model, inputs, y)
    expected, weights = naive_mix(reference, y, (0.0, 0.1), MIX["window"], MIX["evaluate_every"],
                                  MIX["temperature"], min_positives=min_positives)  # fmt: skip
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose([row["weight"] for row in model.leaderboard()["candidates"]],
                               weights, rtol=1e-12)  # fmt: skip
    return reference
