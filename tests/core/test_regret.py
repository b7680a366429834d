"""Regret of online pAUC learners (Kar et al. eq. (6)) against brute force on small streams."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import make_learner
from core.regret import online_penalties, prefix_loss, regret, replay
from tests.core import naive_pauc as naive


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
