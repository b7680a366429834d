"""``auto``'s one-event batch (core.learners._auto_learning._learned_one_event: the service's
usual call, learned without the segment loop's bookkeeping) against the segment loop itself,
and the mix's factors taken in Python against numpy's (core.learners._tournament)."""

from __future__ import annotations

import numpy as np

import core.learners._auto_learning as auto_learning
from core.learners import make_learner
from core.learners._tournament import _mix_factors
from tests.core.auto_helpers import BAD_FIRST, stream
from tests.core.cases import states_equal

#: the mix with drift tracking (the one-event path's case); evaluations after 50, 100, ...
#: events, then every 1,000, so that after a detection the fast period's evaluations (every
#: 500 events) fall between them
TRACKED = {"window": 1000, "evaluate_every": 1000, "first_evaluation": 50, "min_positives": 3,
           "min_negatives": 2, "temperature": 0.05, "track_drift": True}  # fmt: skip


def _one_at_a_time(model, X, y) -> np.ndarray:
    return np.concatenate(
        [model.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )


def test_one_event_calls_leave_what_the_segment_loop_leaves(monkeypatch):
    X, y = stream(5, n=3000)
    # a change of concept: a detection (at event 1,323), evaluations since it at 1,500 and 2,000
    y[1200:] = 1 - y[1200:]
    fast = make_learner("auto", candidates=BAD_FIRST, random_state=0, **TRACKED)
    taken = []
    one_event = auto_learning._learned_one_event

    def counted(*arguments):
        taken.append(one_event(*arguments))
        return taken[-1]

    monkeypatch.setattr(auto_learning, "_learned_one_event", counted)
    scores = _one_at_a_time(fast, X, y)
    # the loop alone: the one-event path declines every call
    monkeypatch.setattr(auto_learning, "_learned_one_event", lambda *arguments: False)
    loop = make_learner("auto", candidates=BAD_FIRST, random_state=0, **TRACKED)
    np.testing.assert_array_equal(scores, _one_at_a_time(loop, X, y))
    states_equal(fast.get_state(), loop.get_state())
    assert np.array_equal(fast.coef_, loop.coef_)
    # the path was taken at every call, and the detector fired
    assert taken == [True] * len(y)
    assert fast.state_["drift:counters"][2] >= 1


def test_two_models_learning_in_turn_keep_their_own_one_event_buffers():
    X, y = stream(6, n=300)
    first = make_learner("auto", candidates=BAD_FIRST, **TRACKED)
    second = make_learner("auto", candidates=BAD_FIRST, **TRACKED)
    alone = make_learner("auto", candidates=BAD_FIRST, **TRACKED)
    interleaved = []
    for i in range(len(y)):
        interleaved.append(first.prequential_step(X[i : i + 1], y[i : i + 1]))
        second.prequential_step(X[::-1][i : i + 1], y[::-1][i : i + 1])
    np.testing.assert_array_equal(np.concatenate(interleaved), _one_at_a_time(alone, X, y))
    states_equal(first.get_state(), alone.get_state())
    # a state put into another model continues bit for bit (its buffers are the new list's)
    copy = make_learner("auto", candidates=BAD_FIRST, **TRACKED)
    copy.state_ = {key: value.copy() for key, value in first.get_state().items()}
    more = slice(100, 160)
    np.testing.assert_array_equal(
        _one_at_a_time(copy, X[more], y[more]), _one_at_a_time(first, X[more], y[more])
    )


def test_the_mix_factors_are_numpys_bit_for_bit():
    rng = np.random.default_rng(3)
    for _ in range(200):
        count = int(rng.integers(2, 10**6))
        k = 5
        m2 = rng.exponential(size=k) * 10.0 ** rng.integers(-300, 300, size=k)
        m2[rng.random(k) < 0.2] = 0.0
        m2[rng.random(k) < 0.1] = np.nan
        weights = rng.random(k) * (rng.random(k) < 0.7)
        own = {
            "n_seen": np.array([count]),
            "served_weights": weights,
            "score_m2": m2,
            "score_mean": rng.normal(size=k),
        }
        # the numpy formula, as the served-score kernel and core.learners._served_scale take it
        with np.errstate(invalid="ignore"):
            spreads = np.sqrt(m2 / count)
        shrink = count / (count + 50.0)
        expected = [
            (j, float(weights[j] / spreads[j] * shrink), float(own["score_mean"][j]))
            for j in range(k)
            if weights[j] > 0.0 and spreads[j] > 0.0
        ]
        got = _mix_factors(own)
        assert [(j, mean) for j, _, mean in got] == [(j, mean) for j, _, mean in expected]
        assert (
            np.array([f for _, f, _ in got]).tobytes()
            == np.array([f for _, f, _ in expected]).tobytes()
        )
    assert _mix_factors({**own, "n_seen": np.array([1])}) == []
