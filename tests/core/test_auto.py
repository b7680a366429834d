"""``auto``'s tournament against a naive reference, beyond the shared contract
(tests/core/test_learner_contract.py runs ``auto`` with its defaults, whose first evaluation
comes after 1000 events; here evaluations are frequent, so leader changes happen inside the
batches that are cut, restored and compared).  The mix, the parameters, the default tournament
and drift tracking have their own files (tests/core/test_auto_*.py)."""

from __future__ import annotations

import copy
from collections import deque

import numpy as np
import pytest
import scipy.sparse as sp

from core.learners import learner_class, make_learner
from core.metrics import auc, pauc
from core.preprocessing import scale_batch
from tests.core.auto_helpers import BAD_FIRST, SMALL, standalone_scores, stream
from tests.core.cases import states_equal

#: with evaluations after 3, 6 and 12 events too
EARLY = dict(SMALL, first_evaluation=3)


# ------------------------------------------------------------------------- naive reference
def naive_tournament(
    candidate_scores, labels, pauc_range, window, every, margin, patience, first=None,
    min_positives=3, min_negatives=2,
):  # fmt: skip
    """Served scores and leader history from each candidate's own prequential scores, one
    event at a time, with a deque(maxlen=window) per candidate (the rule of ``Auto``)."""
    early = set()
    while first is not None and first < every:
        early.add(first)
        first *= 2
    n_candidates, n_events = candidate_scores.shape
    rings = [deque(maxlen=window) for _ in range(n_candidates)]
    ring_labels = deque(maxlen=window)
    leader, since, challenger, streak = 0, 0, -1, 0
    scale, offset = 1.0, 0.0  # served = scale * leader's score + offset
    served, history = [], []
    for t in range(n_events):
        served.append(scale * candidate_scores[leader, t] + offset)
        for k in range(n_candidates):
            rings[k].append(candidate_scores[k, t])
        ring_labels.append(labels[t])
        if (t + 1) % every and t + 1 not in early:
            continue
        # at most the later half of the events seen (docs/algorithms/auto.md (auto.3))
        compared = min(len(ring_labels), (t + 1) - (t + 1) // 2)
        window_labels = np.array(ring_labels)[-compared:]
        n_positive = int(np.sum(window_labels == 1))
        n_negative = len(window_labels) - n_positive
        if n_positive < min_positives or (pauc_range[1] - pauc_range[0]) * n_negative < (
            min_negatives
        ):
            continue
        paucs = [pauc(window_labels, np.array(r)[-compared:], *pauc_range) for r in rings]
        aucs = [auc(window_labels, np.array(r)[-compared:]) for r in rings]
        best = max(range(n_candidates), key=lambda k: (paucs[k], aucs[k], -k))
        if best != leader and paucs[best] > paucs[leader] + margin:
            streak = streak + 1 if challenger == best else 1
            challenger = best
            if streak >= patience:
                # keep the served scores' mean and spread over the window
                before = scale * np.array(rings[leader]) + offset
                after = np.array(rings[best])
                scale = before.std() / after.std() if before.std() > 0 < after.std() else 1.0
                offset = before.mean() - scale * after.mean()
                leader, since, challenger, streak = best, t + 1, -1, 0
                history.append((t + 1, best))
        else:
            challenger, streak = -1, 0
    return np.array(served), history, leader, since


@pytest.mark.parametrize(
    ("scaling", "schedule"),
    [
        ("none", SMALL),
        ("standard", SMALL),
        ("none", dict(SMALL, evaluate_every=40, first_evaluation=3)),
    ],
    ids=["none", "standard", "early_doubling"],
)
def test_tournament_agrees_with_the_naive_reference(scaling, schedule):
    X, y = stream(1)
    model = make_learner("auto", candidates=BAD_FIRST, scaling=scaling, **schedule)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 7), slice(7, 150), slice(150, 151), slice(151, None)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    reference = standalone_scores(model, inputs, y)
    expected, history, leader, since = naive_tournament(
        reference, y, (0.0, 0.1), schedule["window"], schedule["evaluate_every"], 0.01, 2,
        schedule.get("first_evaluation"),
    )  # fmt: skip
    # the map's mean and std sum the window in another order (ring vs deque): ulps
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-12, atol=1e-12)
    assert history and history[0][1] != 0  # the bad first candidate lost the lead
    board = model.leaderboard()
    assert (board["leader"], board["leader_since"]) == (leader, since)
    # the windowed metrics are those of the last evaluation's window (the last 60 events)
    last = board["evaluated_at"]
    for k, row in enumerate(board["candidates"]):
        window = slice(last - SMALL["window"], last)
        assert row["window_pauc"] == pauc(y[window], reference[k, window], 0.0, 0.1)
        assert row["window_auc"] == auc(y[window], reference[k, window])
    scaled = scale_batch(scaling, model.state_, X, learn=False)
    mapped = board["served_scale"] * model._candidates[leader].decision_function(scaled)
    np.testing.assert_array_equal(model.decision_function(X), mapped + board["served_offset"])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_batch_equals_one_event_at_a_time_across_leader_changes(sparse):
    X, y = stream(2)
    if sparse:
        X[np.random.default_rng(2).random(X.shape) < 0.4] = 0.0
    rows = sp.csr_matrix(X) if sparse else X
    # sparse rows keep their zeros with ``scale`` (the service's choice for them)
    early = dict(EARLY, scaling="scale" if sparse else "standard")
    at_once = make_learner("auto", candidates=BAD_FIRST, **early)
    scores = at_once.prequential_step(rows, y)
    single = make_learner("auto", candidates=BAD_FIRST, **early)
    one_by_one = np.concatenate(
        [single.prequential_step(rows[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )
    np.testing.assert_array_equal(scores, one_by_one)
    states_equal(at_once.get_state(), single.get_state())
    assert at_once.leaderboard()["leader"] != 0
    # uneven cuts that straddle evaluation points
    uneven = make_learner("auto", candidates=BAD_FIRST, **early)
    cuts = [0, 3, 19, 20, 21, 77, 140, 141, 260, len(y)]
    pieces = [
        uneven.prequential_step(rows[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]
    np.testing.assert_array_equal(np.concatenate(pieces), scores)
    states_equal(at_once.get_state(), uneven.get_state())


def test_round_trip_mid_stream_continues_bit_for_bit():
    X, y = stream(3)
    original = make_learner("auto", candidates=BAD_FIRST, **SMALL).partial_fit(X[:130], y[:130])
    state = original.get_state()
    assert {key.split(":")[0] for key in state if ":" in key} == {"c0", "c1", "c2"}
    restored = learner_class("auto").from_state(original.get_params(), state)
    states_equal(state, restored.get_state())
    np.testing.assert_array_equal(
        original.prequential_step(X[130:], y[130:]), restored.prequential_step(X[130:], y[130:])
    )
    states_equal(original.get_state(), restored.get_state())
    assert restored.leaderboard() == original.leaderboard()
    twin = copy.deepcopy(original)
    np.testing.assert_array_equal(original.decision_function(X), twin.decision_function(X))


def test_the_clearly_better_candidate_takes_over_after_patience_evaluations():
    X, y = stream(4, n=600)
    model = make_learner("auto", candidates=BAD_FIRST[:2], window=100, evaluate_every=50,
                         margin=0.05, patience=3, min_positives=3, min_negatives=2,
                         temperature=0.0, track_drift=False, scaling="none")  # fmt: skip
    streaks = []
    for start in range(0, 200, 50):
        model.partial_fit(X[start : start + 50], y[start : start + 50])
        board = model.leaderboard()
        streaks.append((board["leader"], board["challenger"], board["challenger_streak"]))
    # the bad candidate leads until the good one has won three evaluations in a row
    assert streaks == [(0, 1, 1), (0, 1, 2), (1, None, 0), (1, None, 0)]
    assert model.leaderboard()["leader_since"] == 150
    rows = model.leaderboard()["candidates"]
    assert rows[1]["window_pauc"] > rows[0]["window_pauc"] + 0.05
    assert rows[1]["leader"] and not rows[0]["leader"]
    np.testing.assert_array_equal(
        model.coef_, model.leaderboard()["served_scale"] * model._candidates[1].coef_
    )


def test_served_scores_keep_their_mean_and_spread_when_the_leader_changes():
    X, y = stream(10)
    model = make_learner("auto", candidates=BAD_FIRST, **SMALL)
    for start in range(0, len(y), 20):  # one evaluation per batch: stop at the first change
        model.partial_fit(X[start : start + 20], y[start : start + 20])
        if model.leaderboard()["leader"] != 0:
            break
    state = model.state_
    leader = int(state["leader"][0])
    assert leader != 0
    filled = min(int(state["n_seen"][0]), SMALL["window"])
    # the first leader was served unmapped; over the window the new leader's mapped scores
    # have the same mean and standard deviation
    old_served = state["window_scores"][0, :filled]
    new_served = state["served_scale"][0] * state["window_scores"][leader, :filled]
    new_served = new_served + state["served_offset"][0]
    assert state["served_scale"][0] > 0
    np.testing.assert_allclose(new_served.mean(), old_served.mean(), atol=1e-12)
    np.testing.assert_allclose(new_served.std(), old_served.std(), rtol=1e-12)


def test_equal_candidates_never_swap():
    X, y = stream(5, n=800)
    twins = [{"learner": "spam", "params": {}}, {"learner": "spam", "params": {}}]
    model = make_learner("auto", candidates=twins, window=100, evaluate_every=10, patience=1,
                         margin=0.0)  # fmt: skip
    model.partial_fit(X, y)
    board = model.leaderboard()
    assert board["evaluated_at"] == 800
    assert (board["leader"], board["leader_since"], board["challenger"]) == (0, 0, None)
    assert board["candidates"][0]["window_pauc"] == board["candidates"][1]["window_pauc"]


def test_near_equal_candidates_within_the_margin_do_not_flap():
    """Two different but similar learners: their windowed pAUCs cross many times, yet with a
    margin and patience the leader changes at most once where margin 0 and patience 1 flap."""
    X, y = stream(6, n=3000, positive_rate=0.3)
    pair = [
        {"learner": "logistic", "params": {"solver": "ftrl"}},
        {"learner": "logistic", "params": {"solver": "ftrl", "alpha": 0.15}},
    ]
    changes = {}
    for name, rule in {"no_hysteresis": (0.0, 1), "default": (0.01, 3)}.items():
        model = make_learner("auto", candidates=pair, window=200, evaluate_every=20,
                             margin=rule[0], patience=rule[1])  # fmt: skip
        leaders = []
        for start in range(0, len(y), 20):
            model.partial_fit(X[start : start + 20], y[start : start + 20])
            leaders.append(model.leaderboard()["leader"])
        changes[name] = int(np.count_nonzero(np.diff(leaders)))
    assert changes["no_hysteresis"] >= 3
    assert changes["default"] <= 1


def test_one_class_window_changes_nothing():
    X, y = stream(7)
    model = make_learner("auto", candidates=BAD_FIRST, **SMALL)
    model.partial_fit(X[:100], np.zeros(100, dtype=int))
    board = model.leaderboard()
    assert board["evaluated_at"] == 100 and board["leader"] == 0
    assert all(row["window_pauc"] is None for row in board["candidates"])


def test_windows_with_too_few_positives_or_negatives_in_range_decide_nothing():
    X, y = stream(9)
    # 60 events, about 15 positives and 45 negatives: 4.5 negatives in FPR [0, 0.1]
    strict = make_learner("auto", candidates=BAD_FIRST, **dict(SMALL, min_negatives=10))
    strict.partial_fit(X, y)
    board = strict.leaderboard()
    assert board["leader"] == 0 and board["challenger"] is None
    assert board["candidates"][1]["window_pauc"] > board["candidates"][0]["window_pauc"] + 0.1
    # the same stream with a range wide enough for 10 negatives lets the good candidate lead
    wide = make_learner("auto", candidates=BAD_FIRST, pauc_range=[0.0, 0.5],
                        **dict(SMALL, min_negatives=10))  # fmt: skip
    assert wide.partial_fit(X, y).leaderboard()["leader"] != 0
    few_positives = make_learner("auto", candidates=BAD_FIRST, **dict(SMALL, min_positives=30))
    assert few_positives.partial_fit(X, y).leaderboard()["leader"] == 0
