"""One shared set of checks over every registered learner (River's habit; docs/architecture.md).

Each learner's own test file checks its equations against a naive reference
(``tests/core/naive/``); this file checks the contract the service relies on, identically for
all of them, with their defaults and with each configuration of ``tests/core/cases.py``.
``svm_pauc`` (a batch solver refit on a window, not an online update) takes every check except
those about online updates (a batch equals its events one at a time, the prequential score).
The checks of input handling, memory layout and large batches: test_learner_contract_inputs.py.
"""

from __future__ import annotations

import inspect
import pkgutil
import re

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import core.learners
from core.errors import InvalidParameter
from core.learners import (
    OnlineLearner,
    available_learners,
    learner_class,
    learner_modules,
    make_learner,
)
from core.learners._base import STATE_DTYPES
from core.learners._params import validate_parameters
from tests.core.cases import (
    BAD_PARAMETERS,
    N_FEATURES,
    close,
    learner_cases,
    states_equal,
    stream,
    unless_standard,
)

# svm_pauc's default range [0, 0.1] is degenerate on these small streams; it says so with a
# warning (tests/core/test_svm_pauc.py checks it), which is noise for the contract
pytestmark = pytest.mark.filterwarnings("ignore:svm_pauc. the pAUC surrogate:UserWarning")

ALL = learner_cases()
ONLINE = learner_cases(online_only=True)
NAMES = available_learners()


# ------------------------------------------------------------------------- parameters, registry
@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_declared_and_its_default_is_accepted(name):
    cls = learner_class(name)
    assert set(cls._parameter_constraints) == set(cls._param_names())
    defaults = {
        p.name: p.default
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self"
    }
    validate_parameters(cls._parameter_constraints, defaults)
    assert not inspect.isabstract(cls)


@pytest.mark.parametrize("name", NAMES)
def test_parameters_are_keyword_only_and_stored_verbatim(name):
    cls = learner_class(name)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == cls._param_names()
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters)
    assert make_learner(name).get_params() == cls.param_defaults()
    with pytest.raises(TypeError, match="positional"):
        cls(parameters[0].default)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_parameter'"):
        cls(no_such_parameter=1)
    value = object()  # any object: __init__ stores, validate_params checks
    assert getattr(cls(**{parameters[0].name: value}), parameters[0].name) is value


class _Declared(OnlineLearner):
    """A learner's parameter declarations (its abstract methods are not needed here)."""

    rate: float = 0.5
    max_iter = 7  # a new default for a shared parameter, which keeps its place


def test_declared_parameters_own_first_then_shared_with_overridden_defaults():
    assert _Declared._param_names() == ["rate", "scaling", "max_iter", "shuffle", "random_state"]
    assert _Declared.param_defaults() == {
        "rate": 0.5, "scaling": "none", "max_iter": 7, "shuffle": True, "random_state": None,
    }  # fmt: skip


def test_a_hand_written_init_and_a_mutable_default_are_refused():
    with pytest.raises(TypeError, match="defines __init__"):

        class _WithInit(OnlineLearner):
            def __init__(self, rate: float = 0.5) -> None:
                self.rate = rate

    with pytest.raises(TypeError, match="mutable default"):

        class _SharedList(OnlineLearner):
            weights: list = []


@pytest.mark.parametrize(("name", "config"), ALL)
def test_clone_and_params_round_trip(name, config):
    learner = make_learner(name, **config)
    copy = clone(learner)
    assert copy.get_params() == learner.get_params()
    assert type(copy) is type(learner)
    assert repr(copy) == repr(learner)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_and_out_of_range_parameters_are_typed_and_named(name):
    with pytest.raises(InvalidParameter, match="unknown parameter.*'no_such_parameter'") as info:
        make_learner(name, no_such_parameter=1)
    assert info.value.param == "no_such_parameter"
    with pytest.raises(InvalidParameter, match="unknown parameter") as info:
        make_learner(name).set_params(zzz=2)
    assert info.value.param == "zzz"
    for param, bad, message in [
        ("max_iter", 0, r"Expected max_iter >= 1, got: 0"),
        ("shuffle", "yes", "shuffle must be True or False"),
        ("random_state", 1.5, "random_state must be None or an integer seed"),
        ("scaling", "minmax", r"Expected scaling in \{.*'scale'\}, got: 'minmax'"),
    ]:
        with pytest.raises(InvalidParameter, match=message) as info:
            make_learner(name, **{param: bad})
        assert info.value.param == param


BAD = [
    pytest.param(name, params, message, id=f"{name}-{'-'.join(map(str, params))}-{i}")
    for name, rows in BAD_PARAMETERS.items()
    for i, (params, message) in enumerate(rows)
]


@pytest.mark.parametrize(("name", "params", "message"), BAD)
def test_bad_hyper_parameters_are_typed_and_named(name, params, message):
    with pytest.raises(InvalidParameter, match=message) as info:
        make_learner(name, **params)
    # a parameter of this learner (a cross-parameter check may name the other one of a pair:
    # solam's l2=0 needs a radius)
    # (a structured parameter names the field inside it: ``candidates[0].learner``)
    root = info.value.param.split("[")[0].split(".")[0]
    assert root in learner_class(name)._parameter_constraints


def test_every_learner_has_a_table_of_bad_parameters():
    """Every registered learner, a new one included, has its rows (docs/learners.md, "How to
    add a learner"); a table for a name the registry does not know would check nothing."""
    assert sorted(BAD_PARAMETERS) == sorted(NAMES)
    assert [name for name, rows in BAD_PARAMETERS.items() if not rows] == []


# two epochs are too few for spdam's certified tolerance: it warns so, by design
# (test_spdam.py checks its convergence); determinism is what is checked here
@pytest.mark.filterwarnings("ignore:spdam. 2 epochs ended:UserWarning")
@pytest.mark.parametrize(("name", "config"), ALL)
def test_fit_is_deterministic_and_learns(name, config):
    X, y = stream(9)
    model = make_learner(name, **config, max_iter=2, random_state=3)
    first = clone(model).fit(X, y)
    second = clone(model).fit(X, y)
    states_equal(first.get_state(), second.get_state())
    assert np.isfinite(first.coef_).all()
    assert first.get_params() == model.get_params()


@pytest.mark.parametrize(("name", "config"), ONLINE)
def test_fit_without_shuffle_is_max_iter_passes_of_partial_fit(name, config):
    X, y = stream(9, n=120)
    fitted = make_learner(name, **config, max_iter=3, shuffle=False).fit(X, y)
    streamed = make_learner(name, **config, max_iter=3, shuffle=False)
    for _ in range(3):
        streamed.partial_fit(X, y)
    states_equal(fitted.get_state(), streamed.get_state())


def test_registry_imports_every_public_learner_module():
    package_modules = {
        f"core.learners.{module.name}"
        for module in pkgutil.iter_modules(core.learners.__path__)
        if not module.name.startswith("_")
    }
    assert set(learner_modules()) == package_modules
    assert {learner_class(name).__module__ for name in NAMES} <= package_modules
    assert {"spam", "solam", "oam", "opauc", "ftrl_pauc", "pmb", "svm_pauc"} <= set(NAMES)


def test_unknown_learner_is_named():
    with pytest.raises(ValueError, match="unknown learner 'nope'; available: "):
        make_learner("nope")


# ------------------------------------------------------------------------- state
@pytest.mark.parametrize(("name", "config"), ALL)
def test_state_is_flat_contiguous_arrays_of_allowed_dtypes(name, config):
    X, y = stream(0)
    learner = make_learner(name, **config).partial_fit(X, y)
    for key, value in learner.get_state().items():
        assert isinstance(value, np.ndarray) and value.flags.c_contiguous, key
        assert value.dtype in STATE_DTYPES, (key, value.dtype)
    assert learner.n_features_in_ == N_FEATURES
    assert learner.coef_.shape == (N_FEATURES,)


@pytest.mark.parametrize(("name", "config"), ALL)
def test_state_round_trip_continues_bit_for_bit(name, config):
    X, y = stream(5)
    config = unless_standard(name, config, "scale")  # sparse rows below
    original = make_learner(name, **config).partial_fit(X[:140], y[:140])
    state = original.get_state()
    restored = learner_class(name).from_state(original.get_params(), state)
    states_equal(state, restored.get_state())
    twin = learner_class(name).from_state(original.get_params(), state)
    rows = sp.csr_matrix(X[140:]) if learner_class(name).supports_sparse else X[140:]
    first = restored.prequential_step(rows, y[140:])
    np.testing.assert_array_equal(first, twin.prequential_step(rows, y[140:]))
    np.testing.assert_array_equal(first, original.prequential_step(rows, y[140:]))
    states_equal(restored.get_state(), original.get_state())
    # the state handed out is a copy: learning on did not change it
    states_equal(state, learner_class(name).from_state(original.get_params(), state).state_)


@pytest.mark.parametrize(("name", "config"), ALL)
def test_from_state_rejects_foreign_or_truncated_state(name, config):
    X, y = stream(4)
    params = make_learner(name, **config).get_params()
    state = make_learner(name, **config).partial_fit(X, y).get_state()
    for key in sorted(set(state) - {"n_features"}):  # its own message: below
        truncated = {k: v for k, v in state.items() if k != key}
        with pytest.raises(ValueError, match=rf"missing \['{re.escape(key)}'\]"):
            learner_class(name).from_state(params, truncated)
    wrong_dtype = dict(state, n_features=state["n_features"].astype(np.float64))
    with pytest.raises(ValueError, match="state array 'n_features' has dtype float64"):
        learner_class(name).from_state(params, wrong_dtype)
    with pytest.raises(ValueError, match="state has no valid 'n_features' entry"):
        learner_class(name).from_state(
            params, {k: v for k, v in state.items() if k != "n_features"}
        )


@pytest.mark.parametrize(("name", "config"), ALL)
def test_deterministic_and_inputs_not_mutated(name, config):
    X, y = stream(5)
    X_before, y_before = X.copy(), y.copy()
    first = make_learner(name, **config).partial_fit(X, y)
    second = make_learner(name, **config).partial_fit(X, y)
    states_equal(first.get_state(), second.get_state())
    np.testing.assert_array_equal(X, X_before)
    np.testing.assert_array_equal(y, y_before)


# ------------------------------------------------------------------------- online updates
ONLINE_LAYOUTS = [
    pytest.param(*case.values, sparse, id=f"{case.id}-{'csr' if sparse else 'dense'}")
    for case in ONLINE
    for sparse in (False, True)
    if not sparse or learner_class(case.values[0]).supports_sparse
]


@pytest.mark.parametrize(("name", "config", "sparse"), ONLINE_LAYOUTS)
def test_batch_equals_one_event_at_a_time_bit_for_bit(name, config, sparse):
    X, y = stream(4, n=120, density=0.5 if sparse else 1.0)
    config = unless_standard(name, config, "scale") if sparse else config
    rows = sp.csr_matrix(X) if sparse else X
    at_once = make_learner(name, **config)
    scores = at_once.prequential_step(rows, y)
    single = make_learner(name, **config)
    one_by_one = np.concatenate(
        [single.prequential_step(rows[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )
    np.testing.assert_array_equal(scores, one_by_one)
    states_equal(at_once.get_state(), single.get_state())


@pytest.mark.parametrize(("name", "config"), ONLINE)
def test_prequential_score_is_the_served_score_before_the_event(name, config):
    X, y = stream(6, n=90)
    config = unless_standard(name, config, "none")
    model = make_learner(name, **config).partial_fit(X[:40], y[:40])
    probe = learner_class(name).from_state(model.get_params(), model.get_state())
    expected = []
    for i in range(40, 90):
        expected.append(probe.decision_function(X[i : i + 1])[0])
        probe.partial_fit(X[i : i + 1], y[i : i + 1])
    close(model.prequential_step(X[40:], y[40:]), expected)
