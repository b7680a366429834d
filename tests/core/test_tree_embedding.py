"""POISE's tree-path embedding (docs/algorithms/poise.md (poise.8)-(poise.10)): the kernel
against a naive router, the tree against scikit-learn's, the path geometry, and a linear
learner made non-linear."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.tree import DecisionTreeClassifier

from core._kernels.tree_embedding import TreeArrays, embed
from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.learners.spdam import exact_minimiser
from core.metrics import pauc
from core.tree_embedding import edge_capacity, fit_tree
from tests.core.naive.tree_embedding import embed_row, path_nodes


def _ring(seed, n=3000, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[::9] = np.round(X[::9])  # ties
    y = np.where((X[:, 0] ** 2 + X[:, 1] ** 2 < 0.6) | (X[:, 2] > 1.8), 1, -1)
    return X, y


def _fit(X, y, **options):
    defaults = {"max_depth": 4, "min_samples_leaf": 5, "embedding": "full", "smote": True,
                "score_lam": 0.01, "random_state": 0}  # fmt: skip
    return fit_tree(X, y, **{**defaults, **options})


def _arrays(tree):
    keys = ("left", "right", "feature", "threshold", "leaf_label", "column", "score_w")
    return TreeArrays(*(tree[f"tree_{key}"] for key in keys))


@pytest.mark.parametrize("embedding", ["full", "frugal"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("append_score", [True, False])
@pytest.mark.parametrize("append_features", [True, False])
def test_kernel_embeds_as_the_naive_router(embedding, sparse, append_score, append_features):
    X, y = _ring(1)
    tree = _fit(X[:2000], y[:2000], embedding=embedding)
    test = X[2000:] * (np.random.default_rng(2).random(X[2000:].shape) < 0.7 if sparse else 1)
    width = (5 if append_features else 0) + 1 + edge_capacity(4, embedding)
    batch = sp.csr_matrix(test) if sparse else test
    arrays = (
        (np.empty((0, 5)), batch.indptr.astype(np.int64), batch.indices.astype(np.int64),
         batch.data) if sparse else (test, np.empty(0, np.int64), np.empty(0, np.int64),
                                     np.empty(0))
    )  # fmt: skip
    indptr, indices, data = embed(*arrays, _arrays(tree), append_score, append_features, 4)
    got = sp.csr_matrix((data, indices, indptr), shape=(len(test), width)).toarray()
    expected = np.array([embed_row(tree, x, width, append_score, append_features) for x in test])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_without_smote_the_tree_partitions_as_scikit_learns():
    X, y = _ring(3)
    tree = _fit(X, y, smote=False, max_depth=5)
    np.testing.assert_allclose(tree["tree_score_w"], exact_minimiser(X, y, 0.01), rtol=1e-12)
    augmented = np.column_stack([X, X @ tree["tree_score_w"]])
    reference = DecisionTreeClassifier(max_depth=5, min_samples_leaf=5, random_state=0)
    reference.fit(augmented, y)
    ours = np.array([path_nodes(tree, x, s)[1] for x, s in zip(X, augmented[:, -1], strict=True)])
    theirs = reference.apply(augmented)
    # the same partition of the events into leaves, with the same labels
    pairs = set(zip(ours.tolist(), theirs.tolist(), strict=True))
    assert len(pairs) == len(set(ours.tolist())) == len(set(theirs.tolist()))
    np.testing.assert_array_equal(tree["tree_leaf_label"][ours], reference.predict(augmented))


def test_path_vectors_follow_the_tree_metric():
    """Unsigned full vectors: ||t||^2 = depth of the leaf, t_a . t_b = depth of the common
    ancestor (poise.9); frugal vectors mark the left turns only (poise.10)."""
    X, y = _ring(4)
    tree = _fit(X, y)
    frugal = _fit(X, y, embedding="frugal")
    width = 5 + 1 + edge_capacity(4, "full")
    paths = []
    for x in X[:200]:
        nodes, leaf = path_nodes(tree, x, float(x @ tree["tree_score_w"]))
        t = np.abs(embed_row(tree, x, width)[6:])
        assert t.sum() == len(nodes)
        paths.append((nodes, t))
        lefts = [node for node in nodes if node in set(frugal["tree_left"].tolist())]
        t_frugal = np.abs(embed_row(frugal, x, 6 + edge_capacity(4, "frugal"))[6:])
        assert t_frugal.sum() == len(lefts)
    for (a, ta), (b, tb) in zip(paths[:-1], paths[1:], strict=True):
        common = next((k for k, (u, v) in enumerate(zip(a, b, strict=False)) if u != v),
                      min(len(a), len(b)))  # fmt: skip
        assert ta @ tb == common


def test_tree_is_frozen_after_the_first_events_and_survives_the_state():
    X, y = _ring(5)
    model = make_learner("tree_embedded", n_fit_events=500, max_depth=4)
    model.partial_fit(X[:499], y[:499])
    assert not model.tree_fitted_
    model.partial_fit(X[499:700], y[499:700])
    assert model.tree_fitted_
    tree = {k: v.copy() for k, v in model.state_.items() if k.startswith("tree_")}
    model.partial_fit(X[700:], y[700:])
    for key, value in tree.items():
        np.testing.assert_array_equal(model.state_[key], value)
    restored = type(model).from_state(model.get_params(), model.get_state())
    np.testing.assert_array_equal(restored.decision_function(X), model.decision_function(X))


def test_corrupt_tree_arrays_are_refused():
    X, y = _ring(6, n=600)
    model = make_learner("tree_embedded", n_fit_events=300, max_depth=3).fit(X, y)
    state = model.get_state()
    state["tree_left"][0] = 0  # a cycle: the root as its own child
    with pytest.raises(ValueError, match="tree_left"):
        type(model).from_state(model.get_params(), state)


@pytest.mark.parametrize("learner", ["poise", "spam", "logistic"])
def test_the_embedding_makes_a_linear_learner_rank_a_non_linear_set(learner):
    X, y = _ring(7, n=8000)
    plain = make_learner(learner).fit(X[:6000], y[:6000])
    embedded = make_learner("tree_embedded", learner=learner).fit_history(X[:6000], y[:6000])
    before = pauc(y[6000:], plain.decision_function(X[6000:]), 0.0, 0.1)
    after = pauc(y[6000:], embedded.decision_function(X[6000:]), 0.0, 0.1)
    assert after > before + 0.3


# ------------------------------------------------------------------ refit and relearn

_INNER = {"base_rate_offset": True, "solver": "ftrl"}
_TREE = {"max_depth": 4, "min_samples_leaf": 5, "embedding": "full", "smote": True,
         "score_lam": 0.01, "random_state": 0}  # fmt: skip


def _embedded(tree, X, d=5):
    """The naive router's rows ``[x, s, t(x)]``, or ``[x, 0, 0]`` before any tree."""
    width = d + 1 + edge_capacity(4, "full")
    if tree is None:
        return np.column_stack([X, np.zeros((len(X), width - d))])
    return np.array([embed_row(tree, x, width) for x in X])


def _reference_scores(X, y, n_fit, refit, relearn, cuts):
    """The refit schedule written out: the inner learner learns ``[x, 0, 0]`` until the first
    fit, rows embedded by the first tree until the refit; at a fit with relearning a fresh
    inner learner learns the buffered rows embedded by the new tree.  Returns the prequential
    scores, the inner learner and the last tree."""
    inner = make_learner("logistic", scaling="none", **_INNER)
    tree, scores = None, []
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        rows = _embedded(tree, X[start:stop])
        scores.append(inner.prequential_step(rows, y[start:stop]))
        if stop in (n_fit, refit):
            tree = _fit(X[:stop], y[:stop])
            if relearn or stop == refit:
                inner = make_learner("logistic", scaling="none", **_INNER)
                inner.partial_fit(_embedded(tree, X[:stop]), y[:stop])
    return np.concatenate(scores), inner, tree


@pytest.mark.parametrize("relearn", [False, True])
@pytest.mark.parametrize("refit", [None, 900])
def test_fits_refit_and_relearning_follow_the_schedule_written_out(relearn, refit):
    """The tree is fitted on the first ``n_fit_events`` events, refitted on the first
    ``refit_events`` (the refit always relearns: the new tree's columns are other edges), and
    a relearning fit leaves the inner learner as a fresh one that learned the buffered events
    embedded by the new tree; events after it are learned and scored as a plain stream."""
    X, y = _ring(8, n=1500)
    model = make_learner("tree_embedded", learner="logistic", params=_INNER, n_fit_events=300,
                         refit_events=refit, relearn=relearn, scaling="none",
                         **{k: v for k, v in _TREE.items() if k != "random_state"})  # fmt: skip
    batches = [0, 1, 137, 299, 300, 301, 650, 899, 900, 1200, 1500]
    served, fits = [], []
    for start, stop in zip(batches[:-1], batches[1:], strict=True):
        served.append(model.prequential_step(X[start:stop], y[start:stop]))
        fits.append(int(model.state_["tree_fitted"][0]))
    # the reference learns in the same cuts, plus one at each fit (the learner splits there)
    cuts = sorted({*batches, 300, *(() if refit is None else (refit,))})
    expected, inner, tree = _reference_scores(X, y, 300, refit, relearn, cuts)
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-12, atol=1e-12)
    for key, value in tree.items():
        np.testing.assert_array_equal(model.state_[key], value)
    np.testing.assert_allclose(model.inner_coef_, inner.coef_, rtol=1e-12, atol=1e-14)
    assert fits == ([0, 0, 0, 1, 1, 1, 1, 1, 1, 1] if refit is None
                    else [0, 0, 0, 1, 1, 1, 1, 2, 2, 2])  # fmt: skip
    assert model.state_["buffer_X"].shape == (refit or 300, 5)


def test_a_state_saved_between_the_fits_continues_bit_for_bit():
    X, y = _ring(9, n=1400)
    params = {"learner": "logistic", "params": _INNER, "n_fit_events": 300,
              "refit_events": 800, "relearn": True, "max_depth": 3}  # fmt: skip
    whole = make_learner("tree_embedded", **params)
    expected = whole.prequential_step(X, y)
    first = make_learner("tree_embedded", **params)
    head = first.prequential_step(X[:500], y[:500])
    assert int(first.state_["tree_fitted"][0]) == 1
    twin = learner_class("tree_embedded").from_state(first.get_params(), first.get_state())
    tail = twin.prequential_step(X[500:], y[500:])
    np.testing.assert_array_equal(np.concatenate([head, tail]), expected)
    assert int(twin.state_["tree_fitted"][0]) == 2


def test_refit_events_must_exceed_n_fit_events():
    with pytest.raises(ValueError, match="refit_events must be more than n_fit_events"):
        make_learner("tree_embedded", n_fit_events=500, refit_events=500).initialize(3)


def test_a_state_of_another_buffer_size_is_refused_naming_the_buffer():
    """One state format: a state whose buffer holds ``n_fit_events`` rows given with a
    ``refit_events`` (a buffer of that many rows) is refused, naming ``buffer_X``."""
    X, y = _ring(10, n=1200)
    old = make_learner("tree_embedded", learner="logistic", params=_INNER, n_fit_events=200,
                       max_depth=3)  # fmt: skip
    old.partial_fit(X[:100], y[:100])
    asked = {**old.get_params(), "refit_events": 600, "relearn": True}
    with pytest.raises(InvalidState, match="'buffer_X' has dtype float64 and shape") as caught:
        learner_class("tree_embedded").from_state(asked, old.get_state())
    assert caught.value.field == "buffer_X"


def test_fit_history_fits_once_on_a_sample_the_size_of_the_buffer():
    X, y = _ring(11, n=3000)
    model = make_learner("tree_embedded", learner="logistic", params=_INNER, n_fit_events=300,
                         refit_events=1000, max_depth=3, random_state=4)  # fmt: skip
    model.fit_history(X, y)
    assert int(model.state_["tree_fitted"][0]) == 2 and int(model.state_["buffer_fill"][0]) == 1000
    sample = np.sort(np.random.default_rng(4).choice(3000, size=1000, replace=False))
    np.testing.assert_array_equal(model.state_["buffer_X"], X[sample])
    before = {k: v.copy() for k, v in model.state_.items() if k.startswith("tree_")}
    model.partial_fit(X, y)  # frozen: no refit follows
    for key, value in before.items():
        np.testing.assert_array_equal(model.state_[key], value)


def test_a_first_fit_short_of_positives_waits_for_them_within_the_buffer():
    """Rare positives: the first 300 events hold one positive, so the fit waits (the buffer
    keeps filling) for the second, which is event 520; the tree is fitted on those 521 events,
    the inner learner relearns them, and the refit comes at 900 as planned."""
    X, y = _ring(12, n=1500)
    y[:900] = -1
    y[[40, 520, 700]] = 1
    model = make_learner("tree_embedded", learner="logistic", params=_INNER, n_fit_events=300,
                         refit_events=900, relearn=True, scaling="none",
                         **{k: v for k, v in _TREE.items() if k != "random_state"})  # fmt: skip
    batches = [0, 250, 400, 800, 1500]
    served, fits = [], []
    for start, stop in zip(batches[:-1], batches[1:], strict=True):
        served.append(model.prequential_step(X[start:stop], y[start:stop]))
        fits.append(int(model.state_["tree_fitted"][0]))
    assert fits == [0, 0, 1, 2]
    expected, inner, tree = _reference_scores(X, y, 521, 900, True, [0, 250, 400, 521, 800, 900,
                                                                      1500])  # fmt: skip
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-12, atol=1e-12)
    for key, value in tree.items():
        np.testing.assert_array_equal(model.state_[key], value)
    # one event at a time: the same
    single = make_learner("tree_embedded", **model.get_params())
    one_by_one = np.concatenate([single.prequential_step(X[i : i + 1], y[i : i + 1])
                                 for i in range(1500)])  # fmt: skip
    np.testing.assert_array_equal(one_by_one, np.concatenate(served))


def test_without_a_refit_a_buffer_short_of_positives_leaves_the_tree_unfitted():
    X, y = _ring(13, n=600)
    y[:] = -1
    y[[10, 450]] = 1
    model = make_learner("tree_embedded", learner="logistic", params=_INNER, n_fit_events=300,
                         max_depth=3).partial_fit(X, y)  # fmt: skip
    assert not model.tree_fitted_ and int(model.state_["buffer_fill"][0]) == 300


def test_restart_tree_grows_the_tree_again_on_the_events_after_it():
    """After ``restart_tree`` the current tree embeds until the next fit, which comes
    ``n_fit_events`` events later, on those events only, and relearns (a tree existed)."""
    X, y = _ring(14, n=1000)
    params = {"learner": "logistic", "params": _INNER, "n_fit_events": 300, "scaling": "none",
              **{k: v for k, v in _TREE.items() if k != "random_state"}}  # fmt: skip
    model = make_learner("tree_embedded", **params)
    twin = make_learner("tree_embedded", **params)
    model.partial_fit(X[:500], y[:500])
    twin.partial_fit(X[:500], y[:500])
    model.restart_tree()
    assert int(model.state_["tree_fitted"][0]) == 0
    # until the fit the old tree embeds and the inner learner goes on as the twin's
    np.testing.assert_array_equal(
        model.prequential_step(X[500:799], y[500:799]),
        twin.prequential_step(X[500:799], y[500:799]),
    )
    model.prequential_step(X[799:800], y[799:800])
    assert int(model.state_["tree_fitted"][0]) == 1
    tree = _fit(X[500:800], y[500:800])
    for key, value in tree.items():
        np.testing.assert_array_equal(model.state_[key], value)
    inner = make_learner("logistic", scaling="none", **_INNER)
    inner.partial_fit(_embedded(tree, X[500:800]), y[500:800])
    np.testing.assert_allclose(
        model.prequential_step(X[800:], y[800:]),
        inner.prequential_step(_embedded(tree, X[800:]), y[800:]),
        rtol=1e-12, atol=1e-12,
    )  # fmt: skip
