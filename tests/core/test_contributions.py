"""Reason codes: ``OnlineLearner.contributions`` (docs/algorithms/reasons.md), for every learner
and configuration of the suite, ``auto`` before and after its tree candidate's fit.

Each is checked against a naive computation written from the definitions, a plain loop over
candidates, features and the tree's path nodes (the raw-space weights of
``core.preprocessing.fold_scaling`` times ``x - reference``; the tree walked node by node), and
the contributions plus the remainder must give the served score to 1e-9."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from core.learners import learner_class, make_learner
from core.learners._candidates import TREE_CANDIDATE, default_candidates
from core.learners._leaf_columns import leaves_per_tree
from core.learners._tournament import mix_terms
from core.learners.boosted_embedded import BoostedEmbedded
from core.learners.tree_embedded import TreeEmbedded
from core.preprocessing import scale_batch, scaler_affine
from core.validation import as_features
from tests.core.cases import learner_cases, stream
from tests.core.naive.boosted_embedding import embed_row
from tests.core.naive.tree_embedding import path_nodes

#: ``auto`` with the default tournament's tree candidate fitted early (at 80 events) on a
#: shallow tree, so that a short stream sees it before and after the fit; and served by its
#: leader alone (``temperature=0``)
EARLY_TREE = {
    **TREE_CANDIDATE,
    "params": {**TREE_CANDIDATE["params"], "n_fit_events": 80, "refit_events": 160,
               "max_depth": 3, "min_samples_leaf": 3},
}  # fmt: skip
AUTO_CASES = {
    "early_tree": {"candidates": [*default_candidates(7, False)[:2], EARLY_TREE]},
    "early_tree_leader": {
        "candidates": [*default_candidates(7, False)[:2], EARLY_TREE],
        "temperature": 0.0,
        "evaluate_every": 30,
        "window": 60,
    },
}


def cases():
    every = [(case.values[0], case.values[1], case.id) for case in learner_cases()]
    every += [("auto", config, f"auto-{label}") for label, config in AUTO_CASES.items()]
    for name, config, case_id in every:
        for scaling in ("none", "standard", "scale", "unit_norm"):
            for sparse in (False, True):
                if sparse and (scaling == "standard" or not learner_class(name).supports_sparse):
                    continue
                try:
                    make_learner(name, scaling=scaling, **config).validate_params()
                except ValueError:
                    continue
                if name == "spdam" and scaling in ("none", "unit_norm") and config:
                    continue  # steps set by hand diverge without a scaler (test_raw_weights)
                yield pytest.param(
                    name, config, scaling, sparse, id=f"{case_id}-{scaling}-{sparse}"
                )


def rows(X, sparse):
    return as_features(sp.csr_matrix(X)) if sparse else X


def naive_scaled(learner, X):
    """Each raw event as the learner's kernels see it, feature by feature: ``(x - reference)
    / divisor`` (``x / ||x||`` for unit_norm)."""
    out = np.zeros(X.shape)
    if learner.scaling == "unit_norm":
        for i in range(X.shape[0]):
            norm = np.sqrt(sum(v * v for v in X[i]))
            out[i] = X[i] / norm if norm > 0 else X[i]
        return out
    divisors, reference = scaler_affine(learner.scaling, learner.state_)
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            out[i, j] = (X[i, j] - reference[j]) / divisors[j]
    return out


def naive_linear(learner, x):
    """``coef_j * scaled(x)_j`` one feature at a time, and the intercept."""
    coef = learner.coef_
    return np.array([coef[j] * x[j] for j in range(len(x))]), learner.intercept_


def naive_tree(learner: TreeEmbedded, x):
    """The tree candidate walked node by node: ``x``'s own weights, the score ``s`` by its
    terms, each path edge's weight to its parent's split feature (the score's by shares)."""
    own, inner = learner._own_state, learner._inner
    d = len(x)
    w, first = inner.coef_, (d if learner.append_features else 0)
    contributions = np.zeros(d)
    remainder = inner.intercept_
    terms = [own["tree_score_w"][j] * x[j] for j in range(d)]
    s = sum(terms)
    for j in range(d):
        if learner.append_features:
            contributions[j] += w[j] * x[j]
        if learner.append_score:
            contributions[j] += w[first] * terms[j]
    nodes, leaf = path_nodes(own, x, s)
    label = own["tree_leaf_label"][leaf]
    for parent, child in itertools.pairwise([0, *nodes]):
        feature, column = own["tree_feature"][parent], own["tree_column"][child]
        if column < 0:
            continue
        weight = w[first + 1 + column] * label
        if feature < d:
            contributions[feature] += weight
        elif sum(abs(t) for t in terms) > 0:
            total = sum(abs(t) for t in terms)
            for j in range(d):
                contributions[j] += weight * abs(terms[j]) / total
        else:
            remainder += weight
    return contributions, remainder


def naive_boosted(learner: BoostedEmbedded, x, raw):
    """``x``'s own inner weights per feature; the margin's and the leaves' to the remainder
    (the trees route the row as posted, ``raw``)."""
    # each tree's leaves at the columns of the installed trees' largest (_leaf_columns)
    stride = leaves_per_tree(learner, learner.state_)
    row = embed_row(learner._own_state, raw, learner.n_trees, stride,
                    learner.append_features, learner.append_margin, scaled=x)  # fmt: skip
    d = len(x) if learner.append_features else 0
    coef = learner._inner.coef_
    # before its first fit the inner learner has no column for the leaves, which are none yet
    assert not np.any(row[len(coef) :])
    terms = [coef[j] * row[j] for j in range(len(coef))]
    contributions = np.zeros(len(x))
    contributions[:d] = terms[:d]
    return contributions, learner._inner.intercept_ + sum(terms[d:])


def naive_candidate(candidate, x, raw):
    if isinstance(candidate, BoostedEmbedded):
        return naive_boosted(candidate, x, raw)
    if isinstance(candidate, TreeEmbedded):
        return naive_tree(candidate, x)
    return naive_linear(candidate, x)


def naive(learner, X):
    scaled = naive_scaled(learner, X)
    out = np.zeros(X.shape)
    remainders = np.zeros(X.shape[0])
    for i in range(X.shape[0]):
        if learner.name == "auto" and learner.temperature == 0.0:
            own = learner._own_state
            c, r = naive_candidate(learner.leader_, scaled[i], X[i])
            out[i] = own["served_scale"][0] * c
            remainders[i] = own["served_scale"][0] * r + own["served_offset"][0]
        elif learner.name == "auto":
            for candidate, factor, mean in mix_terms(learner._own_state, learner._candidates):
                c, r = naive_candidate(candidate, scaled[i], X[i])
                out[i] += factor * c
                remainders[i] += factor * (r - mean)
        else:
            out[i], remainders[i] = naive_candidate(learner, scaled[i], X[i])
    return out, remainders


def learned(name, config, scaling, sparse, n_events):
    X, y = stream(5, n=n_events, density=0.6 if sparse else 1.0)
    learner = make_learner(name, scaling=scaling, **config)
    if learner_class(name).online:
        learner.partial_fit(rows(X[: n_events // 2], sparse), y[: n_events // 2])
        learner.partial_fit(rows(X[n_events // 2 :], sparse), y[n_events // 2 :])
    else:
        learner.fit(rows(X, sparse), y)
    return learner


def check(learner, sparse):
    X, _ = stream(9, n=40, density=0.6 if sparse else 1.0)
    expected_scores = learner.decision_function(rows(X, sparse))
    contributions, remainder = learner.contributions(rows(X, sparse))
    assert contributions.shape == X.shape and remainder.shape == (X.shape[0],)
    tolerance = 1e-9 * max(1.0, np.max(np.abs(expected_scores)))
    np.testing.assert_allclose(contributions.sum(axis=1) + remainder, expected_scores,
                               rtol=0, atol=tolerance)  # fmt: skip
    naive_contributions, naive_remainder = naive(learner, X)
    np.testing.assert_allclose(contributions, naive_contributions, rtol=1e-9, atol=tolerance)
    np.testing.assert_allclose(remainder, naive_remainder, rtol=1e-9, atol=tolerance)
    if sparse:  # the same events dense give the same answer
        dense_contributions, _ = learner.contributions(X)
        np.testing.assert_allclose(dense_contributions, contributions, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, config, scaling, sparse", list(cases()))
def test_contributions_sum_to_the_score_and_match_the_naive_loop(name, config, scaling, sparse):
    learner = learned(name, config, scaling, sparse, 300)
    check(learner, sparse)


@pytest.mark.parametrize("label", sorted(AUTO_CASES))
@pytest.mark.parametrize("sparse", [False, True])
def test_auto_before_and_after_its_tree_fit(label, sparse):
    learner = learned("auto", AUTO_CASES[label], "scale", sparse, 60)
    tree = learner._candidates[2]
    assert not tree.tree_fitted_
    check(learner, sparse)
    X, y = stream(11, n=240, density=0.6 if sparse else 1.0)
    learner.partial_fit(rows(X, sparse), y)
    assert tree.tree_fitted_
    # the tree's path and score terms reach the features (not only the remainder)
    split_features = tree._own_state["tree_feature"][tree._own_state["tree_left"] >= 0]
    assert split_features.size > 0
    check(learner, sparse)


def test_the_reference_is_the_running_mean_under_standard_scaling():
    """An event at the scaler's running mean has no contribution: its score is the
    remainder."""
    learner = learned("logistic", {}, "standard", False, 300)
    mean = learner.state_["scaler_mean"].copy()
    contributions, remainder = learner.contributions(mean[None, :])
    np.testing.assert_allclose(contributions, 0.0, atol=1e-12)
    np.testing.assert_allclose(remainder, learner.decision_function(mean[None, :]), atol=1e-12)
    scaled = scale_batch("standard", learner.state_, mean[None, :], learn=False)
    np.testing.assert_allclose(scaled, 0.0, atol=1e-12)
