"""``logistic``: the properties the service relies on over the configurations the defaults do
not reach (L1, L2, no intercept, CSR).

The shared contract (tests/core/test_learner_contract.py) runs over ``logistic`` with its
defaults and each configuration of tests/core/cases.py (bad parameters included), and
tests/core/test_naive_references.py runs the naive FTRL-Proximal reference over them.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from core.learners import make_learner
from core.metrics import auc
from tests.core.cases import CONFIGURATIONS, N_FEATURES, close, stream
from tests.core.naive.logistic import NaiveLogistic

CONFIGS = CONFIGURATIONS["logistic"]


def test_l1_gives_exact_zeros_and_the_reference_agrees_on_them():
    X, y = stream(2)
    X[:, 3] *= 0.01  # a weak feature whose |z| stays under the threshold
    model = make_learner("logistic", **CONFIGS["l1"]).partial_fit(X, y)
    reference = NaiveLogistic(N_FEATURES, 0.5, 1.0, 2.0, 0.0, True)
    reference.learn(X, y)
    assert model.coef_[3] == 0.0 == reference.weights()[3]
    assert np.count_nonzero(model.coef_) >= 3


def test_one_class_stream_moves_only_towards_that_class():
    X, y = stream(3)
    model = make_learner("logistic").partial_fit(X[:50], np.zeros(50, dtype=int))
    assert model.intercept_ < 0
    reference = NaiveLogistic(N_FEATURES, 0.2, 1.0, 0.0, 0.0, True)
    reference.learn(X[:50], np.zeros(50, dtype=int))
    close(model.coef_, reference.weights())


def test_extreme_logits_do_not_overflow():
    X = np.array([[1e6, 0.0], [-1e6, 0.0], [1e6, 1.0]])
    model = make_learner("logistic", alpha=10.0)
    scores = model.prequential_step(X, np.array([0, 1, 1]))
    assert np.isfinite(scores).all() and np.isfinite(model.coef_).all()
    proba = model.predict_proba(X)
    assert np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_predict_proba_is_the_sigmoid_of_the_score():
    X, y = stream(4)
    model = make_learner("logistic").partial_fit(X, y)
    close(model.predict_proba(X)[:, 1], 1.0 / (1.0 + np.exp(-model.decision_function(X))))


def test_learns_like_batch_logistic_regression():
    rng = np.random.default_rng(5)
    n = 6000
    y = (rng.random(n) < 0.1).astype(int)
    X = rng.normal(size=(n, 8)) + y[:, None] * np.linspace(1.0, 0.0, 8)
    model = make_learner("logistic").partial_fit(X[:4000], y[:4000])
    batch = LogisticRegression().fit(X[:4000], y[:4000])
    online_auc = auc(y[4000:], model.decision_function(X[4000:]))
    batch_auc = auc(y[4000:], batch.decision_function(X[4000:]))
    assert online_auc > batch_auc - 0.01
    # the intercept follows the class prior: log(0.1 / 0.9) = -2.2 at the mean
    assert -4.0 < model.intercept_ < -1.0


def test_high_dimensional_sparse_step_touches_only_its_columns():
    n_features = 2**20
    rng = np.random.default_rng(6)
    rows = sp.random(200, n_features, density=20 / n_features, format="csr", random_state=rng)
    y = rng.random(200) < 0.5
    model = make_learner("logistic")
    assert np.isfinite(model.prequential_step(rows, y)).all()
    touched = np.unique(rows.indices)
    assert np.count_nonzero(model.state_["n"]) == touched.size
    assert np.count_nonzero(model.coef_) <= touched.size


def test_base_rate_offset_shifts_scores_by_the_log_odds_of_the_labels_seen():
    X, y = stream(7)
    model = make_learner("logistic", base_rate_offset=True).partial_fit(X, y)
    positives, negatives = int((y > 0).sum()), int((y <= 0).sum())
    expected = np.log((positives + 0.5) / (negatives + 0.5))
    np.testing.assert_array_equal(model.state_["class_counts"], [negatives, positives])
    # the learned b, from its accumulators by (logistic.3) without penalty
    state = model.state_
    bias = -state["intercept_z"][0] * 0.2 / (1.0 + np.sqrt(state["intercept_n"][0]))
    close(model.decision_function(X), X @ model.coef_ + bias + expected)
    close(np.array([model.intercept_]), np.array([bias + expected]))
    assert abs(bias) < abs(expected)  # b learns only the residual of the base rate


def test_base_rate_offset_makes_early_and_late_scores_of_a_rare_class_comparable():
    # 3 % positives: without the offset FTRL's intercept falls from 0 to about -3.5 over the
    # first hundreds of events, so early negatives outrank later positives in the pooled
    # (prequential) ranking; with it the scale is right from the first events
    rng = np.random.default_rng(11)
    n = 3000
    y = (rng.random(n) < 0.03).astype(int)
    X = rng.normal(size=(n, 5)) + 1.5 * y[:, None] * np.array([1.0, 0.5, 0, 0, 0])
    plain = make_learner("logistic").prequential_step(X, y)
    offset = make_learner("logistic", base_rate_offset=True).prequential_step(X, y)
    assert auc(y, offset) > auc(y, plain) + 0.02
