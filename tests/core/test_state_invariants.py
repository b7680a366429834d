"""State invariants (``core.learners._state``): every loaded state is checked by value.

Parametrised over every registered learner and configuration of ``tests/core/cases.py``, so a new
learner is covered as soon as it is registered, and fails here until it declares an invariant
for each of its state arrays.  Each array is set to out-of-range values (huge and negative
integers, NaN and infinite floats, a wrong length) and ``from_state`` must refuse it with
:class:`~core.errors.InvalidState` naming that array, before any kernel runs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from core.errors import InvalidParameter, InvalidState
from core.learners import available_learners, learner_class, make_learner
from core.learners._state import (
    MAX_COUNT,
    RNG_STATE,
    Count,
    Fraction,
    ReservoirFill,
    with_prefix,
)
from core.learners._stateful import _SCALER_INVARIANTS
from tests.core.cases import N_FEATURES, learner_cases, stream, unless_standard

ALL = learner_cases()
SCALINGS = ["standard", "scale"]


def learned(name, config, sparse=False):
    """A learner of ``name`` that has learned a stream (CSR rows when ``sparse``)."""
    X, y = stream(3, density=0.5 if sparse else 1.0)
    sparse = sparse and learner_class(name).supports_sparse
    rows = sp.csr_matrix(X) if sparse else X
    config = unless_standard(name, config, "scale") if sparse else config
    return make_learner(name, **config).partial_fit(rows, y)


def bad_values(array: np.ndarray, invariant=None) -> list:
    """Values no invariant of an array of this dtype may accept (a metric that may be NaN,
    before it is first evaluated, refuses values outside [0, 1] instead)."""
    if isinstance(invariant, Fraction):
        return [np.inf, -0.5, 1.5]
    if array.dtype.kind == "f":
        return [np.nan, np.inf, -np.inf]
    if array.dtype.kind == "i":  # the narrow tree indices (int16 / int32): their dtype's ends
        limits = np.iinfo(array.dtype)
        return [-2, 2**62 if limits.bits == 64 else limits.max, limits.min]
    return []  # uint64: the RNG state, for which every value is valid (refused: wrong dtype)


@pytest.mark.parametrize(("name", "config"), ALL)
def test_every_state_array_declares_an_invariant(name, config):
    learner = learned(name, config)
    declared = set(learner._state_invariants(N_FEATURES)) | set(_SCALER_INVARIANTS)
    declared.add("n_features")
    undeclared = sorted(set(learner.state_) - declared)
    assert not undeclared, f"learner {name!r} declares no state invariant for {undeclared}"


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize(("name", "config"), ALL)
def test_learned_states_satisfy_their_invariants(name, config, sparse):
    learner = learned(name, config, sparse)
    learner.validate_state(learner.get_state())
    for scaling in SCALINGS:
        if sparse and scaling == "standard":
            continue
        try:
            scaled = make_learner(name, **{**config, "scaling": scaling})
        except InvalidParameter:  # e.g. oam's sparse buffers refuse scaling="standard"
            continue
        X, y = stream(4, density=0.5 if sparse else 1.0)
        scaled.partial_fit(sp.csr_matrix(X) if sparse else X, y)
        scaled.validate_state(scaled.get_state())


@pytest.mark.parametrize(("name", "config"), ALL)
def test_every_array_out_of_range_is_refused_and_named(name, config):
    learner = learned(name, config)
    params = learner.get_params()
    state = learner.get_state()
    cls = learner_class(name)
    refused = 0
    for key, array in state.items():
        if key == "n_features":
            continue
        invariant = learner._state_invariants(N_FEATURES).get(key)
        for value in bad_values(array, invariant) if array.size else []:
            corrupt = {k: v.copy() for k, v in state.items()}
            corrupt[key].reshape(-1)[-1] = value
            with pytest.raises(InvalidState, match=rf"state array '{key}' holds") as info:
                cls.from_state(params, corrupt)
            assert info.value.field == key
            refused += 1
        # a growing array (core/learners/_growing.py) may be longer, up to its capacity
        growing = learner._growing_arrays().get(key)
        size = growing[1] + 1 if growing is not None and array.ndim == 1 else array.size + 1
        longer = dict(state, **{key: np.zeros(size, dtype=array.dtype)})
        with pytest.raises(InvalidState, match=rf"state array '{key}' has dtype") as info:
            cls.from_state(params, longer)
        assert info.value.field == key
        if array.dtype == np.uint64:
            as_float = dict(state, **{key: array.astype(np.float64)})
            with pytest.raises(InvalidState, match=rf"'{key}' has dtype float64"):
                cls.from_state(params, as_float)
    assert refused > 0
    # the untouched state still loads: nothing above was refused for another reason
    cls.from_state(params, state)


@pytest.mark.parametrize(("name", "config"), ALL)
def test_a_width_other_than_the_models_is_refused_before_allocating(name, config):
    learner = learned(name, config)
    state = dict(learner.get_state(), n_features=np.array([2**40], dtype=np.int64))
    with pytest.raises(InvalidState, match=r"'n_features' holds 1099511627776; expected 7"):
        learner_class(name).from_state(learner.get_params(), state, n_features=N_FEATURES)
    for width in (0, -3):
        state["n_features"] = np.array([width], dtype=np.int64)
        with pytest.raises(InvalidState, match="expected a positive integer"):
            learner_class(name).from_state(learner.get_params(), state)


@pytest.mark.parametrize("name", available_learners())
@pytest.mark.parametrize("scaling", SCALINGS)
def test_scaler_arrays_are_checked(name, scaling):
    X, y = stream(6)
    learner = make_learner(name, scaling=scaling).partial_fit(X, y)
    state = learner.get_state()
    for key in [k for k in state if k.startswith("scaler_")]:
        value = -1 if state[key].dtype.kind == "i" else np.nan
        corrupt = dict(state, **{key: state[key].copy()})
        corrupt[key].reshape(-1)[0] = value
        with pytest.raises(InvalidState, match=rf"'{key}' holds") as info:
            learner_class(name).from_state(learner.get_params(), corrupt)
        assert info.value.field == key
    if "scaler_m2" in state:  # a sum of squares cannot be negative
        corrupt = dict(state, scaler_m2=-np.abs(state["scaler_m2"]) - 1.0)
        with pytest.raises(InvalidState, match="'scaler_m2' holds -.* expected values >= 0"):
            learner_class(name).from_state(learner.get_params(), corrupt)


# ------------------------------------------------------------------------- relations
def refused(name, config, field, match, **changes):
    learner = learned(name, config)
    state = learner.get_state()
    for key, value in changes.items():
        state[key] = np.array(value, dtype=state[key].dtype).reshape(state[key].shape)
    with pytest.raises(InvalidState, match=match) as info:
        learner_class(name).from_state(learner.get_params(), state)
    assert info.value.field == field


def test_reservoir_fills_must_match_their_counts():
    # the attacks on a stored state: fills beyond the buffer, or not what the counts imply
    buffers = {"buffer_size_pos": 100, "buffer_size_neg": 100}
    refused("oam", buffers, "fill_neg", "capacity 100 .* holds exactly", fill_neg=[2**40])
    refused("oam", buffers, "fill_pos", "holds exactly", fill_pos=[0])
    refused("oam", {**buffers, "max_nnz": 7}, "fill_pos", "holds exactly", fill_pos=[101])
    refused("pmb", {"passes": 2}, "positive_fill", "holds exactly", positive_fill=[2**40])
    refused("ftrl_pauc", {}, "positive_fill", "holds exactly", positive_fill=[2**40])
    refused("ftrl_pauc", {}, "negative_fill", "holds exactly", negative_fill=[3])


def test_counts_must_be_consistent():
    refused("spam", {}, "n_seen", r"expected n_pos \+ n_neg", n_pos=[0])
    refused("spam", {}, "n_steps", r"in \[0, n_seen", n_steps=[10**6])
    refused("solam", {}, "n_pos", r"in \[0, n_seen", n_pos=[10**6])
    refused("ftrl_pauc", {}, "negative_admitted", r"\[0, negative_seen", negative_admitted=[10**6])
    refused("pmb", {}, "averaged_events", r"\[n_steps", averaged_events=[0], n_steps=[5])
    refused("svm_pauc", {"window": 60}, "window_next", "writes slot", window_fill=[3])


def test_buffer_fills_and_sketch_rows_must_fit_their_buffers():
    refused("pmb", {"buffer_size": 100}, "buffer_fill", r"in \[0, 99\]", buffer_fill=[2**40])
    refused("pmb", {"buffer_size": 100, "first_buffer_size": 16}, "buffer_fill", "an epoch is",
            buffer_fill=[99], n_steps=[0])  # fmt: skip
    refused("opauc", {"rank": 2}, "sketch_rows_pos", r"in \[0, 3\]", sketch_rows_pos=[4])
    refused("opauc", {"rank": 2}, "buffer_rows", r"in \[0, 8\]", buffer_rows=[2**40, 0])
    refused("opauc", {"rank": 2}, "buffer_indptr", "not a CSR row pointer",
            buffer_rows=[2, 0], buffer_indptr=[[0, 5, 2] + [0] * 6, [0] * 9])  # fmt: skip
    refused("opauc", {"rank": 2}, "mean_base_count", "more than the class",
            mean_base_count=[10**6, 0])  # fmt: skip
    sparse = {"max_nnz": N_FEATURES, "buffer_size_pos": 100}
    refused("oam", sparse, "buffer_pos_indices", r"in \[0, 6\]",
            buffer_pos_indices=np.full((100, N_FEATURES), 7))  # fmt: skip
    refused("oam", sparse, "buffer_pos_nnz", r"in \[0, 7\]",
            buffer_pos_nnz=np.full(100, 8))  # fmt: skip


def test_an_undeclared_array_is_a_programming_error():
    learner = learned("spam", {})
    learner._state_invariants = lambda n_features: {}  # a learner that declared nothing
    with pytest.raises(TypeError, match="no state invariant declared for 'avg_coef'"):
        learner.validate_state(learner.get_state())


def test_prefixed_invariants_compose():
    invariants = with_prefix(
        {"count": Count(), "fill": ReservoirFill(10, seen="count"), "rng": RNG_STATE}, "a:"
    )
    from core.learners._state import validate_state

    state = {
        "a:count": np.array([4]),
        "a:fill": np.array([4]),
        "a:rng": np.zeros(1, np.uint64),
    }
    validate_state(invariants, state)
    state["a:count"][0] = MAX_COUNT + 1
    with pytest.raises(InvalidState, match="'a:count' holds"):
        validate_state(invariants, state)


def test_the_refused_state_would_crash_a_kernel():
    """Why the checks exist: a state with ``fill_neg`` = 2**40, given to the kernel
    without ``from_state``, kills the process (run in a subprocess)."""
    script = textwrap.dedent(
        """
        import numpy as np
        from core.learners import make_learner
        X = np.random.default_rng(0).normal(size=(50, 5))
        learner = make_learner("oam").partial_fit(X, np.arange(50) % 2)
        learner.state_["fill_neg"][0] = 2**40  # not through from_state
        learner.partial_fit(X[:1], [1])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=120, check=False
    )
    assert result.returncode < 0 or result.returncode > 128, result  # killed by a signal
