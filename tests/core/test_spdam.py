"""SPDAM (docs/algorithms/spdam.md): Alg. 21 against a naive per-step reference, the solution
against the exact minimiser of (5.1), the duality gap, the stream's window (against its naive
reference over every configuration: tests/core/test_naive_references.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core._kernels.spdam import theorem_sigma
from core.learners import make_learner
from core.learners.spdam import exact_minimiser
from core.metrics import auc
from core.preprocessing import scaler_affine
from tests.core.cases import close
from tests.core.naive import spdam as naive
from tests.core.naive.baselines import SplitMix64


def _data(seed, n=240, d=5, positive_rate=0.3, density=1.0):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < positive_rate, 1, -1)
    X = rng.normal(size=(n, d)) + 0.8 * (y[:, None] > 0) * rng.normal(size=d)
    if density < 1.0:
        X[rng.random(X.shape) > density] = 0.0
    X[::11] = np.round(X[::11])  # ties
    X[5] = X[4]
    return X, y


def pairwise_minimiser(X, y, lam):
    """(5.1) by brute force: every positive-negative difference is a least-squares row with
    target 1, weighted 1 / (n+ n-), plus (lam / 2) ||w||^2."""
    positives, negatives = X[y > 0], X[y < 0]
    differences = (positives[:, None, :] - negatives[None, :, :]).reshape(-1, X.shape[1])
    pairs = len(differences)
    gram = differences.T @ differences / pairs + (lam / 2.0) * np.eye(X.shape[1])
    return np.linalg.solve(gram, differences.sum(axis=0) / pairs)


@pytest.mark.filterwarnings("ignore:spdam. 4 epochs ended")
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"transform": "sqrt_2p", "batch_fraction": 0.25, "lam": 0.05},
        {"sigma": 0.3, "tau": 0.5, "lam": 0.2, "batch_fraction": 1.0},
        {"sigma": 2.0, "batch_fraction": 0.02},
    ],
)
def test_fit_follows_the_naive_algorithm_step_by_step(params, sparse):
    X, y = _data(1, density=0.5 if sparse else 1.0)
    full = {"lam": 1e-2, "batch_fraction": 0.1, "sigma": None, "tau": None,
            "transform": "sqrt_p", "tol": 1e-300, "max_epochs": 4, **params}  # fmt: skip
    model = make_learner("spdam", max_iter=4, tol=1e-300, random_state=3, **params)
    model.fit(sp.csr_matrix(X) if sparse else X, y)
    w, _, epochs, gap, _ = naive.solve(X, y, np.zeros(5), np.zeros(len(y)), [],
                                       SplitMix64(3), **full)  # fmt: skip
    close(model.coef_, w, 1e-9)
    assert epochs == model.state_["n_epochs"][0] == 4
    assert model.duality_gap_ == pytest.approx(gap, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("lam", [1.0, 0.05, 1e-3])
@pytest.mark.parametrize("sparse", [False, True])
def test_fit_reaches_the_exact_minimiser_of_the_auc_objective(lam, sparse):
    X, y = _data(2, n=300, d=6, positive_rate=0.2, density=0.6 if sparse else 1.0)
    expected = pairwise_minimiser(X, y, lam)
    close(exact_minimiser(X, y, lam), expected, 1e-10)
    model = make_learner("spdam", lam=lam, tol=1e-15, max_iter=100_000)
    model.fit(sp.csr_matrix(X) if sparse else X, y)
    assert model.converged_ and model.duality_gap_ <= 1e-15
    # the gap bounds the objective (a quadratic with curvature >= lam / 2): ||w - w*||^2 <=
    # 2 gap / (lam / 2)
    np.testing.assert_allclose(model.coef_, expected, rtol=0, atol=np.sqrt(4e-15 / lam) + 1e-12)
    assert np.linalg.norm(model.coef_ - expected) <= 1e-6 * np.linalg.norm(expected)


def test_thesis_transform_solves_the_half_variance_problem():
    X, y = _data(3, n=200, d=4)
    model = make_learner("spdam", lam=0.1, transform="sqrt_2p", tol=1e-15, max_iter=100_000)
    model.fit(X, y)
    Xbar, b = naive.transformed(X, y, double_prior=True)
    # (spdam.4) with sqrt(2p): (1/(2n)) sum (w.xbar)^2 + g(w), minimised by one linear solve
    system = Xbar.T @ Xbar / len(y) + np.outer(b, b) + 0.05 * np.eye(4)
    close(model.coef_, np.linalg.solve(system, -b), 1e-6)
    close(exact_minimiser(X, y, 0.1, "sqrt_2p"), np.linalg.solve(system, -b), 1e-10)
    assert not np.allclose(model.coef_, exact_minimiser(X, y, 0.1), rtol=1e-3)


@pytest.mark.filterwarnings("ignore:spdam. .* epochs ended")
def test_reported_gap_bounds_the_true_suboptimality():
    X, y = _data(4)
    optimum = exact_minimiser(X, y, 0.01)
    Xbar, b = naive.transformed(X, y, double_prior=False)

    def objective(w):
        return np.mean((Xbar @ w) ** 2) / 2 + 0.5 * (b @ w) ** 2 + b @ w + 0.005 * w @ w

    for epochs in (1, 3, 10):
        model = make_learner("spdam", lam=0.01, max_iter=epochs, tol=1e-300).fit(X, y)
        assert 0 <= objective(model.coef_) - objective(optimum) <= model.duality_gap_ + 1e-15


def test_every_event_at_its_class_mean_leaves_only_g():
    X = np.array([[1.0, 2.0]] * 3 + [[0.0, -1.0]] * 5)
    y = np.array([1] * 3 + [-1] * 5)
    model = make_learner("spdam", lam=0.5).fit(X, y)
    b = np.array([-1.0, -3.0])
    close(model.coef_, -b / (0.25 + b @ b))
    close(model.coef_, exact_minimiser(X, y, 0.5))


def test_one_class_stream_learns_nothing_until_both_classes_are_in_the_window():
    X, y = _data(5)
    model = make_learner("spdam", window=30)
    model.partial_fit(X[y < 0][:20], -np.ones(20, dtype=int))
    assert not model.coef_.any() and model.state_["n_epochs"][0] == 0
    model.partial_fit(X[:40], y[:40])
    assert model.coef_.any() and model.state_["window_fill"][0] == 30


def test_fit_leaves_its_last_events_in_the_window_and_the_stream_continues():
    X, y = _data(6, n=400)
    model = make_learner("spdam", window=100, lam=0.01).fit(X[:300], y[:300])
    np.testing.assert_array_equal(model.state_["window_X"], X[200:300])
    # the duals kept are those of the solve; continuing on the stream keeps a good ranking
    model.partial_fit(X[300:], y[300:])
    assert auc(y, model.decision_function(X)) > 0.75


def test_default_fit_converges_and_ranks_well():
    rng = np.random.default_rng(7)
    y = np.where(rng.random(3000) < 0.1, 1, -1)
    X = rng.normal(size=(3000, 20)) + 0.6 * (y[:, None] > 0) * np.linspace(1, -1, 20)
    model = make_learner("spdam").fit(X[:2000], y[:2000])
    assert model.converged_
    logistic = pairwise_minimiser(X[:2000], y[:2000], 1e-3)
    assert auc(y[2000:], model.decision_function(X[2000:])) == pytest.approx(
        auc(y[2000:], X[2000:] @ logistic), abs=2e-3
    )


@pytest.mark.parametrize("scaling", ["scale", "standard"])
def test_fit_solves_on_the_features_scaled_as_the_model_scores_them(scaling):
    X, y = _data(8, n=300)
    # raw features: an offset of 40 with a spread of 0.05 beside a spread of 900
    X = X * np.array([900.0, 1.0, 0.05, 3.0, 1.0]) + np.array([2500.0, 0.0, -40.0, 1.0, 0.0])
    model = make_learner("spdam", scaling=scaling, tol=1e-12, max_iter=5_000).fit(X, y)
    assert model.converged_
    # every event scaled with the statistics of the whole batch (those served), not with the
    # running ones of its time: the first events would be divided by spreads of a few rows
    divisors, offsets = scaler_affine(scaling, model.state_)
    close(model.coef_, exact_minimiser((X - offsets) / divisors, y, model.lam), 1e-5)


@pytest.mark.parametrize(("n", "m", "kappa_sq", "mu"), [(552, 56, 9.0, 5e-3), (40, 40, 0.3, 2.0)])
def test_theorem_sigma_balances_the_two_contractions_of_its_proof(n, m, kappa_sq, mu):
    sigma = theorem_sigma(n, m, kappa_sq, mu, False)
    # (5.18) with its 1/m: the primal factor 1 - theta equals the dual one
    primal = mu / (mu + 2 * sigma * kappa_sq)
    assert primal == pytest.approx((1 / n) / (1 / m + 1 / (2 * sigma * m)), rel=1e-12)
    assert sigma == pytest.approx(naive.balanced_sigma(n, m, kappa_sq, mu), rel=1e-12)
    # the printed value is 1 / (2 mu) times larger, hence a primal step 2 mu times smaller
    assert theorem_sigma(n, m, kappa_sq, mu, True) == pytest.approx(sigma / (2 * mu), rel=1e-12)
