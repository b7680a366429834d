"""Extreme float64 values: no input can make a learner's state non-finite.

Features are bounded (``core.validation.FEATURE_BOUND``), the arrays learning can grow are
checked after every batch (``Grown``, ``STATE_BOUND``) and every float state is bounded when
loaded (``VALUE_BOUND``), so that any sequence of accepted and refused batches leaves a learner
that scores finite numbers and round-trips its state.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.csr import CSRMatrix
from core.errors import InvalidFeatures, InvalidState, StateOverflow
from core.learners import available_learners, learner_class, make_learner
from core.learners._base import BLOCK_BYTES, KERNEL_CHECK_BYTES
from core.learners._state import VALUE_BOUND, Grown
from core.preprocessing import SCALINGS
from core.validation import (
    FEATURE_BOUND,
    as_features,
    first_out_of_range,
    rows_out_of_range,
)

DBL_MAX = np.finfo(np.float64).max
EPOCH_NANOSECONDS = 1.7e18


# ------------------------------------------------------------------------- the feature bound
@pytest.mark.parametrize("value", [FEATURE_BOUND, -FEATURE_BOUND, EPOCH_NANOSECONDS, 5e-324, 0.0])
def test_values_within_the_feature_bound_are_accepted(value):
    X = np.array([[1.0, value, -2.0]])
    assert as_features(X) is not None
    assert first_out_of_range(X) is None


@pytest.mark.parametrize("value", [1.0000000000000002e100, 1e200, -DBL_MAX, np.inf, np.nan])
def test_values_beyond_the_feature_bound_are_refused_naming_the_row(value):
    X = np.ones((4, 3))
    X[2, 1] = value
    with pytest.raises(InvalidFeatures) as refused:
        as_features(X)
    assert refused.value.row == 2
    assert ("1e+100" in str(refused.value)) or ("NaN or infinity" in str(refused.value))
    sparse = CSRMatrix(
        np.array([0, 1, 2, 3, 4]), np.array([0, 1, 1, 2]), np.array([1.0, 1.0, value, 1.0]), 3
    )
    with pytest.raises(InvalidFeatures) as refused_sparse:
        as_features(sparse)
    assert refused_sparse.value.row == 2
    assert rows_out_of_range(X).tolist() == [False, False, True, False]
    assert rows_out_of_range(sparse).tolist() == [False, False, True, False]


def test_the_issue_event_is_refused_by_the_default_scaling_and_changes_nothing():
    """x = [DBL_MAX, 1e308, 0] was learned and stored scaler_m2 = inf."""
    rng = np.random.default_rng(0)
    learner = make_learner("spam", scaling="standard")
    learner.partial_fit(rng.normal(size=(20, 3)), np.arange(20) % 2)
    before = learner.get_state()
    with pytest.raises(InvalidFeatures) as refused:
        learner.partial_fit(np.array([[DBL_MAX, 1e308, 0.0]]), [1])
    assert refused.value.row == 0
    for key, value in learner.get_state().items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


@pytest.mark.parametrize("scaling", ["standard", "scale", "unit_norm"])
def test_scaling_statistics_stay_finite_at_the_feature_bound(scaling):
    learner = make_learner("spam", scaling=scaling)
    X = np.array([[FEATURE_BOUND, -FEATURE_BOUND, 0.0], [-FEATURE_BOUND, FEATURE_BOUND, 1.0]])
    for _ in range(50):
        learner.partial_fit(X, [1, 0])
    for key, value in learner.get_state().items():
        assert np.isfinite(value).all(), key
    assert np.isfinite(learner.decision_function(X)).all()
    learner.validate_state(learner.get_state())


def test_the_kernel_row_checks_refuse_values_beyond_the_bound():
    """A large unscaled batch is checked by spam's kernel as it reads it (||x||^2 against the
    squared bound), not beforehand: a row beyond the bound is refused by its number and the
    batch changes nothing."""
    rows = KERNEL_CHECK_BYTES // (8 * 5) + 10
    rng = np.random.default_rng(1)
    X = rng.normal(size=(rows, 5))
    y = np.arange(rows) % 2
    learner = make_learner("spam").partial_fit(X[:10], y[:10])
    before = learner.get_state()
    bad = X.copy()
    bad[rows - 3, 4] = 2e100  # ||x||^2 = 4e200: past the squared bound, finite
    with pytest.raises(InvalidFeatures) as refused:
        learner.partial_fit(bad, y)
    assert refused.value.row == rows - 3
    for key, value in learner.get_state().items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


# ------------------------------------------------------------------------- learning overflow
#: legal features (within the bound) on which spdam's unscaled dual ascent overflows at once
DIVERGING = np.array([[1e99, -1e99, 5e98]])


def test_an_overflowing_small_batch_is_refused_and_the_learner_waits_for_a_state():
    """Its state is too large to copy before every event: the refused learner is not restored
    but refuses every use until it is given a state (as the service does, from its store)."""
    learner = make_learner("spdam").partial_fit(np.eye(3), [1, 0, 1])
    good = learner.get_state()
    with pytest.raises(StateOverflow) as refused:
        learner.partial_fit(DIVERGING, [1])
    assert not refused.value.restored
    with pytest.raises(InvalidState, match="overflowed"):
        learner.decision_function(np.eye(3))
    with pytest.raises(InvalidState, match="overflowed"):
        learner.partial_fit(np.eye(3), [1, 0, 1])
    restored = learner_class("spdam").from_state(learner.get_params(), good)
    assert np.isfinite(restored.decision_function(np.eye(3))).all()
    learner.initialize(3)
    assert np.isfinite(learner.decision_function(np.eye(3))).all()


def test_an_overflowing_large_batch_is_rolled_back():
    """A batch learned block by block saves the state first: the overflow puts it back."""
    learner = make_learner("spdam").partial_fit(np.eye(50)[:10], [1, 0] * 5)
    before = learner.get_state()
    rows = 4 * BLOCK_BYTES // 400 + 1000
    X = np.random.default_rng(0).normal(size=(rows, 50))
    X[rows - 5] = 1e99
    assert learner._blocks(X) is not None
    with pytest.raises(StateOverflow) as refused:
        learner.partial_fit(X, np.arange(rows) % 2)
    assert refused.value.restored
    for key, value in learner.get_state().items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


#: a wrapper declares its inner learner's arrays: its default inner logistic learns by FTRL at
#: the embedding's width, whose sums are bounded by the feature bound (Finite, nothing Grown),
#: so the declaration is checked through an inner learner that has weights to grow
GROWING_INNER = {"boosted_embedded": {"learner": "spam"}}


@pytest.mark.parametrize("name", available_learners())
def test_every_learner_declares_the_arrays_learning_grows(name):
    learner = make_learner(name, **GROWING_INNER.get(name, {})).initialize(4)
    keys = learner.grown_state_keys()
    assert keys, name
    invariants = learner._state_invariants(4)
    assert all(isinstance(invariants[key], Grown) for key in keys)
    assert learner.grown_state_in_bounds()


# ------------------------------------------------------------------------- state invariants
@pytest.mark.parametrize("name", available_learners())
def test_extreme_finite_values_in_a_state_are_refused_by_name(name):
    """-1e308 anywhere in a float state (beyond VALUE_BOUND), and beyond its bound (at most
    VALUE_BOUND, mostly STATE_BOUND) in an array learning grows, is refused when the state is
    read back."""
    learner = make_learner(name).partial_fit(np.eye(4).repeat(3, axis=0), np.arange(12) % 2)
    state = learner.get_state()
    invariants = learner._state_invariants(4)
    for key, value in state.items():
        if value.dtype != np.float64 or value.size == 0 or key not in invariants:
            continue
        bad_values = [-1e308]
        if key in learner.grown_state_keys():
            bad_values.append(-2 * invariants[key].bound)
        for bad_value in bad_values:
            bad = {k: v.copy() for k, v in state.items()}
            bad[key].reshape(-1)[0] = bad_value
            with pytest.raises(InvalidState) as refused:
                learner_class(name).from_state(learner.get_params(), bad)
            assert refused.value.field == key, (key, str(refused.value))
    assert VALUE_BOUND < DBL_MAX


# ------------------------------------------------------------------------- property
#: legal values (within the feature bound), large ones included: they may still overflow a
#: learner's weights, which must then refuse the batch
LEGAL = st.sampled_from(
    [0.0, -0.0, 5e-324, -5e-324, 2.2e-308, 1e-200, 1.0, -1.0, 3.5, 1e10, EPOCH_NANOSECONDS]
    + [1e50, -1e50, 1e99, -1e99, FEATURE_BOUND, -FEATURE_BOUND]
)
ILLEGAL = st.sampled_from(
    [1e154, -1e154, 1e200, -1e200, DBL_MAX, -DBL_MAX, np.inf, -np.inf, np.nan]
)
BATCHES = st.lists(
    st.tuples(
        st.lists(st.lists(LEGAL, min_size=3, max_size=3), min_size=1, max_size=3),
        st.lists(st.booleans(), min_size=3, max_size=3),
        # one value of the batch made illegal, or none
        st.one_of(st.none(), st.tuples(st.integers(0, 8), ILLEGAL)),
    ),
    min_size=1,
    max_size=8,
)
ORDINARY = np.array([[0.5, -1.0, 2.0], [1.0, 1.0, 1.0], [-3.0, 0.0, 0.25]])


@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("name", available_learners())
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batches=BATCHES)
def test_any_sequence_of_batches_leaves_a_finite_round_tripping_learner(name, scaling, batches):
    """Whatever extreme values come in, accepted or refused: the learner scores ordinary
    events finitely and its state round-trips (validates and continues bit for bit)."""
    learner = make_learner(name, scaling=scaling).initialize(3)
    good = learner.get_state()
    for rows, labels, illegal in batches:
        X = np.array(rows, dtype=np.float64)
        if illegal is not None:
            X.reshape(-1)[illegal[0] % X.size] = illegal[1]
        y = np.array(labels[: len(rows)], dtype=np.int64)
        if len(set(y.tolist())) == 1 and len(y) > 1:
            y[0] = 1 - y[0]
        try:
            scores = learner.prequential_step(X, y)
        except StateOverflow as error:
            if not error.restored:  # as the service does: back to the last committed state
                learner = learner_class(name).from_state(learner.get_params(), good)
            continue
        except InvalidFeatures:
            continue
        assert np.isfinite(scores).all()
        good = learner.get_state()
    assert np.isfinite(learner.decision_function(ORDINARY)).all()
    state = learner.get_state()
    copy = learner_class(name).from_state(learner.get_params(), state)
    for key, value in copy.get_state().items():
        np.testing.assert_array_equal(value, state[key], err_msg=key)
    np.testing.assert_array_equal(
        copy.decision_function(ORDINARY), learner.decision_function(ORDINARY)
    )
