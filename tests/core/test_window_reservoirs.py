"""The prequential window's since-start reservoirs against a naive Algorithm R, while they are
the window's own scores (not kept twice) and after the window first lets an event go."""

from __future__ import annotations

import numpy as np
import pytest

from core._kernels.random import reservoir_slot, seed_state
from core.metrics import PrequentialWindow


class NaiveReservoirs:
    """Vitter's Algorithm R per class, one event at a time, in full-size Python lists."""

    def __init__(self, capacity: int, random_state: int) -> None:
        self.capacity = capacity
        self.rng_state = seed_state(random_state)
        self.kept: dict[bool, list[float]] = {True: [], False: []}
        self.seen = {True: 0, False: 0}

    def offer(self, score: float, positive: bool) -> None:
        self.seen[positive] += 1
        slot = reservoir_slot(self.rng_state, self.seen[positive], self.capacity)
        if slot == len(self.kept[positive]):
            self.kept[positive].append(score)
        elif slot >= 0:
            self.kept[positive][slot] = score


@pytest.mark.parametrize(
    ("capacity", "reservoir_capacity"), [(30, 100), (30, 30), (30, 12), (200, 7)]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reservoirs_equal_a_naive_algorithm_r_after_every_batch(capacity, reservoir_capacity, seed):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=400)
    labels = (rng.random(400) < 0.3).astype(np.int64)
    window = PrequentialWindow(capacity, reservoir_capacity=reservoir_capacity, random_state=5)
    naive = NaiveReservoirs(reservoir_capacity, random_state=5)
    start = 0
    while start < scores.size:
        # batches of one event, a few, and longer than the window
        stop = min(scores.size, start + int(rng.choice([1, 1, 3, 9, capacity + 5])))
        window.update(scores[start:stop], labels[start:stop])
        for score, label in zip(scores[start:stop], labels[start:stop], strict=True):
            naive.offer(float(score), bool(label))
        start = stop
        state = window.get_state()
        assert state["reservoir_positive_scores"].tolist() == naive.kept[True]
        assert state["reservoir_negative_scores"].tolist() == naive.kept[False]
        assert state["rng_state"].tolist() == naive.rng_state.tolist()
        restored = PrequentialWindow.from_state(state)
        assert restored.summary(0.0, 0.2) == window.summary(0.0, 0.2)


def test_reservoirs_are_not_kept_apart_while_the_window_holds_every_event():
    window = PrequentialWindow(50, reservoir_capacity=40, random_state=3)
    rng = np.random.default_rng(3)
    scores, labels = rng.normal(size=51), np.tile([1, 0], 26)[:51]
    window.update(scores[:50], labels[:50])
    assert window._positive_reservoir.size == window._negative_reservoir.size == 0
    assert window.get_state()["reservoir_positive_scores"].tolist() == scores[:50:2].tolist()
    restored = PrequentialWindow.from_state(window.get_state())
    assert restored._positive_reservoir.size == restored._negative_reservoir.size == 0
    # the 51st event leaves the window's first behind: the reservoirs are kept from then on
    window.update(scores[50:], labels[50:])
    assert window._positive_reservoir[:26].tolist() == scores[::2].tolist()


def test_from_state_refuses_reservoirs_other_than_the_window_while_it_holds_every_event():
    window = PrequentialWindow(20, reservoir_capacity=20, random_state=1)
    window.update([0.5, -0.2, 0.9, 0.1], [1, 0, 1, 0])
    state = window.get_state()
    state["reservoir_positive_scores"] = state["reservoir_positive_scores"][::-1].copy()
    with pytest.raises(ValueError, match="reservoirs must hold the window's scores"):
        PrequentialWindow.from_state(state)
