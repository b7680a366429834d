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


def naive_for(memory, prior_strength=calibration.PRIOR_STRENGTH):
    # the kernel module's constants, each under its own name in lower case
    bounds = {name: getattr(calibration, name.upper()) for name in NaivePlatt.BOUNDS}
    return NaivePlatt(
        memory, prior_strength=prior_strength, prior=calibration.PRIOR_CURVATURE, **bounds
    )


@pytest.mark.parametrize("memory", [50, 2000, 1e9])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0], ids=["tiny", "unit", "large"])
@pytest.mark.parametrize("prior_strength", [calibration.PRIOR_STRENGTH, 0.0, 3.5])
def test_calibrator_agrees_with_the_naive_reference(memory, scale, prior_strength):
    scores, labels, _ = platt_stream(1, scale=scale)
    calibrator = OnlineCalibrator(memory, prior_strength)
    naive = naive_for(memory, prior_strength)
    # uneven batches; the first ones of one class only (no evidence yet: the base rate)
    labels[:20] = -1
    for start, stop in ((0, 1), (1, 20), (20, 250), (250, 777), (777, 1200)):
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
    assert calibrator.labels.tolist() == [int((labels < 0).sum()), int((labels > 0).sum())]


def test_probabilities_start_at_the_base_rate_and_grow_into_the_platt_fit():
    """(calibration.8): before any label every score gets 1/2; with labels of one class only,
    the running base rate whatever the score; then the Platt probability takes over as the
    labels of both classes accumulate."""
    scores, labels, _ = platt_stream(11, n=5000, slope=3.0, offset=-2.0)
    extreme = np.array([-50.0, 0.0, 50.0])
    calibrator, unshrunk = OnlineCalibrator(), OnlineCalibrator(prior_strength=0.0)
    np.testing.assert_array_equal(calibrator.probabilities(extreme), 0.5)
    np.testing.assert_allclose(unshrunk.probabilities(extreme), [0.0, 0.5, 1.0], atol=1e-20)
    negatives = np.flatnonzero(labels < 0)[:30]
    calibrator.update(scores[negatives], labels[negatives])
    np.testing.assert_allclose(calibrator.probabilities(extreme), 0.5 / 31, rtol=1e-12)
    gaps = []
    for calibrator_fed in (10, 100, 1000, 5000):
        shrunk, plain = OnlineCalibrator(), OnlineCalibrator(prior_strength=0.0)
        shrunk.update(scores[:calibrator_fed], labels[:calibrator_fed])
        plain.update(scores[:calibrator_fed], labels[:calibrator_fed])
        gaps.append(np.abs(shrunk.probabilities(extreme) - plain.probabilities(extreme)).max())
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 0.05 < gaps[0]


def test_the_early_probabilities_beat_the_unshrunk_ones_on_rare_positives():
    """The case the shrinkage is for: a rare class, outlying scores among the first events.
    Over the first 250 events the shrunk probabilities score better than the unshrunk ones
    and no worse than the running base rate; over the whole stream as well as the unshrunk."""
    rng = np.random.default_rng(12)
    n = 20_000
    scores = rng.standard_t(2, size=n)  # heavy tails: outliers early on
    truth = 1.0 / (1.0 + np.exp(-(1.5 * np.tanh(scores) - 3.2)))
    y = (rng.random(n) < truth).astype(np.int64)
    served = {}
    for name, strength in (("shrunk", calibration.PRIOR_STRENGTH), ("unshrunk", 0.0)):
        calibrator, served[name] = OnlineCalibrator(prior_strength=strength), np.empty(n)
        for start in range(0, n, 10):
            served[name][start : start + 10] = calibrator.probabilities(scores[start : start + 10])
            calibrator.update(scores[start : start + 10], 2 * y[start : start + 10] - 1)
    early = slice(0, 250)
    base = np.concatenate([[0.5], (np.cumsum(y)[:-1] + 0.5) / (np.arange(1, n) + 1.0)])

    def brier(p, rows=slice(None)):
        return float(np.mean((p[rows] - y[rows]) ** 2))

    assert brier(served["shrunk"], early) < brier(served["unshrunk"], early)
    assert brier(served["shrunk"], early) <= brier(base, early) + 0.005
    assert brier(served["shrunk"]) <= brier(served["unshrunk"]) + 5e-4


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
        ("parameters", np.array([1.0, 20.0])),  # no discount at all: decay must be < 1
        ("parameters", np.array([0.999, -1.0])),  # a negative prior strength
        ("parameters", np.array([0.999, np.inf])),
        ("parameters", np.array([0.999])),  # the state before the prior strength
        ("labels", np.array([0, 1], dtype=np.int64)),  # more labels than events fed
        ("labels", np.array([-1, 1], dtype=np.int64)),
        ("labels", np.zeros(2)),  # float, not int64
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
    with pytest.raises(ValueError):
        OnlineCalibrator(prior_strength=-1.0)
    assert calibrator.counters[0] == 0 and calibrator.labels.tolist() == [0, 0]


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
