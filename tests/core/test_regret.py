"""Regret of online pAUC learners (Kar et al. eq. (6)) against brute force on small streams."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from core.preprocessing import SCALINGS
from core.regret import (
    RegretWindow,
    learner_inputs,
    online_penalties,
    prefix_loss,
    regret,
    replay,
)
from tests.core.naive import pauc as naive


def _naive_prefix_loss(X, y, w, beta):
    pos, neg = X[y > 0] @ w, X[y < 0] @ w
    if len(pos) == 0 or len(neg) == 0:
        return 0.0
    return naive.hinge_top_negatives(pos, neg, naive.top_count(beta, len(neg)))


def _stream(seed, n, rate=0.3, d=3, shift=1.5):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < rate, 1, -1)
    X = rng.normal(size=(n, d)) + (y[:, None] > 0) * np.linspace(shift, 0.0, d)
    return X, y


def test_prefix_loss_is_the_pair_loop():
    rng = np.random.default_rng(0)
    for _ in range(50):
        X, y = _stream(int(rng.integers(1000)), int(rng.integers(1, 40)))
        w = rng.normal(size=3)
        beta = float(rng.choice([0.05, 0.1, 0.5, 1.0]))
        assert prefix_loss(X, y, w, beta=beta) == pytest.approx(
            _naive_prefix_loss(X, y, w, beta), abs=1e-9
        )


def test_penalties_are_eq_6_per_event_and_telescope():
    X, y = _stream(1, 40)
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=3) for _ in range(40)]
    ends = np.arange(1, 41)
    penalties = online_penalties(X, y, ends, weights, beta=0.2)
    for t in range(40):
        expected = _naive_prefix_loss(X[: t + 1], y[: t + 1], weights[t], 0.2) - (
            _naive_prefix_loss(X[:t], y[:t], weights[t], 0.2)
        )
        assert penalties[t] == pytest.approx(expected, abs=1e-9)
    # one fixed w: the penalties sum to the loss of the whole window, in any arrival order
    w = weights[0]
    for order in (np.arange(40), rng.permutation(40), rng.permutation(40)):
        fixed = online_penalties(X[order], y[order], ends, [w] * 40, beta=0.2)
        assert fixed.sum() == pytest.approx(prefix_loss(X, y, w, beta=0.2), abs=1e-9)
    # coarser rounds: the same telescoping with the thresholds of each prefix
    coarse = online_penalties(X, y, [7, 19, 40], [w] * 3, beta=0.2)
    assert coarse.sum() == pytest.approx(fixed.sum(), abs=1e-9)


def test_report_against_brute_force_and_hindsight_optimality():
    X, y = _stream(2, 60)
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=3) * 0.3 for _ in range(6)]
    ends = np.arange(10, 61, 10)
    scores = np.concatenate([X[e - 10 : e] @ w for e, w in zip(ends, weights, strict=True)])
    report = regret(X, y, ends, weights, scores, beta=0.1, C=10.0, tol=1e-9)
    n_pos, n_neg = int((y > 0).sum()), int((y < 0).sum())
    pairs = n_pos * naive.top_count(0.1, n_neg)
    online = sum(
        _naive_prefix_loss(X[:e], y[:e], w, 0.1)
        - _naive_prefix_loss(X[: e - 10], y[: e - 10], w, 0.1)
        for e, w in zip(ends, weights, strict=True)
    )  # fmt: skip
    best = report.w_hindsight
    assert report.online_loss == pytest.approx(online / pairs, abs=1e-12)
    assert report.hindsight_loss == pytest.approx(_naive_prefix_loss(X, y, best, 0.1) / pairs)
    assert report.regret == pytest.approx(report.online_loss - report.hindsight_loss)
    assert report.regret_per_event == pytest.approx(report.regret * pairs / 60)
    assert report.prequential_pauc == pytest.approx(naive.pauc_roc(y, scores, 0.0, 0.1))
    assert report.pauc_gap == pytest.approx(
        naive.pauc_roc(y, X @ best, 0, 0.1) - report.prequential_pauc
    )
    # w* is the best fixed model over the ball of its own radius (Lagrange duality)
    radius = np.linalg.norm(best)
    for _ in range(200):
        direction = rng.normal(size=3)
        other = direction / np.linalg.norm(direction) * radius * rng.random() ** (1 / 3)
        assert prefix_loss(X, y, other, beta=0.1) >= prefix_loss(X, y, best, beta=0.1) - 1e-6


def test_bad_rounds_are_rejected():
    X, y = _stream(3, 20)
    with pytest.raises(ValueError, match="ends must increase"):
        regret(X, y, [10, 19], [np.zeros(3)] * 2, np.zeros(20))
    with pytest.raises(ValueError, match="weight vectors"):
        regret(X, y, [10, 20], [np.zeros(3)], np.zeros(20))
    with pytest.raises(ValueError, match="both classes"):
        regret(X, np.ones(20), [20], [np.zeros(3)], np.zeros(20))


def test_replay_records_the_served_weights_and_refuses_mixed_batches():
    X, y = _stream(4, 300)
    learner = make_learner("pmb", buffer_size=20, first_buffer_size=20)
    ends, weights, scores = replay(learner, X, y, batch_size=20)
    np.testing.assert_allclose(scores[20:40], X[20:40] @ weights[1])
    assert len(ends) == 15 and not np.array_equal(weights[-1], weights[1])
    with pytest.raises(ValueError, match="smaller batch_size"):
        replay(make_learner("pmb", buffer_size=20, first_buffer_size=20), X, y, batch_size=30)


def test_average_regret_of_ftrl_shrinks_on_a_stationary_stream():
    X, y = _stream(5, 8000, rate=0.1, d=5, shift=2.0)
    values = []
    for T in (500, 2000, 8000):
        learner = make_learner("ftrl_pauc", update_every=100, first_update_every=100)
        ends, weights, scores = replay(learner, X[:T], y[:T], batch_size=100)
        values.append(regret(X[:T], y[:T], ends, weights, scores, C=10.0).regret)
    assert values[0] > values[1] > values[2]
    assert values[2] < 0.5 * values[0]


# ----------------------------------------------------------------------------- RegretWindow
def test_kernel_penalties_match_prefix_loss_with_blocks_and_alpha(monkeypatch):
    import core.regret.report as regret_module

    X, y = _stream(6, 60)
    rng = np.random.default_rng(6)
    weights = [rng.normal(size=3) for _ in range(12)]
    ends = np.sort(rng.choice(np.arange(1, 60), size=11, replace=False)).tolist() + [60]
    for alpha, beta in ((0.0, 0.1), (0.0, 1.0), (0.05, 0.3)):
        expected = [
            prefix_loss(X[:e], y[:e], w, alpha, beta) - prefix_loss(X[:s], y[:s], w, alpha, beta)
            for s, e, w in zip([0, *ends[:-1]], ends, weights, strict=True)
        ]
        for cells in (1 << 21, 100):  # one block, and a block of one or two rounds
            monkeypatch.setattr(regret_module, "_PENALTY_BLOCK_CELLS", cells)
            got = online_penalties(X, y, ends, weights, alpha, beta)
            np.testing.assert_allclose(got, expected, atol=1e-9)


class _NaiveWindow:
    """Rounds kept as a Python list; trimmed by dropping whole oldest rounds."""

    def __init__(self, capacity):
        self.capacity, self.rounds = capacity, []

    def update(self, X, y, s, w):
        self.rounds.append([X, y, s, w])
        while sum(len(r[1]) for r in self.rounds) > self.capacity and len(self.rounds) > 1:
            self.rounds.pop(0)
        X, y, s, w = self.rounds[-1]
        if len(y) > self.capacity:
            self.rounds[-1] = [X[-self.capacity :], y[-self.capacity :], s[-self.capacity :], w]

    def contents(self):
        if not self.rounds:
            return np.zeros((0, 3)), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros((0, 3))
        X = np.concatenate([r[0] for r in self.rounds])
        y = np.concatenate([r[1] for r in self.rounds])
        s = np.concatenate([r[2] for r in self.rounds])
        ends = np.cumsum([len(r[1]) for r in self.rounds])
        return X, y, s, ends, np.array([r[3] for r in self.rounds])


def test_window_trims_at_round_boundaries_like_a_list_of_rounds():
    rng = np.random.default_rng(7)
    for capacity in (1, 5, 17, 64):
        window, naive_window = RegretWindow(capacity, 3), _NaiveWindow(capacity)
        X, y = _stream(capacity, 400)
        start = 0
        while start < 400:
            size = int(rng.choice([1, 1, 2, 3, 7, 20, 80]))
            stop = min(400, start + size)
            w = rng.normal(size=3)
            s = rng.normal(size=stop - start)
            window.update(X[start:stop], y[start:stop], s, w)
            naive_window.update(X[start:stop], y[start:stop], s, w)
            for got, expected in zip(window.contents(), naive_window.contents(), strict=True):
                np.testing.assert_array_equal(got, expected)
            assert len(window) <= capacity and window.n_rounds == len(naive_window.rounds)
            start = stop
        assert window.events_seen == 400


def test_window_report_is_regret_on_its_content_and_the_naive_loop():
    X, y = _stream(8, 300, rate=0.2)
    rng = np.random.default_rng(8)
    window = RegretWindow(120, 3)
    start = 0
    while start < 300:
        stop = min(300, start + int(rng.integers(1, 15)))
        w = rng.normal(size=3) * 0.5
        window.update(X[start:stop], y[start:stop], X[start:stop] @ w, w)
        start = stop
    Xw, yw, sw, ends, weights = window.contents()
    assert 120 - 14 < len(yw) <= 120
    report = window.report(0.0, 0.1, C=10.0, tol=1e-6)
    reference = regret(Xw, yw, ends, list(weights), sw, beta=0.1, C=10.0, tol=1e-6)
    assert report.regret == pytest.approx(reference.regret, rel=1e-12)
    assert report.pauc_gap == pytest.approx(reference.pauc_gap, rel=1e-12)
    assert report.rounds == len(ends) == window.n_rounds and report.n_events == len(yw)
    n_neg = int((yw < 0).sum())
    pairs = int((yw > 0).sum()) * naive.top_count(0.1, n_neg)
    online = sum(
        _naive_prefix_loss(Xw[:e], yw[:e], w, 0.1) - _naive_prefix_loss(Xw[:s], yw[:s], w, 0.1)
        for s, e, w in zip([0, *ends[:-1]], ends, weights, strict=True)
    )
    assert report.online_loss == pytest.approx(online / pairs, abs=1e-12)
    assert report.hindsight_loss == pytest.approx(
        _naive_prefix_loss(Xw, yw, report.w_hindsight, 0.1) / pairs, abs=1e-12
    )
    assert report.prequential_pauc == pytest.approx(naive.pauc_roc(yw, sw, 0.0, 0.1))
    section, reason = window.summary(0.0, 0.1, C=10.0, tol=1e-6)
    assert reason is None and section["regret"] == pytest.approx(report.regret)


def test_window_report_reasons_when_undefined():
    window = RegretWindow(10, 2)
    assert window.report().reason == "the regret window holds no event"
    window.update(np.ones((3, 2)), [1, 1, 1], np.zeros(3), np.zeros(2))
    report = window.report()
    assert report.reason == "the regret window holds no negative event"
    assert np.isnan(report.regret) and report.n_events == 3 and report.rounds == 1
    assert window.summary() == (None, "the regret window holds no negative event")
    window = RegretWindow(10, 2)
    window.update(np.ones((2, 2)), [0, 0], np.zeros(2), np.zeros(2))
    assert window.summary()[1] == "the regret window holds no positive event"


def test_window_state_round_trips_bit_for_bit_and_continues_identically():
    X, y = _stream(9, 200)
    rng = np.random.default_rng(9)
    window = RegretWindow(50, 3)
    assert (
        RegretWindow.from_state(window.get_state()).get_state().keys() == window.get_state().keys()
    )
    for start in range(0, 120, 7):
        window.update(
            X[start : start + 7], y[start : start + 7], rng.normal(size=7), rng.normal(size=3)
        )
    state = window.get_state()
    for value in state.values():
        assert value.flags.c_contiguous and value.dtype in (np.float64, np.int64, np.int8)
    assert state["labels"].dtype == np.int8
    restored = RegretWindow.from_state(state)
    for key, value in restored.get_state().items():
        np.testing.assert_array_equal(value, state[key])
        assert value.dtype == state[key].dtype
    for start in range(120, 198, 3):
        batch = (X[start : start + 3], y[start : start + 3], rng.normal(size=3), rng.normal(size=3))
        window.update(*batch)
        restored.update(*batch)
    for key, value in restored.get_state().items():
        np.testing.assert_array_equal(value, window.get_state()[key])
    assert restored.report().regret == window.report().regret


def test_window_rejects_bad_rounds_and_bad_states_unchanged():
    window = RegretWindow(5, 2)
    window.update(np.ones((2, 2)), [1, 0], [0.1, 0.2], [0.0, 1.0])
    before = window.get_state()
    for args, message in (
        ((np.ones((2, 3)), [1, 0], [0, 0], [0, 0]), "shape"),
        ((np.ones((2, 2)), [1, 2], [0, 0], [0, 0]), "label"),
        ((np.ones((2, 2)), [1, 0], [0, np.nan], [0, 0]), "NaN"),
        ((np.ones((2, 2)), [1, 0], [0, 0], [0, 0, 0]), "weights"),
    ):
        with pytest.raises(ValueError, match=message):
            window.update(*args)
    for key, value in window.get_state().items():
        np.testing.assert_array_equal(value, before[key])
    broken = dict(before, counters=np.array([2, 2, 1, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="counters"):
        RegretWindow.from_state(broken)
    with pytest.raises(ValueError, match="lacks the array 'features'"):
        RegretWindow.from_state({k: v for k, v in before.items() if k != "features"})
    with pytest.raises(ValueError, match="round_weights"):
        RegretWindow.from_state(dict(before, round_weights=np.zeros((1, 3))))


def _spam_on_uneven_features(seed, n, scaling):
    """A fresh ``spam`` learner and a stream whose three features differ in scale by 10**4, so
    that every scaling gives the learner other inputs than the raw rows."""
    X, y = _stream(seed, n)
    learner = make_learner("spam", scaling=scaling)
    learner.initialize(3)
    return learner, X * np.array([100.0, 1.0, 0.01]), y


@pytest.mark.parametrize("scaling", SCALINGS)
def test_learner_inputs_are_what_the_learner_scores(scaling):
    learner, X, y = _spam_on_uneven_features(10, 120, scaling)
    for row in range(120):
        inputs = learner_inputs(learner, X[row : row + 1])
        served = learner.coef_
        score = learner.prequential_step(X[row : row + 1], y[row : row + 1])
        np.testing.assert_allclose(score, inputs @ served, rtol=1e-12, atol=1e-12)
    # the learner is not changed by computing its inputs
    state = learner.get_state()
    learner_inputs(learner, X[:10])
    for key, value in learner.get_state().items():
        np.testing.assert_array_equal(value, state[key])


@pytest.mark.parametrize("scaling", SCALINGS)
def test_recorded_inputs_are_learner_inputs_bit_for_bit(scaling):
    # the service's regret window stores the rows recorded while learning instead of
    # scaling the batch twice: they must be the very bytes learner_inputs gives
    learner, X, y = _spam_on_uneven_features(11, 300, scaling)
    for start, stop in [(0, 1), (1, 40), (40, 41), (41, 300)]:
        expected = learner_inputs(learner, X[start:stop])
        with learner.recording_inputs() as recorded:
            learner.prequential_step(X[start:stop], y[start:stop])
        assert len(recorded) == 1
        assert np.asarray(recorded[0], dtype=np.float64).tobytes() == expected.tobytes()
    with learner.recording_inputs() as recorded:
        learner.partial_fit(X[:5], y[:5])
    assert len(recorded) == 1
    learner.partial_fit(X[:5], y[:5])  # outside the block: nothing more is recorded
    assert len(recorded) == 1 and learner._inputs_sink is None


def test_ring_slots_hold_each_event_at_its_absolute_position():
    # events are written by slices; every kept event must sit at slot (absolute index % capacity)
    rng = np.random.default_rng(5)
    capacity, d = 7, 2
    window = RegretWindow(capacity, d)
    rows, labels, scores = [], [], []
    for size in [1, 3, 7, 2, 9, 5, 1, 6, 14, 4]:
        X = rng.normal(size=(size, d))
        y = np.where(rng.random(size) < 0.5, 1, -1)
        s = rng.normal(size=size)
        window.update(X, y, s, np.zeros(d))
        rows.extend(X), labels.extend(y), scores.extend(s)
        state = window.get_state()
        total = len(rows)
        for event in range(max(0, total - capacity), total):
            slot = event % capacity
            np.testing.assert_array_equal(state["features"][slot], rows[event])
            assert state["labels"][slot] == labels[event]
            assert state["scores"][slot] == scores[event]
