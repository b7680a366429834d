"""``spam`` against the naive per-event reference, plus the properties the service relies on.

The shared contract (tests/core/test_learner_contract.py) runs over ``spam`` with its defaults
and each configuration of tests/core/cases.py; here the naive reference runs over the same
configurations (elastic net, no averaging, warm-up, the O(1/t) schedule, the scale fold, CSR
input).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from core.learners import make_learner
from tests.core.cases import CONFIGURATIONS, N_FEATURES, close, states_equal, stream
from tests.core.naive.learners import NaiveSPAM

CONFIGS = {"defaults": {}, **CONFIGURATIONS["spam"]}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_kernel_agrees_with_the_naive_reference(config, sparse):
    X, y = stream(1, density=0.5 if sparse else 1.0)
    model = make_learner("spam", **config)
    # the reference takes the learner's parameters, defaults included, so they cannot drift
    wanted = inspect.signature(NaiveSPAM).parameters
    reference = NaiveSPAM(
        N_FEATURES, **{k: v for k, v in model.get_params().items() if k in wanted}
    )
    # three batches of uneven size, so state carried between kernel calls is exercised too
    for batch in (slice(0, 10), slice(10, 157), slice(157, None)):
        batch_X = sp.csr_matrix(X[batch]) if sparse else X[batch]
        close(model.prequential_step(batch_X, y[batch]), reference.learn(X[batch], y[batch]))
    close(model.coef_, reference.served())
    close(model.decision_function(X), X @ reference.served())
    assert model.state_["n_steps"][0] == reference.n_steps > 0


def test_scale_fold_happens_in_the_fold_configuration():
    X, y = stream(2)
    model = make_learner("spam", **CONFIGS["scale_fold"]).partial_fit(X, y)
    # the fold resets the scale to 1 and moves the iterate sum into avg_offset
    assert model.state_["w_scale"][0] > 1e-3
    assert model.state_["avg_coef"][0] < model.state_["n_steps"][0]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"penalty": "l1"}, "penalty"),
        ({"l2": -1.0}, "l2"),
        ({"l1": float("nan")}, "l1"),
        ({"eta0": 0.0}, "eta0"),
        ({"learning_rate": "constant"}, "learning_rate"),
        ({"learning_rate": "inverse", "l2": 0.0}, "l2 > 0"),
        ({"average": "yes"}, "average"),
        ({"n_warmup": -1}, "n_warmup"),
        ({"max_iter": 0}, "max_iter"),
        ({"random_state": 1.5}, "random_state"),
        ({"scaling": "minmax"}, "scaling"),
    ],
)
def test_bad_hyper_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_learner("spam", **params)


def test_clone_fit_and_registry():
    model = make_learner("spam", penalty="elastic_net", l1=0.01, eta0=0.2, random_state=3)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and copy is not model
    X, y = stream(9)
    first = clone(model).fit(X, y)
    second = clone(model).fit(X, y)
    states_equal(first.get_state(), second.get_state())
    assert first.state_["n_seen"][0] == model.max_iter * len(y)
    assert np.isfinite(first.coef_).all()
    assert "SPAM(penalty='elastic_net'" in repr(model)


def test_high_dimensional_sparse_step_touches_only_its_columns():
    n_features = 2**20
    rng = np.random.default_rng(10)
    rows = sp.random(200, n_features, density=20 / n_features, format="csr", random_state=rng)
    y = rng.random(200) < 0.5
    model = make_learner("spam")
    scores = model.prequential_step(rows, y)
    assert np.isfinite(scores).all()
    touched = np.unique(rows.indices)
    assert np.count_nonzero(model.state_["w_unscaled"]) <= touched.size


@pytest.mark.parametrize("wide", [False, True], ids=["narrow", "interleaved"])
def test_a_deep_copy_learns_independently_and_identically(wide, monkeypatch):
    import copy

    if wide:
        monkeypatch.setattr("core.learners.spam.INTERLEAVE_FROM", 1)
    X, y = stream(12, n=120, density=0.5)
    original = make_learner("spam").partial_fit(sp.csr_matrix(X[:60]), y[:60])
    twin = copy.deepcopy(original)
    first = original.prequential_step(sp.csr_matrix(X[60:]), y[60:])
    second = twin.prequential_step(sp.csr_matrix(X[60:]), y[60:])
    np.testing.assert_array_equal(first, second)
    states_equal(original.get_state(), twin.get_state())
