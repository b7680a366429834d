"""OPAUC / AdaOAM / low-rank OPAUC (``core.learners.opauc``) against the plain reference in
``naive_baselines``, plus the properties of the class statistics and the sketch."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.learners import learner_class, make_learner
from core.learners.opauc import DEFAULT_ADAPTIVE_ETA, DEFAULT_ETA_SCALE, MAX_FULL_RANK_FEATURES
from tests.core.naive_baselines import NaiveOPAUC, weighted_ball_projection

N_FEATURES = 6


def stream(seed, n=300, positive_rate=0.3, n_features=N_FEATURES, density=1.0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + 0.8 * y[:, None] * np.linspace(1, -1, n_features)
    X += 0.5  # non-zero means, so the centring terms matter
    if density < 1.0:
        X[rng.random(X.shape) >= density] = 0.0
    return X, y


def assert_states_equal(left, right):
    assert left.keys() == right.keys()
    for key in left:
        assert left[key].dtype == right[key].dtype, key
        np.testing.assert_array_equal(left[key], right[key], err_msg=key)


def assert_close(actual, expected, rtol=1e-12):
    """Relative agreement, entries near zero judged against the array's scale."""
    scale = max(np.abs(expected).max(), 1e-300)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def reference_for(params, n_features):
    adaptive = params.get("adaptive", False)
    eta = params.get("eta")
    auto = eta is None and not adaptive
    if eta is None:
        eta = DEFAULT_ADAPTIVE_ETA if adaptive else DEFAULT_ETA_SCALE
    return NaiveOPAUC(
        n_features,
        lam=params.get("lam", 1e-4),
        eta=eta,
        auto_eta=auto,
        adaptive=adaptive,
        delta=params.get("delta", 1e-8),
        rank=params.get("rank"),
    )


# ---------------------------------------------------------------------- equations
@pytest.mark.parametrize(
    "params",
    [
        {},  # OPAUC, scale-free step
        {"eta": 0.01, "lam": 0.1},  # OPAUC, constant step as in Gao et al.
        {"adaptive": True},  # AdaOAM
        {"adaptive": True, "lam": 5.0, "eta": 2.0},  # AdaOAM with an active projection
        {"adaptive": True, "lam": 0.0},  # no ball
    ],
    ids=["opauc", "opauc-constant", "adaoam", "adaoam-projecting", "adaoam-no-ball"],
)
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


@pytest.mark.parametrize("params", [{}, {"adaptive": True}, {"rank": 2}])
def test_sparse_input_matches_the_dense_reference(params):
    X, y = stream(2, n=200, n_features=12, density=0.3)
    learner = make_learner("opauc", **params)
    scores = learner.prequential_step(sp.csr_matrix(X), y)
    reference = reference_for(params, 12)
    assert_close(scores, reference.learn(X, y), rtol=1e-12)
    assert_close(learner.coef_, reference.w, rtol=1e-12)


@pytest.mark.parametrize("params", [{"rank": 2}, {"rank": 3, "adaptive": True}])
def test_sketch_matches_the_svd_reference(params):
    X, y = stream(3, n=300, n_features=10)
    learner = make_learner("opauc", **params)
    scores = learner.prequential_step(X, y)
    reference = reference_for(params, 10)
    # the sketch rows are defined up to sign and rotation; BᵀB / T is what the gradient uses
    assert_close(scores, reference.learn(X, y))
    assert_close(learner.coef_, reference.w)
    for label, key in ((1, "pos"), (-1, "neg")):
        rows = int(learner.state_[f"sketch_rows_{key}"][0])
        sketch = learner.state_[f"sketch_{key}"][:rows]  # rows beyond are scratch
        count = reference.count[label]
        assert_close(sketch.T @ sketch / count, reference.covariance(label))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_split_weights_keep_their_products_up_to_date(rank):
    """Plain OPAUC with a sketch keeps ``w = w_direct + B_posᵀ a_pos + B_negᵀ a_neg`` and the
    products its steps use up to date instead of recomputing them: check each against a
    direct computation, after dense and sparse batches and several shrinks."""
    X, y = stream(14, n=260, n_features=9)
    learner = make_learner("opauc", rank=rank)
    learner.prequential_step(X[:100], y[:100])
    learner.prequential_step(sp.csr_matrix(X[100:200]), y[100:200])
    learner.prequential_step(X[200:], y[200:])
    state = learner.state_
    size = 2 * rank
    rows = (int(state["sketch_rows_pos"][0]), int(state["sketch_rows_neg"][0]))
    joint = np.zeros((2 * size, 9))  # positive rows, then negative rows; unused rows zero
    joint[: rows[0]] = state["sketch_pos"][: rows[0]]
    joint[size : size + rows[1]] = state["sketch_neg"][: rows[1]]
    used = np.zeros(2 * size, dtype=bool)
    used[: rows[0]] = used[size : size + rows[1]] = True
    means = np.stack([state["mean_pos"], state["mean_neg"]])
    direct = state["w_direct"]
    assert not state["sketch_coef"][~used].any() and not state["sketch_gram"][~used].any()
    assert not state["sketch_gram"][:, ~used].any()
    assert not state["sketch_dot_direct"][~used].any()
    assert not state["sketch_dot_means"][~used].any()
    assert_close(state["w"], direct + joint.T @ state["sketch_coef"])
    assert_close(state["sketch_gram"], joint @ joint.T, rtol=1e-10)
    assert_close(state["sketch_dot_direct"], joint @ direct, rtol=1e-10)
    assert_close(state["sketch_dot_means"], joint @ means.T, rtol=1e-10)
    assert_close(state["mean_dot_direct"], means @ direct, rtol=1e-10)
    assert_close(state["mean_gram"], means @ means.T, rtol=1e-10)


def test_split_sketch_with_offset_features_stays_close_to_the_reference():
    """The split ``w`` updates its products by uncentred differences (kernel comment): with
    features offset by 1,000 times their spread it still agrees to 1e-9 (measured 1e-11)."""
    X, y = stream(3, n=300, n_features=10)
    X += 1000.0
    params = {"rank": 2, "eta": 1e-3}
    learner = make_learner("opauc", **params)
    scores = learner.prequential_step(X, y)
    reference = reference_for(params, 10)
    assert_close(scores, reference.learn(X, y), rtol=1e-9)
    assert_close(learner.coef_, reference.w, rtol=1e-9)


def test_weighted_projection_kernel_matches_the_reference():
    from core._kernels.opauc import _project_weighted

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


def test_sketch_is_exact_when_the_data_span_at_most_rank_dimensions():
    rng = np.random.default_rng(7)
    basis = rng.normal(size=(3, 20))
    y = (rng.random(400) < 0.4).astype(np.int64)
    X = rng.normal(size=(400, 3)) @ basis + 2.0 * y[:, None]  # centred data span 3 dimensions
    full = make_learner("opauc")
    sketched = make_learner("opauc", rank=3)
    full_scores = full.prequential_step(X, y)
    assert_close(sketched.prequential_step(X, y), full_scores, rtol=1e-8)
    assert_close(sketched.coef_, full.coef_, rtol=1e-8)


def test_sketch_approaches_the_full_rank_gradient_as_rank_grows():
    rng = np.random.default_rng(8)
    d, n = 24, 600
    spectrum = 0.8 ** np.arange(d)  # decaying covariance spectrum
    rotation = np.linalg.qr(rng.normal(size=(d, d)))[0]
    y = (rng.random(n) < 0.4).astype(np.int64)
    X = (rng.normal(size=(n, d)) * np.sqrt(spectrum)) @ rotation.T + 0.5 * y[:, None]
    full = make_learner("opauc").partial_fit(X, y)
    probe = rng.normal(size=d)
    errors = []
    for rank in (1, 2, 4, 8, 16, 24):
        sketched = make_learner("opauc", rank=rank).partial_fit(X, y)
        state = sketched.state_
        sketch_error = 0.0
        for key in ("pos", "neg"):
            B = state[f"sketch_{key}"][: state[f"sketch_rows_{key}"][0]]  # the rows in use
            approx = B.T @ (B @ probe) / state[f"count_{key}"][0]
            exact = full.state_[f"cov_{key}"] @ probe
            sketch_error = max(sketch_error, np.linalg.norm(approx - exact) / np.linalg.norm(exact))
            # frequent directions never overestimates: T·S - BᵀB is positive semi-definite
            scatter = full.state_[f"cov_{key}"] * state[f"count_{key}"][0]
            gap = scatter - B.T @ B
            assert np.linalg.eigvalsh(gap).min() > -1e-10 * np.abs(scatter).max()
        weight_error = np.linalg.norm(sketched.coef_ - full.coef_) / np.linalg.norm(full.coef_)
        errors.append((rank, sketch_error, weight_error))
    sketch_errors = [e[1] for e in errors]
    weight_errors = [e[2] for e in errors]
    assert all(b <= a * 1.05 for a, b in zip(sketch_errors, sketch_errors[1:], strict=False)), (
        errors
    )
    assert sketch_errors[0] > 0.05 and sketch_errors[-1] < 1e-10, errors
    assert weight_errors[-1] < 1e-9 and weight_errors[-1] < weight_errors[2] < weight_errors[0]


# ---------------------------------------------------------------------- contract
@pytest.mark.parametrize("params", [{}, {"adaptive": True, "lam": 1.0}, {"rank": 2}])
def test_batch_equals_one_at_a_time_and_round_trip_continues(params):
    X, y = stream(9, n=200)
    at_once = make_learner("opauc", **params)
    scores = at_once.prequential_step(X, y)
    one_by_one = make_learner("opauc", **params)
    singles = [one_by_one.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    np.testing.assert_array_equal(scores, np.concatenate(singles))
    assert_states_equal(at_once.get_state(), one_by_one.get_state())

    first = make_learner("opauc", **params).partial_fit(X[:111], y[:111])
    restored = learner_class("opauc").from_state(first.get_params(), first.get_state())
    np.testing.assert_array_equal(
        restored.prequential_step(X[111:], y[111:]), first.prequential_step(X[111:], y[111:])
    )
    assert_states_equal(first.get_state(), at_once.get_state())
    assert_states_equal(restored.get_state(), at_once.get_state())


def test_deterministic():
    X, y = stream(10)
    for params in ({}, {"rank": 2, "adaptive": True}):
        first = make_learner("opauc", **params).partial_fit(X, y)
        second = make_learner("opauc", **params).partial_fit(X, y)
        assert_states_equal(first.get_state(), second.get_state())


def test_sketch_result_does_not_depend_on_blas_threads():
    """The plain sketch uses BLAS gemv/gemm (never ddot, whose threads split the sum) so the
    same events give the same state whatever ``OPENBLAS_NUM_THREADS`` is."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    X, y = stream(15, n=40, n_features=12_345)  # above OpenBLAS's 10,000-entry ddot split
    states = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
            learner = make_learner("opauc", rank=2)
            learner.partial_fit(X[:20], y[:20]).partial_fit(sp.csr_matrix(X[20:]), y[20:])
            states.append(learner.get_state())
    assert_states_equal(*states)


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
    assert split["w_direct"].shape == (N_FEATURES,) and split["sketch_gram"].shape == (16, 16)
    assert split["sketch_dot_means"].shape == (16, 2) and split["mean_gram"].shape == (2, 2)
    assert "cov_pos" not in split and "grad_sq_sum" not in split


def test_full_rank_refuses_too_many_features_and_suggests_rank():
    width = MAX_FULL_RANK_FEATURES + 1
    learner = make_learner("opauc")
    with pytest.raises(ValueError, match=r"exceeds the limit of 1000.*rank=k"):
        learner.partial_fit(np.zeros((2, width)), [0, 1])
    assert not learner.is_initialized
    sketched = make_learner("opauc", rank=2).partial_fit(np.ones((2, width)), [0, 1])
    assert sketched.state_["sketch_pos"].shape == (4, width)
    hashed = sp.csr_matrix(([1.0], ([0], [7])), shape=(1, 1 << 20))
    with pytest.raises(ValueError, match=r"exceeds the limit of 8,388,608. Use a smaller rank"):
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
    assert_states_equal(before, learner.get_state())


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
