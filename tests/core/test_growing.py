"""Arrays that grow as they fill (core._arrays.slots_for, core/learners/_growing.py) learn
exactly what arrays of their full capacity learn: every learner with growing arrays, from its
grown state and from the same state padded to the declared capacities, learns a stream of
random batches (ties, one-class batches, single events) to the same scores, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from core._arrays import FIRST_LENGTH, grown, slots_for
from core.boosted_trees import TREE_KEYS
from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.learners._leaf_columns import fitted_width, inner_widths, whole_width

N_FEATURES = 6


def naive_slots_for(needed: int) -> int:
    """The least of 16, and of ``2**k + j * 2**k / 8`` (k >= 4, 0 <= j < 8), that is at
    least ``needed``: the lengths listed one by one."""
    lengths = [FIRST_LENGTH]
    octave = FIRST_LENGTH
    while lengths[-1] < needed:
        lengths += [octave + j * octave // 8 for j in range(1, 9)]
        octave *= 2
    return min(length for length in lengths if length >= needed)


def test_slots_for_is_the_listed_lengths_and_wastes_at_most_an_eighth():
    for needed in range(0, 20_000):
        slots = slots_for(needed)
        assert slots == naive_slots_for(needed), needed
        if needed > FIRST_LENGTH:
            assert needed <= slots <= needed * 1.125, needed


def test_grown_keeps_what_it_held_and_stops_at_the_capacity():
    rng = np.random.default_rng(1)
    array = np.zeros((0, 3))
    filled = 0
    while filled < 1000:
        more = int(rng.integers(1, 40))
        before = array
        array = grown(array, filled + more, 1000)
        if filled + more <= before.shape[0]:
            assert array is before
        else:
            assert array.shape == (min(1000, slots_for(filled + more)), 3)
            np.testing.assert_array_equal(array[: before.shape[0]], before)
            assert not array[before.shape[0] :].any()
        array[filled : filled + more] = filled + 1
        filled = min(filled + more, 1000)
    assert array.shape == (1000, 3)
    assert grown(array, 5000, 1000) is array


def stream(n_events: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Features on a coarse grid (many tied rows and scores), 30 % positives, cut into
    batches of random sizes, with runs of one-class batches."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n_events) < 0.3).astype(np.int64)
    y[400:460] = 1  # one-class batches of positives ...
    y[460:560] = 0  # ... and of negatives
    X = np.round(rng.normal(size=(n_events, N_FEATURES)) + 1.2 * y[:, None] * [1, 1, 0, 0, 0, 0])
    X[::7] = X[0]  # repeated rows: ties in every score
    sizes: list[int] = []
    while sum(sizes) < n_events:
        sizes.append(int(rng.choice([1, 1, 3, 17, 60, 250])))
    return X, y, sizes


def buffers(growing: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The growing arrays filled slot by slot (buffers, reservoirs, windows, held rows): not
    the boosted ensembles' trees, which a fit installs whole (padded trees are no trees), nor
    their inner learners' columns (tested apart: the leaves' columns come at the first fit)."""
    return {
        key: rule
        for key, rule in growing.items()
        if key.split(":")[-1] not in TREE_KEYS and "inner:" not in key
    }


def padded(state: dict[str, np.ndarray], growing: dict[str, tuple[int, int]]) -> dict:
    """``state`` with every growing buffer at its declared capacity (zeros after its slots);
    not the rows and weights of a candidate that auto's pool holds (it keeps none of its own:
    core.learners._row_pool), the pool's rows at theirs."""
    full = dict(state)
    marks = state.get("rows_pooled", np.zeros(0, dtype=np.int64))
    own = ("buffer_X", "pending_X", "buffer_w")
    pooled = {f"c{k}:{key}" for k in np.flatnonzero(marks >= 0) for key in own}
    for key, (axis, capacity) in buffers(growing).items():
        if key not in state or key in pooled:
            continue
        array = state[key]
        shape = list(array.shape)
        shape[axis] = capacity
        larger = np.zeros(shape, dtype=array.dtype)
        larger[(slice(None),) * axis + (slice(0, array.shape[axis]),)] = array
        full[key] = larger
    return full


LEARNERS = {
    # the library's and the service's default model (track_drift, its five candidates)
    "auto": {},
    "boosted_embedded": {"first_fit": 120, "refit_every": 300, "buffer_size": 2000},
    "ftrl_pauc": {"positive_capacity": 500, "negative_capacity": 300, "update_every": 50},
    # its buffer's and positive reservoir's entries (core.learners._row_store)
    "pmb": {"passes": 2, "buffer_size": 40, "random_state": 0},
}


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_grown_arrays_learn_as_full_capacity_ones(name):
    X, y, sizes = stream(1500, seed=3)
    probe = np.round(np.random.default_rng(9).normal(size=(50, N_FEATURES)))
    grown_model = make_learner(name, **LEARNERS[name]).initialize(N_FEATURES)
    growing = grown_model._growing_arrays()
    assert growing, f"{name} declares no growing array"
    cls = learner_class(name)
    full_model = cls.from_state(grown_model.get_params(), padded(grown_model.get_state(), growing))
    at_capacity = [key for key in growing if key in full_model.state_]
    assert at_capacity
    start = 0
    for size in sizes:
        part = slice(start, start + size)
        scores = grown_model.prequential_step(X[part], y[part])
        np.testing.assert_array_equal(scores, full_model.prequential_step(X[part], y[part]))
        start += size
        if start // 250 != (start - size) // 250:  # now and then, and at the end
            np.testing.assert_array_equal(
                grown_model.decision_function(probe), full_model.decision_function(probe)
            )
    smaller = 0
    for key, (axis, capacity) in buffers(growing).items():
        if key not in grown_model.state_:
            continue
        mine, reference = grown_model.state_[key], full_model.state_[key]
        length = mine.shape[axis]
        assert length <= capacity, key
        smaller += length < capacity
        held = (slice(None),) * axis + (slice(0, length),)
        np.testing.assert_array_equal(mine, reference[held], err_msg=key)
        # what the full array holds past the grown one's length was never written
        rest = (slice(None),) * axis + (slice(length, None),)
        assert not reference[rest].any(), key
    assert smaller, f"no growing array of {name} stayed below its capacity"
    for key, value in grown_model.state_.items():
        if key not in buffers(growing):
            np.testing.assert_array_equal(value, full_model.state_[key], err_msg=key)


def whole_width_inner(state: dict[str, np.ndarray], prefix: str, width: int) -> dict:
    """``state`` with the boosted learner's (under ``prefix``) inner learner at the whole
    width before its first fit, as the code before the leaves grew in kept it: zero columns
    for the leaves, the intercept's ``touched`` still last."""
    inner = prefix + "inner:"
    small = int(state[inner + "n_features"][0])
    full = dict(state, **{inner + "n_features": np.array([width])})
    for key in ("z", "n"):
        full[inner + key] = np.concatenate((state[inner + key], np.zeros(width - small)))
    if inner + "touched" in state:
        touched = np.zeros(width + 1, dtype=np.int64)
        touched[:small], touched[width] = (
            state[inner + "touched"][:small],
            state[inner + "touched"][small],
        )
        full[inner + "touched"] = touched
    return full


@pytest.mark.parametrize("name", ["auto", "boosted_embedded"])
def test_the_inner_learner_gains_the_leaves_at_the_first_fit(name):
    """Before its first fit a boosted learner's inner (FTRL) learner has no column for the
    leaves; it learns and scores as one of the whole width (a state of the code before, which
    still loads), and the first installed fit brings the whole width."""
    X, y, sizes = stream(1500, seed=5)
    # FTRL named, as auto's boosted candidates name it (on its own, boosted_embedded's inner
    # logistic would take the Laplace solver at the narrow width: it keeps the whole width)
    params = {} if name == "auto" else {**LEARNERS[name], "params": {"solver": "ftrl"}}
    model = make_learner(name, **params).partial_fit(X[:100], y[:100])
    prefixes = ["c2:", "c4:"] if name == "auto" else [""]
    state = model.get_state()
    for prefix in prefixes:
        boosted = model._candidates[int(prefix[1])] if prefix else model
        small, width = inner_widths(boosted, N_FEATURES)
        # x (when the candidate reads it: not auto's slow boosted one) and the margin
        assert small == N_FEATURES * boosted.append_features + 1 < width
        assert state[prefix + "inner:z"].shape == (small,) and boosted.fits_ == 0
        state = whole_width_inner(state, prefix, width)
    whole = learner_class(name).from_state(model.get_params(), state)
    start = 100
    for size in sizes:
        if start >= len(y):
            break
        part = slice(start, start + size)
        np.testing.assert_array_equal(
            model.prequential_step(X[part], y[part]), whole.prequential_step(X[part], y[part])
        )
        start += size
    np.testing.assert_array_equal(model.decision_function(X), whole.decision_function(X))
    for prefix in prefixes:
        boosted = model._candidates[int(prefix[1])] if prefix else model
        assert boosted.fits_ > 0
        # the leaves of the installed trees' largest (at most max_leaves a tree)
        width = fitted_width(boosted, N_FEATURES, model.state_[prefix + "ens_left"])
        assert small < width <= whole_width(boosted, N_FEATURES)
        assert model.state_[prefix + "inner:z"].shape == (width,)
    for key, value in model.state_.items():
        np.testing.assert_array_equal(value, whole.state_[key], err_msg=key)
    bad = {**model.get_state()}
    prefix = prefixes[0]
    bad[prefix + "inner:n_features"] = np.array([N_FEATURES + 1])  # too narrow after a fit
    with pytest.raises(InvalidState) as caught:
        learner_class(name).from_state(model.get_params(), bad)
    assert caught.value.field == prefix + "inner:n_features"


@pytest.mark.parametrize("name", ["ftrl_pauc", "pmb", "auto"])
def test_a_refused_batch_leaves_the_arrays_it_grew_as_they_were(name):
    """A large dense batch is checked and learned in blocks (core.learners._base.BLOCK_BYTES):
    a NaN in a late block, after earlier blocks grew arrays, puts the saved state back whole,
    shapes and values."""
    from core.errors import InvalidFeatures

    rng = np.random.default_rng(4)
    y = (rng.random(120_000) < 0.3).astype(np.int64)
    X = rng.normal(size=(120_000, 12)) + y[:, None]
    model = make_learner(name).partial_fit(X[:20], y[:20])
    saved = model.get_state()
    X[-1, 3] = np.nan
    with pytest.raises(InvalidFeatures, match="NaN"):
        model.partial_fit(X, y)
    assert model.state_.keys() == saved.keys()
    for key, value in saved.items():
        np.testing.assert_array_equal(model.state_[key], value, err_msg=key)
    probe = X[:50]
    fresh = learner_class(name).from_state(model.get_params(), saved)
    np.testing.assert_array_equal(model.decision_function(probe), fresh.decision_function(probe))
