"""The kernel parameters kept between calls (core.learners._kept_params) follow every change of
the attributes they come from: for each hyper-parameter of ``logistic``, ``ftrl_pauc`` and
``boosted_embedded`` that reaches a kept value, set after some learning, the next calls learn
what a learner built with the new value learns from the same state and events, bit for bit;
and the kept value is never part of the parameters nor of the stored state."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.learners._kept_params import KEPT


def stream(n: int, seed: int = 0, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] * X[:, 1] + X[:, 2] + 0.5 * rng.normal(size=n) > 1.0).astype(np.int64)
    return X, y


FTRL = {"solver": "ftrl", "base_rate_offset": True}
LAPLACE = {"base_rate_offset": True}
#: a random walk fast enough that the variances reach their cap, the prior variance
NOISY = {"base_rate_offset": True, "process_noise": 0.05}
COLUMNS = {"max_columns": 3, "number_prior_variance": 3.0}
PAUC = {"update_every": 200, "first_update_every": 4, "inner_steps": 5, "positive_capacity": 40,
        "negative_capacity": 80, "random_state": 1}  # fmt: skip
#: trees fitted within a few hundred events, the fused segment's case (standard scaling, FTRL)
BOOSTED = {"first_fit": 60, "refit_every": 90, "buffer_size": 120, "n_trees": 5,
           "max_leaves": 4, "min_samples_leaf": 5, "fit_delay": 24,
           "negatives_per_positive": 2.0, "scaling": "standard", "random_state": 3,
           "params": {"solver": "ftrl", "base_rate_offset": True}}  # fmt: skip

#: (learner, parameters, the attribute set, its new value, events learned before, after)
CASES = [
    ("logistic", FTRL, "alpha", 0.05, 200, 200),
    ("logistic", FTRL, "beta", 3.0, 200, 200),
    ("logistic", FTRL, "l1", 2.0, 200, 200),
    ("logistic", FTRL, "l2", 5.0, 200, 200),
    ("logistic", FTRL, "fit_intercept", False, 200, 200),
    ("logistic", FTRL, "half_life", 50.0, 200, 200),
    ("logistic", FTRL, "base_rate_offset", False, 200, 200),
    ("logistic", NOISY, "prior_variance", 3.0, 200, 200),
    ("logistic", LAPLACE, "process_noise", 1e-2, 200, 200),
    ("logistic", LAPLACE, "fit_intercept", False, 200, 200),
    ("logistic", LAPLACE, "base_rate_offset", False, 200, 200),
    ("logistic", LAPLACE, "empirical_prior_per_weight", 4.0, 10, 200),
    ("logistic", {**COLUMNS, "process_noise": 0.05}, "number_prior_variance", 0.5, 200, 200),
    ("logistic", {**COLUMNS, "process_noise": 0.05}, "prior_variance", 3.0, 200, 200),
    ("logistic", COLUMNS, "process_noise", 1e-2, 200, 200),
    ("ftrl_pauc", PAUC, "alpha", 0.05, 300, 300),
    ("ftrl_pauc", PAUC, "beta", 0.3, 300, 300),
    ("ftrl_pauc", PAUC, "lam", 0.5, 300, 300),
    ("ftrl_pauc", PAUC, "eta0", 0.1, 300, 300),
    ("ftrl_pauc", PAUC, "min_norm", 3.0, 300, 300),
    ("ftrl_pauc", PAUC, "update_every", 30, 300, 300),
    ("ftrl_pauc", PAUC, "first_update_every", 1, 300, 300),
    ("ftrl_pauc", PAUC, "inner_steps", 2, 300, 300),
    ("ftrl_pauc", PAUC, "admission", 2.0, 300, 300),
    ("ftrl_pauc", PAUC, "auc_weight", 0.0, 300, 300),
    ("ftrl_pauc", PAUC, "half_life", 100.0, 300, 300),
    ("ftrl_pauc", PAUC, "positive_capacity", 20, 300, 300),
    ("ftrl_pauc", PAUC, "negative_capacity", 30, 300, 300),
    ("boosted_embedded", BOOSTED, "scaling", "none", 200, 200),
    ("boosted_embedded", BOOSTED, "fit_delay", 0, 200, 200),
    ("boosted_embedded", BOOSTED, "buffer_size", 100, 200, 200),
    ("boosted_embedded", BOOSTED, "n_trees", 3, 200, 200),
    ("boosted_embedded", BOOSTED, "append_features", False, 200, 200),
    ("boosted_embedded", BOOSTED, "append_margin", False, 200, 200),
    ("boosted_embedded", BOOSTED, "negatives_per_positive", 0.5, 200, 200),
    ("boosted_embedded", BOOSTED, "first_fit", 30, 20, 200),
    ("boosted_embedded", BOOSTED, "refit_every", 30, 200, 200),
    ("boosted_embedded", BOOSTED, "refit_every", None, 200, 200),
    ("boosted_embedded", BOOSTED, "refit_growth", 1.1, 200, 200),
]


def _ids(case) -> str:
    name, params, attribute, value = case[:4]
    kind = {id(FTRL): "ftrl", id(LAPLACE): "laplace", id(NOISY): "laplace"}.get(id(params), "")
    kind = "columns" if "max_columns" in params else kind
    return f"{name}{'-' + kind if kind else ''}-{attribute}={value}"


def _continued(name: str, params: dict, state: dict, width: int | None):
    """A learner of ``params`` that goes on from ``state``, or from scratch at ``width`` if
    given (a new value that takes another state layout)."""
    if width is not None:
        return make_learner(name, **params).initialize(width)
    return learner_class(name).from_state(params, state)


def _learned(learner, X, y) -> tuple[np.ndarray, dict]:
    scores = np.concatenate([learner.prequential_step(X[k : k + 1], y[k : k + 1])
                             for k in range(min(len(y), 40))]  # one-event calls
                            + [learner.prequential_step(X[k : k + 16], y[k : k + 16])
                               for k in range(40, len(y), 16)])  # fmt: skip
    return scores, learner.get_state()


def _same(one: tuple[np.ndarray, dict], other: tuple[np.ndarray, dict]) -> bool:
    scores, state = one
    other_scores, other_state = other
    if not np.array_equal(scores, other_scores) or list(state) != list(other_state):
        return False
    return all(
        state[key].dtype == other_state[key].dtype and np.array_equal(state[key], other_state[key])
        for key in state
    )


@pytest.mark.parametrize(("name", "params", "attribute", "value", "before", "after"), CASES,
                         ids=[_ids(case) for case in CASES])  # fmt: skip
def test_a_parameter_set_after_learning_is_the_one_the_next_calls_use(
    name, params, attribute, value, before, after
):
    X, y = stream(before + after)
    learner = make_learner(name, **params)
    learner.prequential_step(X[:before], y[:before])
    assert KEPT in learner.__dict__  # the call read its kernel parameters from the kept value
    old = learner.get_params()
    learner.set_params(**{attribute: value})
    new, state = learner.get_params(), learner.get_state()
    try:
        reference = _continued(name, new, state, None)  # built with the new value
        width = None
    except InvalidState:  # another state layout: both go on from scratch
        width = learner.n_features_in_
        reference = _continued(name, new, state, width)
        learner.initialize(width)
    unchanged = _continued(name, old, state, width)
    rest = X[before:], y[before:]
    learned = _learned(learner, *rest)
    assert _same(learned, _learned(reference, *rest))
    assert learner._kernel_params() == reference._kernel_params()
    # the attribute reaches the kept value, and its new value changes what is learned
    assert unchanged._kernel_params() != reference._kernel_params()
    assert not _same(_learned(unchanged, *rest), learned)


def test_the_kept_value_is_neither_a_parameter_nor_stored():
    X, y = stream(300)
    learner = make_learner("boosted_embedded", **BOOSTED).partial_fit(X, y)
    inner = learner._inner
    assert KEPT in learner.__dict__ and KEPT in inner.__dict__
    for part in (learner, inner):
        assert KEPT not in part.get_params()
        assert not any(KEPT in key for key in part.get_state())
    copy = learner_class("boosted_embedded").from_state(learner.get_params(), learner.get_state())
    assert KEPT not in copy.__dict__  # built again from its own attributes when first read
    assert _same(_learned(copy, X, y), _learned(learner, X, y))


def test_a_deleted_attribute_drops_the_kept_value_too():
    X, y = stream(200)
    learner = make_learner("logistic", solver="ftrl", alpha=0.05).partial_fit(X, y)
    reference = learner_class("logistic").from_state(
        {**learner.get_params(), "alpha": 0.2}, learner.get_state()
    )
    del learner.alpha  # the class default (0.2) shows again
    assert _same(_learned(learner, X, y), _learned(reference, X, y))
