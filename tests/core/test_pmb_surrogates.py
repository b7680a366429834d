"""pAUC / Prec@k surrogates on a buffer (docs/algorithms/pmb.md (pmb.1)-(pmb.2)): the kernels
of core._kernels.pauc_surrogate against exhaustive searches, pair loops and finite
differences."""

from __future__ import annotations

import numpy as np
import pytest

from core._kernels.pauc_surrogate import (
    count_above,
    prec_at_k_coefficients,
    tight_pauc_coefficients,
)
from tests.core.naive import pauc as naive


def _random_problem(rng, max_pos=3, max_neg=4, n_features=3):
    m = int(rng.integers(1, max_pos + 1))
    n = int(rng.integers(1, max_neg + 1))
    Xp = rng.normal(size=(m, n_features))
    Xn = rng.normal(size=(n, n_features))
    w = rng.normal(size=n_features) * rng.choice([0.1, 1.0, 3.0])
    return Xp, Xn, w


def _tight(Xp, Xn, w, j_alpha, j_beta):
    pos_coef, neg_coef = np.empty(len(Xp)), np.empty(len(Xn))
    value, delta = tight_pauc_coefficients(Xp @ w, Xn @ w, j_alpha, j_beta, pos_coef, neg_coef)
    grad = neg_coef @ Xn + pos_coef @ Xp
    return value, delta, grad


# ---------------------------------------------------------------------------- surrogates
def test_tight_surrogate_equals_exhaustive_search_over_orderings():
    rng = np.random.default_rng(0)
    for _ in range(120):
        Xp, Xn, w = _random_problem(rng)
        j_beta = int(rng.integers(1, len(Xn) + 1))
        j_alpha = int(rng.integers(0, j_beta))
        value, delta, grad = _tight(Xp, Xn, w, j_alpha, j_beta)
        assert value == pytest.approx(
            naive.tight_value_bruteforce(Xp, Xn, w, j_alpha, j_beta), abs=1e-9
        )
        # the returned constraint is the one attaining the max: value = Delta - w.g, grad = -g
        assert value == pytest.approx(delta + grad @ w, abs=1e-9)


def test_tight_surrogate_with_tied_scores_equals_exhaustive_search():
    # integer features and weights: many tied scores and pairs exactly at margin 0 or 1
    rng = np.random.default_rng(10)
    for _ in range(150):
        m, n = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        Xp = rng.integers(-2, 3, size=(m, 2)).astype(float)
        Xn = rng.integers(-2, 3, size=(n, 2)).astype(float)
        w = rng.integers(-1, 2, size=2).astype(float)
        j_beta = int(rng.integers(1, n + 1))
        j_alpha = int(rng.integers(0, j_beta))
        value, delta, grad = _tight(Xp, Xn, w, j_alpha, j_beta)
        assert value == pytest.approx(naive.tight_value_bruteforce(Xp, Xn, w, j_alpha, j_beta),
                                      abs=1e-9)  # fmt: skip
        assert value == pytest.approx(delta + grad @ w, abs=1e-9)


def test_top_beta_hinge_equals_all_pairs_loop_and_its_gradient():
    rng = np.random.default_rng(1)
    for _ in range(200):
        Xp, Xn, w = _random_problem(rng, max_pos=8, max_neg=30, n_features=4)
        n_top = int(count_above(0.2, len(Xn)))
        value, _, grad = _tight(Xp, Xn, w, 0, n_top)
        assert value == pytest.approx(naive.hinge_top_negatives(Xp @ w, Xn @ w, n_top), abs=1e-9)
        np.testing.assert_allclose(
            grad, naive.hinge_top_negatives_grad(Xp, Xn, w, n_top), atol=1e-9
        )


@pytest.mark.parametrize("j_alpha", [0, 2])
def test_subgradient_matches_finite_differences_and_supports_the_function(j_alpha):
    rng = np.random.default_rng(2)
    for _ in range(100):
        Xp, Xn, w = _random_problem(rng, max_pos=6, max_neg=12, n_features=4)
        if len(Xn) <= j_alpha:
            continue
        j_beta = int(rng.integers(j_alpha + 1, len(Xn) + 1))
        value, _, grad = _tight(Xp, Xn, w, j_alpha, j_beta)
        # piecewise linear: a central difference with a tiny step is exact away from kinks,
        # which random continuous data avoid with probability 1
        step = 1e-7
        numeric = np.array(
            [
                (
                    _tight(Xp, Xn, w + step * e, j_alpha, j_beta)[0]
                    - _tight(Xp, Xn, w - step * e, j_alpha, j_beta)[0]
                )
                / (2 * step)
                for e in np.eye(len(w))
            ]
        )
        np.testing.assert_allclose(grad, numeric, atol=1e-5)
        # convexity: f(v) >= f(w) + g.(v - w) for any v (Danskin subgradient)
        for _ in range(5):
            other = w + rng.normal(size=len(w))
            assert _tight(Xp, Xn, other, j_alpha, j_beta)[0] >= value + grad @ (other - w) - 1e-9


def test_no_positive_or_no_top_negative_gives_zero():
    pos_coef, neg_coef = np.empty(0), np.full(3, 7.0)
    assert tight_pauc_coefficients(np.empty(0), np.ones(3), 0, 1, pos_coef, neg_coef) == (0, 0)
    assert neg_coef.tolist() == [0.0, 0.0, 0.0]


def test_top_negative_ties_are_broken_by_index():
    pos_coef, neg_coef = np.empty(1), np.empty(4)
    tight_pauc_coefficients(np.array([0.5]), np.zeros(4), 0, 2, pos_coef, neg_coef)
    assert neg_coef.tolist() == [1.0, 1.0, 0.0, 0.0]


def test_count_above_is_robust_to_rounding():
    assert count_above(0.07, 100) == 7
    assert count_above(0.1, 500) == 50
    assert count_above(0.1, 501) == 51


def test_prec_at_k_closed_form_equals_brute_force_and_is_a_subgradient():
    rng = np.random.default_rng(3)
    for _ in range(150):
        t = int(rng.integers(1, 8))
        X = rng.normal(size=(t, 3))
        labels = rng.choice([-1, 1], size=t).astype(np.int64)
        w = rng.normal(size=3)
        n_top = int(rng.integers(0, t + 1))
        coef = np.empty(t)
        value = prec_at_k_coefficients(X @ w, labels, n_top, coef)
        best, _ = naive.prec_at_k_bruteforce(X @ w, labels, n_top)
        assert value + t == pytest.approx(best, abs=1e-9)
        grad = coef @ X
        for _ in range(5):
            other = w + rng.normal(size=3)
            coef_other = np.empty(t)
            value_other = prec_at_k_coefficients(X @ other, labels, n_top, coef_other)
            assert value_other >= value + grad @ (other - w) - 1e-9
