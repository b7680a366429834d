"""``logistic`` against the naive FTRL-Proximal reference, plus the properties the service
relies on over the configurations the defaults do not reach (L1, L2, no intercept, CSR).

The shared contract (tests/core/test_learner_contract.py) also runs over ``logistic`` with its
defaults.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from core.learners import make_learner
from core.metrics import auc
from tests.core import linear_learner_checks as checks
from tests.core.linear_learner_checks import N_FEATURES, close, states_equal, stream
from tests.core.naive_logistic import NaiveLogistic

CONFIGS = {
    "defaults": {},
    # l1 large enough that some coordinates sit exactly at 0 and others leave the threshold
    "l1": {"l1": 2.0, "alpha": 0.5},
    "l2": {"l2": 3.0, "beta": 0.5},
    "elastic_net_no_intercept": {"l1": 0.5, "l2": 1.0, "fit_intercept": False},
    "large_steps": {"alpha": 5.0, "beta": 0.0},
}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_kernel_agrees_with_the_naive_reference(config, sparse):
    X, y = stream(1, density=0.5 if sparse else 1.0)
    model = make_learner("logistic", **config)
    wanted = inspect.signature(NaiveLogistic).parameters
    reference = NaiveLogistic(
        N_FEATURES, **{k: v for k, v in model.get_params().items() if k in wanted}
    )
    # uneven batches, one of them one-class (the stream starts with 15 negatives)
    for batch in (slice(0, 10), slice(10, 157), slice(157, None)):
        batch_X = sp.csr_matrix(X[batch]) if sparse else X[batch]
        close(model.prequential_step(batch_X, y[batch]), reference.learn(X[batch], y[batch]))
    close(model.coef_, reference.weights())
    close(np.array([model.intercept_]), np.array([reference.intercept()]))
    close(model.decision_function(X), np.array([reference.score(x) for x in X]))


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


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"beta": -1.0}, "beta"),
        ({"l1": -0.1}, "l1"),
        ({"l2": "big"}, "l2"),
        ({"fit_intercept": 1}, "fit_intercept"),
        ({"max_iter": 0}, "max_iter"),
        ({"scaling": "minmax"}, "scaling"),
    ],
)
def test_bad_hyper_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_learner("logistic", **params)


def test_clone_fit_and_repr():
    model = make_learner("logistic", alpha=0.5, l1=0.1, random_state=3)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and copy is not model
    X, y = stream(9)
    first = clone(model).fit(X, y)
    second = clone(model).fit(X, y)
    states_equal(first.get_state(), second.get_state())
    assert "Logistic(alpha=0.5" in repr(model)


# ---------------------------------------------------------------- shared configuration checks
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_sparse_batch_equals_its_dense_copy(config):
    checks.check_sparse_batch_equals_its_dense_copy("logistic", config)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_batch_equals_one_event_at_a_time_bit_for_bit(config, sparse):
    checks.check_batch_equals_one_event_at_a_time_bit_for_bit("logistic", config, sparse)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_round_trip_and_same_state_same_events_same_result(config):
    checks.check_round_trip_and_same_state_same_events_same_result("logistic", config)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_prequential_scores_are_decision_function_before_each_event(config):
    checks.check_prequential_scores_are_decision_function_before_each_event("logistic", config)


@pytest.mark.parametrize(("change", "message"), checks.BAD_INPUTS)
def test_bad_input_is_named_and_changes_nothing(change, message):
    checks.check_bad_input_is_named_and_changes_nothing("logistic", {}, change, message)


def test_float32_lists_and_non_contiguous_arrays_are_accepted():
    checks.check_float32_lists_and_non_contiguous_arrays_are_accepted("logistic")
