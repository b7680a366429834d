"""One shared set of checks over every registered online learner (River's habit, STYLE.md).

Each learner's own test file checks its equations against a naive reference; this file checks
the contract of DESIGN §3 that the service relies on, identically for all of them.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from core.learners import available_learners, learner_class, make_learner
from core.validation import CSRMatrix

ONLINE = [name for name in available_learners() if getattr(learner_class(name), "online", True)]
SPARSE = [name for name in ONLINE if learner_class(name).supports_sparse]
N_FEATURES = 6


def stream(seed: int, n: int = 240, positive_rate: float = 0.3):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, N_FEATURES)) + 0.8 * y[:, None] * np.linspace(1, -1, N_FEATURES)
    X[::17] = np.round(X[::17])  # exact ties and repeated rows
    X[5] = X[4]
    return X, y


def assert_states_equal(left: dict, right: dict) -> None:
    assert left.keys() == right.keys()
    for key in left:
        assert left[key].dtype == right[key].dtype, key
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)


@pytest.mark.parametrize("name", ONLINE)
def test_state_is_flat_contiguous_arrays_of_allowed_dtypes(name):
    X, y = stream(0)
    learner = make_learner(name).partial_fit(X, y)
    state = learner.get_state()
    allowed = {np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64)}
    for key, value in state.items():
        assert isinstance(value, np.ndarray) and value.flags.c_contiguous, key
        assert value.dtype in allowed, (key, value.dtype)
    assert learner.n_features_in_ == N_FEATURES
    assert learner.coef_.shape == (N_FEATURES,)


@pytest.mark.parametrize("name", ONLINE)
def test_clone_and_params_round_trip(name):
    learner = make_learner(name)
    copy = clone(learner)
    assert copy.get_params() == learner.get_params()
    assert type(copy) is type(learner)
    with pytest.raises(ValueError, match="unknown parameter"):
        make_learner(name, no_such_parameter=1)


@pytest.mark.parametrize("name", ONLINE)
def test_batch_equals_one_event_at_a_time(name):
    X, y = stream(1)
    at_once = make_learner(name)
    scores_at_once = at_once.prequential_step(X, y)
    one_by_one = make_learner(name)
    scores_one_by_one = np.concatenate(
        [one_by_one.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )
    np.testing.assert_array_equal(scores_at_once, scores_one_by_one)
    assert_states_equal(at_once.get_state(), one_by_one.get_state())


@pytest.mark.parametrize("name", ONLINE)
def test_prequential_score_is_the_served_score_before_the_event(name):
    X, y = stream(2, n=120)
    learner = make_learner(name).partial_fit(X[:60], y[:60])
    expected = []
    probe = learner.from_state(learner.get_params(), learner.get_state())
    for i in range(60, 120):
        expected.append(probe.decision_function(X[i : i + 1])[0])
        probe.partial_fit(X[i : i + 1], y[i : i + 1])
    scores = learner.prequential_step(X[60:], y[60:])
    np.testing.assert_allclose(scores, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ONLINE)
def test_state_round_trip_continues_bit_for_bit(name):
    X, y = stream(3)
    original = make_learner(name).partial_fit(X[:150], y[:150])
    restored = learner_class(name).from_state(original.get_params(), original.get_state())
    assert_states_equal(original.get_state(), restored.get_state())
    np.testing.assert_array_equal(
        original.prequential_step(X[150:], y[150:]), restored.prequential_step(X[150:], y[150:])
    )
    assert_states_equal(original.get_state(), restored.get_state())


@pytest.mark.parametrize("name", ONLINE)
def test_from_state_rejects_foreign_or_truncated_state(name):
    X, y = stream(4)
    state = make_learner(name).partial_fit(X, y).get_state()
    key = sorted(state)[0]
    truncated = {k: v for k, v in state.items() if k != key}
    with pytest.raises(ValueError, match="missing"):
        learner_class(name).from_state(make_learner(name).get_params(), truncated)
    wrong_dtype = dict(state, n_features=state["n_features"].astype(np.float64))
    with pytest.raises(ValueError, match="n_features"):
        learner_class(name).from_state(make_learner(name).get_params(), wrong_dtype)


@pytest.mark.parametrize("name", ONLINE)
def test_deterministic_and_inputs_not_mutated(name):
    X, y = stream(5)
    X_before, y_before = X.copy(), y.copy()
    first = make_learner(name).partial_fit(X, y)
    second = make_learner(name).partial_fit(X, y)
    assert_states_equal(first.get_state(), second.get_state())
    np.testing.assert_array_equal(X, X_before)
    np.testing.assert_array_equal(y, y_before)


@pytest.mark.parametrize("name", ONLINE)
@pytest.mark.parametrize(
    "bad",
    ["nan", "inf", "width", "label", "empty", "count"],
)
def test_rejected_batch_changes_nothing(name, bad):
    X, y = stream(6)
    learner = make_learner(name).partial_fit(X[:100], y[:100])
    before = learner.get_state()
    batch_X, batch_y = X[100:110].copy(), y[100:110].copy()
    if bad == "nan":
        batch_X[3, 2] = np.nan
    elif bad == "inf":
        batch_X[7, 0] = -np.inf
    elif bad == "width":
        batch_X = batch_X[:, :-1]
    elif bad == "label":
        batch_y = batch_y + 2
    elif bad == "empty":
        batch_X, batch_y = batch_X[:0], batch_y[:0]
    elif bad == "count":
        batch_y = batch_y[:-1]
    with pytest.raises(ValueError):
        learner.prequential_step(batch_X, batch_y)
    assert_states_equal(before, learner.get_state())


@pytest.mark.parametrize("name", ONLINE)
def test_one_class_batches_and_labels_in_every_convention(name):
    X, y = stream(7)
    zero_one = make_learner(name)
    zero_one.partial_fit(X[:30], np.zeros(30, dtype=int))  # negatives only
    zero_one.partial_fit(X[30:60], np.ones(30, dtype=int))  # positives only
    zero_one.partial_fit(X[60:], y[60:])
    plus_minus = make_learner(name)
    plus_minus.partial_fit(X[:30], -np.ones(30))
    plus_minus.partial_fit(X[30:60], np.ones(30))
    plus_minus.partial_fit(X[60:], np.where(y[60:] == 1, 1, -1))
    booleans = make_learner(name)
    booleans.partial_fit(X[:30], np.zeros(30, dtype=bool))
    booleans.partial_fit(X[30:60], np.ones(30, dtype=bool))
    booleans.partial_fit(X[60:], y[60:].astype(bool))
    assert_states_equal(zero_one.get_state(), plus_minus.get_state())
    assert_states_equal(zero_one.get_state(), booleans.get_state())
    assert np.isfinite(zero_one.coef_).all()


@pytest.mark.parametrize("name", ONLINE)
def test_float32_lists_and_non_contiguous_inputs_are_coerced(name):
    X, y = stream(8)
    reference = make_learner(name).partial_fit(X.astype(np.float32).astype(np.float64), y)
    wide = np.zeros((len(y), 2 * N_FEATURES), dtype=np.float32)
    wide[:, ::2] = X
    from_view = make_learner(name).partial_fit(wide[:, ::2], y)
    from_list = make_learner(name).partial_fit(X.astype(np.float32).tolist(), y.tolist())
    assert_states_equal(reference.get_state(), from_view.get_state())
    assert_states_equal(reference.get_state(), from_list.get_state())


@pytest.mark.parametrize("name", SPARSE)
def test_sparse_batch_scores_like_its_dense_copy(name):
    rng = np.random.default_rng(9)
    X, y = stream(9)
    X[rng.random(X.shape) < 0.6] = 0.0
    X[10] = 0.0  # an empty row
    dense = make_learner(name)
    sparse = make_learner(name)
    dense_scores = dense.prequential_step(X, y)
    sparse_scores = sparse.prequential_step(sp.csr_matrix(X), y)
    np.testing.assert_allclose(sparse_scores, dense_scores, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-10, atol=1e-10)
    probe = X[:20]
    np.testing.assert_allclose(
        sparse.decision_function(CSRMatrix(*_csr_arrays(probe), N_FEATURES)),
        dense.decision_function(probe),
        rtol=1e-10,
        atol=1e-10,
    )


def _csr_arrays(dense):
    matrix = sp.csr_matrix(dense)
    return matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64), matrix.data


@pytest.mark.parametrize("name", ONLINE)
@pytest.mark.parametrize("scaling", ["unit_norm", "standard", "scale"])
def test_every_scaling_keeps_the_contract(name, scaling):
    X, y = stream(10)
    X = X * np.array([1.0, 100.0, 0.01, 5.0, 1.0, 1000.0]) + 50.0
    at_once = make_learner(name, scaling=scaling)
    scores = at_once.prequential_step(X, y)
    one_by_one = make_learner(name, scaling=scaling)
    for i in range(len(y)):
        one_by_one.partial_fit(X[i : i + 1], y[i : i + 1])
    assert np.isfinite(scores).all()
    assert_states_equal(at_once.get_state(), one_by_one.get_state())
    restored = learner_class(name).from_state(at_once.get_params(), at_once.get_state())
    np.testing.assert_array_equal(restored.decision_function(X), at_once.decision_function(X))


def test_unknown_learner_is_named():
    with pytest.raises(ValueError, match="unknown learner 'nope'; available: "):
        make_learner("nope")
