"""``auto``'s pool of rows as posted (core.learners._row_pool): its boosted candidates keep the
buffers and held rows that the same learner alone keeps (whose buffer is the naive loop's:
tests/core/test_fit_buffer.py), from one copy while they are pooled; they leave it when their
buffer wraps, and a restarted buffer starts at the next event; the state is the same whatever
the batching, and a pool that does not agree with its candidates is refused on load."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.learners._candidates import FAST_TREE_CANDIDATE
from core.learners._fit_buffer import buffered, held_rows
from core.learners._row_pool import pooled_rows
from core.learners.boosted_embedded import BoostedEmbedded
from tests.core.cases import states_equal

POOLED = (2, 4)  # the default tournament's boosted candidates (buffers of 8,000 and 2,000)
#: the fast boosted candidate's buffer: it leaves the pool when that wraps
FAST_ROWS = FAST_TREE_CANDIDATE["params"]["buffer_size"]


def rare_stream(n, seed=0, rate=0.05, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 100.0, 0.01, 3.0, 1.0] + [0.0, 5e3, 0.0, 1.0, -2.0]
    y = np.where(rng.random(n) < rate, 1, -1)
    X[y > 0, 0] += 1.5
    return X, y


def flipping(n, change, seed=11):
    """7 % positives from weights that flip sign on half the features at ``change``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    weights = np.array([1.2, -0.8, 1.0, 0.6, -1.2, 0.9, 0.5, -0.7])
    flipped = weights * np.array([-1, 1, -1, 1, -1, 1, -1, 1])
    logits = np.where(np.arange(n) < change, X @ weights, X @ flipped) - 3.2
    return X, np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-logits)), 1, -1)


def alone(auto, k):
    """The candidate's learner alone, with its parameters (it keeps its own rows)."""
    candidate = auto._candidates[k]
    return BoostedEmbedded(**candidate.get_params()).initialize(auto.n_features_in_)


def kept(learner, link=None):
    """The buffer's rows, labels and weights, oldest first, and the held rows and labels."""
    return (*buffered(learner._own_state, learner.buffer_size, link),
            *held_rows(learner._own_state, link))  # fmt: skip


def test_the_pooled_candidates_keep_what_they_keep_alone():
    """After every batch, each boosted candidate's buffer and held rows are those of its
    learner fed the same rows alone, its other arrays the same; the pool holds each row once
    while both are pooled; the fast one's buffer (2,000 rows) leaves the pool when it wraps, the
    other stays."""
    X, y = rare_stream(4_700)
    auto = make_learner("auto")
    twins, start = {}, 0
    for size in (1, 3, 246, 50, 7, 900, 1, 2500, 380, 612):
        auto.partial_fit(X[start : start + size], y[start : start + size])
        twins = twins or {k: alone(auto, k) for k in POOLED}
        for k in POOLED:  # the twins started at the first batch: feed them it too
            twins[k].partial_fit(X[start : start + size], y[start : start + size])
        start += size
        for k in POOLED:
            candidate, twin = auto._candidates[k], twins[k]
            for got, want in zip(kept(candidate, candidate._rows_link), kept(twin), strict=True):
                np.testing.assert_array_equal(got, want)
            mine, theirs = candidate.state_, twin.state_
            for key in set(mine) - {"buffer_X", "pending_X", "buffer_w"}:
                np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
            if pooled_rows(candidate._rows_link):  # no weights of its own: 1 where written
                assert len(mine["buffer_w"]) == 0
                np.testing.assert_array_equal(theirs["buffer_w"], theirs["buffer_y"] != 0)
            else:
                np.testing.assert_array_equal(mine["buffer_w"], theirs["buffer_w"])
        pooled = auto.state_["rows_pooled"]
        if start <= FAST_ROWS:  # both pooled from event 0: the pool holds every event once
            assert pooled[list(POOLED)].tolist() == [0, 0]
            np.testing.assert_array_equal(auto.state_["rows_X"][:start], X[:start])
            assert auto.state_["c2:buffer_X"].shape[0] == auto.state_["c4:buffer_X"].shape[0] == 0
    # the fast candidate's buffer wrapped: it keeps its own rows; the other still pooled
    assert pooled.tolist() == [-1, -1, 0, -1, -1]
    assert auto.state_["c4:buffer_X"].shape == (FAST_ROWS, 5)
    assert int(auto.state_["rows_fill"][0]) == start


def test_a_restarted_buffer_starts_at_the_next_event_and_batching_changes_nothing():
    """A change in the stream restarts the boosted candidates' buffers (track_drift): the pool
    drops the rows before; the state is the same bit for bit whatever the batches, and a
    state saved in between continues bit for bit."""
    X, y = flipping(9_000, 3_000)
    whole = make_learner("auto")
    expected = whole.prequential_step(X, y)
    assert whole.state_["drift:counters"][2] >= 1  # a change was found
    assert int(whole.state_["rows_from"][0]) > 0  # the rows before the restart were dropped
    assert whole.state_["rows_pooled"][2] == whole.state_["rows_from"][0]
    uneven, got, start = make_learner("auto"), [], 0
    for size in [1, 499, 37, 2000, 3, 1460, 1, 4999]:
        if start == 4_000:  # a state saved in between
            uneven = learner_class("auto").from_state(uneven.get_params(), uneven.get_state())
        got.append(uneven.prequential_step(X[start : start + size], y[start : start + size]))
        start += size
    np.testing.assert_array_equal(np.concatenate(got), expected)
    states_equal(whole.get_state(), uneven.get_state())


@pytest.fixture(scope="module")
def saved():
    X, y = rare_stream(300)
    model = make_learner("auto").partial_fit(X, y)
    return model.get_params(), model.get_state()


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("rows_pooled", {"rows_pooled": np.array([-1, -1, 5, -1, 0])}),  # starts after the pool
        ("rows_pooled", {"rows_pooled": np.array([0, -1, 0, -1, 0])}),  # a linear candidate
        ("rows_pooled", {"rows_pooled": np.array([-1, -1, 0, -1, 0, 0])}),  # another length
        ("rows_fill", {"rows_fill": np.array([400])}),  # more rows than it holds
        ("rows_pooled", {"rows_fill": np.array([299])}),  # fewer events than the candidates
        ("rows_from", {"rows_from": np.array([7])}),  # the candidates start before it
        ("c2:buffer_y", {"c2:buffer_y": np.zeros(257, dtype=np.int8)}),  # not a grown length
        ("c4:pending_y", {"c4:pending_y": np.zeros(65, dtype=np.int8)}),
        ("c2:buffer_X", {"c2:buffer_X": np.ones((256, 5))}),  # rows of its own while pooled
        ("c4:buffer_w", {"c4:buffer_w": np.ones(320)}),  # weights of its own while pooled
        ("rows_X", {"rows_X": np.zeros((8_257, 5))}),  # beyond the capacity
        ("rows_X", {"rows_X": np.zeros((320, 4))}),  # another width
        ("rows_X", {"rows_X": np.full((320, 5), np.nan)}),
        ("rows_fill", {"rows_pooled": np.full(5, -1)}),  # rows that no candidate holds
    ],
)
def test_a_pool_that_disagrees_with_its_candidates_is_refused(saved, field, change):
    params, state = saved
    with pytest.raises(InvalidState) as caught:
        learner_class("auto").from_state(params, {**state, **change})
    assert caught.value.field == field


def test_the_pooled_rows_are_checked_as_the_candidate_s_own():
    """A pooled candidate's rows are its buffer's for its own checks: a fill beyond its labels
    is refused naming the candidate's array.  After 270 events the precise candidate's fit
    from event 250 is pending: 250 rows in its buffer (256 labels), 20 held for the fit."""
    X, y = rare_stream(270)
    model = make_learner("auto").partial_fit(X, y)
    params, state = model.get_params(), model.get_state()
    assert state["c2:pending"][0] == 1 and state["c2:pending_fill"][0] == 20
    # the pool still holds every event the candidate says it holds: only its own check sees it
    broken = {**state, "c2:buffer_fill": np.array([270]), "c2:pending_fill": np.array([0])}
    with pytest.raises(InvalidState) as caught:
        learner_class("auto").from_state(params, broken)
    assert caught.value.field == "c2:buffer_fill"
    twin = learner_class("auto").from_state(params, state)
    assert twin.state_["rows_X"].shape == (288, 5)  # 270 rows once, for both candidates
