"""A composite learner's ``state_`` (core.learners._composed) is the flat dict of its own arrays
and its parts' under their prefixes, the same array objects, after every batch (a part may
swap an array: growth, a packed buffer); the prefixed names are one copy for every model of a
kind (issue 36: a cached model keeps no list of them nor of its arrays besides the view)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from core.learners import make_learner
from core.learners._composed import ComposedState


def naive_flat(learner) -> dict[str, np.ndarray]:
    """The flat state, walked from the parts: a composite's own arrays, then each part's under
    its prefix (a composite part's own flat state, recursively)."""
    if not isinstance(learner, ComposedState):
        return dict(learner.state_)
    flat = dict(learner._own_state)
    for prefix, part in learner._parts():
        flat.update({prefix + key: value for key, value in naive_flat(part).items()})
    return flat


def assert_view_is_parts(learner) -> None:
    view, expected = learner.state_, naive_flat(learner)
    assert list(view) == list(expected)
    for key, value in expected.items():
        assert view[key] is value, key


def stream(n, seed):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 4)), 1)
    y = np.where(X[:, 0] + rng.normal(size=n) > 0.8, 1, 0)
    return X, y


@pytest.mark.parametrize("name", ["auto", "tree_embedded"])
def test_the_view_shows_the_parts_arrays_after_every_batch(name):
    learner = make_learner(name)
    X, y = stream(700, 3)
    learner.partial_fit(X[:1], y[:1])
    assert_view_is_parts(learner)
    for start, stop in ((1, 2), (2, 40), (40, 41), (41, 400), (400, 700)):
        learner.partial_fit(X[start:stop], y[start:stop])  # growing arrays are swapped
        assert_view_is_parts(learner)
        assert_view_is_parts(learner)  # read twice: kept as it is


def test_an_array_swapped_in_a_part_shows_in_the_view():
    learner = make_learner("auto")
    X, y = stream(50, 4)
    learner.partial_fit(X, y)
    prefix, part = learner._parts()[0]
    key = next(iter(part.state_))
    replacement = part.state_[key].copy()
    part.state_[key] = replacement
    learner._refresh_view()
    assert learner.state_[prefix + key] is replacement
    assert_view_is_parts(learner)


def test_the_arrays_a_batch_swaps_out_are_freed():
    """A view that may be stale holds no array: the arrays the batches swapped out (grown
    buffers' smaller copies, the trees an install replaces) are freed at once, not kept by the
    view built before them until it is next read (issue 36: a quarter of a cached default
    model's memory).  The parts' own views are built at the start and at each fit."""
    learner = make_learner("auto")
    X, y = stream(700, 6)
    learner.partial_fit(X[:40], y[:40])
    first = {key: weakref.ref(value) for key, value in learner.state_.items()}
    for start in range(40, 700, 60):
        learner.partial_fit(X[start : start + 60], y[start : start + 60])
    gc.collect()
    now = naive_flat(learner)
    swapped = [key for key, ref in first.items() if now[key] is not ref()]
    assert any(key.endswith("ens_threshold_or_value") for key in swapped)  # a fit installed trees
    assert any(key.endswith("buffer_y") for key in swapped)  # a buffer grew
    assert [key for key in swapped if first[key]() is not None] == []
    assert_view_is_parts(learner)


def test_models_of_a_kind_share_the_prefixed_names():
    X, y = stream(300, 5)
    first, second = make_learner("auto"), make_learner("auto")
    first.partial_fit(X, y)
    second.partial_fit(X[:120], y[:120])
    second.partial_fit(X[120:], y[120:])
    # a model loaded from a stored state: its names decoded anew (not the literals' objects)
    stored = {"".join(list(key)): value.copy() for key, value in first.state_.items()}
    third = type(first).from_state(first.get_params(), stored)
    shared = {name: name for name in first.state_}
    for other in (second, third):
        assert list(other.state_) == list(first.state_)
        for name in other.state_:
            assert shared[name] is name  # the same string object: one copy for all
