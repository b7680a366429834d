"""Streams, comparisons and learner configurations shared by the learner tests.

``CONFIGURATIONS`` lists, per learner, the hyper-parameters whose code paths the defaults do
not reach; the contract suite (``test_learner_contract.py``) runs every check over each of them,
and ``test_naive_references.py`` runs the learners' naive references over them.  A new learner
appears in the suite with its defaults as soon as it is registered; add its other
configurations here.
"""

from __future__ import annotations

import numpy as np

from core.learners import available_learners, learner_class, make_learner

N_FEATURES = 7

CONFIGURATIONS: dict[str, dict[str, dict]] = {
    "spam": {
        "no_average": {"average": False},
        "elastic_net": {"penalty": "elastic_net", "l1": 0.05, "l2": 0.01},
        "elastic_net_last": {"penalty": "elastic_net", "l1": 0.02, "average": False},
        "inverse_warmup": {"learning_rate": "inverse", "l2": 0.5, "n_warmup": 25, "eta0": 0.3},
        # l2 large enough that the scale falls below 1e-3 and is folded into the vector
        "scale_fold": {"l2": 3.0, "eta0": 1.0},
        "scale_fold_last": {"l2": 3.0, "eta0": 1.0, "average": False},
        # half-lives short against the test streams; 3 events renormalises every 96 events
        "forgetting": {"half_life": 20.0},
        "forgetting_renormalised": {"half_life": 3, "eta0": 1.0},
        "forgetting_last": {"half_life": 40.0, "average": False},
        "forgetting_elastic_net": {"penalty": "elastic_net", "l1": 0.05, "half_life": 10.0},
    },
    "solam": {
        "no_average": {"average": False},
        "plain_solam": {"l2": 0.0, "radius": 3.0},
        # small ball and small kappa: the projections of w, a, b and alpha are all active
        "projections": {"l2": 0.1, "eta0": 0.5, "kappa": 0.5, "radius": 0.2},
        "given_radius": {"l2": 0.01, "radius": 0.5, "average": False},
        # 1 - gamma * l2 <= 0 on the first events, then the scale falls below 1e-3 and is folded
        "shrink_fold": {"l2": 3.0, "eta0": 1.0},
        "forgetting": {"half_life": 20.0},
        "forgetting_renormalised": {"half_life": 3, "radius": 0.5},
        "forgetting_last": {"half_life": 30.0, "average": False},
    },
    "oam": {
        "gradient": {"variant": "gra"},
        # buffers smaller than the stream's classes: the reservoirs replace rows
        "small_buffers": {"buffer_size_pos": 8, "buffer_size_neg": 8},
        "sparse_buffers": {"max_nnz": N_FEATURES, "buffer_size_pos": 20, "buffer_size_neg": 30},
        "gradient_sparse_buffers": {
            "variant": "gra",
            "max_nnz": N_FEATURES,
            "buffer_size_pos": 8,
            "buffer_size_neg": 8,
        },
        "forgetting": {"buffer_size_pos": 8, "buffer_size_neg": 8, "half_life": 40.0},
        "forgetting_sparse_buffers": {"max_nnz": N_FEATURES, "half_life": 100.0},
    },
    "opauc": {
        "adaoam": {"adaptive": True},
        "adaoam_ball": {"adaptive": True, "lam": 1.0},
        "sketch": {"rank": 2},
        "adaoam_sketch": {"rank": 2, "adaptive": True},
        "forgetting": {"half_life": 30.0},
        "adaoam_forgetting": {"adaptive": True, "half_life": 50.0},
    },
    "ftrl_pauc": {
        "frequent_updates": {"update_every": 20, "positive_capacity": 30, "negative_capacity": 40},
        "alpha": {"alpha": 0.05, "beta": 0.3, "update_every": 25},
        "forgetting": {
            "update_every": 20,
            "positive_capacity": 10,
            "negative_capacity": 40,
            "half_life": 60.0,
        },
    },
    "pmb": {
        "small_buffer": {"buffer_size": 40},
        "prec_at_k": {"loss": "prec_at_k", "buffer_size": 50},
        "forgetting": {"buffer_size": 20, "half_life": 60.0},
    },
    "svm_pauc": {
        "small_window": {"window": 60},
    },
    "poise": {
        # a range with a lower bound, small reservoirs that replace rows, no projection
        "range": {"alpha": 0.05, "beta": 0.3, "max_negatives": 30, "positive_capacity": 10},
        "no_projection": {"project": False, "lam": 0.05, "beta": 0.2},
        # biased reservoirs that fill, then replace; the step counter scaled after 40 events
        "forgetting": {
            "half_life": 40.0,
            "beta": 0.3,
            "max_negatives": 30,
            "positive_capacity": 10,
        },
        "last_iterate": {"average": False, "beta": 0.2},
        # the paper's game alone, and the all-negatives term against one drawn positive
        "game_only": {"auc_weight": 0.0},
        "one_drawn_positive": {"auc_weight": 3.0, "auc_positives": 1, "alpha": 0.05},
    },
    "boosted_embedded": {
        # fitted mid-stream (after 40 events), refitted every 30, on a ring of 50 events
        "refitted_logistic": {
            "first_fit": 40,
            "refit_every": 30,
            "buffer_size": 50,
            "n_trees": 4,
            "max_leaves": 4,
            "min_samples_leaf": 3,
        },
        "poise_leaves_only": {
            "learner": "poise",
            "first_fit": 30,
            "refit_every": None,
            "buffer_size": 30,
            "n_trees": 3,
            "max_leaves": 3,
            "min_samples_leaf": 2,
            "append_features": False,
            "append_margin": False,
        },
        "ftrl_pauc_margin": {
            "learner": "ftrl_pauc",
            "first_fit": 25,
            "refit_every": 60,
            "buffer_size": 40,
            "n_trees": 2,
            "max_leaves": 5,
            "min_samples_leaf": 2,
            "append_features": False,
        },
    },
    "tree_embedded": {
        # the tree is fitted mid-stream (after 80 events), frugal, around other learners
        "fitted_poise": {"n_fit_events": 80, "max_depth": 3, "min_samples_leaf": 3},
        "frugal_spam": {
            "learner": "spam",
            "n_fit_events": 60,
            "max_depth": 4,
            "embedding": "frugal",
            "min_samples_leaf": 2,
            "smote": False,
        },
        "logistic_no_score": {
            "learner": "logistic",
            "n_fit_events": 100,
            "max_depth": 2,
            "append_score": False,
            "min_samples_leaf": 5,
        },
        # the inner learner sees [s, t(x)] only
        "logistic_path_only": {
            "learner": "logistic",
            "params": {"base_rate_offset": True, "solver": "ftrl"},
            "n_fit_events": 80,
            "max_depth": 3,
            "append_features": False,
            "min_samples_leaf": 5,
        },
        # fitted after 40 events (relearning them), refitted on the first 90
        "refit_logistic": {
            "learner": "logistic",
            "params": {"base_rate_offset": True, "solver": "ftrl"},
            "n_fit_events": 40,
            "refit_events": 90,
            "relearn": True,
            "max_depth": 2,
            "min_samples_leaf": 3,
        },
        "pauc_inner": {
            "learner": "pmb",
            "params": {"buffer_size": 40},
            "pauc_range": [0.0, 0.3],
            "n_fit_events": 50,
            "max_depth": 3,
        },
    },
    "spdam": {
        # a window smaller than the test streams (the ring buffer wraps), the thesis' transform
        # and explicit step sizes
        "small_window": {"window": 50, "stream_epochs": 3},
        "thesis_transform": {"transform": "sqrt_2p", "batch_fraction": 0.3},
        "given_steps": {"sigma": 0.5, "tau": 0.2, "lam": 0.1},
    },
    "logistic": {
        # l1 large enough that some coordinates sit exactly at 0 and others leave the threshold
        "l1": {"l1": 2.0, "alpha": 0.5},
        "l2": {"l2": 3.0, "beta": 0.5},
        "elastic_net_no_intercept": {"l1": 0.5, "l2": 1.0, "fit_intercept": False},
        "large_steps": {"solver": "ftrl", "alpha": 5.0, "beta": 0.0},
        # a half-life short against the test streams: the discount is far from 1
        "forgetting": {"half_life": 20.0},
        "forgetting_l1": {"half_life": 50, "l1": 1.0, "fit_intercept": False},
        "base_rate_offset": {"base_rate_offset": True},
        # the defaults above take the Laplace solver (7 features): FTRL's own paths
        "ftrl": {"solver": "ftrl"},
        "ftrl_base_rate_offset": {"solver": "ftrl", "base_rate_offset": True},
        "laplace_no_intercept": {"solver": "laplace", "fit_intercept": False},
        # a wide prior: steps large against the scale of the stream
        "laplace_wide_prior": {"prior_variance": 30.0, "base_rate_offset": True},
        # noise large against the stream's information: the cap at the prior is reached
        "laplace_noisy": {"process_noise": 0.05, "prior_variance": 0.5},
        "laplace_fixed_weights": {"process_noise": 0.0},
        # fewer slots than the stream's 7 columns: the last columns to appear are left out
        "laplace_columns_in_use": {"max_columns": 4, "base_rate_offset": True},
        # a prior per kind of slot: the stream's numbers vary, its rounded rows repeat values
        "laplace_columns_by_kind": {"max_columns": 5, "number_prior_variance": 3.0},
        "base_rate_offset_forgetting": {"base_rate_offset": True, "half_life": 30.0, "l2": 1.0},
        # the prior's variance re-estimated early in the test streams (half an event per weight)
        "laplace_empirical_prior": {"base_rate_offset": True, "empirical_prior_per_weight": 0.5},
    },
    "auto": {
        # frequent evaluations on a short window: leader changes inside the test streams
        "fast_tournament": {
            "window": 40,
            "evaluate_every": 20,
            "first_evaluation": 10,
            "min_positives": 2,
            "min_negatives": 2,
            "patience": 1,
        },  # fmt: skip
        "three_candidates": {
            "candidates": [
                {"learner": "spam", "params": {}},
                {"learner": "logistic", "params": {"alpha": 0.5}},
                {"learner": "pmb", "params": {"buffer_size": 20}},
            ],
            "evaluate_every": 30,
            "window": 60,
        },
        # the fast candidate and the detector's arrays (its defaults fire on longer streams:
        # tests/core/test_auto_drift.py)
        "track_drift": {"track_drift": True, "window": 60, "evaluate_every": 30},
    },
}


#: Per learner, hyper-parameters it must refuse and a pattern the error message must match
#: (the contract suite also checks the error is an InvalidParameter naming one of them).
BAD_PARAMETERS: dict[str, list[tuple[dict, str]]] = {
    "spam": [
        ({"penalty": "l1"}, "penalty"),
        ({"l2": -1.0}, "l2"),
        ({"l1": float("nan")}, "l1"),
        ({"eta0": 0.0}, "eta0"),
        ({"learning_rate": "constant"}, "learning_rate"),
        ({"learning_rate": "inverse", "l2": 0.0}, "l2 > 0"),
        ({"average": "yes"}, "average"),
        ({"n_warmup": -1}, "n_warmup"),
        ({"half_life": 0.5}, "half_life"),
    ],
    "solam": [
        ({"l2": -1.0}, "l2"),
        ({"l2": 0.0}, "radius"),
        ({"radius": 0.0}, "radius"),
        ({"kappa": -1.0}, "kappa"),
        ({"eta0": float("inf")}, "eta0"),
        ({"average": 1}, "average"),
        ({"half_life": -10.0}, "half_life"),
    ],
    "oam": [
        ({"variant": "sequential"}, "variant"),
        ({"C": 0}, "C > 0"),
        ({"C": float("nan")}, "C"),
        ({"buffer_size_pos": 0}, "buffer_size_pos"),
        ({"buffer_size_neg": 2.5}, "buffer_size_neg"),
        ({"max_nnz": 0}, "max_nnz"),
        ({"max_nnz": 5, "scaling": "standard"}, "scaling='standard'"),
        ({"half_life": "week"}, "half_life"),
    ],
    "opauc": [
        ({"lam": -1.0}, "lam"),
        ({"eta": 0.0}, "eta"),
        ({"adaptive": "yes"}, "adaptive"),
        ({"delta": -1e-8}, "delta"),
        ({"rank": 0}, "rank"),
        ({"half_life": 100.0, "rank": 2}, "half_life"),
    ],
    "ftrl_pauc": [
        ({"alpha": 0.2, "beta": 0.1}, "alpha < beta"),
        ({"lam": 0.0}, "lam"),
        ({"eta0": -1.0}, "eta0"),
        ({"update_every": 0}, "update_every"),
        ({"first_update_every": 0}, "first_update_every"),
        ({"inner_steps": 0}, "inner_steps"),
        ({"positive_capacity": 0}, "positive_capacity"),
        ({"admission": 0.5}, "admission"),
        ({"min_norm": -0.1}, "min_norm"),
        ({"min_norm": 5.0, "lam": 0.1}, "min_norm"),  # W's outer radius is sqrt(2 / lam) = 4.47
        ({"auc_weight": -1.0}, "auc_weight"),
        ({"half_life": float("inf")}, "half_life"),
    ],
    "pmb": [
        ({"loss": "auc"}, "loss"),
        ({"passes": 3}, "passes"),
        ({"buffer_size": 1}, "buffer_size"),
        ({"alpha": 0.2, "beta": 0.1}, "alpha < beta"),
        ({"beta": 1.5}, "beta"),
        ({"k": 0.0}, "k"),
        ({"eta": -1.0}, "eta"),
        ({"radius": -1.0}, "radius"),
        ({"first_buffer_size": 1}, "first_buffer_size"),
        ({"auc_weight": -1.0}, "auc_weight"),
        ({"half_life": True}, "half_life"),
    ],
    "logistic": [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"beta": -1.0}, "beta"),
        ({"l1": -0.1}, "l1"),
        ({"l2": "big"}, "l2"),
        ({"fit_intercept": 1}, "fit_intercept"),
        ({"base_rate_offset": "yes"}, "base_rate_offset"),
        ({"half_life": 0}, "half_life"),
        ({"solver": "newton"}, "solver"),
        ({"prior_variance": 0.0}, "prior_variance"),
        ({"process_noise": -1e-3}, "process_noise"),
        ({"solver": "laplace", "l1": 1.0}, "l1 unset with solver='laplace'"),
        ({"solver": "laplace", "half_life": 100}, "half_life unset with solver='laplace'"),
        ({"number_prior_variance": 3.0}, "max_columns with number_prior_variance"),
        ({"max_columns": 4, "number_prior_variance": 0.0}, "number_prior_variance"),
        ({"empirical_prior_per_weight": 0.0}, "empirical_prior_per_weight"),
        ({"empirical_prior_per_weight": 2.0}, "base_rate_offset=True and max_columns=None"),
    ],
    "auto": [
        ({"window": 1}, "window"),
        ({"evaluate_every": 0}, "evaluate_every"),
        ({"window": 100, "evaluate_every": 200}, "evaluate_every <= window"),
        ({"margin": -0.1}, "margin"),
        ({"patience": 0}, "patience"),
        ({"pauc_range": [0.2, 0.1]}, "pauc_range"),
        ({"candidates": [{"learner": "nope"}]}, "candidates"),
    ],
    "svm_pauc": [
        ({"alpha": 0.3, "beta": 0.2}, "alpha < beta"),
        ({"C": 0}, "C"),
        ({"method": "cccp"}, "method"),
        ({"tol": -1.0}, "tol"),
        ({"window": 1}, "window"),
    ],
    "poise": [
        ({"alpha": 0.2, "beta": 0.1}, "alpha < beta"),
        ({"lam": 0.0}, "lam"),
        ({"project": 1}, "project"),
        ({"sd_ratio": 0.0}, "sd_ratio"),
        ({"max_negatives": 1}, "max_negatives"),
        ({"positive_capacity": 0}, "positive_capacity"),
        ({"average": "yes"}, "average"),
        ({"half_life": 0.0}, "half_life"),
        ({"auc_weight": -1.0}, "auc_weight"),
        ({"auc_positives": 0}, "auc_positives"),
    ],
    "boosted_embedded": [
        ({"learner": "nope"}, "learner"),
        ({"learner": "boosted_embedded"}, "learner"),
        ({"params": [1]}, "params"),
        ({"pauc_range": [0.3, 0.1]}, "pauc_range"),
        ({"n_trees": 0}, "n_trees"),
        ({"n_trees": 501}, "n_trees"),
        ({"max_leaves": 1}, "max_leaves"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"min_samples_leaf": 0}, "min_samples_leaf"),
        ({"l2_regularization": -1.0}, "l2_regularization"),
        ({"buffer_size": 8}, "buffer_size"),
        ({"first_fit": 3}, "first_fit"),
        ({"first_fit": 100, "buffer_size": 50}, "first_fit must be at most buffer_size"),
        ({"refit_every": 0}, "refit_every"),
        ({"append_margin": 1}, "append_margin"),
    ],
    "tree_embedded": [
        ({"learner": "nope"}, "learner"),
        ({"learner": "tree_embedded"}, "learner"),
        ({"params": {"l2": -1.0}, "learner": "spam"}, "inner learner .spam.: Expected l2"),
        ({"params": [1]}, "params"),
        ({"pauc_range": [0.3, 0.1]}, "pauc_range"),
        ({"max_depth": 0}, "max_depth"),
        ({"embedding": "sparse"}, "embedding"),
        ({"n_fit_events": 2}, "n_fit_events"),
        ({"n_fit_events": 100, "refit_events": 100}, "refit_events must be more"),
        ({"relearn": 1}, "relearn"),
        ({"score_lam": 0.0}, "score_lam"),
    ],
    "spdam": [
        ({"lam": 0.0}, "lam"),
        ({"batch_fraction": 0.0}, "batch_fraction"),
        ({"batch_fraction": 1.5}, "batch_fraction"),
        ({"sigma": -1.0}, "sigma"),
        ({"tau": float("nan")}, "tau"),
        ({"transform": "sqrt"}, "transform"),
        ({"window": 1}, "window"),
        ({"stream_epochs": 0}, "stream_epochs"),
    ],
}


def unless_standard(name: str, config: dict, scaling: str) -> dict:
    """``config`` with ``scaling`` for a learner whose default scaling is ``standard`` (``auto``,
    as the service picks for dense models) when ``config`` sets none: for the tests that feed
    sparse rows (``standard`` centres, so refuses them: ``scale``, the service's choice for
    sparse models) or that compare a prequential score with the score before the event (an
    online scaler scales the event with statistics that include it: ``none``)."""
    if "scaling" not in config and learner_class(name).scaling == "standard":
        return {**config, "scaling": scaling}
    return config


def learner_cases(*, online_only: bool = False, sparse_only: bool = False) -> list:
    """``pytest.param((name, config), id=...)`` for every registered learner with its defaults,
    then each configuration of :data:`CONFIGURATIONS`."""
    import pytest

    cases = []
    for name in available_learners():
        cls = learner_class(name)
        if (online_only and not cls.online) or (sparse_only and not cls.supports_sparse):
            continue
        cases.append(pytest.param(name, {}, id=f"{name}-defaults"))
        for label, config in CONFIGURATIONS.get(name, {}).items():
            cases.append(pytest.param(name, config, id=f"{name}-{label}"))
    return cases


def stream(seed, n=300, n_features=N_FEATURES, density=1.0):
    """Random stream with a one-class prefix, exact ties, repeated and zero rows."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(np.int64)
    y[:15] = 0  # negatives only at first: no step until a positive arrives
    direction = rng.normal(size=n_features)
    X = rng.normal(size=(n, n_features)) + 0.7 * y[:, None] * direction
    if density < 1.0:
        X[rng.random(X.shape) > density] = 0.0
    X[::13] = np.round(X[::13])  # ties
    X[7] = X[6]
    X[20] = 0.0  # zero rows
    X[21] = 0.0
    return X, y


def close(actual, expected, rtol=1e-12):
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def states_equal(left, right):
    assert left.keys() == right.keys()
    for key in left:
        assert left[key].dtype == right[key].dtype, key
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)


def shifted_gaussian_events(rng, n, shift, rate):
    """``(X, y)``: ``n`` rows of N(0, I), the positives (a fraction ``rate``, labels 0/1) moved
    by ``shift``; successive calls with one ``rng`` give a training and a test stream."""
    y = (rng.random(n) < rate).astype(int)
    return rng.normal(size=(n, len(shift))) + y[:, None] * shift, y


def naive_reference(model, naive_class, n_features):
    """``naive_class`` built from ``model``'s hyper-parameters (defaults included, so the two
    cannot drift apart): those its constructor names, after ``n_features``."""
    import inspect

    wanted = inspect.signature(naive_class).parameters
    return naive_class(n_features, **{k: v for k, v in model.get_params().items() if k in wanted})


def check_a_heavy_tailed_row(name, naive_class, min_auc):
    """The second positive of a 10 %-positive stream is 100 standard deviations out on one
    feature: the learner must match its naive reference event by event (the step cap
    included) and keep a held-out AUC above ``min_auc`` (an uncapped step flips the model)."""
    from core.metrics import auc

    def draw(seed, n):
        rng = np.random.default_rng(seed)
        y = (rng.random(n) < 0.1).astype(np.int64)
        return rng.normal(size=(n, 6)) + 0.8 * y[:, None] * np.linspace(1, -1, 6), y

    X, y = draw(1, 600)
    X[np.flatnonzero(y == 1)[1], 0] = 100.0
    model = make_learner(name)
    reference = naive_reference(model, naive_class, 6)
    close(model.prequential_step(X, y), reference.learn(X, y))
    close(model.coef_, reference.served())
    X_test, y_test = draw(99, 4000)
    assert auc(y_test, model.decision_function(X_test)) > min_auc
