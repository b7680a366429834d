"""Streams, comparisons and learner configurations shared by the learner tests.

``CONFIGURATIONS`` lists, per learner, the hyper-parameters whose code paths the defaults do
not reach; the contract suite (``test_learner_contract.py``) runs every check over each of them,
and a learner's own test file runs its naive reference over them.  A new learner appears in the
suite with its defaults as soon as it is registered; add its other configurations here.
"""

from __future__ import annotations

import numpy as np

from core.learners import available_learners, learner_class

N_FEATURES = 7

CONFIGURATIONS: dict[str, dict[str, dict]] = {
    "spam": {
        "no_average": {"average": False},
        "elastic_net": {"penalty": "elastic_net", "l1": 0.05, "l2": 0.01},
        "elastic_net_last": {"penalty": "elastic_net", "l1": 0.02, "average": False},
        "inverse_warmup": {"learning_rate": "inverse", "l2": 0.5, "n_warmup": 25, "eta0": 0.3},
        # l2 large enough that the scale falls below 1e-3 and is folded into the vector
        "scale_fold": {"l2": 3.0, "eta0": 1.0},
        "scale_fold_last": {"l2": 3.0, "eta0": 1.0, "average": False},
    },
    "solam": {
        "no_average": {"average": False},
        "plain_solam": {"l2": 0.0, "radius": 3.0},
        # small ball and small kappa: the projections of w, a, b and alpha are all active
        "projections": {"l2": 0.1, "eta0": 0.5, "kappa": 0.5, "radius": 0.2},
        "given_radius": {"l2": 0.01, "radius": 0.5, "average": False},
        # 1 - gamma * l2 <= 0 on the first events, then the scale falls below 1e-3 and is folded
        "shrink_fold": {"l2": 3.0, "eta0": 1.0},
    },
    "oam": {
        "gradient": {"variant": "gra"},
        "sparse_buffers": {"max_nnz": N_FEATURES, "buffer_size_pos": 20, "buffer_size_neg": 30},
    },
    "opauc": {
        "adaoam": {"adaptive": True},
        "sketch": {"rank": 2},
        "adaoam_sketch": {"rank": 2, "adaptive": True},
    },
    "ftrl_pauc": {
        "frequent_updates": {"update_every": 20, "positive_capacity": 30, "negative_capacity": 40},
        "alpha": {"alpha": 0.05, "beta": 0.3, "update_every": 25},
    },
    "pmb": {
        "small_buffer": {"buffer_size": 40},
        "prec_at_k": {"loss": "prec_at_k", "buffer_size": 50},
    },
    "svm_pauc": {
        "small_window": {"window": 60},
    },
}


def learner_cases(*, online_only: bool = False, sparse_only: bool = False) -> list:
    """``pytest.param((name, config), id=...)`` for every registered learner with its defaults,
    then each configuration of :data:`CONFIGURATIONS`."""
    import pytest

    cases = []
    for name in available_learners():
        cls = learner_class(name)
        if (online_only and not cls.online) or (sparse_only and not cls.supports_sparse):
            continue
        cases.append(pytest.param(name, {}, id=f"{name}-defaults"))
        for label, config in CONFIGURATIONS.get(name, {}).items():
            cases.append(pytest.param(name, config, id=f"{name}-{label}"))
    return cases


def stream(seed, n=300, n_features=N_FEATURES, density=1.0):
    """Random stream with a one-class prefix, exact ties, repeated and zero rows."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(np.int64)
    y[:15] = 0  # negatives only at first: no step until a positive arrives
    direction = rng.normal(size=n_features)
    X = rng.normal(size=(n, n_features)) + 0.7 * y[:, None] * direction
    if density < 1.0:
        X[rng.random(X.shape) > density] = 0.0
    X[::13] = np.round(X[::13])  # ties
    X[7] = X[6]
    X[20] = 0.0  # zero rows
    X[21] = 0.0
    return X, y


def close(actual, expected, rtol=1e-12):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def states_equal(left, right):
    assert left.keys() == right.keys()
    for key in left:
        assert left[key].dtype == right[key].dtype, key
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)
