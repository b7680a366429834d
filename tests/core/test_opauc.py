"""OPAUC / AdaOAM / low-rank OPAUC (``core.learners.opauc``) against the plain reference in
``tests.core.naive.baselines``, plus the properties of the class statistics and the learner's
contract; the low-rank sketch: test_opauc_sketch.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.errors import InvalidParameter
from core.learners import learner_class, make_learner
from core.learners.opauc import MAX_FULL_RANK_FEATURES
from tests.core.cases import states_equal
from tests.core.naive.baselines import weighted_ball_projection
from tests.core.opauc_helpers import N_FEATURES, assert_close, reference_for, stream


# ---------------------------------------------------------------------- equations
@pytest.mark.parametrize(
    "params",
    [
        {},  # OPAUC, scale-free step
        {"eta": 0.01, "lam": 0.1},  # OPAUC, constant step as in Gao et al.
        {"adaptive": True},  # AdaOAM
        {"adaptive": True, "lam": 5.0, "eta": 2.0},  # AdaOAM with an active projection
        {"adaptive": True, "lam": 0.0},  # no ball
        {"half_life": 40.0},  # exponentially weighted class statistics
        {"adaptive": True, "half_life": 25, "lam": 5.0, "eta": 2.0},  # + decaying G
    ],
    ids=[
        "opauc", "opauc-constant", "adaoam", "adaoam-projecting", "adaoam-no-ball",
        "opauc-forgetting", "adaoam-forgetting",
    ],
)  # fmt: skip
def test_dense_stream_matches_the_reference(params):
    X, y = stream(1)
    learner = make_learner("opauc", **params)
    scores = np.concatenate(
        [learner.prequential_step(X[:120], y[:120]), learner.prequential_step(X[120:], y[120:])]
    )
    reference = reference_for(params, N_FEATURES)
    assert_close(scores, reference.learn(X, y))
    assert_close(learner.coef_, reference.w)
    for label, key in ((1, "pos"), (-1, "neg")):
        assert learner.state_[f"count_{key}"][0] == reference.count[label]
        assert_close(learner.state_[f"mean_{key}"], reference.mean[label])
        assert_close(learner.state_[f"cov_{key}"], reference.cov[label])
    if params.get("adaptive"):
        assert_close(learner.state_["grad_sq_sum"], reference.grad_sq)
    if params.get("lam") == 5.0:
        assert reference.n_projections >= 10  # the H-weighted projection was exercised
        assert np.linalg.norm(learner.coef_) <= 1 / np.sqrt(5.0) * (1 + 1e-12)


def test_a_heavy_tailed_row_early_in_the_stream_does_not_make_the_step_diverge():
    """The second positive 100 standard deviations out: with the plain automatic step
    ``0.1 / nu`` the events' Hessians ``z zᵀ + S_opp`` then make gradient descent diverge
    (``||w||`` 137, held-out AUC 0.46 on this stream); the curvature-capped step matches the
    reference and keeps ``w`` bounded and useful (0.75, as without the outlier)."""
    from core.metrics import auc

    X, y = stream(2, n=600, positive_rate=0.07)
    X[np.flatnonzero(y == 1)[1], 0] = 100.0
    learner = make_learner("opauc")
    scores = learner.prequential_step(X, y)
    reference = reference_for({}, N_FEATURES)
    assert_close(scores, reference.learn(X, y))
    assert_close(learner.coef_, reference.w)
    assert np.linalg.norm(learner.coef_) < 1.0
    X_test, y_test = stream(4, n=2000, positive_rate=0.1)
    assert auc(y_test, learner.decision_function(X_test)) > 0.7


@pytest.mark.parametrize("params", [{}, {"adaptive": True}, {"rank": 2}])
def test_sparse_input_matches_the_dense_reference(params):
    X, y = stream(2, n=200, n_features=12, density=0.3)
    learner = make_learner("opauc", **params)
    scores = learner.prequential_step(sp.csr_matrix(X), y)
    reference = reference_for(params, 12)
    assert_close(scores, reference.learn(X, y), rtol=1e-12)
    assert_close(learner.coef_, reference.w, rtol=1e-12)


def test_weighted_projection_kernel_matches_the_reference():
    from core._kernels.adaoam import project_weighted as _project_weighted

    rng = np.random.default_rng(4)
    for _ in range(50):
        d = int(rng.integers(1, 30))
        u = rng.normal(size=d) * rng.uniform(0.1, 10)
        h = rng.uniform(1e-3, 5, size=d)
        radius = rng.uniform(0.1, 3)
        out = np.empty(d)
        _project_weighted(u, h, radius, out)
        expected = weighted_ball_projection(u, h, radius)
        assert_close(out, expected)
        assert np.linalg.norm(out) <= radius * (1 + 1e-14)


# ---------------------------------------------------------------------- class statistics
@pytest.mark.parametrize("scaled", [False, True])
def test_covariance_recursion_equals_np_cov_after_every_prefix(scaled):
    X, y = stream(5, n=80)
    if scaled:  # large offset: where the thesis' printed recursion and naive x xᵀ - c cᵀ suffer
        X = X * 3.0 + 1e4
    learner = make_learner("opauc")
    for i in range(len(y)):
        learner.partial_fit(X[i : i + 1], y[i : i + 1])
        for label, key in ((1, "pos"), (0, "neg")):
            seen = X[: i + 1][y[: i + 1] == label]
            if len(seen) == 0:
                assert not learner.state_[f"cov_{key}"].any()
                continue
            expected = np.cov(seen.T, bias=True).reshape(N_FEATURES, N_FEATURES)
            cov = learner.state_[f"cov_{key}"]
            np.testing.assert_allclose(cov, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
            np.testing.assert_array_equal(cov, cov.T)  # symmetric to the last bit
            np.testing.assert_allclose(learner.state_[f"mean_{key}"], seen.mean(axis=0), rtol=1e-12)


def test_no_update_until_both_classes_were_seen():
    X, y = stream(6, n=50)
    learner = make_learner("opauc", adaptive=True)
    learner.partial_fit(X[y == 1], y[y == 1])
    assert not learner.coef_.any() and not learner.state_["grad_sq_sum"].any()
    assert learner.state_["count_pos"][0] == (y == 1).sum()
    learner.partial_fit(X[y == 0][:1], [0])
    assert learner.coef_.any()


# ---------------------------------------------------------------------- contract


@pytest.mark.parametrize("rank", [1, 3])
def test_csr_and_mixed_batches_equal_one_at_a_time_and_round_trip_mid_buffer(rank):
    """Rebuild boundaries are the state's (buffer rows and non-zeros, shrinks), so CSR batches,
    mixed with dense ones (which materialise first), give the same state bit for bit however
    the events are grouped; a state restored with half-full buffers continues identically."""
    X, y = stream(19, n=240, n_features=20, density=0.4)
    kinds = np.where((np.arange(240) // 40) % 3 == 1, "dense", "csr")  # csr, dense, csr, ...

    def batch(a, b):
        return X[a:b] if kinds[a] == "dense" else sp.csr_matrix(X[a:b])

    at_once = make_learner("opauc", rank=rank)
    starts = [a for a in range(240) if a == 0 or kinds[a] != kinds[a - 1]] + [240]
    scores = np.concatenate(
        [
            at_once.prequential_step(batch(a, b), y[a:b])
            for a, b in zip(starts[:-1], starts[1:], strict=True)
        ]
    )
    one_by_one = make_learner("opauc", rank=rank)
    singles = [one_by_one.prequential_step(batch(i, i + 1), y[i : i + 1]) for i in range(240)]
    np.testing.assert_array_equal(scores, np.concatenate(singles))
    states_equal(at_once.get_state(), one_by_one.get_state())
    reference = reference_for({"rank": rank}, 20)
    assert_close(scores, reference.learn(X, y))

    first = make_learner("opauc", rank=rank).partial_fit(sp.csr_matrix(X[:37]), y[:37])
    assert first.state_["buffer_rows"].min() > 0
    restored = learner_class("opauc").from_state(first.get_params(), first.get_state())
    tail = sp.csr_matrix(X[37:])
    np.testing.assert_array_equal(
        restored.prequential_step(tail, y[37:]), first.prequential_step(tail, y[37:])
    )
    states_equal(restored.get_state(), first.get_state())


def test_deterministic():
    X, y = stream(10)
    for params in ({}, {"rank": 2, "adaptive": True}, {"rank": 2}):
        first = make_learner("opauc", **params).partial_fit(sp.csr_matrix(X), y).partial_fit(X, y)
        second = make_learner("opauc", **params).partial_fit(sp.csr_matrix(X), y).partial_fit(X, y)
        states_equal(first.get_state(), second.get_state())


def test_sketch_result_does_not_depend_on_blas_threads():
    """The plain sketch uses BLAS gemv/gemm (never ddot, whose threads split the sum) so the
    same events give the same state whatever ``OPENBLAS_NUM_THREADS`` is."""
    import threadpoolctl  # scikit-learn's dependency, so always installed

    X, y = stream(15, n=40, n_features=12_345)  # above OpenBLAS's 10,000-entry ddot split
    states = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
            learner = make_learner("opauc", rank=2)
            learner.partial_fit(X[:20], y[:20]).partial_fit(sp.csr_matrix(X[20:]), y[20:])
            states.append(learner.get_state())
    states_equal(*states)


def test_state_layout_follows_the_options():
    X, y = stream(11, n=40)
    full = make_learner("opauc").partial_fit(X, y).state_
    assert full["cov_pos"].shape == (N_FEATURES, N_FEATURES) and "sq_norm_mean" in full
    assert "grad_sq_sum" not in full and "sketch_pos" not in full
    sketch = make_learner("opauc", rank=4, adaptive=True, eta=0.1).partial_fit(X, y).state_
    assert sketch["sketch_neg"].shape == (8, N_FEATURES) and "cov_neg" not in sketch
    assert sketch["grad_sq_sum"].shape == (N_FEATURES,) and "sq_norm_mean" not in sketch
    assert "w_direct" not in sketch  # AdaOAM's steps are not in the span of the sketches
    split = make_learner("opauc", rank=4).partial_fit(X, y).state_
    slots = 16 + 3 + 2 * 16  # Q_pos, Q_neg, v, c_pos, c_neg, X_pos, X_neg (k = 4)
    assert split["w_direct"].shape == (N_FEATURES,) and split["basis_gram"].shape == (slots, slots)
    assert split["sketch_map"].shape == (2, 8, slots) and split["basis_coef"].shape == (slots,)
    assert split["buffer_data"].shape == (2, N_FEATURES) and split["buffer_indptr"].shape == (2, 17)
    assert "cov_pos" not in split and "grad_sq_sum" not in split


def test_full_rank_refuses_too_many_features_and_suggests_rank():
    width = MAX_FULL_RANK_FEATURES + 1
    learner = make_learner("opauc")
    with pytest.raises(InvalidParameter, match=r"exceeds the limit of 1000.*rank=k"):
        learner.partial_fit(np.zeros((2, width)), [0, 1])
    assert not learner.is_initialized
    sketched = make_learner("opauc", rank=2).partial_fit(np.ones((2, width)), [0, 1])
    assert sketched.state_["sketch_pos"].shape == (4, width)
    hashed = sp.csr_matrix(([1.0], ([0], [7])), shape=(1, 1 << 20))
    with pytest.raises(InvalidParameter, match=r"exceeds the limit of 8,388,608. Use a smaller"):
        make_learner("opauc", rank=8).partial_fit(hashed, [1])
    assert make_learner("opauc", rank=1).partial_fit(hashed, [1]).n_features_in_ == 1 << 20


def test_rejected_batch_changes_nothing():
    X, y = stream(12, n=60)
    learner = make_learner("opauc", rank=2, scaling="standard").partial_fit(X[:40], y[:40])
    before = learner.get_state()
    bad = X[40:].copy()
    bad[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        learner.partial_fit(bad, y[40:])
    with pytest.raises(ValueError, match="labels"):
        learner.partial_fit(X[40:], y[40:] + 3)
    states_equal(before, learner.get_state())


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"lam": -1.0}, "lam"),
        ({"eta": 0.0}, "eta > 0"),
        ({"adaptive": "yes"}, "adaptive"),
        ({"delta": -1e-3}, "delta"),
        ({"rank": 0}, "rank"),
        ({"rank": 2.0}, "rank"),
        ({"scaling": "minmax"}, "scaling"),
    ],
)
def test_bad_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_learner("opauc", **params)


def test_fit_learns():
    from sklearn.metrics import roc_auc_score

    X, y = stream(13, n=600)
    for params in ({}, {"adaptive": True}, {"rank": 2}):
        learner = make_learner("opauc", max_iter=2, random_state=0, **params).fit(X, y)
        assert roc_auc_score(y, learner.decision_function(X)) > 0.8
