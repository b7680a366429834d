"""The service's learning step checks each batch's (score, label) pairs once
(:func:`core.validation.check_labelled_scores`) and feeds its output to the metrics window,
the drift detector and the calibrator with ``validated=True``: the same state as the checking
path, batch after batch."""

from __future__ import annotations

import numpy as np

from core.metrics import PrequentialWindow
from core.metrics.drift import DriftDetector
from core.validation import check_labelled_scores


def _stream(n: int = 3000):
    rng = np.random.default_rng(5)
    labels = np.where(rng.random(n) < 0.2, 1, -1)
    # the ranking flips half-way: the detector has a drift to find
    scores = rng.normal(size=n) + np.where(np.arange(n) < n // 2, labels, -labels)
    return scores, labels


def test_the_window_fed_validated_pairs_keeps_the_same_contents_and_reservoirs():
    scores, labels = _stream()
    checked, trusted = PrequentialWindow(500, 300, 1), PrequentialWindow(500, 300, 1)
    for start in range(0, len(scores), 7):
        part = slice(start, start + 7)
        checked.update(scores[part].tolist(), (labels[part] > 0).tolist())
        trusted.update(*check_labelled_scores(labels[part], scores[part])[::-1], validated=True)
    for mine, theirs in zip(trusted.contents(), checked.contents(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert trusted.summary() == checked.summary()


def test_the_detector_fed_validated_pairs_finds_the_same_drifts_with_the_same_state():
    scores, labels = _stream()
    checked, trusted = DriftDetector(), DriftDetector()
    for start in range(0, len(scores), 7):
        part = slice(start, start + 7)
        found = checked.update(scores[part].tolist(), (labels[part] > 0).tolist())
        signs, valid = check_labelled_scores(labels[part], scores[part])
        assert trusted.update(valid, signs, validated=True) == found
    assert checked.detections == trusted.detections >= 1
    for key, value in checked.get_state().items():
        np.testing.assert_array_equal(trusted.get_state()[key], value, err_msg=key)
