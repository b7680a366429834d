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


def test_auto_serves_records_and_watches_a_segment_in_one_call_as_in_two():
    """``DriftTracking.serve_record_and_watch`` (one kernel call) leaves auto's arrays as
    ``serve_and_record`` then ``watch`` leave them, and gives the same served scores and the
    same comparison start, over segments of a flipping stream whose scores the detector finds
    a drift in (detections, and one confirmed: the trees restart)."""
    from core.learners._tournament import grow_window, serve_and_record

    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=400) > 1.0).astype(np.int64)
    model = make_learner("auto", evaluate_every=200, window=400, random_state=0)
    model.partial_fit(X, y)
    state = model.get_state()
    fused, apart = (make_learner("auto", evaluate_every=200, window=400, random_state=0)
                    for _ in range(2))  # fmt: skip
    fused.state_ = {key: value.copy() for key, value in state.items()}
    apart.state_ = {key: value.copy() for key, value in state.items()}
    scores, labels = flipping_stream(1, n=1200, change=300)
    labels = np.where(labels > 0, 1, -1).astype(np.int64)
    candidate_scores = np.vstack([scores + k * rng.normal(size=1200) for k in range(5)])
    detections = []
    for start in range(0, 1200, 100):  # the period's multiples end the segments, as in auto
        piece = slice(start, start + 100)
        outcomes = []
        for model_ in (fused, apart):
            own, tracking = model_._own_state, model_._drift()
            grow_window(own, 400, int(own["n_seen"][0]) + 100)
            served = np.empty(100)
            segment = np.ascontiguousarray(candidate_scores[:, piece])
            if model_ is fused:
                since = tracking.serve_record_and_watch(own, segment, labels[piece], served,
                    model_._candidates, min_positives=10, temperature=0.1)  # fmt: skip
            else:
                serve_and_record(own, segment, labels[piece], 0.1, served)
                since = tracking.watch(own, served, labels[piece], model_._candidates,
                                       min_positives=10, temperature=0.1)  # fmt: skip
            outcomes.append((since, served))
        assert outcomes[0][0] == outcomes[1][0]
        np.testing.assert_array_equal(outcomes[0][1], outcomes[1][1])
        detections.append(int(fused._own_state["drift:counters"][2]))
    assert detections[-1] > detections[0]  # the flip was detected
    restarts = fused.state_["c2:generation"][0]
    assert restarts > state["c2:generation"][0]  # confirmed: the trees grow again
    after, expected = fused.get_state(), apart.get_state()
    assert after.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(after[key], value, err_msg=key)
