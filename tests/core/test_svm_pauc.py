"""SVM_pAUC (Narasimhan & Agarwal; notes 000): MVC, QP, solver, surrogate identities, learner."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from core._kernels.simplex_qp import solve_simplex_qp
from core.learners import learner_class, make_learner
from core.learners.svm_pauc import (
    hinge_surrogate,
    most_violated_constraint,
    range_counts,
    solve_svm_pauc,
    tight_surrogate,
)
from core.metrics import pauc_narasimhan_agarwal
from tests.core.naive import pauc as naive


def _small(rng, m, n, d=2, scale=1.0):
    Xp = rng.normal(size=(m, d)) * scale
    Xn = rng.normal(size=(n, d)) * scale
    X = np.vstack([Xp, Xn])
    y = np.array([1] * m + [-1] * n)
    return X, y, Xp, Xn


# ---------------------------------------------------------------------------- MVC and QP
@pytest.mark.parametrize("alpha, beta", [(0.0, 0.5), (0.0, 0.2), (0.2, 0.6), (0.25, 1.0)])
def test_most_violated_constraint_equals_exhaustive_search(alpha, beta):
    rng = np.random.default_rng(0)
    for _ in range(25):
        m, n = int(rng.integers(1, 4)), int(rng.integers(3, 6))
        _, _, Xp, Xn = _small(rng, m, n, d=3)
        w = rng.normal(size=3) * rng.choice([0.2, 1.0, 4.0])
        j_alpha, j_beta = range_counts(alpha, beta, n)
        N = m * (j_beta - j_alpha)
        delta, g, value = most_violated_constraint(Xp, Xn, w, j_alpha, j_beta, N)
        constraints = naive.tight_constraints(Xp, Xn, j_alpha, j_beta)
        best = max(d - v @ w for d, v in constraints) / N
        assert value == pytest.approx(best, abs=1e-10)
        assert delta - g @ w == pytest.approx(value, abs=1e-10)
        # the returned (Delta, g) is itself one of the admissible constraints
        assert any(abs(d / N - delta) < 1e-12 and np.allclose(v / N, g) for d, v in constraints)


def test_simplex_qp_matches_scipy():
    rng = np.random.default_rng(1)
    for _ in range(15):
        k, d = int(rng.integers(1, 10)), int(rng.integers(1, 5))
        A = rng.normal(size=(k, d))
        G, b, C = A @ A.T, rng.normal(size=k) + 0.5, float(rng.choice([0.01, 1.0, 50.0]))
        lam = np.zeros(k + 1)
        lam[0] = C
        solve_simplex_qp(G, b, C, lam, 1e-12, 10**6)

        def f(x, G=G, b=b):
            return 0.5 * x @ G @ x - b @ x

        reference = minimize(
            f, np.full(k, C / (k + 1)), jac=lambda x, G=G, b=b: G @ x - b, method="SLSQP",
            bounds=[(0, None)] * k, options={"ftol": 1e-15, "maxiter": 2000},
            constraints=[{"type": "ineq", "fun": lambda x, C=C: C - x.sum()}],
        )  # fmt: skip
        assert lam.min() >= 0 and lam.sum() == pytest.approx(C)
        assert f(lam[1:]) <= reference.fun + 1e-9 * max(1.0, abs(reference.fun))


# ---------------------------------------------------------------------------- the solver
def _primal_over_all_constraints(constraints, C, n_features):
    """Independent solver: min 1/2||w||^2 + C xi, xi >= Delta_c - w.g_c for EVERY admissible
    constraint (enumerated), xi >= 0, by SLSQP on (w, xi)."""
    D = np.array([c[0] for c in constraints])
    G = np.array([c[1] for c in constraints])

    def objective(z):
        return 0.5 * z[:-1] @ z[:-1] + C * z[-1]

    result = minimize(
        objective, np.zeros(n_features + 1), method="SLSQP",
        jac=lambda z: np.append(z[:-1], C),
        constraints=[{"type": "ineq", "fun": lambda z: z[-1] - D + G @ z[:-1],
                      "jac": lambda z: np.hstack([G, np.ones((len(D), 1))])},
                     {"type": "ineq", "fun": lambda z: z[-1:]}],
        options={"ftol": 1e-13, "maxiter": 1000},
    )  # fmt: skip
    return result.fun, result.x[:-1]


@pytest.mark.parametrize("alpha, beta, C", [(0.0, 0.5, 1.0), (0.0, 0.25, 20.0), (0.25, 0.75, 5.0)])
def test_objective_matches_a_generic_solver_on_the_enumerated_problem(alpha, beta, C):
    rng = np.random.default_rng(2)
    X, y, Xp, Xn = _small(rng, 3, 4, d=2)
    Xp += np.array([1.0, 0.0])
    X[:3] = Xp
    j_alpha, j_beta = range_counts(alpha, beta, 4)
    N = 3 * (j_beta - j_alpha)
    constraints = [(d / N, g / N) for d, g in naive.tight_constraints(Xp, Xn, j_alpha, j_beta)]
    reference, w_reference = _primal_over_all_constraints(constraints, C, 2)
    result = solve_svm_pauc(X, y, alpha=alpha, beta=beta, C=C, tol=1e-8)
    assert result.converged
    assert result.objective == pytest.approx(reference, abs=1e-6)
    # the primal objective is strongly convex: the minimiser is unique
    np.testing.assert_allclose(result.w, w_reference, atol=1e-3)


def test_top_beta_objective_matches_a_generic_solver_on_a_larger_set():
    """[0, beta] via the top-K-sum identity sum_topK(a) = min_tau K tau + sum (a_j - tau)_+ and
    the hinge as slack variables: a smooth constrained problem for SLSQP."""
    rng = np.random.default_rng(3)
    m, n, d, beta, C = 5, 20, 3, 0.2, 10.0
    X, y, Xp, Xn = _small(rng, m, n, d=d)
    Xp += 0.7
    X[:m] = Xp
    K = naive.top_count(beta, n)
    diff = (Xp[:, None, :] - Xn[None, :, :]).reshape(m * n, d)
    # z = [w (d), tau, u (n), e (m n)]
    n_var = d + 1 + n + m * n

    def objective(z):
        return 0.5 * z[:d] @ z[:d] + C / (m * K) * (K * z[d] + z[d + 1 : d + 1 + n].sum())

    def constraints(z):
        w, tau, u, e = z[:d], z[d], z[d + 1 : d + 1 + n], z[d + 1 + n :]
        per_negative = e.reshape(m, n).sum(axis=0)
        return np.concatenate([e - (1.0 - diff @ w), e, u - (per_negative - tau), u])

    reference = minimize(objective, np.zeros(n_var), method="SLSQP",
                         constraints=[{"type": "ineq", "fun": constraints}],
                         options={"ftol": 1e-12, "maxiter": 2000})  # fmt: skip
    result = solve_svm_pauc(X, y, beta=beta, C=C, tol=1e-8)
    assert result.objective == pytest.approx(reference.fun, rel=1e-5)


def test_solver_stops_within_tol_of_the_surrogate_optimum():
    rng = np.random.default_rng(4)
    y = np.where(rng.random(3000) < 0.05, 1, -1)
    X = rng.normal(size=(3000, 5)) + (y[:, None] > 0) * np.array([2.5, 1.0, 0, 0, 0])
    loose = solve_svm_pauc(X, y, beta=0.1, C=5.0, tol=1e-2)
    tight = solve_svm_pauc(X, y, beta=0.1, C=5.0, tol=1e-7)
    assert loose.converged and tight.converged
    # the 1-slack guarantee: objective within C * tol of the optimum
    assert tight.objective <= loose.objective <= tight.objective + 5.0 * 1e-2 + 1e-9


# ---------------------------------------------------------------------------- paper facts
def test_worked_example_of_the_journal_figure_2():
    f1 = [9.1, 6.8, 6.1, 5.7, 8.5, 8.1, 4.2, 3.6, 2.3]
    f2 = [9.9, 8.7, 3.3, 2.1, 7.6, 5.3, 4.9, 4.4, 0.8]
    y = [1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert naive.pauc_journal(y, f1, 0.0, 1.0) == pytest.approx(0.70)
    assert naive.pauc_journal(y, f2, 0.0, 1.0) == pytest.approx(0.60)
    assert naive.pauc_journal(y, f1, 0.1, 0.2) == pytest.approx(0.25)
    assert naive.pauc_journal(y, f2, 0.1, 0.2) == pytest.approx(0.50)
    assert pauc_narasimhan_agarwal(y, f1, 0.1, 0.2) == pytest.approx(0.25)
    assert pauc_narasimhan_agarwal(y, f2, 0.1, 0.2) == pytest.approx(0.50)
    # as features (x = the score, w = 1): the tight [0, 0.2] surrogate is the hinge of every
    # positive against the top negative (j_beta = 1)
    X = np.array(f2)[:, None]
    assert tight_surrogate(X, np.array(y), np.ones(1), 0.0, 0.2) == pytest.approx(
        (0 + 0 + (1 - 3.3 + 7.6) + (1 - 2.1 + 7.6)) / 4
    )


def test_theorem_5_tight_equals_hinge_on_zero_beta():
    rng = np.random.default_rng(5)
    for _ in range(40):
        m, n = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        X, y, Xp, Xn = _small(rng, m, n, d=2)
        w = rng.normal(size=2) * 2
        _, j_beta = range_counts(0.0, 0.5, n)
        brute = naive.tight_value_bruteforce(Xp, Xn, w, 0, j_beta) / (m * j_beta)
        pairs = naive.hinge_top_negatives(Xp @ w, Xn @ w, j_beta) / (m * j_beta)
        assert tight_surrogate(X, y, w, 0.0, 0.5) == pytest.approx(brute, abs=1e-10)
        assert brute == pytest.approx(pairs, abs=1e-10)


def _theorem_7_terms(Xp, Xn, w, j_alpha, j_beta):
    s, t = Xp @ w, np.sort(Xn @ w)[::-1]
    N = len(s) * (j_beta - j_alpha)
    hinge = sum(max(0, 1 - si + tj) for si in s for tj in t[j_alpha:j_beta]) / N
    eta = sum(max(0, tj - si) for si in s for tj in t[:j_alpha]) / N
    below = [si for si in s if si < t[j_alpha - 1]]
    hinge_plus = sum(max(0, 1 - si + tj) for si in below for tj in t[j_alpha:j_beta]) / N
    eta_plus = sum(max(0, tj - si) for si in below for tj in t[:j_alpha]) / N
    return hinge, eta, hinge_plus, eta_plus


def test_theorem_7_bounds_and_equality_for_separated_scores():
    rng = np.random.default_rng(6)
    for trial in range(60):
        m, n = int(rng.integers(1, 4)), int(rng.integers(3, 6))
        separated = trial % 2 == 0
        X, y, Xp, Xn = _small(rng, m, n, d=1)
        if separated:  # |w.x_i - w.z_j| >= 1 for all pairs: integer grid with distinct parity
            Xp, Xn = (
                2.0 * rng.integers(-3, 4, size=(m, 1)),
                2.0 * rng.integers(-3, 4, size=(n, 1)) + 1,
            )
            X = np.vstack([Xp, Xn])
        w = np.ones(1)
        j_alpha, j_beta = range_counts(0.25, 0.75, n)
        tight = tight_surrogate(X, y, w, 0.25, 0.75)
        N = m * (j_beta - j_alpha)
        assert tight == pytest.approx(
            naive.tight_value_bruteforce(Xp, Xn, w, j_alpha, j_beta) / N, abs=1e-10
        )
        hinge, eta, hinge_plus, eta_plus = _theorem_7_terms(Xp, Xn, w, j_alpha, j_beta)
        assert hinge_plus + eta_plus - 1e-12 <= tight <= hinge + eta + 1e-12
        assert hinge_surrogate(X, y, w, 0.25, 0.75) == pytest.approx(hinge, abs=1e-12)
        if separated:
            assert tight == pytest.approx(hinge + eta, abs=1e-12)


def test_theorem_2_the_hinge_surrogate_on_alpha_beta_is_not_convex():
    # notes 000 §2.2 counterexample with j_alpha = 2, j_beta = 3 (n = 10, [0.2, 0.3])
    j_alpha, n = 2, 10
    negatives = [(0, -1)] + [(0, 0)] * (j_alpha - 1) + [(-1, 0)] + [(-1, -1)] * (n - j_alpha - 1)
    X = np.array([(0.0, 0.0)] + negatives, dtype=float)
    y = np.array([1] + [-1] * n)
    r1 = hinge_surrogate(X, y, np.array([1.0, 0.0]), 0.2, 0.3)
    r2 = hinge_surrogate(X, y, np.array([0.0, 1.0]), 0.2, 0.3)
    r3 = hinge_surrogate(X, y, np.array([0.5, 0.5]), 0.2, 0.3)
    assert r1 == r2 == 0.0
    assert r3 == pytest.approx(0.5 / (3 - 2))


def test_dc_improves_the_nonconvex_objective_from_the_tight_start():
    rng = np.random.default_rng(7)
    y = np.where(rng.random(1500) < 0.1, 1, -1)
    X = rng.normal(size=(1500, 4)) + (y[:, None] > 0) * np.array([1.0, 0.3, 0, 0])
    alpha, beta, C = 0.02, 0.05, 5.0
    tight = solve_svm_pauc(X, y, alpha=alpha, beta=beta, C=C, tol=1e-5)
    dc = solve_svm_pauc(X, y, alpha=alpha, beta=beta, C=C, tol=1e-5, method="dc")

    def J(w):
        return 0.5 * w @ w + C * hinge_surrogate(X, y, w, alpha, beta)

    assert dc.objective == pytest.approx(J(dc.w), abs=1e-12)
    assert J(dc.w) <= J(tight.w) + 1e-12
    assert dc.n_outer >= 1
    # the hinge surrogate is below the tight one ([J] Fig. 3c), so DC's objective is lower too
    assert hinge_surrogate(X, y, tight.w, alpha, beta) <= tight_surrogate(
        X, y, tight.w, alpha, beta
    )


# ---------------------------------------------------------------------------- the learner
def test_learner_fit_state_round_trip_and_sparse():
    rng = np.random.default_rng(8)
    y = (rng.random(800) < 0.1).astype(int)
    X = rng.normal(size=(800, 5)) + y[:, None] * np.array([2.5, 1.0, 0, 0, 0])
    X[rng.random(X.shape) < 0.3] = 0.0
    model = make_learner("svm_pauc", beta=0.1, C=2.0).fit(X, y)
    assert model.converged_ and model.state_["n_iter"][0] > 1
    restored = learner_class("svm_pauc").from_state(model.get_params(), model.get_state())
    np.testing.assert_array_equal(restored.decision_function(X), model.decision_function(X))
    np.testing.assert_array_equal(model.decision_function(X), X @ model.coef_)
    from_sparse = make_learner("svm_pauc", beta=0.1, C=2.0).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(from_sparse.coef_, model.coef_, atol=1e-12)
    direct = solve_svm_pauc(X.astype(float), np.where(y > 0, 1, -1), beta=0.1, C=2.0)
    np.testing.assert_array_equal(model.coef_, direct.w)


def test_partial_fit_refits_on_the_latest_window():
    rng = np.random.default_rng(9)
    y = (rng.random(300) < 0.2).astype(int)
    X = rng.normal(size=(300, 3)) + y[:, None] * np.array([2.5, 0.0, 0.0])
    model = make_learner("svm_pauc", window=100)
    first = model.prequential_step(X[:200], y[:200])
    assert not first.any()  # scored by the model before the batch (w = 0)
    w_before = model.coef_
    scores = model.prequential_step(X[200:], y[200:])
    np.testing.assert_array_equal(scores, X[200:] @ w_before)
    window_model = make_learner("svm_pauc").fit(X[200:], y[200:])
    np.testing.assert_allclose(model.coef_, window_model.coef_, atol=1e-12)
    np.testing.assert_array_equal(np.sort(model.state_["window_y"]),
                                  np.sort(np.where(y[200:] > 0, 1, -1)))  # fmt: skip


def test_one_class_data_is_rejected():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="needs both classes"):
        make_learner("svm_pauc").fit(X, np.ones(5))


def test_rejected_batch_leaves_the_state_unchanged():
    rng = np.random.default_rng(10)
    y = (rng.random(200) < 0.3).astype(int)
    X = rng.normal(size=(200, 3)) + y[:, None]
    model = make_learner("svm_pauc", window=50).fit(X, y)
    model.partial_fit(X[:60], y[:60])
    before = model.get_state()
    bad = X[60:70].copy()
    bad[2, 1] = np.nan
    for batch_X, batch_y in [(bad, y[60:70]), (X[60:70, :2], y[60:70]), (X[60:70], y[60:70] + 3)]:
        with pytest.raises(ValueError):
            model.partial_fit(batch_X, batch_y)
        for key, value in before.items():
            np.testing.assert_array_equal(model.state_[key], value, err_msg=key)


def test_a_degenerate_surrogate_is_flagged_and_a_wider_range_is_not():
    rng = np.random.default_rng(11)
    y = (rng.random(6000) < 0.05).astype(int)
    X = rng.normal(size=(6000, 4)) + y[:, None] * np.array([1.0, 0.0, 0.0, 0.0])
    with pytest.warns(UserWarning, match="minimised at w = 0"):
        narrow = make_learner("svm_pauc", beta=0.1).fit(X, y)
    assert narrow.degenerate_ and np.linalg.norm(narrow.coef_) < 1e-3
    wide = make_learner("svm_pauc", beta=0.5).fit(X, y)
    assert not wide.degenerate_ and wide.coef_[0] > 10 * np.abs(wide.coef_[1:]).max()
