"""ftrl_pauc: FTRL on the pAUC hinge surrogate over reservoir samples (Kar et al. §3)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core._kernels.forgetting import recent_steps
from core._kernels.ftrl_pauc import project_annulus, resort_descending, solver_steps, track_quantile
from core._kernels.pauc_buffers import pauc_gradient_counts
from core.learners import learner_class, make_learner
from core.learners.svm_pauc import solve_svm_pauc
from tests.core.cases import shifted_gaussian_events
from tests.core.naive import pauc as naive


def _stream(seed, n=400, rate=0.2, n_features=4, shift=1.5):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + y[:, None] * np.linspace(shift, -0.5, n_features)
    return X, y


@pytest.mark.parametrize(
    "params",
    [
        dict(update_every=20, inner_steps=2, positive_capacity=15, negative_capacity=30,
             admission=2.0, random_state=1),
        dict(update_every=20, positive_capacity=15, negative_capacity=30, random_state=1),
        dict(update_every=20, positive_capacity=15, negative_capacity=30, auc_weight=0.0,
             random_state=2),
        dict(update_every=7, first_update_every=7, inner_steps=1, positive_capacity=40,
             negative_capacity=25,
             admission=1.0 / 0.1, beta=0.1, lam=1.0, eta0=2.0),
        dict(update_every=33, inner_steps=3, positive_capacity=10, negative_capacity=60,
             beta=0.3, admission=1.5, random_state=5),
        # alpha > 0: the tight [alpha, beta] surrogate (j_alpha >= 1 at every update)
        dict(update_every=20, inner_steps=2, positive_capacity=15, negative_capacity=30,
             alpha=0.05, beta=0.3, random_state=3),
        dict(update_every=25, first_update_every=25, inner_steps=3, positive_capacity=12,
             negative_capacity=40, alpha=0.1, beta=0.25, admission=1.0 / 0.25, lam=0.5),
        # forgetting: biased reservoirs (sampled insertions for the negatives; every
        # positive inserted at 200) and the capped solver step
        dict(update_every=20, inner_steps=2, positive_capacity=15, negative_capacity=30,
             half_life=200.0, random_state=4),
        dict(update_every=20, positive_capacity=15, negative_capacity=30, admission=2.0,
             half_life=900.0, random_state=6),
    ],
)  # fmt: skip
def test_learner_matches_per_event_reference(params):
    X, y = _stream(0)
    learner = make_learner("ftrl_pauc", **params)
    scores = learner.prequential_step(X, y)
    ref_scores, ref_w, ref_quantile, seen, ref_steps = naive.ftrl_pauc_reference(X, y, **params)
    state = learner.state_
    admission = params.get("admission")
    assert state["n_solver_steps"][0] == ref_steps > 5
    assert (
        state["negative_admitted"][0]
        == seen["admitted"]
        < seen["neg"] + (admission is None or admission * params.get("beta", 0.1) >= 1)
    )
    np.testing.assert_allclose(state["admission_quantile"], ref_quantile, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state["w"], ref_w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-9, atol=1e-12)


def _solver_steps_by_general_kernels(w, steps, pos_X, n_pos, neg_X, n_neg, seen, admitted,
                                     alpha, beta, lam, eta0, min_norm, inner_steps,
                                     auc_weight, half_life, n_events):  # fmt: skip
    """solver_steps as two pauc_gradient_counts per step (the pAUC term, then the all-pairs
    term), as the kernel computed it before it shared one scoring, sort and row pass."""
    capacity = len(pos_X) + len(neg_X)
    n_steps = min(10 * inner_steps, max(inner_steps, inner_steps * capacity // (n_pos + n_neg)))
    effective = n_neg * (seen / admitted)
    j_alpha = int(np.floor(alpha * effective + 1e-9))
    j_beta = min(max(int(np.ceil(beta * effective - 1e-9)), 1), n_neg)
    j_alpha = min(j_alpha, j_beta - 1)
    pos_rows, neg_rows = np.arange(n_pos), np.arange(n_neg)
    grad, grad_auc = np.empty(len(w)), np.empty(len(w))
    for _ in range(n_steps):
        pauc_gradient_counts(pos_X, pos_rows, neg_X, neg_rows, w, j_alpha, j_beta, grad)
        if auc_weight > 0.0:
            pauc_gradient_counts(pos_X, pos_rows, neg_X, neg_rows, w, 0, n_neg, grad_auc)
            for j in range(len(w)):
                grad[j] += auc_weight * grad_auc[j]
        steps += 1
        step = eta0 / (1.0 + eta0 * lam * recent_steps(steps, n_events, half_life))
        shrink = 1.0 - step * lam
        for j in range(len(w)):
            w[j] = shrink * w[j] - step * grad[j]
        project_annulus(w, min_norm, np.sqrt(2.0 / lam))
    return steps


@pytest.mark.parametrize(
    "alpha, beta, auc_weight, n_pos, n_neg, ties",
    [(0.0, 0.1, 10.0, 37, 203, False), (0.0, 0.1, 10.0, 40, 200, True),
     (0.05, 0.3, 10.0, 21, 90, False), (0.05, 0.3, 3.0, 33, 101, True),
     (0.0, 0.2, 0.0, 19, 150, False), (0.1, 0.25, 0.0, 30, 61, True),
     (0.0, 1.0, 10.0, 5, 7, False)],
)  # fmt: skip
def test_solver_steps_compute_what_the_general_kernels_compute_bit_for_bit(
    alpha, beta, auc_weight, n_pos, n_neg, ties
):
    """The solver's shared scoring, incremental sort, merged coefficients and four-row passes
    change no number: w is bit for bit that of two pauc_gradient_counts per step (fill counts
    that are not multiples of four, partly filled reservoirs, admission, tied scores)."""
    rng = np.random.default_rng(n_pos)
    d = 7
    pos_X, neg_X = np.zeros((n_pos + 3, d)), np.zeros((n_neg + 9, d))
    pos_X[:n_pos] = rng.normal(size=(n_pos, d)) + 0.4
    neg_X[:n_neg] = rng.normal(size=(n_neg, d))
    if ties:  # few distinct values: many tied scores, inside and at the top-j_beta boundary
        pos_X, neg_X = np.round(pos_X), np.round(neg_X)
        neg_X[1:n_neg:3] = neg_X[0]
    seen, admitted = 3 * n_neg, 2 * n_neg
    for half_life, n_events in [(0.0, 5000), (300.0, 900)]:
        w0 = rng.normal(size=d) * 0.3
        w, w_ref = w0.copy(), w0.copy()
        steps = np.array([17], dtype=np.int64)
        args = (alpha, beta, 0.1, 0.5, 0.25, 6)
        assert solver_steps(
            w, steps, pos_X, np.array([n_pos]), neg_X, np.array([n_neg]), np.array([seen]),
            np.array([admitted]), *args, np.empty(d), auc_weight, half_life, n_events,
            len(pos_X) + len(neg_X),
        )  # fmt: skip
        ref_steps = _solver_steps_by_general_kernels(
            w_ref, 17, pos_X, n_pos, neg_X, n_neg, seen, admitted, *args, auc_weight,
            half_life, n_events,
        )  # fmt: skip
        assert steps[0] == ref_steps >= 17 + 6
        np.testing.assert_array_equal(w, w_ref)


def test_resort_descending_gives_the_stable_descending_argsort_from_any_start():
    rng = np.random.default_rng(3)
    for n in [1, 2, 5, 64, 301]:
        scores = np.round(rng.normal(size=n), 1)  # ties
        scores[::7] = -0.0 if n > 7 else scores[::7]  # -0.0 ties with 0.0
        expected = np.argsort(-scores, kind="mergesort")
        for start in [np.arange(n), rng.permutation(n), expected[::-1].copy(), expected.copy()]:
            order = start.copy()
            assert resort_descending(scores, order, n * n)
            np.testing.assert_array_equal(order, expected)
    order = np.arange(100)
    assert not resort_descending(np.arange(100.0), order, 50)  # gives up: argsort instead
    assert sorted(order) == list(range(100))


def test_minimum_norm_safeguard_matches_the_reference_where_it_engages():
    # a weak shift (at most 0.5 sd): the surrogate is minimised at w = 0, so steps land in the
    # inner ball of W and are pushed back onto the sphere ||w|| = min_norm (the pure pAUC
    # surrogate: the all-pairs term of the default auc_weight is not minimised at 0 here)
    X, y = _stream(7, shift=0.0)
    params = dict(update_every=20, inner_steps=2, positive_capacity=30, negative_capacity=60,
                  min_norm=0.4, admission=2.0, auc_weight=0.0, random_state=2)  # fmt: skip
    learner = make_learner("ftrl_pauc", **params)
    scores = learner.prequential_step(X, y)
    ref_scores, ref_w, _, _, ref_steps = naive.ftrl_pauc_reference(X, y, **params)
    assert learner.state_["n_solver_steps"][0] == ref_steps
    np.testing.assert_allclose(learner.state_["w"], ref_w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-9, atol=1e-12)
    assert np.linalg.norm(ref_w) == pytest.approx(0.4, rel=1e-12)
    _, free_w, _, _, _ = naive.ftrl_pauc_reference(X, y, **{**params, "min_norm": 0.0})
    assert np.linalg.norm(free_w) < 0.2


def test_safeguard_finds_the_direction_when_the_surrogate_is_minimised_at_zero():
    """Kar et al.'s [0, 0.1] hinge surrogate on 1 % positives shifted by 1.34 standard
    deviations (below the ~1.75 of the top-10 % negatives): the batch solver returns w = 0 and
    the learner without the safeguard drifts; with it, one pass ranks as well as the true
    shift direction.  (auc_weight=0: the pure pAUC surrogate.  The default all-pairs term is not
    minimised at 0 there, so the default learner ranks as well without needing the safeguard.)"""
    rng = np.random.default_rng(0)
    shift = np.array([0.9, -0.7, 0.5, 0.4, -0.3, 0.0, 0.0, 0.0, 0.0, 0.0])

    X, y = shifted_gaussian_events(rng, 30000, shift, 0.01)
    X_test, y_test = shifted_gaussian_events(rng, 30000, shift, 0.01)
    batch = solve_svm_pauc(X, np.where(y > 0, 1, -1), beta=0.1, C=1.0 / 0.1)
    assert np.linalg.norm(batch.w) < 1e-2
    oracle = naive.pauc_roc(y_test, X_test @ shift, 0.0, 0.1)
    model = make_learner("ftrl_pauc", auc_weight=0.0).partial_fit(X, y)
    assert np.linalg.norm(model.coef_) >= 0.25 - 1e-12
    default = naive.pauc_roc(y_test, model.decision_function(X_test), 0.0, 0.1)
    free = make_learner("ftrl_pauc", auc_weight=0.0, min_norm=0.0).partial_fit(X, y)
    without = naive.pauc_roc(y_test, free.decision_function(X_test), 0.0, 0.1)
    assert default > oracle - 0.02
    assert without < default - 0.05
    mixed = make_learner("ftrl_pauc").partial_fit(X, y)
    assert naive.pauc_roc(y_test, mixed.decision_function(X_test), 0.0, 0.1) > oracle - 0.02


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


def test_forgetting_reservoirs_fill_before_they_forget():
    """With ``half_life`` a reservoir keeps every event of its class until its used slots are
    full ((forgetting.4), filled first): a 2 % class with H = 5000 has a class half-life of
    ~100 positives, ~144 used slots, so all ~60 positives of 3,000 events stay, in order."""
    X, y = _stream(2, n=3000, rate=0.02)
    model = make_learner("ftrl_pauc", half_life=5000, random_state=0).partial_fit(X, y)
    n_pos = int(y.sum())
    assert model.state_["positive_fill"][0] == n_pos > 30
    np.testing.assert_array_equal(model.state_["positive_X"][:n_pos], X[y > 0])


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


def test_tight_gradient_reference_is_the_brute_force_maximiser():
    """The direct r-by-r reference for alpha > 0 agrees with the exhaustive search over all
    subsets and orders (Delta - w.g maximised; its subgradient is -g)."""
    rng = np.random.default_rng(4)
    for j_alpha, j_beta in [(1, 2), (1, 3), (2, 3)]:
        Xp, Xn, w = rng.normal(size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=3)
        constraints = naive.tight_constraints(Xp, Xn, j_alpha, j_beta)
        values = [delta - g @ w for delta, g in constraints]
        _, best_g = constraints[int(np.argmax(values))]
        np.testing.assert_allclose(
            naive.tight_pauc_grad(Xp, Xn, w, j_alpha, j_beta), -best_g, rtol=1e-12, atol=1e-12
        )


def test_one_pass_is_close_to_the_batch_solver():
    rng = np.random.default_rng(6)
    direction = rng.normal(size=10) * 0.5

    X, y = shifted_gaussian_events(rng, 60000, direction, 0.01)
    X_test, y_test = shifted_gaussian_events(rng, 60000, direction, 0.01)
    batch = solve_svm_pauc(X, np.where(y > 0, 1, -1), beta=0.1, C=1.0 / 0.1)
    ceiling = naive.pauc_roc(y_test, X_test @ batch.w, 0.0, 0.1)
    model = make_learner("ftrl_pauc").partial_fit(X, y)
    assert naive.pauc_roc(y_test, model.decision_function(X_test), 0.0, 0.1) > ceiling - 0.02
