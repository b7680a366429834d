"""The fit buffer of ``boosted_embedded`` against its naive reference (every positive kept,
the negatives sampled once full, weights the inverse of the rate), its arrays grown as it
fills and checked on load, and the fit weighing its rows; the other arrays that grow as they
fill (ftrl_pauc's reservoirs, auto's window) change nothing of what is learned."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.ensemble import HistGradientBoostingClassifier

from core.boosted_trees import EnsembleParams, bin_features, fit_ensemble
from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.learners._fit_buffer import buffered as buffer_contents
from core.learners.boosted_embedded import BoostedEmbedded
from core.validation import as_features
from tests.core.naive.boosted_embedding import margin_row
from tests.core.naive.fit_buffer import FitBuffer, weighted_edges

SMALL = {"first_fit": 120, "refit_every": None, "buffer_size": 200, "n_trees": 4,
         "max_leaves": 4, "min_samples_leaf": 5, "scaling": "none"}  # fmt: skip


def rare_stream(n, rate=0.03, seed=0, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(rng.random(n) < rate, 1, -1)
    X[y > 0, 0] += 1.5
    return X, y


def buffered(model):
    return buffer_contents(model._own_state, model.buffer_size)


@pytest.mark.parametrize("batch", [1, 37, 5000])
@pytest.mark.parametrize("sparse", [False, True])
def test_the_buffer_is_the_naive_loops(batch, sparse):
    """Rows, labels and weights, oldest first, as the plain loop keeps them, whatever the
    batches (the draws are one per negative offered to a full buffer, in order)."""
    X, y = rare_stream(3000)
    model = BoostedEmbedded(**SMALL, negatives_per_positive=4.0, random_state=7)
    reference = FitBuffer(200, 4.0, seed=7)
    for start in range(0, len(y), batch):
        part = X[start : start + batch]
        model.partial_fit(as_features(sp.csr_matrix(part)) if sparse else part,
                          y[start : start + batch])  # fmt: skip
        for row, label in zip(part, y[start : start + batch], strict=True):
            reference.offer(row, label)
    rows, labels, weights = buffered(model)
    want_rows, want_labels, want_weights = reference.arrays()
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(weights, want_weights)
    # a positive for about four negatives kept once full: the 200 rows span many more events
    # than the last 200, and hold several times their positives
    assert int((labels > 0).sum()) > 3 * int((y[-200:] > 0).sum()) > 0
    assert weights[labels > 0].tolist() == [1.0] * int((labels > 0).sum())
    assert (weights[labels <= 0] >= 1.0).all() and weights.max() > 2.0


def test_a_stream_with_many_positives_keeps_the_last_events():
    """When positives are frequent enough the rate is 1: the ring of the last events."""
    X, y = rare_stream(1000, rate=0.4)
    model = BoostedEmbedded(**SMALL).partial_fit(X, y)
    rows, labels, weights = buffered(model)
    np.testing.assert_array_equal(rows, X[-200:])
    np.testing.assert_array_equal(labels, y[-200:])
    assert (weights == 1.0).all()


def test_the_buffer_grows_as_it_fills_and_is_checked_on_load():
    X, y = rare_stream(300, rate=0.3)
    # fit_delay 0: no events held apart for a pending fit, every one enters the buffer
    model = BoostedEmbedded(**{**SMALL, "buffer_size": 8000, "fit_delay": 0}).initialize(4)
    assert model.state_["buffer_X"].shape == (0, 4)
    model.partial_fit(X[:5], y[:5])
    assert model.state_["buffer_X"].shape == (16, 4)  # 16, 18, 20, ... rows as it fills
    model.partial_fit(X[5:], y[5:])
    assert model.state_["buffer_X"].shape == (320, 4)  # 300 rows: an eighth of 256 over
    assert model.state_["buffer_w"].shape == model.state_["buffer_y"].shape == (320,)
    params, state = model.get_params(), model.get_state()
    twin = BoostedEmbedded.from_state(params, state)
    np.testing.assert_array_equal(twin.decision_function(X), model.decision_function(X))

    def refused(field, **changes):
        broken = {**state, **changes}
        with pytest.raises(InvalidState) as caught:
            BoostedEmbedded.from_state(params, broken)
        assert caught.value.field == field

    refused("buffer_X", buffer_X=np.zeros((8001, 4)))  # beyond the capacity
    refused("buffer_X", buffer_X=np.zeros((300, 5)))  # another width
    refused("buffer_y", buffer_y=np.zeros(299, dtype=np.int64))
    refused("buffer_fill", buffer_X=np.zeros((200, 4)), buffer_y=np.zeros(200, dtype=np.int64),
            buffer_w=np.ones(200))  # fmt: skip
    refused("buffer_w", buffer_w=np.zeros(300))


def test_the_fit_weighs_the_rows_as_the_buffer_says():
    """The job carries the buffer's weights; the ensemble is scikit-learn's booster fitted on
    the weighted bins with them as sample_weight, its thresholds mapped back to the features'
    values: the margin of the raw rows is the booster's on their bin codes (the kernel's growth
    is scikit-learn's, float32 gradients and all)."""
    X, y = rare_stream(3000)
    model = BoostedEmbedded(**SMALL, negatives_per_positive=4.0).partial_fit(X, y)
    job = model.fit_job()
    rows, labels, weights = buffered(model)
    np.testing.assert_array_equal(job.sample_weight, weights)
    assert len(set(weights.tolist())) > 2
    feature_major, n_edges, table = bin_features(rows, weights)
    codes = feature_major.T.astype(float)
    edges = [table[j, : n_edges[j]] for j in range(rows.shape[1])]
    for j in range(rows.shape[1]):
        np.testing.assert_allclose(edges[j], weighted_edges(rows[:, j], weights), rtol=0, atol=0)
        below = rows[:, j][:, None] <= edges[j][None, :]
        np.testing.assert_array_equal(below, codes[:, j][:, None] <= np.arange(len(edges[j])))
    params = EnsembleParams(4, 4, 0.1, 5, 0.0, 0)
    ensemble = fit_ensemble(rows, labels, params, weights)
    booster = HistGradientBoostingClassifier(
        max_iter=4, max_leaf_nodes=4, min_samples_leaf=5, early_stopping=False, random_state=0
    ).fit(codes, labels > 0, sample_weight=weights)
    fresh = rare_stream(500, seed=1)[0]
    fresh_codes = np.column_stack(
        [np.searchsorted(edges[j], fresh[:, j], side="left") for j in range(fresh.shape[1])]
    ).astype(float)
    margins = np.array([margin_row(ensemble, row) for row in np.vstack((rows, fresh))])
    np.testing.assert_allclose(
        margins, booster.decision_function(np.vstack((codes, fresh_codes))), rtol=1e-12
    )
    unweighted = fit_ensemble(rows, labels, params)
    assert ensemble["ens_baseline"][0] < unweighted["ens_baseline"][0]  # the stream's balance
    assert not model.install(job.run(), job)  # no fit is pending: only a pending one installs


def test_growing_reservoirs_and_window_learn_as_full_ones():
    """ftrl_pauc's reservoirs and auto's window grow as they fill; what is learned is the same
    as with arrays of full capacity from the start (the kernels take the capacities)."""
    X, y = rare_stream(2500, rate=0.2, d=5)
    grown = make_learner("ftrl_pauc", positive_capacity=1000, negative_capacity=600)
    full = make_learner("ftrl_pauc", positive_capacity=1000, negative_capacity=600).initialize(5)
    full.state_["positive_X"] = np.zeros((1000, 5))
    full.state_["negative_X"] = np.zeros((600, 5))
    for start in range(0, len(y), 100):
        grown.partial_fit(X[start : start + 100], y[start : start + 100])
        full.partial_fit(X[start : start + 100], y[start : start + 100])
        assert grown.state_["negative_X"].shape[0] <= 600
    np.testing.assert_array_equal(grown.state_["w"], full.state_["w"])
    assert grown.state_["positive_X"].shape[0] < 1000
    np.testing.assert_array_equal(
        grown.state_["positive_X"], full.state_["positive_X"][: grown.state_["positive_X"].shape[0]]
    )
    with pytest.raises(InvalidState):
        learner_class("ftrl_pauc").from_state(
            grown.get_params(), {**grown.get_state(), "positive_X": np.zeros((1001, 5))}
        )

    auto = make_learner("auto", window=1000).partial_fit(X[:300], y[:300])
    assert auto.state_["window_scores"].shape[1] < 1000
    auto.partial_fit(X[300:], y[300:])
    assert auto.state_["window_scores"].shape == (len(auto.candidate_specs()), 1000)
    state = auto.get_state()
    with pytest.raises(InvalidState):
        learner_class("auto").from_state(
            auto.get_params(), {**state, "window_labels": np.zeros(1001, dtype=np.int64)}
        )
