"""``core.metrics.drift.DriftDetector`` against the naive Page-Hinkley reference, its state round
trip (batch = one at a time), its refusal of corrupt states, and detection on real learners'
prequential scores (docs/algorithms/drift.md)."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidState
from core.learners import make_learner
from core.metrics.drift import DriftDetector
from tests.core.naive.drift import NaivePageHinkley


def flipping_stream(seed, n=1500, change=700, rate=0.2, ties=False):
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < rate).astype(np.int64)
    sign = np.where(np.arange(n) < change, 1.0, -1.0)
    scores = rng.normal(size=n) + 1.5 * sign * labels
    if ties:
        scores = np.round(scores, 1)  # many exact ties between the classes
    return scores, labels


PARAMS = [
    dict(capacity=8, delta=0.05, threshold=5.0, min_losses=20),
    dict(capacity=30, delta=0.01, threshold=12.0, min_losses=50),
    dict(capacity=3, delta=0.1, threshold=3.0, min_losses=5),
    dict(capacity=40, delta=0.1, threshold=5.0, min_losses=20),  # 10 of the other class
]


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_detector_agrees_with_the_naive_reference(params, ties):
    scores, labels = flipping_stream(1, ties=ties)
    detector = DriftDetector(**params)
    found = []
    for start in (0, 1, 250, 777, 1200):  # uneven batches, a one-event batch among them
        stop = {0: 1, 1: 250, 250: 777, 777: 1200, 1200: len(labels)}[start]
        found += detector.update(scores[start:stop], labels[start:stop])
    reference = NaivePageHinkley(**params).update(scores, labels)
    assert found == reference.detections
    assert detector.detections == len(reference.detections) >= 1
    assert detector.last_detection == reference.detections[-1]
    kept = {
        1: detector.recent[1, : detector.recent_fill[1]],
        -1: detector.recent[0, : detector.recent_fill[0]],
    }
    for label in (1, -1):
        assert sorted(kept[label]) == sorted(reference.recent[label])
    if reference.losses:
        assert detector.statistics[0] == pytest.approx(np.mean(reference.losses), rel=1e-12)


def test_one_class_batches_feed_only_the_rings():
    detector = DriftDetector(capacity=4)
    assert detector.update([0.1, 0.2, 0.3], [0, 0, 0]) == []
    assert detector.counters[1] == 0 and detector.recent_fill.tolist() == [3, 0]
    detector.update([0.5], [1])  # three negatives: below the ring's 4 (1 / delta = 20 > 4)
    assert detector.counters[1] == 0 and detector.recent_fill.tolist() == [3, 1]
    detector.update([0.4, 0.6], [0, 1])  # the 4th negative, then a loss: no negative above it
    assert detector.counters[1] == 1 and detector.statistics[0] == 0.0


def test_a_loss_counts_against_one_over_delta_scores_of_the_other_class():
    """With a ring larger than ``1 / delta``, losses start once the other class's ring holds
    ``ceil(1 / delta)`` scores (one of them then moves a loss by at most delta), as in the
    naive reference."""
    detector = DriftDetector(capacity=40, delta=0.25)  # 4 scores of the other class
    detector.update([0.1, 0.2, 0.3], [0, 0, 0])
    detector.update([0.5, 0.6], [1, 1])
    assert detector.counters[1] == 0
    detector.update([0.05, 0.7], [0, 1])
    assert detector.counters[1] == 1  # the positive at 0.7 against 4 negatives
    reference = NaivePageHinkley(capacity=40, delta=0.25)
    reference.update([0.1, 0.2, 0.3, 0.5, 0.6, 0.05, 0.7], [0, 0, 0, 1, 1, 0, 1])
    assert reference.losses == [0.0]


def test_one_rare_positive_after_a_reset_does_not_make_a_detection():
    """A stationary stream of rare positives: every negative is compared with the few
    positives of its ring for hundreds of events, so a lone positive ranked low made the loss
    of every later negative rise (a detection with a ring of two positives); counted only
    against ``1 / delta`` positives, the same events detect nothing, and the naive reference
    agrees."""
    rng = np.random.default_rng(0)
    scores = np.concatenate(([3.0], rng.normal(size=600), [-1.0], rng.normal(size=600)))
    labels = np.zeros(scores.shape[0], dtype=np.int64)
    labels[0] = labels[601] = 1
    assert DriftDetector().update(scores, labels) == []
    assert NaivePageHinkley().update(scores, labels).detections == []
    # the rule off (a ring of one score: every loss counts, as before it): the lone positive
    # at -1 is a detection
    assert DriftDetector(capacity=1, delta=0.05).update(scores, labels) != []


def test_state_round_trip_continues_bit_for_bit():
    scores, labels = flipping_stream(2)
    whole = DriftDetector(capacity=10, threshold=6.0, min_losses=30)
    expected = whole.update(scores, labels)
    first = DriftDetector(capacity=10, threshold=6.0, min_losses=30)
    found = first.update(scores[:600], labels[:600])
    state = first.get_state()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    second = DriftDetector.from_state(state)
    found += second.update(scores[600:], labels[600:])
    assert found == expected
    for key, value in whole.get_state().items():
        np.testing.assert_array_equal(second.get_state()[key], value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("recent_fill", np.array([99, 0])),
        ("recent_next", np.array([-1, 0])),
        ("statistics", np.array([np.nan, 0.0, 0.0])),
        ("counters", np.array([5, 9, 0, -1])),
        ("recent", np.zeros((2, 3))),
    ],
)
def test_corrupt_states_are_refused_naming_the_array(key, value):
    state = DriftDetector(capacity=4).get_state()
    state[key] = value
    with pytest.raises(InvalidState) as info:
        DriftDetector.from_state(state)
    assert info.value.field == key


@pytest.mark.parametrize("bad", [{"capacity": 0}, {"delta": -1.0}, {"threshold": 0.0},
                                 {"min_losses": 0}])  # fmt: skip
def test_bad_parameters_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        DriftDetector(**bad)


def test_defaults_detect_a_flip_learned_by_a_real_learner_and_stay_quiet_before_it():
    # 7 % positives, 10 features, the signs of half the weights flip at 30,000
    rng = np.random.default_rng(3)
    n, change = 40_000, 30_000
    X = rng.normal(size=(n, 10))
    weights = np.linspace(1.0, -1.0, 10)
    flipped = weights * np.where(np.arange(10) % 2 == 0, -1.0, 1.0)
    logits = np.where(np.arange(n)[:, None] < change, X @ weights[:, None],
                      X @ flipped[:, None])[:, 0] - 3.0  # fmt: skip
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    learner = make_learner("logistic")
    detector = DriftDetector()
    found = []
    for start in range(0, n, 500):
        rows = slice(start, start + 500)
        found += detector.update(learner.prequential_step(X[rows], labels[rows]), labels[rows])
    assert found and all(change <= index < change + 5000 for index in found[:1])
    assert not [index for index in found if index < change]
