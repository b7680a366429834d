"""Checks shared by the tests of the linear learners that carry a table of configurations
(``spam``, ``solam``): each takes the registry name and one configuration, so a test file runs
them over the configurations its learner's defaults do not reach.  The shared contract of every
learner with its defaults is tests/core/test_learner_contract.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.learners import learner_class, make_learner

N_FEATURES = 7

#: (change, message) pairs for :func:`check_bad_input_is_named_and_changes_nothing`
BAD_INPUTS = [
    ("nan", "NaN"),
    ("inf", "infinity"),
    ("width", "expected 7 features"),
    ("label", "labels must be"),
    ("empty", "empty batch"),
    ("sparse_nan", "NaN"),
    ("sparse_width", "expected 7 features"),
]


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


def check_sparse_batch_equals_its_dense_copy(name, config):
    X, y = stream(3, density=0.4)
    dense, sparse = make_learner(name, **config), make_learner(name, **config)
    close(sparse.prequential_step(sp.csr_matrix(X), y), dense.prequential_step(X, y), 1e-10)
    close(sparse.coef_, dense.coef_, 1e-10)
    # and a model fed both kinds continues consistently
    mixed = make_learner(name, **config)
    mixed.partial_fit(X[:100], y[:100])
    mixed.partial_fit(sp.csr_matrix(X[100:200]), y[100:200])
    mixed.partial_fit(X[200:], y[200:])
    close(mixed.coef_, dense.coef_, 1e-10)


def check_batch_equals_one_event_at_a_time_bit_for_bit(name, config, sparse):
    X, y = stream(4, n=120, density=0.5 if sparse else 1.0)
    rows = sp.csr_matrix(X) if sparse else X
    at_once = make_learner(name, **config)
    scores = at_once.prequential_step(rows, y)
    single = make_learner(name, **config)
    one_by_one = np.concatenate(
        [single.prequential_step(rows[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )
    np.testing.assert_array_equal(scores, one_by_one)
    states_equal(at_once.get_state(), single.get_state())


def check_round_trip_and_same_state_same_events_same_result(name, config):
    X, y = stream(5)
    original = make_learner(name, **config).partial_fit(X[:140], y[:140])
    state = original.get_state()
    restored = learner_class(name).from_state(original.get_params(), state)
    states_equal(state, restored.get_state())
    twin = learner_class(name).from_state(original.get_params(), state)
    first = restored.prequential_step(sp.csr_matrix(X[140:]), y[140:])
    second = twin.prequential_step(sp.csr_matrix(X[140:]), y[140:])
    third = original.prequential_step(sp.csr_matrix(X[140:]), y[140:])
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, third)
    states_equal(restored.get_state(), original.get_state())
    states_equal(state, learner_class(name).from_state(original.get_params(), state).state_)


def check_prequential_scores_are_decision_function_before_each_event(name, config):
    X, y = stream(6, n=90)
    model = make_learner(name, **config).partial_fit(X[:40], y[:40])
    probe = learner_class(name).from_state(model.get_params(), model.get_state())
    expected = []
    for i in range(40, 90):
        expected.append(probe.decision_function(X[i : i + 1])[0])
        probe.partial_fit(X[i : i + 1], y[i : i + 1])
    np.testing.assert_array_equal(model.prequential_step(X[40:], y[40:]), expected)


def check_bad_input_is_named_and_changes_nothing(name, config, change, message):
    X, y = stream(7)
    model = make_learner(name, **config).partial_fit(X[:100], y[:100])
    before = model.get_state()
    batch_X, batch_y = X[100:110].copy(), y[100:110].copy()
    if change == "nan":
        batch_X[2, 3] = np.nan
    elif change == "inf":
        batch_X[4, 0] = np.inf
    elif change == "width":
        batch_X = batch_X[:, 1:]
    elif change == "label":
        batch_y[5] = 3
    elif change == "empty":
        batch_X, batch_y = batch_X[:0], batch_y[:0]
    elif change == "sparse_nan":
        batch_X[2, 3] = np.nan
        batch_X = sp.csr_matrix(batch_X)
    elif change == "sparse_width":
        batch_X = sp.csr_matrix(batch_X[:, 1:])
    with pytest.raises(ValueError, match=message):
        model.prequential_step(batch_X, batch_y)
    states_equal(before, model.get_state())


def check_float32_lists_and_non_contiguous_arrays_are_accepted(name):
    X, y = stream(8)
    X32 = X.astype(np.float32)
    reference = make_learner(name).partial_fit(X32.astype(np.float64), y)
    wide = np.zeros((len(y), 2 * N_FEATURES), dtype=np.float32)
    wide[:, 1::2] = X32
    fortran = np.asfortranarray(X32)
    for variant in (X32, X32.tolist(), wide[:, 1::2], fortran):
        other = make_learner(name).partial_fit(variant, y.tolist())
        states_equal(reference.get_state(), other.get_state())


def check_interleaved_layout_learns_the_same_bit_for_bit(name, config, sparse, monkeypatch):
    """Wide models keep their per-feature arrays interleaved in memory (cache locality); the
    numbers, the stored state and its round trip must not depend on it."""
    X, y = stream(11, n=150, density=0.5 if sparse else 1.0)
    rows = sp.csr_matrix(X) if sparse else X
    separate = make_learner(name, **config)
    separate.partial_fit(rows[:70], y[:70])
    monkeypatch.setattr("core.learners.spam.INTERLEAVE_FROM", 1)
    packed = make_learner(name, **config)
    packed.partial_fit(rows[:70], y[:70])
    assert not packed.state_["w_unscaled"].flags.c_contiguous  # a strided view
    states_equal(packed.get_state(), separate.get_state())
    assert all(value.flags.c_contiguous for value in packed.get_state().values())
    restored = learner_class(name).from_state(packed.get_params(), packed.get_state())
    scores = [m.prequential_step(rows[70:], y[70:]) for m in (separate, packed, restored)]
    assert not restored.state_["w_unscaled"].flags.c_contiguous
    np.testing.assert_array_equal(scores[0], scores[1])
    np.testing.assert_array_equal(scores[0], scores[2])
    states_equal(packed.get_state(), separate.get_state())
    np.testing.assert_array_equal(packed.decision_function(rows), separate.decision_function(rows))
    np.testing.assert_array_equal(packed.coef_, separate.coef_)
