"""Online scaling (core/preprocessing.py) against a naive per-event numpy reference.

The reference keeps every event seen so far and recomputes the statistics from scratch with
``np.mean`` / ``np.std`` (population, for a number under ``standard`` floored at a share of its
non-zero values' spread about the mean; for ``scale`` over each feature's non-zero values,
floored at a quarter of their root mean square), including the event being scaled (the
documented [CHOICE]); scoring-time transforms use the statistics without the new events.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.csr import CSRMatrix
from core.preprocessing import STANDARD_FLOOR, initial_scaler_state, scale_batch
from core.validation import as_features

N_FEATURES = 5


def events(seed, n=60):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES)) * np.array([1.0, 30.0, 0.01, 2.0, 1.0]) + np.array(
        [0.0, 5.0, -1.0, 0.5, 0.0]
    )
    X[rng.random(X.shape) < 0.3] = 0.0  # implicit zeros for the sparse modes
    X[4] = 0.0  # a zero row
    X[:, 4] = 0.0  # a feature that stays 0: std 0, divided by 1
    X[:, 3] = np.where(np.arange(n) % 150 == 7, 2.0 + np.arange(n) / 100, 0.0)  # a rare number
    return X


def naive(scaling, seen, x):
    """Scale ``x`` with the statistics of ``seen`` (which already includes x when learning)."""
    if scaling == "unit_norm":
        norm = np.linalg.norm(x)
        return x / norm if norm > 0 else x.copy()
    stack = np.array(seen)
    if scaling == "standard":
        std, mean = stack.std(axis=0), stack.mean(axis=0)
        for j in range(stack.shape[1]):  # a number's floor: the non-zero values' spread
            present = stack[:, j][stack[:, j] != 0.0]
            if np.unique(np.abs(present)).size > 1:
                spread = np.sqrt(np.mean((present - mean[j]) ** 2))
                std[j] = max(std[j], STANDARD_FLOOR * spread)
        centred = x - mean
        return np.where(std > 1e-12, centred / np.where(std > 1e-12, std, 1.0), centred)
    divisors = np.ones(stack.shape[1])
    for j in range(stack.shape[1]):
        present = stack[:, j][stack[:, j] != 0.0]
        if present.size:
            divisors[j] = max(present.std(), 0.25 * np.sqrt(np.mean(present**2)))
    return x / divisors


# "standard" centres features, so it is dense only (its refusal of CSR is tested below)
@pytest.mark.parametrize(
    "scaling, sparse",
    [("unit_norm", False), ("unit_norm", True), ("standard", False), ("scale", False),
     ("scale", True)],
)  # fmt: skip
def test_learning_then_scoring_match_the_naive_reference(scaling, sparse):
    X = events(1, n=200)
    state = initial_scaler_state(scaling, N_FEATURES)
    seen, expected = [], []
    for x in X:
        seen.append(x)
        expected.append(naive(scaling, seen, x))
    batches = (slice(0, 1), slice(1, 25), slice(25, 160), slice(160, None))  # state carried
    got = []
    for rows in batches:
        batch = as_features(sp.csr_matrix(X[rows])) if sparse else X[rows]
        out = scale_batch(scaling, state, batch, learn=True)
        got.append(out.toarray() if isinstance(out, CSRMatrix) else out)
    np.testing.assert_allclose(np.vstack(got), np.array(expected), rtol=1e-9, atol=1e-12)
    # scoring uses the statistics of everything learned, and learns nothing
    probe = events(2, n=7)
    before = {key: value.copy() for key, value in state.items()}
    batch = as_features(sp.csr_matrix(probe)) if sparse else probe
    out = scale_batch(scaling, state, batch, learn=False)
    out = out.toarray() if isinstance(out, CSRMatrix) else out
    np.testing.assert_allclose(
        out, np.array([naive(scaling, list(X), x) for x in probe]), rtol=1e-9, atol=1e-12
    )
    for key in state:
        np.testing.assert_array_equal(state[key], before[key])


def test_the_first_event_under_standard_scaling_is_zero_and_input_is_not_mutated():
    X = events(3)
    copy = X.copy()
    out = scale_batch("standard", initial_scaler_state("standard", N_FEATURES), X, learn=True)
    np.testing.assert_array_equal(out[0], np.zeros(N_FEATURES))
    np.testing.assert_array_equal(X, copy)


def test_standard_scaling_refuses_sparse_input_before_touching_statistics():
    state = initial_scaler_state("standard", N_FEATURES)
    with pytest.raises(ValueError, match="scaling='scale'"):
        scale_batch("standard", state, as_features(sp.csr_matrix(events(4))), learn=True)
    assert state["scaler_count"][0] == 0


def test_scale_mode_scales_a_category_alike_whatever_its_frequency():
    """A one-hot or hashed category (values 1 or -1) is divided by a quarter of the size of its
    values whatever its frequency: a category first seen at the 1,000th event is 4 (the standard
    deviation over every event would make it sqrt(1000)), and a common one 4 too; a number
    present in one event in four is divided by the spread of its values."""
    n = 1000
    X = np.zeros((n, 3))
    X[:, 0] = np.where(np.arange(n) % 2 == 0, 1.0, 0.0)  # a common category
    X[n - 1, 1] = -1.0  # hashed with a negative sign, seen once, last
    X[::4, 2] = np.where(np.arange(n // 4) % 2 == 0, 100.0, 300.0)  # a number, 1 event in 4
    state = initial_scaler_state("scale", 3)
    out = np.vstack(
        [scale_batch("scale", state, X[rows], learn=True) for rows in (slice(0, 7), slice(7, n))]
    )
    np.testing.assert_array_equal(out[:, :2], 4.0 * X[:, :2])
    assert out[n - 4, 2] == 300.0 / 100.0  # the values' spread is 100 once both were seen
    assert state["scaler_nonzero"].tolist() == [500, 1, 250]


def test_a_tiny_or_constant_feature_is_not_blown_up_by_scale_mode():
    """A constant feature becomes 4 (a quarter of its size: the floor, not the rounding left
    of its spread); values whose squares underflow to 0 are left as they are rather than
    divided by 0."""
    X = np.full((1000, 1), 0.1)
    out = scale_batch("scale", initial_scaler_state("scale", 1), X, learn=True)
    np.testing.assert_allclose(out, np.full_like(X, 4.0), rtol=1e-12)
    tiny = np.full((3, 1), 1e-170)
    out = scale_batch("scale", initial_scaler_state("scale", 1), tiny, learn=True)
    np.testing.assert_array_equal(out, tiny)
