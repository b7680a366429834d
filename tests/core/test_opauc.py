"""OPAUC / AdaOAM / low-rank OPAUC (``core.learners.opauc``) against the plain reference in
``tests.core.naive.baselines``, plus the properties of the class statistics and the sketch."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.errors import InvalidParameter
from core.learners import learner_class, make_learner
from core.learners.opauc import DEFAULT_ADAPTIVE_ETA, DEFAULT_ETA_SCALE, MAX_FULL_RANK_FEATURES
from tests.core.cases import states_equal
from tests.core.naive.baselines import NaiveOPAUC, weighted_ball_projection

N_FEATURES = 6


def stream(seed, n=300, positive_rate=0.3, n_features=N_FEATURES, density=1.0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + 0.8 * y[:, None] * np.linspace(1, -1, n_features)
    X += 0.5  # non-zero means, so the centring terms matter
    if density < 1.0:
        X[rng.random(X.shape) >= density] = 0.0
    return X, y


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
        half_life=params.get("half_life"),
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


def basis_rows(state, rank):
    """The basis ``R`` of the factored sketch (``core._kernels.opauc``) as dense rows, and which
    slots are in use: Q_pos, Q_neg (2k each), v, c_pos, c_neg, X_pos, X_neg (buffered)."""
    size = 2 * rank
    d = state["w"].shape[0]
    length = state["buffer_indptr"].shape[1] - 1
    R = np.zeros((2 * size + 3 + 2 * length, d))
    used = np.zeros(R.shape[0], dtype=bool)
    R[2 * size] = state["w_direct"]
    used[2 * size] = True
    for s, key in enumerate(("pos", "neg")):
        q = state["sketch_base_rows"][s]
        R[s * size : s * size + q] = state[f"sketch_{key}"][:q]
        used[s * size : s * size + q] = True
        R[2 * size + 1 + s] = state[f"mean_{key}"]
        used[2 * size + 1 + s] = True
        first = 2 * size + 3 + s * length
        indptr = state["buffer_indptr"][s]
        for j in range(state["buffer_rows"][s]):
            columns = state["buffer_indices"][s, indptr[j] : indptr[j + 1]]
            R[first + j, columns] = state["buffer_data"][s, indptr[j] : indptr[j + 1]]
            used[first + j] = True
    return R, used


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("kinds", ["dense-csr-dense", "csr", "dense-csr"])
def test_factored_sketch_keeps_its_basis_products_up_to_date(rank, kinds):
    """Plain OPAUC with a sketch keeps ``w = Σ coef_r R_r``, the sketches as ``M_s R`` and
    the Gram ``R Rᵀ`` up to date instead of recomputing them: check each against a direct
    computation, after dense and sparse batches, several shrinks and rebuilds, ending with
    materialised (dense) and factored (CSR, buffers in use) states."""
    X, y = stream(14, n=260, n_features=9, density=0.6)
    learner = make_learner("opauc", rank=rank)
    parts = kinds.split("-")
    bounds = np.linspace(0, len(y), len(parts) + 1).astype(int)
    for kind, a, b in zip(parts, bounds[:-1], bounds[1:], strict=True):
        batch = sp.csr_matrix(X[a:b]) if kind == "csr" else X[a:b]
        learner.prequential_step(batch, y[a:b])
    state = learner.state_
    size = 2 * rank
    R, used = basis_rows(state, rank)
    if parts[-1] == "csr":
        assert state["buffer_rows"].sum() > 0  # the factored form is exercised
    else:
        assert state["buffer_rows"].sum() == 0 and state["basis_coef"][2 * size] == 1.0
    coef, gram, sketch_map = state["basis_coef"], state["basis_gram"], state["sketch_map"]
    assert not coef[~used].any() and not gram[~used].any() and not gram[:, ~used].any()
    assert not sketch_map[:, :, ~used].any()
    expected_gram = R @ R.T
    expected_gram[2 * size, 2 * size] = 0.0  # v · v is not kept
    assert_close(gram, expected_gram, rtol=1e-10)
    assert_close(state["w"], coef @ R)
    reference = reference_for({"rank": rank}, 9)
    reference.learn(X, y)
    length = state["buffer_indptr"].shape[1] - 1
    for s, (label, key) in enumerate(((1, "pos"), (-1, "neg"))):
        rows = state[f"sketch_rows_{key}"][0]
        assert not sketch_map[s, rows:].any()
        count = state[f"count_{key}"][0]
        first = 2 * size + 3 + s * length
        mean = state["mean_base_count"][s] * R[2 * size + 1 + s]
        mean = (mean + R[first : first + state["buffer_rows"][s]].sum(axis=0)) / count
        assert_close(mean, X[y == (label > 0)].mean(axis=0))
        sketch = sketch_map[s, :rows] @ R
        assert_close(sketch.T @ sketch / count, reference.covariance(label), rtol=1e-10)
    assert_close(state["w"], reference.w, rtol=1e-12)


def explicit_sketch_learner_run(X, y, rank, lam=1e-4, eta=DEFAULT_ETA_SCALE):
    """Plain OPAUC with a sketch through the explicit kernel (``opauc_learn``: ``B w`` and
    ``Bᵀ(B w)`` per event, as for AdaOAM), dense input: the pre-factoring computation."""
    from core._kernels._bundles import EventBatch
    from core._kernels.opauc import OPAUCOptions, OPAUCState, opauc_learn

    n, d = X.shape
    w = np.zeros(d)
    means = [np.zeros(d), np.zeros(d)]
    sketches = [np.zeros((2 * rank, d)), np.zeros((2 * rank, d))]
    rows = [np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)]
    counts = [np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)]
    scores = np.empty(n)
    labels = np.where(y > 0, 1, -1).astype(np.int64)
    batch = EventBatch(np.ascontiguousarray(X), np.zeros(1, dtype=np.int64),
                       np.zeros(0, dtype=np.int64), np.zeros(0), False)  # fmt: skip
    state = OPAUCState(w, *means, *sketches, *rows, *counts, np.zeros(0), np.zeros(1))
    opauc_learn(
        batch, labels, scores, state, OPAUCOptions(lam, eta, True, False, 1e-8, np.inf, rank, 0.0)
    )
    return scores, w


@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.parametrize("density", [0.1, 0.5])
def test_csr_stream_with_many_rebuilds_matches_the_reference_and_the_explicit_kernel(rank, density):
    """Long CSR streams (dozens of shrinks and rebuilds per class) against the naive reference
    and against the explicit kernel that materialises every vector."""
    X, y = stream(16, n=700, n_features=40, density=density)
    learner = make_learner("opauc", rank=rank)
    scores = np.concatenate(
        [learner.prequential_step(sp.csr_matrix(X[a : a + 233]), y[a : a + 233])
         for a in range(0, 700, 233)]
    )  # fmt: skip
    reference = reference_for({"rank": rank}, 40)
    assert_close(scores, reference.learn(X, y))
    assert_close(learner.coef_, reference.w)
    explicit_scores, explicit_w = explicit_sketch_learner_run(X, y, rank)
    assert_close(scores, explicit_scores)
    assert_close(learner.coef_, explicit_w)


@pytest.mark.parametrize("rank", [2, 3])
def test_csr_buffer_filled_by_non_zeros_and_by_rows(rank):
    """The own buffer holds at most ``n_features`` non-zeros: wide rows force a rebuild before
    the buffer has its rows (here nearly every event), narrow rows fill it by rows.

    (Empty rows are avoided: several of them make a class's centred rows rank-deficient, and
    whether a rounding-level eigenvalue counts as above ``θ`` then decides when the next
    shrink comes, in the reference as in every kernel.)"""
    rng = np.random.default_rng(17)
    X, y = stream(17, n=300, n_features=30)
    kept = rng.random(X.shape) >= np.where(np.arange(300) < 150, 0.9, 0.05)[:, None]
    kept[np.arange(300), rng.integers(0, 30, 300)] = True  # no empty rows (see below)
    X[~kept] = 0.0
    learner = make_learner("opauc", rank=rank)
    scores, held = [], []
    for i in range(len(y)):  # one event per call: the boundaries are the state's, not the calls'
        scores.append(learner.prequential_step(sp.csr_matrix(X[i : i + 1]), y[i : i + 1]))
        held.append(learner.state_["buffer_rows"].max())
    assert max(held[:150]) >= 6 and max(held[160:]) <= 2
    reference = reference_for({"rank": rank}, 30)
    assert_close(np.concatenate(scores), reference.learn(X, y))
    assert_close(learner.coef_, reference.w)
    at_once = make_learner("opauc", rank=rank).partial_fit(sp.csr_matrix(X), y)
    states_equal(at_once.get_state(), learner.get_state())


@pytest.mark.parametrize("first_label", [0, 1])
def test_csr_class_seen_once_and_late(first_label):
    """One event of a class (mean only, no sketch row), then many of the other, then the
    class again: no step before both were seen, then the same as the reference."""
    X, y = stream(18, n=120, n_features=15, density=0.4)
    y = np.where(np.arange(120) < 60, 1 - first_label, y)
    y[0] = first_label
    y[1:60] = 1 - first_label
    learner = make_learner("opauc", rank=2)
    scores = np.concatenate(
        [learner.prequential_step(sp.csr_matrix(X[i : i + 1]), y[i : i + 1]) for i in range(2)]
        + [learner.prequential_step(sp.csr_matrix(X[2:]), y[2:])]
    )
    assert scores[0] == 0.0
    reference = reference_for({"rank": 2}, 15)
    assert_close(scores, reference.learn(X, y))
    assert_close(learner.coef_, reference.w)


@pytest.mark.parametrize("kind", ["dense", "csr"])
def test_split_sketch_with_offset_features_stays_close_to_the_reference(kind):
    """The split ``w`` updates its products by uncentred differences, and the factored (CSR)
    sketch forms its rows' products from raw rows and means (kernel comment): with features
    offset by 1,000 times their spread both still agree to 1e-9 (measured 1e-11 dense,
    5e-11 CSR)."""
    X, y = stream(3, n=300, n_features=10)
    X += 1000.0
    params = {"rank": 2, "eta": 1e-3}
    learner = make_learner("opauc", **params)
    scores = learner.prequential_step(X if kind == "dense" else sp.csr_matrix(X), y)
    reference = reference_for(params, 10)
    assert_close(scores, reference.learn(X, y), rtol=1e-9)
    assert_close(learner.coef_, reference.w, rtol=1e-9)


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
