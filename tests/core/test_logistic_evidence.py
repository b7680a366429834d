"""``logistic``'s empirical-Bayes prior (``empirical_prior_per_weight``; docs/algorithms/logistic.md
(logistic.18)-(logistic.19)): the re-estimate against a naive evidence computed with
determinants and solves, when it happens, and what a stored state may then hold."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core._kernels.logistic_laplace import EVIDENCE_RANGE
from core.errors import InvalidParameter, InvalidState
from core.learners import learner_class, make_learner
from tests.core.naive.logistic import evidence_prior

PRIOR = 0.3
OFFSET = {"base_rate_offset": True}


def _stream(seed: int, n: int = 600, signal: float = 3.0):
    """Four features, two of them strongly informative (a wide prior fits them better than
    0.3: the evidence picks it), about 15 % positives."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    logit = signal * (X[:, 0] - 0.7 * X[:, 2]) - 3.0
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    return X, y


def _event_reaching(y: np.ndarray, count: int) -> int:
    """The index of the event after which both classes have ``count`` events (20: four per
    weight of the belief of four features and the intercept)."""
    rarer = np.minimum(np.cumsum(y > 0), np.cumsum(y <= 0))
    return int(np.flatnonzero(rarer >= count)[0])


def test_the_re_estimate_is_the_naive_evidence_maximiser_at_the_count():
    X, y = _stream(1)
    at = _event_reaching(y, 20)
    params = {"base_rate_offset": True, "process_noise": 0.0}
    plain = make_learner("logistic", **params)
    empirical = make_learner("logistic", empirical_prior_per_weight=4.0, **params)
    # before the count is reached: the same bits
    assert np.array_equal(plain.prequential_step(X[:at], y[:at]),
                          empirical.prequential_step(X[:at], y[:at]))  # fmt: skip
    assert np.array_equal(plain.state_["covariance"], empirical.state_["covariance"])
    # the event that reaches it is learned, then the prior is re-estimated
    plain.partial_fit(X[at : at + 1], y[at : at + 1])
    empirical.partial_fit(X[at : at + 1], y[at : at + 1])
    best, mean, covariance = evidence_prior(plain.state_["mean"], plain.state_["covariance"], PRIOR)
    assert best > 2 * PRIOR
    np.testing.assert_allclose(empirical.state_["mean"], mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(empirical.state_["covariance"], covariance, rtol=1e-8, atol=1e-12)
    assert np.array_equal(empirical.state_["covariance"], empirical.state_["covariance"].T)
    assert np.all(np.abs(empirical.state_["mean"][:-1]) > np.abs(plain.state_["mean"][:-1]))
    # once: the events after it are learned on the new belief, as a plain learner would
    resumed = learner_class("logistic").from_state(empirical.get_params(), empirical.get_state())
    rest = slice(at + 1, None)
    np.testing.assert_array_equal(
        empirical.prequential_step(X[rest], y[rest]), resumed.prequential_step(X[rest], y[rest])
    )


def test_a_stream_without_signal_keeps_the_prior_and_its_bits():
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(500, 4)), (rng.random(500) < 0.2).astype(np.int64)
    plain = make_learner("logistic", base_rate_offset=True)
    empirical = make_learner("logistic", base_rate_offset=True, empirical_prior_per_weight=4.0)
    assert np.array_equal(plain.prequential_step(X, y), empirical.prequential_step(X, y))
    assert np.array_equal(plain.state_["covariance"], empirical.state_["covariance"])


@pytest.mark.parametrize("sparse", [False, True])
def test_batches_learn_what_single_events_learn(sparse):
    X, y = _stream(3, n=400)
    whole = make_learner("logistic", base_rate_offset=True, empirical_prior_per_weight=3.0)
    scores = whole.prequential_step(sp.csr_matrix(X) if sparse else X, y)
    single = make_learner("logistic", base_rate_offset=True, empirical_prior_per_weight=3.0)
    one_by_one = [single.prequential_step(X[i : i + 1], y[i : i + 1])[0] for i in range(400)]
    np.testing.assert_array_equal(scores, one_by_one)
    for name, array in whole.state_.items():
        np.testing.assert_array_equal(array, single.state_[name], err_msg=name)
    assert not np.array_equal(
        whole.state_["mean"],
        make_learner("logistic", base_rate_offset=True).partial_fit(X, y).state_["mean"],
    )


def test_it_needs_the_offset_and_no_columns_in_use():
    with pytest.raises(InvalidParameter, match="base_rate_offset=True and max_columns=None"):
        make_learner("logistic", empirical_prior_per_weight=4.0).initialize(4)
    with pytest.raises(InvalidParameter, match="base_rate_offset=True and max_columns=None"):
        make_learner(
            "logistic", base_rate_offset=True, max_columns=4, empirical_prior_per_weight=4.0
        ).initialize(4)
    with pytest.raises(InvalidParameter, match="empirical_prior_per_weight"):
        make_learner("logistic", **OFFSET, empirical_prior_per_weight=0.0).initialize(4)
    # FTRL has no prior: the parameter is left unused, as prior_variance is
    ftrl = make_learner("logistic", **OFFSET, empirical_prior_per_weight=1.0, solver="ftrl")
    X, y = _stream(4, n=200)
    plain = make_learner("logistic", base_rate_offset=True, solver="ftrl")
    np.testing.assert_array_equal(ftrl.prequential_step(X, y), plain.prequential_step(X, y))


def test_a_stored_variance_is_bounded_by_the_prior_then_by_the_grid_once_reached():
    X, y = _stream(5)
    at = _event_reaching(y, 20)
    params = {"base_rate_offset": True, "empirical_prior_per_weight": 4.0}
    before = make_learner("logistic", **params).partial_fit(X[:at], y[:at])
    after = make_learner("logistic", **params).partial_fit(X, y)
    for model, bound in [(before, PRIOR), (after, EVIDENCE_RANGE * PRIOR)]:
        params_, state = model.get_params(), model.get_state()
        covariance = state["covariance"].copy()
        covariance[1, 1] = 1.01 * bound
        with pytest.raises(InvalidState, match="variance of .* at 1; expected at most"):
            learner_class("logistic").from_state(params_, {**state, "covariance": covariance})
        covariance[1, 1] = 0.99 * bound
        twin = learner_class("logistic").from_state(params_, {**state, "covariance": covariance})
        assert twin.state_["covariance"][1, 1] == 0.99 * bound
