"""``auto``'s fast-adapting candidate (core.learners._candidates.FAST_TREE_CANDIDATE): which
tournaments hold it, that inside ``auto`` it learns exactly what the standalone learner of its
parameters learns (``boosted_embedded`` over ``logistic``'s discounted FTRL, whose kernels are
checked against naive references in test_boosted_embedded.py and test_logistic.py), and that
it is what follows a stream whose concept keeps moving."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from core.learners import make_learner
from core.learners._candidates import (
    DEFAULT_CANDIDATES,
    FAST_CANDIDATES,
    FAST_TREE_CANDIDATE,
    TREE_REFIT_FEATURES,
    WIDE_FEATURES,
    default_candidates,
)
from core.metrics import auc


@pytest.mark.parametrize(
    ("width", "fast"),
    [
        (None, (*FAST_CANDIDATES, FAST_TREE_CANDIDATE)),
        (4, (*FAST_CANDIDATES, FAST_TREE_CANDIDATE)),
        (TREE_REFIT_FEATURES, (*FAST_CANDIDATES, FAST_TREE_CANDIDATE)),
        (TREE_REFIT_FEATURES + 1, FAST_CANDIDATES),
        (WIDE_FEATURES + 1, FAST_CANDIDATES),
    ],
)
def test_the_fast_candidates_of_each_width(width, fast):
    tracked = default_candidates(width, track_drift=True)
    plain = default_candidates(width, track_drift=False)
    assert tracked == (*plain, *fast)
    if width is not None and width <= TREE_REFIT_FEATURES:
        assert plain == DEFAULT_CANDIDATES


def _moving(n: int, seed: int, period: int = 1500):
    """A concept that moves all the time: the weights of a logistic model turn a little at
    every event and change sign on half of the features every ``period`` events, as prices
    do in Elec2; ~40 % positives."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    base = np.array([1.5, -1.0, 1.2, 0.8, -1.3, 0.6])
    turn = np.sin(np.arange(n) / 400.0)[:, None] * np.array([1.0, 1.0, -1.0, 0.0, 0.0, 0.0])
    flips = np.where((np.arange(n) // period) % 2 == 1, -1.0, 1.0)[:, None]
    weights = (base + turn) * np.where(np.arange(6) % 2 == 0, flips, 1.0)
    logits = (X * weights).sum(axis=1) + np.abs(X[:, 0] * X[:, 1]) - 1.2
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return X, y


def _prequential(model, X, y, batch: int = 250) -> np.ndarray:
    return np.concatenate(
        [
            model.prequential_step(X[i : i + batch], y[i : i + batch])
            for i in range(0, len(y), batch)
        ]
    )


def test_inside_auto_the_fast_candidate_learns_what_the_standalone_learner_learns():
    """The reference: ``boosted_embedded`` with the candidate's parameters, learning the same
    (already scaled) stream alone.  Auto's fifth candidate must hold the same state and have
    scored every event the same (auto's ring of each candidate's prequential scores)."""
    rng = np.random.default_rng(5)
    n = 4600  # past the candidate's fits at 250, 375, ..., 2,853, 4,280 events, under the window
    X = rng.normal(size=(n, 5))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X[:, 0] - X[:, 1] * X[:, 2] - 1.0)))).astype(int)
    model = make_learner("auto", scaling="none", random_state=3)
    _prequential(model, X, y)
    assert int(model.state_["drift_since"][0]) == 0  # no detection: no restart of its trees
    params = copy.deepcopy(FAST_TREE_CANDIDATE["params"])
    reference = make_learner("boosted_embedded", scaling="none", random_state=3, **params)
    expected = _prequential(reference, X, y, batch=1000)
    np.testing.assert_array_equal(model.state_["window_scores"][4, :n], expected)
    own = model.get_state()
    for key, value in reference.get_state().items():
        np.testing.assert_array_equal(own["c4:" + key], value, err_msg=key)
    assert reference.fits_ == 8  # the last installed at 4,280 + 256


def _window_mean_auc(y, scores, width: int = 1000) -> float:
    return float(np.mean([auc(y[i : i + width], scores[i : i + width])
                          for i in range(0, len(y) - width + 1, width)]))  # fmt: skip


def test_on_a_moving_concept_the_fast_candidate_leads_and_lifts_the_served_ranking():
    """Against the tournament without it (the default before, still that of wider models), on
    a concept that keeps moving."""
    X, y = _moving(12_000, seed=2)
    model = make_learner("auto", random_state=0)
    served = _prequential(model, X, y)
    slow = [*DEFAULT_CANDIDATES, *FAST_CANDIDATES]
    before = _prequential(make_learner("auto", candidates=slow, random_state=0), X, y)
    assert _window_mean_auc(y, served) > _window_mean_auc(y, before) + 0.01
    board = model.leaderboard()
    weights = [row["weight"] for row in board["candidates"]]
    assert int(np.argmax(weights)) == 4, weights
