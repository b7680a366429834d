"""``ftrl_pauc``'s reservoirs inside ``auto`` while they are the stream's prefix
(core.learners._row_pool.PrefixLink): it keeps its events' labels, not their rows, and
rebuilds the rows by replaying auto's scaler over the pool only when its solver reads them.
It learns what the same learner alone learns from auto's scaled rows, bit for bit; it keeps
its rows once a reservoir would replace one or the pool leaves the first event; a stored
state of the replayed form round-trips, and one whose labels disagree with its fills or with
the pool is refused."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from core.errors import InvalidState
from core.learners import make_learner
from core.learners.auto import Auto
from core.learners.ftrl_pauc import FTRLpAUC
from core.preprocessing import initial_scaler_state, scale_batch

C1 = 1  # ftrl_pauc in the default tournament


def digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def stream(n, rate=0.3, d=10, seed=2):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(int)
    X = rng.normal(size=(n, d)) * np.linspace(0.5, 40.0, d) + y[:, None] * 0.8
    return X, y


def learned(auto, X, y, sizes):
    start, k = 0, 0
    while start < len(y):
        size = sizes[k % len(sizes)]
        auto.prequential_step(X[start : start + size], y[start : start + size])
        start, k = start + size, k + 1
    return auto


def alone_on_scaled(auto, X, y) -> FTRLpAUC:
    """c1's learner alone, fed auto's scaled rows one event at a time (its reservoirs are kept
    as rows)."""
    scaled = scale_batch("standard", initial_scaler_state("standard", X.shape[1]), X, learn=True)
    twin = FTRLpAUC(**auto._candidates[C1].get_params()).initialize(X.shape[1])
    for i in range(len(y)):
        twin.partial_fit(scaled[i : i + 1], y[i : i + 1])
    return twin


def reservoirs(learner) -> list[str]:
    state = learner.state_
    rows = [state[f"{p}_X"][: int(state[f"{p}_fill"][0])] for p in ("positive", "negative")]
    return [digest(state["w"]), *map(digest, rows)]


def kept_rows(auto) -> FTRLpAUC:
    """A copy of auto's c1 that keeps its rows (from a round trip of auto's state)."""
    copy = Auto.from_state(auto.get_params(), auto.get_state())
    copy._candidates[C1].keep_rows()
    return copy._candidates[C1]


@pytest.mark.parametrize("sizes", [[1], [1, 7, 50, 300]])
def test_the_replayed_reservoirs_learn_what_kept_rows_learn(sizes):
    X, y = stream(400)
    auto = learned(make_learner("auto"), X, y, sizes)
    c1 = auto._candidates[C1]
    assert c1.state_["positive_X"].shape[0] == c1.state_["negative_X"].shape[0] == 0
    assert int(c1.state_["n_updates"][0]) == 4  # the solver read replayed rows
    labels = c1.state_["prefix_labels"][:400]
    np.testing.assert_array_equal(labels, y > 0)
    assert reservoirs(kept_rows(auto)) == reservoirs(alone_on_scaled(auto, X, y))


def test_a_full_reservoir_keeps_its_rows_and_learns_on_as_before():
    X, y = stream(2_400)  # the negatives pass the reservoir's 2,000 at about 2,860 events
    X, y = np.concatenate((X, stream(700, rate=0.0, seed=3)[0])), np.concatenate((y, [0] * 700))
    auto = learned(make_learner("auto"), X, y, [1, 7, 50, 300])
    c1 = auto._candidates[C1]
    assert not len(c1.state_["prefix_labels"])
    assert int(c1.state_["negative_seen"][0]) > int(c1.state_["negative_fill"][0]) == 2_000
    assert reservoirs(c1) == reservoirs(alone_on_scaled(auto, X, y))


def test_the_pool_leaving_the_first_event_keeps_the_rows_first():
    """A boosted candidate whose 300-row buffer wraps leaves the pool: c1 keeps its rows
    before the pool drops them, and learns on as alone."""
    candidates = [
        {"learner": "logistic"},
        {"learner": "ftrl_pauc"},
        {"learner": "boosted_embedded", "params": {"buffer_size": 300, "refit_every": 200}},
    ]
    X, y = stream(700)
    auto = make_learner("auto", candidates=candidates, track_drift=False)
    learned(auto, X[:290], y[:290], [1, 7, 50])
    assert len(auto._candidates[C1].state_["prefix_labels"])
    learned(auto, X[290:], y[290:], [1, 7, 50])
    c1 = auto._candidates[C1]
    assert not len(c1.state_["prefix_labels"]) and 0 not in auto.state_["rows_pooled"]
    assert reservoirs(c1) == reservoirs(alone_on_scaled(auto, X, y))


def test_restarted_trees_move_the_pool_and_the_rows_are_kept_first():
    """A drift's restart (each boosted candidate's buffer starts at the next event) moves the
    pool past the first event: c1 keeps its rows then, and learns on as alone."""
    X, y = stream(600)
    auto = learned(make_learner("auto"), X[:300], y[:300], [1, 7, 50])
    auto._candidates[2].restart_tree()
    assert len(auto._candidates[C1].state_["prefix_labels"])  # c4 still starts at event 0
    auto._candidates[4].restart_tree()
    assert not len(auto._candidates[C1].state_["prefix_labels"])
    learned(auto, X[300:], y[300:], [1, 7, 50])
    assert reservoirs(auto._candidates[C1]) == reservoirs(alone_on_scaled(auto, X, y))


def test_a_stored_replayed_state_round_trips():
    X, y = stream(600)
    whole = learned(make_learner("auto"), X, y, [1])
    half = learned(make_learner("auto"), X[:300], y[:300], [1])
    state = half.get_state()
    assert state["c1:positive_X"].shape[0] == 0 and len(state["c1:prefix_labels"])
    resumed = Auto.from_state(half.get_params(), state)
    scores = resumed.prequential_step(X[300:], y[300:])
    assert digest(scores) == digest(learned(make_learner("auto"), X[:300], y[:300], [1])
                                    .prequential_step(X[300:], y[300:]))  # fmt: skip
    assert reservoirs(kept_rows(resumed)) == reservoirs(kept_rows(whole))


def _flip_first_label(state):
    state["c1:prefix_labels"][0] = 1 - state["c1:prefix_labels"][0]


def _one_more_event(state):
    for key in ("c1:positive_fill", "c1:positive_seen"):
        state[key][0] += 1


def _label_past_the_events(state):
    state["c1:prefix_labels"][-1] = 1


def _labels_past_capacity(state):
    state["c1:prefix_labels"] = np.ones(3_001, dtype=np.int8)


@pytest.mark.parametrize(
    "change",
    [_flip_first_label, _one_more_event, _label_past_the_events,
     _labels_past_capacity],
)  # fmt: skip
def test_replayed_labels_that_disagree_are_refused(change):
    X, y = stream(300)
    auto = learned(make_learner("auto"), X, y, [300])
    state = auto.get_state()
    change(state)
    with pytest.raises(InvalidState) as refused:
        Auto.from_state(auto.get_params(), state)
    assert refused.value.field.startswith("c1:")


@pytest.mark.parametrize("labels", [np.ones(16, dtype=np.int8), np.zeros(1, dtype=np.int8)])
def test_a_learner_alone_refuses_replayed_labels(labels):
    """Even negatives' labels (zeros): a learner alone keeps its rows, never labels."""
    X, y = stream(100)
    model = FTRLpAUC().partial_fit(X, y)
    state = model.get_state()
    state["prefix_labels"] = labels
    with pytest.raises(InvalidState, match="prefix_labels"):
        FTRLpAUC.from_state(model.get_params(), state)
