"""``spam`` against the naive per-event reference, plus the properties the service relies on.

The shared contract (tests/core/test_learner_contract.py) also runs over ``spam`` with its
defaults; here the same properties are checked over the configurations the defaults do not
reach (elastic net, no averaging, warm-up, the O(1/t) schedule, the scale fold, CSR input).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from core.learners import learner_class, make_learner
from tests.core.naive_learners import NaiveSPAM

N_FEATURES = 7

CONFIGS = {
    "defaults": {},
    "no_average": {"average": False},
    "elastic_net": {"penalty": "elastic_net", "l1": 0.05, "l2": 0.01},
    "elastic_net_last": {"penalty": "elastic_net", "l1": 0.02, "average": False},
    "inverse_warmup": {"learning_rate": "inverse", "l2": 0.5, "n_warmup": 25, "eta0": 0.3},
    # l2 large enough that the scale falls below 1e-3 and is folded into the vector
    "scale_fold": {"l2": 3.0, "eta0": 1.0},
    "scale_fold_last": {"l2": 3.0, "eta0": 1.0, "average": False},
}


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


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_sparse_batch_equals_its_dense_copy(config):
    X, y = stream(3, density=0.4)
    dense, sparse = make_learner("spam", **config), make_learner("spam", **config)
    close(sparse.prequential_step(sp.csr_matrix(X), y), dense.prequential_step(X, y), 1e-10)
    close(sparse.coef_, dense.coef_, 1e-10)
    # and a model fed both kinds continues consistently
    mixed = make_learner("spam", **config)
    mixed.partial_fit(X[:100], y[:100])
    mixed.partial_fit(sp.csr_matrix(X[100:200]), y[100:200])
    mixed.partial_fit(X[200:], y[200:])
    close(mixed.coef_, dense.coef_, 1e-10)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_batch_equals_one_event_at_a_time_bit_for_bit(config, sparse):
    X, y = stream(4, n=120, density=0.5 if sparse else 1.0)
    rows = sp.csr_matrix(X) if sparse else X
    at_once = make_learner("spam", **config)
    scores = at_once.prequential_step(rows, y)
    single = make_learner("spam", **config)
    one_by_one = np.concatenate(
        [single.prequential_step(rows[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )
    np.testing.assert_array_equal(scores, one_by_one)
    states_equal(at_once.get_state(), single.get_state())


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_round_trip_and_same_state_same_events_same_result(config):
    X, y = stream(5)
    original = make_learner("spam", **config).partial_fit(X[:140], y[:140])
    state = original.get_state()
    restored = learner_class("spam").from_state(original.get_params(), state)
    states_equal(state, restored.get_state())
    twin = learner_class("spam").from_state(original.get_params(), state)
    first = restored.prequential_step(sp.csr_matrix(X[140:]), y[140:])
    second = twin.prequential_step(sp.csr_matrix(X[140:]), y[140:])
    third = original.prequential_step(sp.csr_matrix(X[140:]), y[140:])
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, third)
    states_equal(restored.get_state(), original.get_state())
    states_equal(state, learner_class("spam").from_state(original.get_params(), state).state_)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_prequential_scores_are_decision_function_before_each_event(config):
    X, y = stream(6, n=90)
    model = make_learner("spam", **config).partial_fit(X[:40], y[:40])
    probe = learner_class("spam").from_state(model.get_params(), model.get_state())
    expected = []
    for i in range(40, 90):
        expected.append(probe.decision_function(X[i : i + 1])[0])
        probe.partial_fit(X[i : i + 1], y[i : i + 1])
    np.testing.assert_array_equal(model.prequential_step(X[40:], y[40:]), expected)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("nan", "NaN"),
        ("inf", "infinity"),
        ("width", "expected 7 features"),
        ("label", "labels must be"),
        ("empty", "empty batch"),
        ("sparse_nan", "NaN"),
        ("sparse_width", "expected 7 features"),
    ],
)
def test_bad_input_is_named_and_changes_nothing(change, message):
    X, y = stream(7)
    model = make_learner("spam", penalty="elastic_net").partial_fit(X[:100], y[:100])
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


def test_float32_lists_and_non_contiguous_arrays_are_accepted():
    X, y = stream(8)
    X32 = X.astype(np.float32)
    reference = make_learner("spam").partial_fit(X32.astype(np.float64), y)
    wide = np.zeros((len(y), 2 * N_FEATURES), dtype=np.float32)
    wide[:, 1::2] = X32
    fortran = np.asfortranarray(X32)
    for variant in (X32, X32.tolist(), wide[:, 1::2], fortran):
        other = make_learner("spam").partial_fit(variant, y.tolist())
        states_equal(reference.get_state(), other.get_state())


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


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_interleaved_layout_learns_the_same_bit_for_bit(config, sparse, monkeypatch):
    """Wide models keep their per-feature arrays interleaved in memory (cache locality); the
    numbers, the stored state and its round trip must not depend on it."""
    X, y = stream(11, n=150, density=0.5 if sparse else 1.0)
    rows = sp.csr_matrix(X) if sparse else X
    separate = make_learner("spam", **config)
    separate.partial_fit(rows[:70], y[:70])
    monkeypatch.setattr("core.learners.spam.INTERLEAVE_FROM", 1)
    packed = make_learner("spam", **config)
    packed.partial_fit(rows[:70], y[:70])
    assert not packed.state_["w_unscaled"].flags.c_contiguous  # a strided view
    states_equal(packed.get_state(), separate.get_state())
    assert all(value.flags.c_contiguous for value in packed.get_state().values())
    restored = learner_class("spam").from_state(packed.get_params(), packed.get_state())
    scores = [m.prequential_step(rows[70:], y[70:]) for m in (separate, packed, restored)]
    assert not restored.state_["w_unscaled"].flags.c_contiguous
    np.testing.assert_array_equal(scores[0], scores[1])
    np.testing.assert_array_equal(scores[0], scores[2])
    states_equal(packed.get_state(), separate.get_state())
    np.testing.assert_array_equal(packed.decision_function(rows), separate.decision_function(rows))
    np.testing.assert_array_equal(packed.coef_, separate.coef_)


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
