"""``boosted_embedded``: the embedding kernel against a naive router and the ensemble against
scikit-learn's own scores, the fit schedule, the fit points ``(N, N + fit_delay)`` against a
naive loop, a pending fit across a checkpoint, and fits handed to a background fitter equal to
the library's bit for bit (tests/core/test_boosted_fits.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.ensemble import HistGradientBoostingClassifier

from core.boosted_trees import ENSEMBLE_KEYS, EnsembleParams, fit_with_leaves, node_capacity
from core.errors import InvalidState
from core.learners import _leaf_columns as columns
from core.learners import make_learner
from core.learners._candidates import BOOSTED_CANDIDATE
from core.learners._fit_buffer import held_rows
from core.learners.boosted_embedded import BoostedEmbedded
from core.validation import as_features
from tests.core.boosted_helpers import SMALL_EMBEDDED, xor_stream
from tests.core.cases import states_equal
from tests.core.naive.boosted_embedding import embed_row, leaf_node, margin_row


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(("append_features", "append_margin"), [(True, True), (False, False)])
def test_kernel_embeds_as_the_naive_router(sparse, append_features, append_margin):
    X, y = xor_stream(400)
    X[np.abs(X) < 0.5] = 0.0  # zeros, so the CSR rows are sparse
    learner = make_learner("boosted_embedded", scaling="none", append_features=append_features,
                           append_margin=append_margin, **SMALL_EMBEDDED)  # fmt: skip
    learner.partial_fit(X, y)
    assert learner.fits_ >= 2
    batch = as_features(sp.csr_matrix(X[:50])) if sparse else X[:50]
    embedded = learner.transform(batch).toarray()
    stride = columns.leaves_per_tree(learner, learner.state_)  # the installed trees' leaves
    assert stride <= learner.max_leaves
    for i in range(50):
        expected = embed_row(learner._own_state, X[i], learner.n_trees, stride,
                             append_features, append_margin)  # fmt: skip
        np.testing.assert_array_equal(embedded[i], expected)


@pytest.mark.parametrize("min_samples_leaf", [5, 40, 200], ids=["deep", "shallow", "one leaf"])
def test_the_growths_leaves_are_the_routers_and_embed_the_fitted_rows_as_it(min_samples_leaf):
    """A fit gives the leaf of every fitted row in every tree (so relearning the buffer routes
    nothing): the naive router's, on rows with ties at the bin edges (few values), constant
    columns (the first one among them: it gets the root's sums only) and trees that stop short
    of ``max_leaves`` or at the root; the embedding by them is the routed one bit for bit, and
    the margin scikit-learn's booster's."""
    X, y = xor_stream(300, seed=4, d=5)
    X[:, 0] = 2.5
    X[:, 3] = -1.0
    X[:, 4] = np.round(X[:, 4])
    params = EnsembleParams(7, 6, 0.2, min_samples_leaf, 1.0, 0)
    ensemble, row_leaves = fit_with_leaves(X, y, params)
    routed = [
        [ensemble["ens_feature_or_leaf"][t, leaf_node(ensemble, t, x)] for t in range(7)] for x in X
    ]
    np.testing.assert_array_equal(row_leaves, routed)
    learner = make_learner("boosted_embedded", scaling="none", n_trees=7, max_leaves=6)
    learner.partial_fit(X[:4], y[:4])
    width = columns.whole_width(learner, 5)
    by_leaves = columns.embed_fitted(learner, X, row_leaves, ensemble, width)
    by_routing = columns.embed(learner, X, X, ensemble, width)
    for key in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(by_leaves, key), getattr(by_routing, key))
    booster = HistGradientBoostingClassifier(
        max_iter=7, max_leaf_nodes=6, min_samples_leaf=min_samples_leaf, learning_rate=0.2,
        l2_regularization=1.0, early_stopping=False, random_state=0,
    ).fit(X, y)  # fmt: skip
    np.testing.assert_allclose(by_leaves.toarray()[:, 5], booster.decision_function(X), rtol=0,
                               atol=1e-12)  # fmt: skip


@pytest.mark.parametrize(
    "learning_rate", [0.1, BOOSTED_CANDIDATE["params"]["learning_rate"]], ids=["own", "auto's"]
)
def test_the_ensemble_scores_as_scikit_learns_booster(learning_rate):
    X, y = xor_stream(600, seed=3)
    learner = make_learner(
        "boosted_embedded", scaling="none", learning_rate=learning_rate, **SMALL_EMBEDDED
    ).partial_fit(X, y)
    job = learner.fit_job()
    booster = HistGradientBoostingClassifier(
        max_iter=6, max_leaf_nodes=5, min_samples_leaf=5, learning_rate=learning_rate,
        l2_regularization=learner.l2_regularization, early_stopping=False, random_state=0,
    ).fit(job.X, job.y > 0)  # fmt: skip
    assert learner.refit()  # on the buffer the job copied
    np.testing.assert_allclose(learner.margin(X), booster.decision_function(X), rtol=0,
                               atol=1e-12)  # fmt: skip
    assert [margin_row(learner._own_state, x) for x in X[:20]] == pytest.approx(
        list(booster.decision_function(X[:20])), abs=1e-12
    )


def test_schedule_first_fit_then_doubling_up_to_refit_every_events():
    X, y = xor_stream(700)
    learner = make_learner("boosted_embedded", **{**SMALL_EMBEDDED, "refit_growth": 2.0})
    learner.partial_fit(X[:119], y[:119])
    assert learner.fits_ == 0
    learner.partial_fit(X[119:121], y[119:121])
    assert (learner.fits_, learner.fit_points_) == (1, (120, 120))
    learner.partial_fit(X[121:239], y[121:239])
    assert learner.fits_ == 1
    # the events double (120 more), then at most refit_every (150) between fits
    learner.partial_fit(X[239:700], y[239:700])
    assert learner.fits_ == 5 and learner.fit_points_ == (690, 690)
    # no refit: one fit only
    once = make_learner("boosted_embedded", **{**SMALL_EMBEDDED, "refit_every": None}).partial_fit(
        X, y
    )
    assert once.fits_ == 1


def test_schedule_grows_by_half_and_installs_l_n_events_later():
    """The default ``refit_growth`` 1.5: fits at 120, 180, 270, 405 (each half as many events
    again as the last learned), then every ``refit_every`` (150); a fit from ``N`` is installed
    ``min(fit_delay, max(fit_delay // 8, N // 16))`` events later."""
    X, y = xor_stream(700)
    learner = make_learner("boosted_embedded", **SMALL_EMBEDDED)
    points = []
    for i in range(700):
        learner.partial_fit(X[i : i + 1], y[i : i + 1])
        if learner.fits_ > len(points):
            points.append(learner.fit_points_)
    assert points == [(120, 120), (180, 180), (270, 270), (405, 405), (555, 555)]
    delayed = make_learner("boosted_embedded", **{**SMALL_EMBEDDED, "fit_delay": 80})
    delayed.partial_fit(X[:129], y[:129])
    assert delayed.fit_due() and delayed.fits_ == 0  # due at 120: L = max(80 // 8, 7) = 10
    delayed.partial_fit(X[129:130], y[129:130])
    assert delayed.fit_points_ == (120, 130)
    # the next from 180 (60 events after the last one's N): L = max(10, 180 // 16) = 11
    delayed.partial_fit(X[130:280], y[130:280])  # the next, from 270, lands at 286
    assert delayed.fit_points_ == (180, 191)


def test_a_state_held_past_its_install_point_installs_at_the_next_call():
    """A state stored with more events held than ``L(N)`` (an older rule, or a larger
    ``fit_delay``) installs its pending fit before it learns anything more: the fit points
    ``(N, N + held)``."""
    X, y = xor_stream(300)
    longer = make_learner("boosted_embedded", **{**SMALL_EMBEDDED, "fit_delay": 320}).partial_fit(
        X[:150], y[:150]
    )  # due at 120, L = 40: 30 held
    assert longer.fit_due() and int(longer.state_["pending_fill"][0]) == 30
    params = {**longer.get_params(), "fit_delay": 80}  # L(120) = 10 < 30
    shorter = BoostedEmbedded.from_state(params, longer.get_state())
    shorter.partial_fit(X[150:151], y[150:151])
    assert shorter.fits_ == 1 and shorter.fit_points_ == (120, 150)
    assert shorter.events_seen_ == 151 and not shorter.fit_due()


def test_a_fit_waits_for_two_events_of_each_class():
    X, y = xor_stream(300)
    y = np.zeros(300, dtype=np.int64)
    y[[150, 170]] = 1
    learner = make_learner("boosted_embedded", **SMALL_EMBEDDED).partial_fit(X[:200], y[:200])
    assert learner.fits_ == 1 and learner.fit_points_ == (171, 171)


def test_restart_drops_a_pending_fit_and_refits_on_later_events():
    X, y = xor_stream(600)
    learner = make_learner("boosted_embedded", **{**SMALL_EMBEDDED, "fit_delay": 20})
    learner.partial_fit(X[:125], y[:125])  # due at 120, L = max(20 // 8, 7) = 7
    assert learner.fit_due() and learner.events_seen_ == 125
    learner.restart_tree()
    assert not learner.fit_due() and learner.fits_ == 0
    learner.partial_fit(X[125:244], y[125:244])
    assert not learner.fit_due()
    learner.partial_fit(X[244:245], y[244:245])
    assert learner.fit_due()
    learner.partial_fit(X[245:260], y[245:260])  # L = min(20, 245 // 16) = 15
    assert learner.fits_ == 1 and learner.fit_points_ == (245, 260)
    # the fit learned the events after the restart only, then the 15 held ones joined
    assert learner.fit_job().X.shape[0] == 135


def test_round_trip_and_a_corrupt_tree_is_refused():
    X, y = xor_stream(400)
    learner = make_learner("boosted_embedded", **SMALL_EMBEDDED).partial_fit(X[:300], y[:300])
    restored = BoostedEmbedded.from_state(learner.get_params(), learner.get_state())
    learner.partial_fit(X[300:], y[300:])
    restored.partial_fit(X[300:], y[300:])
    states_equal(learner.get_state(), restored.get_state())
    state = learner.get_state()
    state["ens_left"][0, 0] = 0  # a child that is its own parent: routing would never end
    with pytest.raises(InvalidState, match="ens_left"):
        BoostedEmbedded.from_state(learner.get_params(), state)
    state = learner.get_state()
    state["ens_feature_or_leaf"][0, 0] = 6  # the root splits on a feature beyond the 6
    with pytest.raises(InvalidState, match="ens_feature_or_leaf"):
        BoostedEmbedded.from_state(learner.get_params(), state)
    state = learner.get_state()
    leaves = state["ens_left"][0] < 0
    state["ens_feature_or_leaf"][0, leaves] = SMALL_EMBEDDED[
        "max_leaves"
    ]  # a leaf beyond the tree's
    with pytest.raises(InvalidState, match="ens_feature_or_leaf"):
        BoostedEmbedded.from_state(learner.get_params(), state)


def test_trees_are_three_narrow_arrays_and_a_wider_or_out_of_range_array_is_refused():
    """A node is a split or a leaf: its left child (int16; the right one is the next node), its
    feature or leaf index (int32) and its threshold or leaf value (float64); a state holding
    them wider (or as format 8's six arrays) or pointing beyond the tree is refused naming
    the array, before the learner is rebuilt."""
    X, y = xor_stream(300)
    learner = make_learner("boosted_embedded", **SMALL_EMBEDDED).partial_fit(X, y)
    state = learner.get_state()
    assert [state[key].dtype for key in ENSEMBLE_KEYS] == [
        np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.float64), np.dtype(np.float64),
        np.dtype(np.int64),
    ]  # fmt: skip
    assert state["ens_trees"][0] == SMALL_EMBEDDED["n_trees"]
    for key in ("ens_left", "ens_feature_or_leaf"):
        wide = {**state, key: state[key].astype(np.int64)}
        with pytest.raises(InvalidState, match=f"{key}.*int64.*expected int"):
            BoostedEmbedded.from_state(learner.get_params(), wide)
    format_8 = {**state, "ens_right": state["ens_left"] + 1}
    with pytest.raises(InvalidState, match="ens_right"):
        BoostedEmbedded.from_state(learner.get_params(), format_8)
    for value in (
        9_999,
        2 * SMALL_EMBEDDED["max_leaves"] - 2,
    ):  # beyond the nodes; no room for a right
        beyond = learner.get_state()
        beyond["ens_left"][0, 0] = value
        with pytest.raises(InvalidState, match="ens_left"):
            BoostedEmbedded.from_state(learner.get_params(), beyond)


def padded_trees(state: dict, max_leaves: int) -> dict:
    """``state`` with its trees at ``2 * max_leaves - 1`` nodes each, as the code before the
    trees were trimmed kept them (no left child, feature 0 and value 0 past a tree's nodes)."""
    nodes = node_capacity(max_leaves)
    padded = dict(state)
    for key, fill in (("ens_left", -1), ("ens_feature_or_leaf", 0), ("ens_threshold_or_value", 0)):
        trees = state[key]
        padded[key] = np.full((trees.shape[0], nodes), fill, dtype=trees.dtype)
        padded[key][:, : trees.shape[1]] = trees
    return padded


def test_trees_hold_the_nodes_of_the_largest_tree_and_learn_as_padded_ones():
    """An installed fit keeps the nodes its largest tree has, not ``2 * max_leaves - 1`` a
    tree: a young model's trees (few rows, so fewer leaves) take less memory, and learn and
    score bit for bit as the same trees padded to the whole width, which still load; tree
    arrays of different widths, or wider than the whole width, are refused."""
    X, y = xor_stream(900, seed=4)
    params = {**SMALL_EMBEDDED, "max_leaves": 12, "min_samples_leaf": 20}
    learner = make_learner("boosted_embedded", **params).partial_fit(X[:300], y[:300])
    state = learner.get_state()
    left = state["ens_left"]
    internal = (left >= 0).sum(axis=1)  # a tree of k splits has 2k + 1 nodes
    assert left.shape == (params["n_trees"], 2 * int(internal.max()) + 1)
    assert left.shape[1] < node_capacity(params["max_leaves"])
    assert {state[key].shape for key in ("ens_feature_or_leaf", "ens_threshold_or_value")} == {
        left.shape
    }
    padded = BoostedEmbedded.from_state(learner.get_params(), padded_trees(state, 12))
    probe = xor_stream(50, seed=5)[0]
    np.testing.assert_array_equal(learner.decision_function(probe), padded.decision_function(probe))
    for start in range(300, 900, 100):  # across refits, each trimmed to its own trees
        part = slice(start, start + 100)
        np.testing.assert_array_equal(
            learner.prequential_step(X[part], y[part]), padded.prequential_step(X[part], y[part])
        )
    assert learner.fits_ >= 3
    ragged = {**state, "ens_threshold_or_value": state["ens_threshold_or_value"][:, :-1].copy()}
    with pytest.raises(InvalidState, match="nodes a tree"):
        BoostedEmbedded.from_state(learner.get_params(), ragged)
    wider = padded_trees(state, 13)  # 25 nodes a tree for trees of at most 12 leaves (23)
    with pytest.raises(InvalidState, match=r"'ens_left' has .* up to 23 along axis 1"):
        BoostedEmbedded.from_state(learner.get_params(), wider)


def test_learns_a_non_linear_ranking_a_linear_learner_cannot():
    X, y = xor_stream(6000, seed=9)
    boosted = make_learner("boosted_embedded", first_fit=1000, refit_every=2000)
    linear = make_learner("logistic")
    from core.metrics.ranking import auc

    late = slice(3000, None)
    assert auc(y[late], boosted.prequential_step(X, y)[late]) > 0.9
    assert auc(y[late], linear.prequential_step(X, y)[late]) < 0.6


def test_auto_tracking_drift_refits_its_boosted_candidate_on_post_change_events():
    """``auto`` with ``track_drift`` restarts the candidate at a detected change: its next fit
    comes ``first_fit`` events after the detection, on a buffer of post-change events only."""
    rng = np.random.default_rng(0)
    n = 12_000
    X = rng.normal(size=(n, 6))
    z = X[:, 0] * X[:, 1] + X[:, 2]
    z[n // 2 :] = -z[n // 2 :]
    y = (z + 0.3 * rng.normal(size=n) > 1.0).astype(np.int64)
    boosted = {"first_fit": 500, "refit_every": None, "buffer_size": 2000, "n_trees": 10}
    auto = make_learner("auto", track_drift=True, candidates=[
        {"learner": "logistic", "params": {}},
        {"learner": "boosted_embedded", "params": boosted},
    ]).partial_fit(X, y)  # fmt: skip
    [candidate] = [c for c in auto._candidates if c.name == "boosted_embedded"]
    assert int(candidate.state_["generation"][0]) >= 1 and candidate.fits_ == 2
    fit_from, fit_at = candidate.fit_points_
    # the buffer it was fitted on, first_fit events from the restart, all after the change
    assert fit_at == fit_from + 256 and fit_from - boosted["first_fit"] >= n // 2


def test_a_young_learner_holds_no_trees_and_no_held_rows_until_it_needs_them():
    X, y = xor_stream(300)
    params = {**SMALL_EMBEDDED, "fit_delay": 40}
    learner = make_learner("boosted_embedded", **params).partial_fit(X[:100], y[:100])
    state = learner.get_state()
    for key in ("ens_left", "ens_threshold_or_value", "pending_X", "pending_y"):
        assert state[key].shape[0] == 0, key
    learner.partial_fit(X[100:130], y[100:130])  # the fit fell due at 120: 10 rows held
    assert learner.get_state()["pending_X"].shape == (16, 6)
    learner.partial_fit(X[130:300], y[130:300])  # installed at 160: the trees grew in
    state = learner.get_state()
    assert state["ens_left"].shape == (6, 9) and state["ens_trees"][0] == 6
    # the same stream learned at once, and one event at a time, leave the same state
    at_once = make_learner("boosted_embedded", **params).partial_fit(X, y)
    one_by_one = make_learner("boosted_embedded", **params)
    for k in range(300):
        one_by_one.partial_fit(X[k : k + 1], y[k : k + 1])
    states_equal(at_once.get_state(), state)
    states_equal(one_by_one.get_state(), state)
    young = make_learner("boosted_embedded", **params).partial_fit(X[:100], y[:100])
    restored = BoostedEmbedded.from_state(young.get_params(), young.get_state())
    states_equal(restored.get_state(), young.get_state())


def test_a_state_claiming_more_trees_or_held_rows_than_it_holds_is_refused():
    X, y = xor_stream(100)
    learner = make_learner("boosted_embedded", **{**SMALL_EMBEDDED, "fit_delay": 40})
    learner.partial_fit(X, y)
    state = learner.get_state()
    state["ens_trees"][0] = 1  # no tree row: the kernels would read past the arrays
    with pytest.raises(InvalidState, match="tree rows"):
        BoostedEmbedded.from_state(learner.get_params(), state)
    state = learner.get_state()
    state["pending_fill"][0] = 3
    with pytest.raises(InvalidState, match="held for a pending fit"):
        BoostedEmbedded.from_state(learner.get_params(), state)


def posted_stream(n, seed):
    """``xor_stream`` on scales and offsets far from unit (the rows as a user posts them)."""
    X, y = xor_stream(n, seed=seed)
    return X * np.array([1000.0, 0.01, 50.0, 1.0, 3.0, 7.0]) + [5e4, -3.0, 0.0, 10.0, 0.0, 1.0], y


def test_the_trees_split_the_rows_as_posted_and_the_inner_learner_reads_x_scaled():
    """With ``scaling="standard"`` the buffer holds the rows as posted, the trees are
    scikit-learn's booster fitted on them, and the embedding routes the raw row while its ``x``
    columns are standardised by the running mean and deviation of every event seen; the
    relearning after a fit reads the buffer standardised as of the fit's event."""
    X, y = posted_stream(400, seed=5)
    learner = make_learner("boosted_embedded", scaling="standard", **SMALL_EMBEDDED)
    for batch in (slice(0, 1), slice(1, 119), slice(119, 121), slice(121, 300), slice(300, 400)):
        learner.partial_fit(X[batch], y[batch])
    job = learner.fit_job()
    posted = {tuple(row) for row in X}
    assert job.X.shape[0] == 200 and all(tuple(row) in posted for row in job.X)
    booster = HistGradientBoostingClassifier(
        max_iter=6, max_leaf_nodes=5, min_samples_leaf=5,
        l2_regularization=learner.l2_regularization, early_stopping=False, random_state=0,
    ).fit(job.X, job.y > 0)  # fmt: skip
    # a buffer not full yet: every row weighs 1
    assert (job.sample_weight == 1.0).all()
    assert learner.refit()  # on the buffer the job copied, the scaling as of event 400
    np.testing.assert_allclose(learner.margin(X), booster.decision_function(X), rtol=0,
                               atol=1e-12)  # fmt: skip
    mean, std = X.mean(axis=0), X.std(axis=0)
    own = learner._own_state
    np.testing.assert_allclose(own["fit_offsets"], mean, rtol=1e-12)
    np.testing.assert_allclose(own["fit_divisors"], std, rtol=1e-12)
    embedded = learner.transform(X[:40]).toarray()
    stride = columns.leaves_per_tree(learner, learner.state_)
    for i in range(40):
        expected = embed_row(own, X[i], learner.n_trees, stride,
                             scaled=(X[i] - mean) / std)  # fmt: skip
        np.testing.assert_allclose(embedded[i], expected, rtol=1e-9, atol=1e-12)
    # the inner learner relearned the job's rows embedded, x standardised as of the fit
    rows = [embed_row(own, x, learner.n_trees, stride, scaled=(x - mean) / std)
            for x in job.X]  # fmt: skip
    reference = learner._build_inner().partial_fit(sp.csr_matrix(np.array(rows)), job.y)
    probe = sp.csr_matrix(embedded)
    expected = reference.decision_function(probe)
    np.testing.assert_allclose(learner._inner.decision_function(probe), expected, rtol=1e-9,
                               atol=1e-12)  # fmt: skip


def test_sparse_rows_route_and_scale_as_the_same_dense_rows():
    X, y = posted_stream(400, seed=6)
    X[np.abs(X) < 2.0] = 0.0  # zeros, so the CSR rows are sparse
    dense = make_learner("boosted_embedded", scaling="scale", **SMALL_EMBEDDED)
    sparse = make_learner("boosted_embedded", scaling="scale", **SMALL_EMBEDDED)
    for batch in (slice(0, 150), slice(150, 151), slice(151, 400)):
        dense.partial_fit(X[batch], y[batch])
        sparse.partial_fit(sp.csr_matrix(X[batch]), y[batch])
    assert dense.fits_ >= 2
    states_equal(dense.get_state(), sparse.get_state())
    np.testing.assert_array_equal(
        dense.decision_function(X[:50]), sparse.decision_function(sp.csr_matrix(X[:50]))
    )


def test_auto_hands_its_boosted_candidates_the_rows_as_posted():
    """``auto`` scales the rows once for its linear candidates; the boosted ones get them as
    posted, with auto's scaling (their scaler follows the same events as auto's), from one
    copy of them in auto's pool (core.learners._row_pool)."""
    X, y = posted_stream(280, seed=7)  # the fits due at 250 are installed at 282
    auto = make_learner("auto").partial_fit(X[:120], y[:120]).partial_fit(X[120:], y[120:])
    boosted = [c for c in auto._candidates if c.name == "boosted_embedded"]
    assert len(boosted) == 2
    np.testing.assert_array_equal(auto.state_["rows_X"][:280], X)
    for candidate in boosted:
        own = candidate.state_
        assert candidate.fit_due() and int(own["buffer_fill"][0]) == 250  # due at 250
        assert own["buffer_X"].shape == own["pending_X"].shape == (0, 6)  # the pool has them
        np.testing.assert_array_equal(candidate.fit_job().X, X[:250])
        np.testing.assert_array_equal(held_rows(own, candidate._rows_link)[0], X[250:])
        for key in ("scaler_count", "scaler_mean", "scaler_m2"):
            np.testing.assert_array_equal(own[key], auto.state_[key])


def test_a_fit_scaling_that_divides_by_zero_is_refused():
    X, y = xor_stream(200)
    learner = make_learner("boosted_embedded", scaling="standard", **SMALL_EMBEDDED).partial_fit(
        X, y
    )
    state = learner.get_state()
    state["fit_divisors"][2] = 0.0
    with pytest.raises(InvalidState, match="fit_divisors"):
        BoostedEmbedded.from_state(learner.get_params(), state)
