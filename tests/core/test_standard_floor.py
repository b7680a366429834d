"""The floor of ``standard`` scaling on a number that is mostly 0 (core/preprocessing.py,
docs/algorithms/scaling.md (scaling.2)): a rare count stays within reach, a flag, a one-hot
category and a feature that is never 0 are scaled bit for bit as without the floor, the raw map
mirrors the transform, ``boosted_embedded``'s fused segment learns the floored rows as the
general path does, and hostile values of the two arrays it keeps are refused."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from core import preprocessing
from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.preprocessing import initial_scaler_state, scale_batch, scaler_affine
from tests.core.boosted_helpers import SMALL_FUSED, learned_by_path
from tests.core.scaling_helpers import N_EVENTS, mixed


def scaled(X: np.ndarray, floor: float, monkeypatch) -> tuple[np.ndarray, np.ndarray, dict]:
    """``X`` learned in three calls, then scored, with ``floor`` as the floor's share."""
    monkeypatch.setattr(preprocessing, "STANDARD_FLOOR", floor)
    state = {"n_features": np.array([X.shape[1]]), **initial_scaler_state("standard", X.shape[1])}
    calls = ((0, 1), (1, 700), (700, len(X)))
    learned_rows = [scale_batch("standard", state, X[a:b], learn=True) for a, b in calls]
    scored = scale_batch("standard", state, X[:50], learn=False)
    monkeypatch.undo()
    return np.vstack(learned_rows), scored, state


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def test_a_rare_count_stays_within_reach_and_the_other_kinds_are_scaled_as_before(monkeypatch):
    X = mixed()
    rows, scored, state = scaled(X, preprocessing.STANDARD_FLOOR, monkeypatch)
    unfloored, unfloored_scored, _ = scaled(X, 0.0, monkeypatch)
    # once the count's values have had two magnitudes (before, it may be a category) it is
    # within 2 / floor of its mean, where its standard deviation puts it ~1 / sqrt(p) out
    present = np.flatnonzero(X[:, 0])
    varied = present[np.flatnonzero(X[present, 0] != X[present[0], 0])[0]]
    reach = 2.0 / preprocessing.STANDARD_FLOOR
    assert np.abs(rows[varied:, 0]).max() <= reach < np.abs(unfloored[varied:, 0]).max()
    assert np.array_equal(rows[:varied, 0], unfloored[:varied, 0])
    for j in range(1, 6):  # the flag, the one-hot pair and both numbers: the same bits
        assert digest(rows[:, j]) == digest(unfloored[:, j]), j
        assert digest(scored[:, j]) == digest(unfloored_scored[:, j]), j
    assert state["scaler_present"].tolist() == np.count_nonzero(X, axis=0).tolist()
    assert state["scaler_magnitude"][1:4].tolist() == [1.0, 1.0, 1.0]
    assert state["scaler_magnitude"][[0, 4, 5]].tolist() == [-1.0, -1.0, -1.0]


def test_the_raw_map_mirrors_the_floored_transform(monkeypatch):
    X = mixed(seed=1)
    _, _, state = scaled(X, preprocessing.STANDARD_FLOOR, monkeypatch)
    divisors, offsets = scaler_affine("standard", state)
    probe = mixed(40, seed=2)
    np.testing.assert_array_equal(
        (probe - offsets) / divisors, scale_batch("standard", state, probe, learn=False)
    )


@pytest.mark.parametrize("sizes", [(1,), (1, 7, 30, 2)], ids=["one event", "batches"])
def test_the_fused_segment_learns_floored_rows_as_the_general_path(sizes, monkeypatch):
    X = mixed(700, seed=3)[:, [0, 1, 4, 5]]
    y = (X[:, 2] + X[:, 0] + np.random.default_rng(3).normal(size=len(X)) > 6.0).astype(np.int64)
    state, scores, taken, _ = learned_by_path(
        "boosted_embedded", SMALL_FUSED, X, y, sizes, True, monkeypatch
    )
    general = learned_by_path("boosted_embedded", SMALL_FUSED, X, y, sizes, False, monkeypatch)
    assert any(taken) and state["scaler_magnitude"][0] == -1.0
    np.testing.assert_array_equal(scores, general[1])
    for key, value in general[0].items():
        np.testing.assert_array_equal(state[key], value, err_msg=key)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("scaler_present", -1, r"expected an integer in \[0, scaler_count"),
        ("scaler_present", N_EVENTS + 1, r"expected an integer in \[0, scaler_count"),
        ("scaler_present", 2.0, "expected int64"),
        ("scaler_magnitude", np.nan, "expected finite values"),
        ("scaler_magnitude", np.inf, "expected finite values"),
        ("scaler_magnitude", -2.0, "expected values >= -1.0"),
        ("scaler_magnitude", 1e300, "expected values of magnitude at most"),
    ],
)
def test_hostile_floor_arrays_are_refused_naming_the_array(key, value, message):
    X = mixed()
    y = (X[:, 4] > 5.0).astype(np.int64)
    learner = make_learner("logistic", scaling="standard").partial_fit(X, y)
    state = learner.get_state()
    array = state[key].astype(type(value)) if isinstance(value, float) else state[key].copy()
    array[0] = value
    with pytest.raises(InvalidState, match=message) as info:
        learner_class("logistic").from_state(learner.get_params(), dict(state, **{key: array}))
    assert info.value.field == key
