"""``core.metrics.calibration.OnlineCalibrator`` against the naive reference (a plain loop of
the same update), batches against one event at a time, its state round trip and refusal of
corrupt states, and that it calibrates (docs/algorithms/calibration.md)."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidState
from core.metrics import calibration
from core.metrics.calibration import OnlineCalibrator
from tests.core.naive.calibration import NaivePlatt


def platt_stream(seed, n=1200, slope=1.7, offset=-2.5, scale=1.0):
    """Scores whose true probability is sigmoid(slope * score / scale + offset)."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=n) * scale
    truth = 1.0 / (1.0 + np.exp(-(slope * scores / scale + offset)))
    labels = np.where(rng.random(n) < truth, 1, -1)
    return scores, labels, truth


def naive_for(memory):
    return NaivePlatt(
        memory,
        prior=calibration.PRIOR_CURVATURE,
        ridge=calibration.RIDGE,
        score_bound=calibration.SCORE_BOUND,
        standard_bound=calibration.STANDARD_BOUND,
        theta_bound=calibration.THETA_BOUND,
    )


@pytest.mark.parametrize("memory", [50, 2000, 1e9])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0], ids=["tiny", "unit", "large"])
def test_calibrator_agrees_with_the_naive_reference(memory, scale):
    scores, labels, _ = platt_stream(1, scale=scale)
    calibrator, naive = OnlineCalibrator(memory), naive_for(memory)
    for start, stop in ((0, 1), (1, 250), (250, 777), (777, 1200)):  # uneven batches
        probabilities = calibrator.probabilities(scores[start:stop])
        expected = [naive.probability(s) for s in scores[start:stop]]
        np.testing.assert_allclose(probabilities, expected, rtol=1e-9, atol=1e-12)
        calibrator.update(scores[start:stop], labels[start:stop])
        for score, label in zip(scores[start:stop], labels[start:stop], strict=True):
            naive.feed(score, label)
        np.testing.assert_allclose(calibrator.theta, naive.theta, rtol=1e-9, atol=1e-12)
        upper = naive.curvature[np.triu_indices(2)]
        np.testing.assert_allclose(calibrator.curvature, upper, rtol=1e-9, atol=1e-12)
    assert calibrator.counters[0] == len(scores)


def test_rare_positives_and_extreme_scores_agree_with_the_reference():
    rng = np.random.default_rng(3)
    scores = np.concatenate([rng.normal(size=300) * 1e12, [1e300, -1e300, 0.0, 0.0]])
    labels = np.where(rng.random(len(scores)) < 0.002, 1, -1)
    labels[-1] = 1
    calibrator, naive = OnlineCalibrator(), naive_for(calibration.DEFAULT_MEMORY)
    calibrator.update(scores, labels)
    for score, label in zip(scores, labels, strict=True):
        naive.feed(score, label)
    assert np.isfinite(calibrator.theta).all() and np.isfinite(calibrator.curvature).all()
    np.testing.assert_allclose(calibrator.theta, naive.theta, rtol=1e-9, atol=1e-12)
    probabilities = calibrator.probabilities(scores)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()


def test_a_batch_equals_its_events_one_at_a_time_bit_for_bit():
    scores, labels, _ = platt_stream(2)
    whole, single = OnlineCalibrator(), OnlineCalibrator()
    whole.update(scores, labels)
    for k in range(len(scores)):
        single.update(scores[k : k + 1], labels[k : k + 1])
    for key, value in whole.get_state().items():
        assert value.tobytes() == single.get_state()[key].tobytes(), key


def test_state_round_trip_is_bit_for_bit_and_resumes_identically():
    scores, labels, _ = platt_stream(4)
    original = OnlineCalibrator(500)
    original.update(scores[:700], labels[:700])
    restored = OnlineCalibrator.from_state(original.get_state())
    for calibrator in (original, restored):
        calibrator.update(scores[700:], labels[700:])
    for key, value in original.get_state().items():
        assert value.tobytes() == restored.get_state()[key].tobytes(), key
    assert original.probabilities(scores).tobytes() == restored.probabilities(scores).tobytes()


@pytest.mark.parametrize(
    "key, value",
    [
        ("theta", np.array([np.nan, 0.0])),
        ("theta", np.array([1e300, 0.0])),
        ("curvature", np.array([1.0, 5.0, 1.0])),  # not positive semi-definite
        ("curvature", np.array([-1.0, 0.0, 1.0])),
        ("parameters", np.array([1.0])),  # no discount at all: decay must be < 1
        ("counters", np.array([-1], dtype=np.int64)),
        ("counters", np.array([2**62], dtype=np.int64)),
        ("curvature", np.array([1e300, 0.0, 1.0])),
        ("moments", np.array([1.0, 0.0, 1e308])),
        ("moments", np.array([1.0, 0.0, -1.0])),
        ("moments", np.array([1e9, 0.0, 1.0])),  # more weight than the memory holds
        ("theta", np.zeros(3)),
        ("counters", np.zeros(1)),  # float, not int64
    ],
)
def test_corrupt_states_are_refused_naming_the_array(key, value):
    state = OnlineCalibrator().get_state()
    state[key] = value
    with pytest.raises(InvalidState) as caught:
        OnlineCalibrator.from_state(state)
    assert caught.value.field == key
    missing = OnlineCalibrator().get_state()
    del missing[key]
    with pytest.raises(InvalidState):
        OnlineCalibrator.from_state(missing)


def test_it_learns_the_true_map_and_beats_the_raw_sigmoid():
    scores, labels, truth = platt_stream(5, n=40_000, slope=0.6, offset=-3.0)
    calibrator = OnlineCalibrator()
    calibrator.update(scores, labels)
    test, test_labels, test_truth = platt_stream(6, n=20_000, slope=0.6, offset=-3.0)
    y = (test_labels > 0).astype(float)
    calibrated = np.mean((calibrator.probabilities(test) - y) ** 2)
    raw = np.mean((1.0 / (1.0 + np.exp(-test)) - y) ** 2)
    oracle = np.mean((test_truth - y) ** 2)
    assert calibrated < raw and calibrated - oracle < 1e-3


def test_it_follows_a_drift():
    before, labels_before, _ = platt_stream(7, n=20_000, slope=2.0, offset=-2.0)
    after, labels_after, _ = platt_stream(8, n=40_000, slope=-1.0, offset=0.5)
    _, _, truth_after = platt_stream(9, n=2000, slope=-1.0, offset=0.5)
    test, _, _ = platt_stream(9, n=2000, slope=-1.0, offset=0.5)
    calibrator = OnlineCalibrator()
    calibrator.update(before, labels_before)
    assert np.abs(calibrator.probabilities(test) - truth_after).max() > 0.5
    calibrator.update(after, labels_after)
    assert np.abs(calibrator.probabilities(test) - truth_after).max() < 0.05


def test_bad_input_is_refused():
    calibrator = OnlineCalibrator()
    with pytest.raises(ValueError):
        calibrator.update([0.1, np.nan], [1, -1])
    with pytest.raises(ValueError):
        calibrator.update([0.1], [1, -1])
    with pytest.raises(ValueError):
        OnlineCalibrator(0.5)
    assert calibrator.counters[0] == 0


def test_the_validated_path_gives_the_same_state():
    """The service feeds the arrays its metrics window has just checked (labels 0/1 or
    -1/+1) without checking them again."""
    scores, labels, _ = platt_stream(10)
    checked, trusted, zero_one = OnlineCalibrator(), OnlineCalibrator(), OnlineCalibrator()
    checked.update(scores, labels)
    trusted.update(scores, labels, validated=True)
    zero_one.update(scores, (labels > 0).astype(np.int64), validated=True)
    for key, value in checked.get_state().items():
        assert value.tobytes() == trusted.get_state()[key].tobytes(), key
        assert value.tobytes() == zero_one.get_state()[key].tobytes(), key
