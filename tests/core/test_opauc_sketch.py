"""Low-rank OPAUC's sketch (``core.learners.opauc`` with ``rank``) against the SVD of the plain
reference in ``tests.core.naive.baselines`` and an explicit kernel: its factored basis, its
rebuilds over CSR streams, and how close it comes to the full-rank gradient."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.learners import make_learner
from core.learners.opauc import DEFAULT_ETA_SCALE
from tests.core.cases import states_equal
from tests.core.opauc_helpers import assert_close, reference_for, stream


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
