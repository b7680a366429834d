"""Tests of core/metrics/'s PrequentialWindow against a deque window, naive references and
scikit-learn: its metrics after every batch, its state's round trip and its reservoirs."""

from __future__ import annotations

import collections
import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.metrics import PrequentialWindow, UndefinedMetricWarning, auc, pauc, roc_curve
from tests.core.metrics_helpers import TOLERANCE, fpr_range
from tests.core.naive.metrics import naive_auc

#: the metric kernels are compiled (or loaded from the cache) before any property test runs
pytestmark = pytest.mark.usefixtures("compiled_window_kernels")


def _assert_same_metric(actual, expected):
    if math.isnan(expected):
        assert math.isnan(actual)
    else:
        assert actual == pytest.approx(expected, abs=TOLERANCE)


@st.composite
def stream_in_batches(draw):
    """(capacity, list of (scores, labels) batches), batch sizes from 0 to beyond capacity."""
    capacity = draw(st.integers(1, 25))
    batches = []
    for _ in range(draw(st.integers(1, 12))):
        size = draw(st.integers(0, 2 * capacity + 3))
        scores = draw(st.lists(st.integers(0, 8), min_size=size, max_size=size))
        labels = draw(st.lists(st.sampled_from([0, 1]), min_size=size, max_size=size))
        batches.append((np.array(scores, dtype=np.float64), np.array(labels)))
    return capacity, batches


@settings(max_examples=40)
@given(stream_in_batches(), fpr_range())
def test_window_matches_a_deque_after_every_batch(stream, bounds):
    capacity, batches = stream
    alpha, beta = bounds
    window = PrequentialWindow(capacity)
    reference = collections.deque(maxlen=capacity)
    seen_scores, seen_labels = [], []
    for scores, labels in batches:
        window.update(scores, labels)
        reference.extend(zip(scores.tolist(), labels.tolist(), strict=True))
        seen_scores += scores.tolist()
        seen_labels += labels.tolist()

        content_scores, content_labels = window.contents()
        assert content_scores.tolist() == [score for score, _ in reference]
        assert ((content_labels + 1) // 2).tolist() == [label for _, label in reference]
        assert len(window) == len(reference)
        assert window.counts_since_start == {
            "events": len(seen_labels),
            "positives": sum(seen_labels),
            "negatives": len(seen_labels) - sum(seen_labels),
        }

        reference_labels = [label for _, label in reference]
        reference_scores = [score for score, _ in reference]
        summary = window.summary(alpha, beta)
        json.dumps(summary, allow_nan=False)  # JSON-able, no NaN
        assert summary["window"]["events"] == len(reference)
        assert summary["window"]["positives"] == sum(reference_labels)
        if 0 < sum(reference_labels) < len(reference_labels):
            expected_auc = auc(reference_labels, reference_scores)
            expected_pauc = pauc(reference_labels, reference_scores, alpha, beta)
            assert window.auc() == pytest.approx(expected_auc, abs=TOLERANCE)
            assert window.pauc(alpha, beta) == pytest.approx(expected_pauc, abs=TOLERANCE)
            assert summary["window"]["auc"] == pytest.approx(expected_auc, abs=TOLERANCE)
            assert summary["window"]["pauc"] == pytest.approx(expected_pauc, abs=TOLERANCE)
            expected_standardized = pauc(reference_labels, reference_scores, alpha, beta, True)
            assert summary["window"]["pauc_standardized"] == pytest.approx(
                expected_standardized, abs=TOLERANCE
            )
            assert window.pauc(alpha, beta, standardized=True) == pytest.approx(
                expected_standardized, abs=TOLERANCE
            )
            assert summary["window"]["reason"] is None
            for actual, expected in zip(
                window.roc_curve(), roc_curve(reference_labels, reference_scores), strict=True
            ):
                np.testing.assert_array_equal(actual, expected)
        else:
            with pytest.warns(UndefinedMetricWarning):
                assert math.isnan(window.auc())
            assert summary["window"]["auc"] is None
            assert summary["window"]["pauc"] is None
            assert summary["window"]["reason"].startswith("window holds no ")

        # The reservoirs (default 100,000 per class) still hold everything: exact.
        assert summary["since_start"]["cumulative_exact"] is True
        if 0 < sum(seen_labels) < len(seen_labels):
            _assert_same_metric(window.cumulative_auc(), auc(seen_labels, seen_scores))
            _assert_same_metric(
                window.cumulative_pauc(alpha, beta), pauc(seen_labels, seen_scores, alpha, beta)
            )
        else:
            assert summary["since_start"]["reason"].endswith("event since the start")


def test_window_batch_longer_than_capacity_keeps_its_last_pairs():
    window = PrequentialWindow(3)
    window.update([1.0, 2.0], [0, 1])
    window.update([3.0, 4.0, 5.0, 6.0, 7.0], [1, 0, 0, 1, 0])
    scores, labels = window.contents()
    assert scores.tolist() == [5.0, 6.0, 7.0]
    assert labels.tolist() == [-1, 1, -1]
    assert window.counts_since_start == {"events": 7, "positives": 3, "negatives": 4}


def _held_bytes(window: PrequentialWindow) -> int:
    """The bytes of the arrays the window holds, alone or in tuples."""
    held = [v if isinstance(v, tuple) else (v,) for v in vars(window).values()]
    return sum(value.nbytes for group in held for value in group if isinstance(value, np.ndarray))


def test_window_keeps_no_sorted_copy_between_metric_calls():
    # a cached model's window holds its rings and reservoirs only: the sorted class scores a
    # summary needs are sorted by each call (issue 36), and an update between two calls shows
    rng = np.random.default_rng(5)
    window = PrequentialWindow(50, reservoir_capacity=30, random_state=2)
    scores, labels = np.round(rng.normal(size=120), 1), rng.integers(0, 2, size=120)
    window.update(scores[:80], labels[:80])
    held = _held_bytes(window)
    first = window.summary(0.0, 0.3)
    assert _held_bytes(window) == held
    assert window.summary(0.0, 0.3) == first
    window_scores, window_labels = scores[30:80], labels[30:80]
    assert math.isclose(window.auc(), float(naive_auc(window_labels, window_scores)))
    assert first["window"]["auc"] == window.auc()
    window.update(scores[80:], labels[80:])
    assert math.isclose(window.auc(), float(naive_auc(labels[70:], scores[70:])))
    assert window.summary(0.0, 0.3)["window"]["auc"] == window.auc()


def test_summary_of_one_class_window_reports_none_and_reason_without_warning():
    window = PrequentialWindow(2)
    window.update([0.1, 0.9, 0.4], [0, 1, 1])  # the window keeps the two positives
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = window.summary(0.0, 0.5)
    undefined_point = {"threshold": None, "tpr": None, "fpr": None, "precision": None,
                       "alert_rate": None}  # fmt: skip
    assert summary["window"] == {
        "auc": None,
        "pauc": None,
        "pauc_standardized": None,
        "average_precision": None,
        "operating_points": {  # the default targets, every value undefined
            "at_fpr": [{"target": t, **undefined_point} for t in (0.001, 0.01, 0.05)],
            "at_alert_rate": [{"target": t, **undefined_point} for t in (0.005, 0.01)],
            "at_k": [
                {"k": k, "reviewed": None, "precision": None, "recall": None} for k in (100, 1000)
            ],
        },  # fmt: skip
        "reason": "window holds no negative event",
        "events": 2,
        "positives": 2,
        "negatives": 0,
    }
    assert summary["since_start"]["auc"] == 1.0
    assert summary["since_start"]["reason"] is None
    assert summary["window_capacity"] == 2
    assert PrequentialWindow(2).summary()["since_start"]["reason"] == "no event since the start"


def test_window_rejects_bad_batch_and_keeps_its_state():
    window = PrequentialWindow(5, random_state=3)
    window.update([0.1, 0.7, 0.3], [0, 1, 0])
    before = window.get_state()
    for scores, labels in (
        ([0.2, np.nan], [0, 1]),
        ([0.2, 0.3], [0, 1, 1]),
        ([0.2, 0.3], [0, 5]),
    ):
        with pytest.raises(ValueError):
            window.update(scores, labels)
        _assert_states_identical(window.get_state(), before)
    window.update([], [])  # an empty batch is a no-op
    _assert_states_identical(window.get_state(), before)


def test_window_rejects_bad_parameters():
    with pytest.raises(ValueError, match="capacity must be a positive integer, got: 0"):
        PrequentialWindow(0)
    with pytest.raises(ValueError, match="reservoir_capacity must be a positive integer"):
        PrequentialWindow(10, reservoir_capacity=2.5)


def _assert_states_identical(actual, expected):
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key].dtype == expected[key].dtype, key
        assert actual[key].flags.c_contiguous, key
        assert actual[key].tobytes() == expected[key].tobytes(), key


def _random_stream(seed, n_events):
    rng = np.random.default_rng(seed)
    labels = (rng.random(n_events) < 0.3).astype(np.int64)
    return np.round(rng.normal(size=n_events) + labels, 1), labels


@pytest.mark.parametrize("n_events", [0, 3, 40, 500])
def test_state_round_trips_bit_for_bit_and_continues_identically(n_events):
    scores, labels = _random_stream(n_events, n_events + 100)
    window = PrequentialWindow(37, reservoir_capacity=16, random_state=11)
    window.update(scores[:n_events], labels[:n_events])
    state = window.get_state()
    assert set(state) == {
        "window_parameters",
        "window_scores",
        "window_labels",
        "window_cursor",
        "counts_since_start",
        "reservoir_positive_scores",
        "reservoir_negative_scores",
        "rng_state",
    }
    for array in state.values():
        assert array.dtype in (np.float64, np.int64, np.uint64, np.int8)  # int8: the labels
        assert array.flags.c_contiguous
    assert state["window_labels"].dtype == np.int8
    restored = PrequentialWindow.from_state(state)
    _assert_states_identical(restored.get_state(), state)
    # Same state + same events = same result, RNG included.
    window.update(scores[n_events:], labels[n_events:])
    restored.update(scores[n_events:], labels[n_events:])
    _assert_states_identical(restored.get_state(), window.get_state())
    assert restored.summary(0.0, 0.2) == window.summary(0.0, 0.2)


def test_from_state_accepts_read_only_buffers_as_read_back_from_redis():
    window = PrequentialWindow(8, reservoir_capacity=5, random_state=1)
    window.update(*_random_stream(3, 20))
    state = window.get_state()
    from_bytes = {
        key: np.frombuffer(array.tobytes(), dtype=array.dtype) for key, array in state.items()
    }
    restored = PrequentialWindow.from_state(from_bytes)
    restored.update([0.5, 0.1], [1, 0])  # its arrays are its own, and writable
    window.update([0.5, 0.1], [1, 0])
    _assert_states_identical(restored.get_state(), window.get_state())


def test_batches_give_the_same_state_as_events_one_at_a_time():
    scores, labels = _random_stream(5, 300)
    whole = PrequentialWindow(50, reservoir_capacity=20, random_state=2)
    whole.update(scores, labels)
    one_by_one = PrequentialWindow(50, reservoir_capacity=20, random_state=2)
    for score, label in zip(scores, labels, strict=True):
        one_by_one.update([score], [label])
    in_chunks = PrequentialWindow(50, reservoir_capacity=20, random_state=2)
    for start in range(0, 300, 70):  # chunks longer than the capacity
        in_chunks.update(scores[start : start + 70], labels[start : start + 70])
    _assert_states_identical(one_by_one.get_state(), whole.get_state())
    _assert_states_identical(in_chunks.get_state(), whole.get_state())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda state: state.pop("rng_state"), "lacks the array 'rng_state'"),
        (
            lambda state: state.update(window_scores=state["window_scores"].astype(np.float32)),
            "'window_scores' must be 1-d float64",
        ),
        (
            lambda state: state.update(counts_since_start=np.array([9, 1, 1], dtype=np.int64)),
            "counts_since_start",
        ),
        (
            lambda state: state.update(window_cursor=np.array([99], dtype=np.int64)),
            "window_cursor 99",
        ),
        (
            lambda state: state.update(window_labels=np.zeros(10, dtype=np.int8)),
            "window_labels must be -1 or \\+1",
        ),
    ],
)
def test_from_state_rejects_inconsistent_state(change, message):
    window = PrequentialWindow(10, reservoir_capacity=4)
    window.update(*_random_stream(0, 30))
    state = window.get_state()
    change(state)
    with pytest.raises(ValueError, match=message):
        PrequentialWindow.from_state(state)


def test_reservoirs_beyond_capacity_are_samples_of_their_class():
    scores, labels = _random_stream(1, 400)
    window = PrequentialWindow(10, reservoir_capacity=25, random_state=4)
    window.update(scores, labels)
    state = window.get_state()
    assert state["reservoir_positive_scores"].size == 25
    assert state["reservoir_negative_scores"].size == 25
    assert set(state["reservoir_positive_scores"]) <= set(scores[labels == 1])
    assert set(state["reservoir_negative_scores"]) <= set(scores[labels == 0])
    assert window.cumulative_exact is False
    assert window.summary()["since_start"]["cumulative_exact"] is False
    assert 0.0 <= window.cumulative_auc() <= 1.0


def test_reservoir_sample_is_uniform():
    """Algorithm R keeps each of N events with probability k / N."""
    n_events, reservoir_capacity, n_runs = 40, 8, 1500
    kept = np.zeros(n_events)
    scores = np.arange(n_events, dtype=np.float64)
    labels = np.zeros(n_events, dtype=np.int64)
    for seed in range(n_runs):
        window = PrequentialWindow(4, reservoir_capacity=reservoir_capacity, random_state=seed)
        window.update(scores[:13], labels[:13])
        window.update(scores[13:], labels[13:])
        kept[window.get_state()["reservoir_negative_scores"].astype(np.int64)] += 1
    expected = n_runs * reservoir_capacity / n_events
    standard_deviation = math.sqrt(expected * (1 - reservoir_capacity / n_events))
    assert np.abs(kept - expected).max() < 5 * standard_deviation
    chi_square = float(((kept - expected) ** 2 / expected).sum())
    assert chi_square < 90  # 39 degrees of freedom (weakly dependent); p < 1e-5 above 90


def test_cumulative_auc_estimate_is_close_beyond_reservoir_capacity():
    rng = np.random.default_rng(12)
    labels = (rng.random(60_000) < 0.5).astype(np.int64)
    scores = rng.normal(size=60_000) + 0.8 * labels
    window = PrequentialWindow(1000, reservoir_capacity=5000)
    window.update(scores, labels)
    assert not window.cumulative_exact
    assert window.cumulative_auc() == pytest.approx(auc(labels, scores), abs=0.01)
