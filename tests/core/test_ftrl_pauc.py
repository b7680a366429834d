"""ftrl_pauc: FTRL on the pAUC hinge surrogate over reservoir samples (Kar et al. §3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from core._kernels.ftrl_pauc import track_quantile
from core._kernels.random import random_below, seed_state
from core.learners import learner_class, make_learner
from core.learners.svm_pauc import solve_svm_pauc
from tests.core import naive_pauc as naive


def _stream(seed, n=400, rate=0.2, n_features=4, shift=1.5):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + y[:, None] * np.linspace(shift, -0.5, n_features)
    return X, y


def _reference_ftrl(X, y, *, beta=0.1, lam=0.1, eta0=0.5, update_every=500,
                    first_update_every=16, inner_steps=5,
                    positive_capacity=1000, negative_capacity=2000, admission=2.0,
                    random_state=None):  # fmt: skip
    """The learner's algorithm, one event at a time, with pair-loop gradients and lists."""
    w = np.zeros(X.shape[1])
    rng_state = seed_state(random_state)
    positives, negatives = [], []
    seen = {"pos": 0, "neg": 0, "admitted": 0}
    quantile = np.zeros(2)
    level = min(1.0, admission * beta)
    steps, updates, since, scores = 0, 0, 0, []

    def offer(buffer, capacity, key, x):
        seen[key] += 1
        if len(buffer) < capacity:
            buffer.append(x.copy())
        else:
            slot = random_below(rng_state, seen[key])
            if slot < capacity:
                buffer[slot] = x.copy()

    for x, label in zip(X, y, strict=True):
        score = float(w @ x)
        scores.append(score)
        if label > 0:
            offer(positives, positive_capacity, "pos", x)
        else:
            seen["neg"] += 1
            admit = level >= 1.0 or score >= quantile[0]
            if level < 1.0:
                quantile[1] += 0.01 * (abs(score - quantile[0]) - quantile[1])
                quantile[0] += 0.02 * quantile[1] * ((1.0 if score > quantile[0] else 0.0) - level)
            if admit:
                offer(negatives, negative_capacity, "admitted", x)
        since += 1
        if since < min(update_every, first_update_every * 2**updates):
            continue
        since = 0
        if not positives or not negatives:
            continue
        updates += 1
        P, N = np.array(positives), np.array(negatives)
        capacity = positive_capacity + negative_capacity
        n_steps = min(
            10 * inner_steps, max(inner_steps, inner_steps * capacity // (len(P) + len(N)))
        )
        effective = len(N) * seen["neg"] / seen["admitted"]
        j_beta = min(max(math.ceil(beta * effective - 1e-9), 1), len(N))
        for _ in range(n_steps):
            grad = naive.hinge_top_negatives_grad(P, N, w, j_beta) / (len(P) * j_beta)
            steps += 1
            step = eta0 / (1.0 + eta0 * lam * steps)
            w = (1.0 - step * lam) * w - step * grad
            norm, radius = np.linalg.norm(w), math.sqrt(2.0 / lam)
            if norm > radius:
                w = w * (radius / norm)
    return np.array(scores), w, quantile, seen, steps


@pytest.mark.parametrize(
    "params",
    [
        dict(update_every=20, inner_steps=2, positive_capacity=15, negative_capacity=30,
             random_state=1),
        dict(update_every=7, first_update_every=7, inner_steps=1, positive_capacity=40,
             negative_capacity=25,
             admission=1.0 / 0.1, beta=0.1, lam=1.0, eta0=2.0),
        dict(update_every=33, inner_steps=3, positive_capacity=10, negative_capacity=60,
             beta=0.3, admission=1.5, random_state=5),
    ],
)  # fmt: skip
def test_learner_matches_per_event_reference(params):
    X, y = _stream(0)
    learner = make_learner("ftrl_pauc", **params)
    scores = learner.prequential_step(X, y)
    ref_scores, ref_w, ref_quantile, seen, ref_steps = _reference_ftrl(X, y, **params)
    state = learner.state_
    assert state["n_solver_steps"][0] == ref_steps > 5
    assert (
        state["negative_admitted"][0]
        == seen["admitted"]
        < seen["neg"] + (params.get("admission", 2.0) * params.get("beta", 0.1) >= 1)
    )
    np.testing.assert_allclose(state["admission_quantile"], ref_quantile, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state["w"], ref_w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-9, atol=1e-12)


def test_quantile_tracker_follows_the_quantile_of_a_stationary_stream():
    rng = np.random.default_rng(1)
    for level, scale in [(0.2, 1.0), (0.05, 30.0)]:
        quantile = np.zeros(2)
        scores = rng.normal(size=40000) * scale + 3.0
        for value in scores:
            track_quantile(quantile, value, level)
        exact = np.quantile(scores, 1.0 - level)
        assert abs(quantile[0] - exact) < 0.15 * scale
        assert abs(np.mean(scores[-10000:] > quantile[0]) - level) < 0.03


def test_reservoirs_keep_the_rare_class_in_full_up_to_the_cap():
    X, y = _stream(2, n=3000, rate=0.02)
    model = make_learner("ftrl_pauc", positive_capacity=100, random_state=0).partial_fit(X, y)
    n_pos = int(y.sum())
    assert model.state_["positive_fill"][0] == min(100, n_pos) == n_pos
    stored = model.state_["positive_X"][:n_pos]
    np.testing.assert_array_equal(stored, X[y > 0])  # in arrival order while below the cap


@pytest.mark.parametrize("alpha", [0.0, 0.02])
def test_round_trip_determinism_and_sparse_with_steps(alpha):
    X, y = _stream(3, n=900)
    X[np.random.default_rng(0).random(X.shape) < 0.4] = 0.0
    params = dict(alpha=alpha, update_every=50, first_update_every=50, positive_capacity=40,
                  negative_capacity=80, random_state=4)  # fmt: skip
    first = make_learner("ftrl_pauc", **params).partial_fit(X[:450], y[:450])
    restored = learner_class("ftrl_pauc").from_state(first.get_params(), first.get_state())
    np.testing.assert_array_equal(
        first.prequential_step(X[450:], y[450:]), restored.prequential_step(X[450:], y[450:])
    )
    for key, value in first.get_state().items():
        np.testing.assert_array_equal(value, restored.state_[key], err_msg=key)
    assert first.state_["n_updates"][0] == 900 // 50
    assert first.state_["n_solver_steps"][0] >= 5 * (900 // 50)
    dense = make_learner("ftrl_pauc", **params).prequential_step(X, y)
    sparse = make_learner("ftrl_pauc", **params).prequential_step(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(dense, sparse)


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(alpha=0.2, beta=0.1), "alpha < beta"),
        (dict(lam=0.0), "lam"),
        (dict(eta0=-1.0), "eta0"),
        (dict(update_every=0), "update_every"),
        (dict(first_update_every=0), "first_update_every"),
        (dict(inner_steps=0), "inner_steps"),
        (dict(positive_capacity=0), "positive_capacity"),
        (dict(admission=0.5), "admission"),
    ],
)
def test_bad_parameters_are_named(params, match):
    with pytest.raises(ValueError, match=match):
        make_learner("ftrl_pauc", **params)


def test_one_pass_is_close_to_the_batch_solver():
    rng = np.random.default_rng(6)
    direction = rng.normal(size=10) * 0.5

    def draw(n):
        y = (rng.random(n) < 0.01).astype(int)
        return rng.normal(size=(n, 10)) + y[:, None] * direction, y

    X, y = draw(60000)
    X_test, y_test = draw(60000)
    batch = solve_svm_pauc(X, np.where(y > 0, 1, -1), beta=0.1, C=1.0 / 0.1)
    ceiling = naive.pauc_roc(y_test, X_test @ batch.w, 0.0, 0.1)
    model = make_learner("ftrl_pauc").partial_fit(X, y)
    assert naive.pauc_roc(y_test, model.decision_function(X_test), 0.0, 0.1) > ceiling - 0.02
