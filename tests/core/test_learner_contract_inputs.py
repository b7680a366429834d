"""The shared contract over every registered learner (test_learner_contract.py), for its
inputs: a bad batch is named, typed and changes nothing, labels come in every convention, lists,
float32 and sparse batches score like their dense copies under every scaling, the memory layout
and the blocks of a large batch learn what one whole batch learns, and a validated batch skips
nothing but the checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from core.csr import CSRMatrix
from core.errors import InvalidFeatures
from core.learners import available_learners, learner_class, make_learner
from core.validation import as_features
from tests.core.cases import N_FEATURES, close, learner_cases, states_equal, stream, unless_standard

# svm_pauc's default range [0, 0.1] is degenerate on these small streams; it says so with a
# warning (tests/core/test_svm_pauc.py checks it), which is noise for the contract
pytestmark = pytest.mark.filterwarnings("ignore:svm_pauc. the pAUC surrogate:UserWarning")

ALL = learner_cases()
ONLINE = learner_cases(online_only=True)
SPARSE = learner_cases(sparse_only=True)
NAMES = available_learners()


BAD_INPUTS = [
    ("nan", r"features contain NaN or infinity \(first at row 2\)", 2),
    ("inf", r"features contain NaN or infinity \(first at row 4\)", 4),
    ("width", f"expected {N_FEATURES} features per event, got {N_FEATURES - 1}", None),
    ("label", "labels must be 0/1, -1/\\+1 or bool; got 3", 5),
    ("empty", "empty batch", None),
    ("count", "got 9 labels for 10 events", None),
    ("sparse_nan", r"features contain NaN or infinity \(first at row 2\)", 2),
    ("sparse_width", f"expected {N_FEATURES} features per event, got {N_FEATURES - 1}", None),
]


@pytest.mark.parametrize(("change", "message", "row"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
@pytest.mark.parametrize(("name", "config"), ALL)
def test_bad_batch_is_named_typed_and_changes_nothing(name, config, change, message, row):
    X, y = stream(7)
    model = make_learner(name, **config).partial_fit(X[:100], y[:100])
    before = model.get_state()
    batch_X, batch_y = X[100:110].copy(), y[100:110].copy()
    if change in ("nan", "sparse_nan"):
        batch_X[2, 3] = np.nan
    elif change == "inf":
        batch_X[4, 0] = np.inf
    elif change in ("width", "sparse_width"):
        batch_X = batch_X[:, 1:]
    elif change == "label":
        batch_y[5] = 3
    elif change == "empty":
        batch_X, batch_y = batch_X[:0], batch_y[:0]
    elif change == "count":
        batch_y = batch_y[:-1]
    if change.startswith("sparse"):
        batch_X = sp.csr_matrix(batch_X)
    with pytest.raises(InvalidFeatures, match=message) as info:
        model.prequential_step(batch_X, batch_y)
    assert info.value.row == row
    assert info.value.field == ("labels" if change in ("label", "count") else "features")
    states_equal(before, model.get_state())


@pytest.mark.parametrize(("name", "config"), ALL)
def test_one_class_batches_and_labels_in_every_convention(name, config):
    X, y = stream(7)
    conventions = [
        (np.zeros(30, dtype=int), np.ones(30, dtype=int), y[60:]),
        (-np.ones(30), np.ones(30), np.where(y[60:] == 1, 1, -1)),
        (np.zeros(30, dtype=bool), np.ones(30, dtype=bool), y[60:].astype(bool)),
    ]
    states = []
    for negatives, positives, rest in conventions:
        model = make_learner(name, **config)
        model.partial_fit(X[:30], negatives)  # negatives only
        model.partial_fit(X[30:60], positives)  # positives only
        model.partial_fit(X[60:], rest)
        assert np.isfinite(model.coef_).all()
        states.append(model.get_state())
    states_equal(states[0], states[1])
    states_equal(states[0], states[2])


@pytest.mark.parametrize(("name", "config"), ALL)
def test_float32_lists_and_non_contiguous_inputs_are_coerced(name, config):
    X, y = stream(8)
    X32 = X.astype(np.float32)
    reference = make_learner(name, **config).partial_fit(X32.astype(np.float64), y)
    wide = np.zeros((len(y), 2 * N_FEATURES), dtype=np.float32)
    wide[:, 1::2] = X32
    for variant in (X32, X32.tolist(), wide[:, 1::2], np.asfortranarray(X32)):
        other = make_learner(name, **config).partial_fit(variant, y.tolist())
        states_equal(reference.get_state(), other.get_state())


@pytest.mark.parametrize(("name", "config"), SPARSE)
def test_sparse_batch_scores_like_its_dense_copy(name, config):
    X, y = stream(3, density=0.4)
    config = unless_standard(name, config, "scale")
    dense, sparse = make_learner(name, **config), make_learner(name, **config)
    close(sparse.prequential_step(sp.csr_matrix(X), y), dense.prequential_step(X, y), 1e-10)
    close(sparse.coef_, dense.coef_, 1e-10)
    matrix = sp.csr_matrix(X[:20])
    arrays = (matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64), matrix.data)
    close(
        sparse.decision_function(CSRMatrix(*arrays, N_FEATURES)),
        dense.decision_function(X[:20]),
        1e-10,
    )
    # and a model fed both kinds continues consistently (the same batches all dense: a learner
    # that solves on a window per batch, spdam, depends on the batching)
    mixed, batched = make_learner(name, **config), make_learner(name, **config)
    mixed.partial_fit(X[:100], y[:100])
    mixed.partial_fit(sp.csr_matrix(X[100:200]), y[100:200])
    mixed.partial_fit(X[200:], y[200:])
    for rows in (slice(0, 100), slice(100, 200), slice(200, None)):
        batched.partial_fit(X[rows], y[rows])
    close(mixed.coef_, batched.coef_, 1e-10)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scaling", ["unit_norm", "standard", "scale"])
def test_every_scaling_keeps_the_contract(name, scaling):
    X, y = stream(10)
    X = X * np.array([1.0, 100.0, 0.01, 5.0, 1.0, 1000.0, 3.0]) + 50.0
    at_once = make_learner(name, scaling=scaling)
    scores = at_once.prequential_step(X, y)
    assert np.isfinite(scores).all()
    if learner_class(name).online:
        one_by_one = make_learner(name, scaling=scaling)
        for i in range(len(y)):
            one_by_one.partial_fit(X[i : i + 1], y[i : i + 1])
        states_equal(at_once.get_state(), one_by_one.get_state())
    restored = learner_class(name).from_state(at_once.get_params(), at_once.get_state())
    np.testing.assert_array_equal(restored.decision_function(X), at_once.decision_function(X))


# ------------------------------------------------------------------------- memory layout
@pytest.mark.parametrize("name", ["spam", "solam"])
def test_high_dimensional_sparse_step_touches_only_its_columns(name):
    """spam and solam keep w scaled (w = w_scale * w_unscaled) so a CSR step costs O(nnz)."""
    n_features = 2**20
    rng = np.random.default_rng(10)
    rows = sp.random(200, n_features, density=20 / n_features, format="csr", random_state=rng)
    y = rng.random(200) < 0.5
    model = make_learner(name)
    assert np.isfinite(model.prequential_step(rows, y)).all()
    touched = np.unique(rows.indices)
    assert np.count_nonzero(model.state_["w_unscaled"]) <= touched.size


WIDE_LAYOUT = [case for case in ONLINE if case.values[0] in ("spam", "solam")]


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize(("name", "config"), WIDE_LAYOUT)
def test_interleaved_layout_learns_the_same_bit_for_bit(name, config, sparse, monkeypatch):
    """Wide spam / solam models keep their per-feature arrays interleaved in memory (cache
    locality); the numbers, the stored state and its round trip must not depend on it."""
    X, y = stream(11, n=150, density=0.5 if sparse else 1.0)
    rows = sp.csr_matrix(X) if sparse else X
    separate = make_learner(name, **config)
    separate.partial_fit(rows[:70], y[:70])
    monkeypatch.setattr("core.learners.spam.INTERLEAVE_FROM", 1)
    packed = make_learner(name, **config)
    packed.partial_fit(rows[:70], y[:70])
    assert not packed.state_["w_unscaled"].flags.c_contiguous  # a strided view
    states_equal(packed.get_state(), separate.get_state())
    assert all(value.flags.c_contiguous for value in packed.get_state().values())
    restored = learner_class(name).from_state(packed.get_params(), packed.get_state())
    scores = [m.prequential_step(rows[70:], y[70:]) for m in (separate, packed, restored)]
    assert not restored.state_["w_unscaled"].flags.c_contiguous
    np.testing.assert_array_equal(scores[0], scores[1])
    np.testing.assert_array_equal(scores[0], scores[2])
    states_equal(packed.get_state(), separate.get_state())
    np.testing.assert_array_equal(packed.decision_function(rows), separate.decision_function(rows))
    np.testing.assert_array_equal(packed.coef_, separate.coef_)


# ----------------------------------------------------------------- large dense batches
@pytest.mark.parametrize("name, params", [
    ("spam", {"scaling": "standard"}), ("solam", {"scaling": "unit_norm"}),
    ("logistic", {"scaling": "scale"}), ("oam", {}),
])  # fmt: skip
def test_a_large_batch_is_learned_in_blocks_as_if_whole(name, params, monkeypatch):
    """Above 4 blocks a dense batch is checked and learned block by block (core.learners._base
    BLOCK_BYTES): the result equals learning its events in small batches, bit for bit, and a
    NaN in the last block is refused with its row and leaves the state as it was."""
    import core.learners._base as base

    monkeypatch.setattr(base, "BLOCK_BYTES", 4096)  # blocks of 10 rows of 50 features
    rng = np.random.default_rng(3)
    y = (rng.random(2000) < 0.2).astype(np.int64)
    X = rng.normal(size=(2000, 50)) + y[:, None] * 0.5
    blocked = make_learner(name, **params)
    blocked.partial_fit(X[:5], y[:5])
    assert blocked._blocks(X) is not None
    scores = blocked.prequential_step(X, y)
    reference = make_learner(name, **params).partial_fit(X[:5], y[:5])
    expected = np.concatenate([reference.prequential_step(X[i : i + 7], y[i : i + 7])
                               for i in range(0, 2000, 7)])  # fmt: skip
    np.testing.assert_array_equal(scores, expected)
    states_equal(blocked.get_state(), reference.get_state())
    bad = X.copy()
    bad[1995, 7] = np.nan
    before = blocked.get_state()
    with pytest.raises(InvalidFeatures, match="first at row 1995") as refused:
        blocked.partial_fit(bad, y)
    assert refused.value.row == 1995
    states_equal(blocked.get_state(), before)


@pytest.mark.parametrize("name, params", [
    ("spam", {}), ("spam", {"average": False, "half_life": 300.0}), ("solam", {}),
    ("spam", {"penalty": "elastic_net"}),  # no row-checking kernel: checked first
])  # fmt: skip
def test_a_large_batch_is_checked_by_the_kernel_as_if_checked_first(name, params, monkeypatch):
    """An unscaled dense batch of KERNEL_CHECK_BYTES or more is checked for NaN / infinity by
    the learner's kernel as it learns it (OnlineLearner._learn_rows): the result equals
    learning its events in small, checked-first batches, bit for bit; a NaN or an infinity is
    refused with its row and leaves the state as it was, as is a value beyond the feature
    bound; a row of values within the bound whose ``||x||^2`` is beyond its square stops the
    kernel and is learned as it was without the check."""
    import core.learners._base as base

    monkeypatch.setattr(base, "KERNEL_CHECK_BYTES", 4096)  # 11 rows of 50 features
    rng = np.random.default_rng(4)
    y = (rng.random(2000) < 0.2).astype(np.int64)
    X = rng.normal(size=(2000, 50)) + y[:, None] * 0.5
    checked = make_learner(name, **params)
    checked.partial_fit(X[:5], y[:5])
    assert checked._kernel_may_check(X)
    reference = make_learner(name, **params).partial_fit(X[:5], y[:5])
    assert not reference._kernel_may_check(X[:7])
    np.testing.assert_array_equal(
        checked.prequential_step(X, y),
        np.concatenate([reference.prequential_step(X[i : i + 7], y[i : i + 7])
                        for i in range(0, 2000, 7)]),
    )  # fmt: skip
    states_equal(checked.get_state(), reference.get_state())
    for row, value in ((1995, np.nan), (0, -np.inf), (700, np.inf)):
        bad = X.copy()
        bad[row, 7] = value
        before = checked.get_state()
        with pytest.raises(InvalidFeatures, match=f"first at row {row}\\)") as refused:
            checked.partial_fit(bad, y)
        assert refused.value.row == row
        states_equal(checked.get_state(), before)
    huge = X[:100].copy()
    huge[40, 3] = 1e160  # finite, but beyond the feature bound (its square overflows)
    before = checked.get_state()
    with pytest.raises(InvalidFeatures, match="first at row 40\\)") as refused:
        checked.partial_fit(huge, y[:100])
    assert refused.value.row == 40
    states_equal(checked.get_state(), before)
    near = X[:100].copy()
    near[40, :5] = 5e99  # each value within the bound, ||x||^2 beyond its square
    checked.partial_fit(near, y[:100])
    for i in range(0, 100, 7):
        reference.partial_fit(near[i : i + 7], y[:100][i : i + 7])
    states_equal(checked.get_state(), reference.get_state())


@pytest.mark.parametrize("name", ["spam", "solam"])
def test_a_large_csr_batch_is_checked_by_the_kernel_as_if_checked_first(name, monkeypatch):
    """The same for CSR rows: the kernel proves each row's columns increasing and in range
    before it uses them, and its values finite; a row it cannot prove (columns out of order)
    sends the rest of the batch to the full check, then to the unchecked kernel.  Offences
    are named as before, a column offence anywhere before a NaN."""
    import core.learners._base as base

    monkeypatch.setattr(base, "KERNEL_CHECK_BYTES", 4096)
    rng = np.random.default_rng(6)
    n, width, nnz = 1500, 300, 6
    y = (rng.random(n) < 0.3).astype(np.int64)
    indices = np.sort(np.stack([rng.choice(width, nnz, replace=False) for _ in range(n)]), axis=1)
    data = rng.normal(size=(n, nnz)) + 0.3
    indptr = np.arange(0, n * nnz + 1, nnz)

    def batch(columns=indices, values=data):
        return CSRMatrix(indptr, columns.ravel().copy(), values.ravel().copy(), width)

    def learner():
        model = make_learner(name).partial_fit(batch().take_rows(np.arange(5)), y[:5])
        return model

    checked, reference = learner(), learner()
    assert checked._kernel_may_check(batch())
    shuffled = indices.copy()
    shuffled[700:] = shuffled[700:, ::-1]  # valid rows, columns out of order from row 700
    expected = []
    for start in range(0, n, 7):
        rows = np.arange(start, min(start + 7, n))
        expected.append(reference.prequential_step(batch(shuffled).take_rows(rows), y[rows]))
    np.testing.assert_array_equal(checked.prequential_step(batch(shuffled), y),
                                  np.concatenate(expected))  # fmt: skip
    states_equal(checked.get_state(), reference.get_state())
    offences = [
        ("values", (1200, 2), np.nan, r"NaN or infinity \(first at row 1200\)", 1200),
        ("columns", (900, 3), width, f"index {width} is outside \\[0, {width}\\) \\(row 900\\)",
         900),
        ("columns", (40, 1), -1, r"index -1 is outside", 40),
    ]  # fmt: skip
    for what, (row, entry), value, message, named in offences:
        columns, values = indices.copy(), data.copy()
        (values if what == "values" else columns)[row, entry] = value
        before = checked.get_state()
        with pytest.raises(InvalidFeatures, match=message) as refused:
            checked.partial_fit(batch(columns, values), y)
        assert refused.value.row == named
        states_equal(checked.get_state(), before)
    # a NaN in row 100 and a repeated column in row 1300: the column offence is named
    columns, values = indices.copy(), data.copy()
    values[100, 0] = np.inf
    columns[1300, 2] = columns[1300, 1]
    with pytest.raises(InvalidFeatures, match="row 1300 repeats feature index") as refused:
        checked.partial_fit(batch(columns, values), y)
    assert refused.value.row == 1300


@pytest.mark.parametrize(("name", "config"), ALL)
def test_decision_function_of_a_validated_batch_skips_nothing_but_the_checks(name, config):
    """``check_input=False`` (the service's parsed batches): the same scores, bit for bit, for
    what ``as_features`` returns (a dense array, or a CSR batch for a sparse learner)."""
    X, y = stream(3)
    config = unless_standard(name, config, "scale")
    learner = make_learner(name, **config).partial_fit(X[:200], y[:200])
    rows = [as_features(X[200:], N_FEATURES, accept_sparse=False)]
    if learner_class(name).supports_sparse:
        rows.append(as_features(sp.csr_matrix(X[200:]), N_FEATURES))
    for batch in rows:
        np.testing.assert_array_equal(
            learner.decision_function(batch, check_input=False), learner.decision_function(batch)
        )
