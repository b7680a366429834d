"""``boosted_embedded``'s segment in one kernel call (core.learners._boosted_fused) learns what
the general path learns, bit for bit: the state and the pre-update scores, alone (its own rows,
a buffer that wraps and samples, fits held and installed) and inside ``auto`` (the pool's rows),
one event at a time, in batches and in ``learn_rounds`` (a call per piece, the served weights
between); and it takes the common case, leaving the rest."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import _boosted_learning, make_learner
from core.learners._boosted_fused import MOST_CUTS, fusable, learn_fused
from tests.core.boosted_helpers import SMALL_FUSED, learned_by_path


def stream(n: int, seed: int = 0, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] * X[:, 1] + 0.5 * rng.normal(size=n) > 1.0).astype(np.int64)  # ~15 % positive
    return X, y


#: the leaves' columns right after ``x`` (no margin) or after the margin (no ``x``): the
#: kernel's stride counts the columns before them
LEAVES_AFTER = [{**SMALL_FUSED, "append_margin": False}, {**SMALL_FUSED, "append_features": False}]


@pytest.mark.parametrize(
    ("name", "params", "n_events"),
    [("boosted_embedded", SMALL_FUSED, 700), ("auto", {"random_state": 0}, 2600),
     *[("boosted_embedded", params, 700) for params in LEAVES_AFTER]],
    ids=["alone", "in auto", "no margin", "no x"],
)  # fmt: skip
@pytest.mark.parametrize("sizes", [(1,), (1, 7, 30, 2)], ids=["one event", "batches"])
def test_the_fused_segment_learns_as_the_general_path(name, params, n_events, sizes, monkeypatch):
    X, y = stream(n_events)
    state, scores, taken, _ = learned_by_path(name, params, X, y, sizes, True, monkeypatch)
    general_state, general_scores, _, _ = learned_by_path(
        name, params, X, y, sizes, False, monkeypatch
    )
    # both paths ran: the common case fused, growth (and the pool's detach) the general way
    assert sum(taken) > len(taken) // 2 and not all(taken)
    np.testing.assert_array_equal(scores, general_scores)
    assert state.keys() == general_state.keys()
    for key, value in general_state.items():
        np.testing.assert_array_equal(state[key], value, err_msg=key)
    if name == "boosted_embedded":
        assert state["fits"][0] >= 5 and state["buffer_written"][0] > SMALL_FUSED["buffer_size"]


@pytest.mark.parametrize(
    ("name", "params", "n_events"),
    [("boosted_embedded", SMALL_FUSED, 900), ("auto", {"random_state": 0}, 2600)],
    ids=["alone", "in auto"],
)
@pytest.mark.parametrize("rounds", [2, 5], ids=["fused pieces", "more cuts than fused"])
def test_learn_rounds_in_fused_pieces_learn_as_the_general_path(name, params, n_events, rounds,
                                                                monkeypatch):  # fmt: skip
    X, y = stream(n_events, seed=1)
    sizes = (40,)
    state, scores, taken, served = learned_by_path(
        name, params, X, y, sizes, True, monkeypatch, rounds
    )
    general = learned_by_path(name, params, X, y, sizes, False, monkeypatch, rounds)
    if rounds < MOST_CUTS:
        assert sum(taken) > len(taken) // 2 and not all(taken)
    np.testing.assert_array_equal(scores, general[1])
    np.testing.assert_array_equal(np.concatenate(served), np.concatenate(general[3]))
    for key, value in general[0].items():
        np.testing.assert_array_equal(state[key], value, err_msg=key)


def test_the_fused_segment_leaves_what_it_does_not_take():
    """Another scaling, rows that are not C-ordered float64, the Laplace solver inside: None,
    and nothing learned."""
    X, y = stream(200)
    for params, rows in (({**SMALL_FUSED, "scaling": "scale"}, X[:1]),
                         (SMALL_FUSED, np.asfortranarray(X[:3])),
                         (SMALL_FUSED, X[:2].astype(np.float32)),
                         ({**SMALL_FUSED, "params": {"solver": "laplace"}}, X[:1])):  # fmt: skip
        model = make_learner("boosted_embedded", **params).partial_fit(X[:100], y[:100])
        before = model.get_state()
        labels = np.where(y[: len(rows)] > 0, 1, -1).astype(np.int64)
        assert not fusable(model, rows, labels, np.empty(0))
        assert not learn_fused(model, rows, labels, np.empty(0), 0, (), ((), len(labels)), [],
                               False, [])  # fmt: skip
        after = model.get_state()
        for key, value in before.items():
            np.testing.assert_array_equal(after[key], value, err_msg=key)


@pytest.mark.parametrize(
    ("name", "params", "n_events"),
    [("boosted_embedded", SMALL_FUSED, 700), ("auto", {"random_state": 0}, 2600)],
    ids=["alone", "in auto"],
)
def test_the_usual_call_at_once_learns_as_the_segment_loop(name, params, n_events, monkeypatch):
    """A call that no fit point cuts, with no fit pending, goes to the fused kernel call
    without the segment loop (``_learned_at_once``): one event at a time, it leaves the state
    and scores the loop's fused segments leave, and takes most of the calls."""
    X, y = stream(n_events, seed=2)
    at_once = _boosted_learning._learned_at_once
    taken: list[bool] = []

    def counted(*args):
        taken.append(at_once(*args))
        return taken[-1]

    def run(shortcut) -> tuple:
        monkeypatch.setattr(_boosted_learning, "_learned_at_once", shortcut)
        model = make_learner(name, **params)
        scores = [model.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(len(y))]
        monkeypatch.undo()
        return model.get_state(), np.concatenate(scores)

    state, scores = run(counted)
    loop_state, loop_scores = run(lambda *args: False)
    assert sum(taken) > len(taken) // 2 and not all(taken)
    np.testing.assert_array_equal(scores, loop_scores)
    assert state.keys() == loop_state.keys()
    for key, value in loop_state.items():
        np.testing.assert_array_equal(state[key], value, err_msg=key)
