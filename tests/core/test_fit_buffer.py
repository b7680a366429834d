"""The fit buffer of ``boosted_embedded`` against its naive reference (every positive kept,
the negatives sampled once full, weights the inverse of the rate), its arrays grown as it
fills and checked on load, and the fit growing its trees on the sample and correcting the
margin for the sampling rate; the other arrays that grow as they fill (ftrl_pauc's reservoirs,
auto's window) change nothing of what is learned."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score

from core.boosted_trees import EnsembleParams, fit_ensemble
from core.errors import InvalidState
from core.learners import learner_class, make_learner
from core.learners._fit_buffer import buffered as buffer_contents
from core.learners.boosted_embedded import BoostedEmbedded
from core.validation import as_features
from tests.core.naive.boosted_embedding import margin_row
from tests.core.naive.fit_buffer import FitBuffer, sampling_shift

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
    refused("buffer_y", buffer_y=np.zeros(299, dtype=np.int8))
    refused("buffer_fill", buffer_X=np.zeros((200, 4)), buffer_y=np.zeros(200, dtype=np.int8),
            buffer_w=np.ones(200))  # fmt: skip
    refused("buffer_w", buffer_w=np.zeros(300))


def test_the_trees_grow_on_the_sample_and_the_margin_is_corrected_for_its_rate():
    """The job carries the buffer's weights; the trees are scikit-learn's booster fitted on the
    sampled rows unweighted, and the margin is the booster's plus the log of the negatives'
    sampling rate, so the baseline is the log-odds of the stream's balance (positives over the
    negatives the kept ones stand for)."""
    X, y = rare_stream(3000)
    model = BoostedEmbedded(**SMALL, negatives_per_positive=4.0).partial_fit(X, y)
    job = model.fit_job()
    rows, labels, weights = buffered(model)
    np.testing.assert_array_equal(job.sample_weight, weights)
    assert len(set(weights.tolist())) > 2
    params = EnsembleParams(4, 4, 0.1, 5, 0.0, 0)
    ensemble = fit_ensemble(rows, labels, params, weights)
    booster = HistGradientBoostingClassifier(
        max_iter=4, max_leaf_nodes=4, min_samples_leaf=5, early_stopping=False, random_state=0
    ).fit(rows, labels > 0)
    shift = sampling_shift(labels, weights)
    assert shift < np.log(0.5)  # the buffer over-represents the positives at least twice
    probe = np.vstack((rows, rare_stream(500, seed=1)[0]))
    margins = np.array([margin_row(ensemble, row) for row in probe])
    np.testing.assert_allclose(margins, booster.decision_function(probe) + shift, rtol=0,
                               atol=1e-12)  # fmt: skip
    positives = float((labels > 0).sum())
    stream_balance = np.log(positives / weights[labels <= 0].sum())
    np.testing.assert_allclose(ensemble["ens_baseline"][0], stream_balance, rtol=1e-12)
    # the weights move the baseline alone: the same trees as the rows fitted without them
    unweighted = fit_ensemble(rows, labels, params)
    for key in ("ens_left", "ens_feature_or_leaf", "ens_threshold_or_value"):
        np.testing.assert_array_equal(unweighted[key], ensemble[key])
    assert unweighted["ens_baseline"][0] + shift == pytest.approx(ensemble["ens_baseline"][0])
    fitted, row_leaves = job.run()
    prepared = model.prepare(fitted, job, row_leaves)
    # no fit is pending: only a pending one installs
    assert not model.install(fitted, job, prepared)


def rare_disc(n, seed, radius2=0.02):
    """Rare positives (about 0.35 % at ``radius2`` 0.02) in a small disc that no linear score
    ranks."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, np.where(X[:, 0] ** 2 + (X[:, 1] - 1.5) ** 2 < radius2, 1, -1)


def test_trees_grown_on_the_sample_rank_rare_positives_the_weighted_fit_misses():
    """Why the trees are grown unweighted: on a stream of rare positives the sampled buffer's
    fit ranks a held-out set of the disc almost perfectly, while the same booster weighted by
    the sampling weights (the whole stream's fit) takes huge Newton steps on single positives
    and ranks it far worse."""
    X, y = rare_disc(20_000, seed=0)
    X_test, y_test = rare_disc(50_000, seed=1)
    model = BoostedEmbedded(buffer_size=2000, first_fit=2000, refit_every=None, scaling="none",
                            learning_rate=0.2).partial_fit(X, y)  # fmt: skip
    job = model.fit_job()
    assert (job.y > 0).sum() > 5 * (y[-2000:] > 0).sum()
    assert model.refit()
    weighted = HistGradientBoostingClassifier(
        max_iter=50, max_leaf_nodes=15, learning_rate=0.2, min_samples_leaf=20,
        early_stopping=False, random_state=0,
    ).fit(job.X, job.y > 0, sample_weight=job.sample_weight)  # fmt: skip
    ours = roc_auc_score(y_test, model.margin(X_test), max_fpr=0.1)
    assert ours > 0.98
    assert ours > roc_auc_score(y_test, weighted.decision_function(X_test), max_fpr=0.1) + 0.1


def test_the_default_l2_keeps_a_fit_on_a_few_rare_positives_from_turning_over():
    """Why ``l2_regularization`` is 1 by default: on 4,000 rows with 17 positives in a disc,
    auto's boosting (50 trees at rate 0.2) without it takes Newton steps of
    ``sum (y - p) / sum p (1 - p)`` on leaves whose positives it has already fitted (``p`` near
    1, the hessians near 0), and its later trees turn the disc's ranking over; with it the fit
    ranks the disc as the first trees did."""
    X, y = rare_disc(4000, seed=3, radius2=0.03)
    X_test, y_test = rare_disc(50_000, seed=99, radius2=0.03)
    model = BoostedEmbedded(scaling="none", learning_rate=0.2).initialize(4)
    params = model._ensemble_params()
    assert params.l2_regularization == 1.0 and (y > 0).sum() == 17
    with_l2 = fit_ensemble(X, y, params)
    without = fit_ensemble(X, y, replace(params, l2_regularization=0.0))
    margins = [np.array([margin_row(fitted, row) for row in X_test[:20_000]])
               for fitted in (with_l2, without)]  # fmt: skip
    assert roc_auc_score(y_test[:20_000], margins[0]) > 0.99
    assert roc_auc_score(y_test[:20_000], margins[1]) < 0.5


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
