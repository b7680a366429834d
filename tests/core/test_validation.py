import numpy as np
import pytest
import scipy.sparse as sp

from core.csr import CSRMatrix
from core.errors import InvalidFeatures, InvalidParameter
from core.validation import (
    as_features,
    as_labels,
    as_scores,
    check_batch,
    check_fpr_pair,
    first_nonfinite,
)


@pytest.mark.parametrize(
    "labels, expected",
    [
        ([0, 1, 1, 0], [-1, 1, 1, -1]),
        ([-1, 1], [-1, 1]),
        ([True, False], [1, -1]),
        (np.array([1.0, 0.0]), [1, -1]),
        ([1, 1, 1], [1, 1, 1]),
        ([0], [-1]),
    ],
)
def test_labels_accepted(labels, expected):
    result = as_labels(labels)
    assert result.dtype == np.int64 and result.tolist() == expected


@pytest.mark.parametrize(
    "labels, message",
    [
        ([0, 2], "got 2"),
        ([0.5, 1], "got 0.5"),
        (["a", "b"], "got 'a'"),
        ([0, -1, 1], "mix 0 and -1"),
        ([], "empty batch"),
        ([np.nan, 1], "got nan"),
    ],
)
def test_bad_labels_named(labels, message):
    with pytest.raises(ValueError, match=message):
        as_labels(labels)


def test_features_coerced_once_to_contiguous_float64():
    X = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # non-contiguous float32
    out = as_features(X)
    assert out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, X)
    assert as_features([[1, 2], [3, 4]]).dtype == np.float64


def test_contiguous_float64_batch_is_returned_as_is_and_still_checked():
    X = np.arange(8, dtype=np.float64).reshape(2, 4)
    assert as_features(X, 4) is X and as_features(X) is X
    assert as_features(X, 4, check_finite=False) is X
    # a Fortran-ordered, a 1-d or another width's batch goes the general way
    fortran = np.asfortranarray(X)
    out = as_features(fortran, 4)
    assert out is not fortran and out.flags.c_contiguous
    np.testing.assert_array_equal(out, X)
    assert as_features(X[0], 4).shape == (1, 4)
    X[1, 2] = np.inf
    with pytest.raises(ValueError, match="first at row 1"):
        as_features(X, 4)
    assert as_features(X, 4, check_finite=False) is X  # its rows checked by the caller


@pytest.mark.parametrize(
    "X, message",
    [
        (np.array([[1.0, np.nan]]), "NaN or infinity \\(first at row 0\\)"),
        (np.array([[1.0, 2.0], [np.inf, 0.0]]), "first at row 1"),
        (np.zeros((0, 3)), "empty batch"),
        (np.zeros(3), "2-d array"),
        ([["a", "b"]], "must be numeric"),
        (np.zeros((2, 3)), "expected 4 features per event, got 3"),
    ],
)
def test_bad_features_named(X, message):
    with pytest.raises(ValueError, match=message):
        as_features(X, 4 if message.startswith("expected") else None)


def test_scipy_sparse_becomes_csr_and_round_trips():
    dense = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    batch = as_features(sp.csr_matrix(dense))
    assert isinstance(batch, CSRMatrix)
    assert batch.indices.dtype == np.int64 and batch.data.dtype == np.float64
    np.testing.assert_array_equal(batch.toarray(), dense)
    np.testing.assert_array_equal(as_features(sp.csc_array(dense)).toarray(), dense)
    np.testing.assert_array_equal(batch.take_rows(np.array([2, 1, 1])).toarray(), dense[[2, 1, 1]])


@pytest.mark.parametrize(
    "matrix, message",
    [
        (CSRMatrix(np.array([0, 1]), np.array([5]), np.array([1.0]), 3), "index 5 is outside"),
        (
            CSRMatrix(np.array([0, 2]), np.array([1, 1]), np.array([1.0, 2.0]), 3),
            "row 0 repeats feature index 1",
        ),
        (CSRMatrix(np.array([0, 1]), np.array([0]), np.array([np.nan]), 3), "NaN"),
        (CSRMatrix(np.array([0, 2]), np.array([0]), np.array([1.0]), 3), "malformed"),
    ],
)
def test_bad_sparse_named(matrix, message):
    with pytest.raises(ValueError, match=message):
        as_features(matrix)


def test_csr_from_dense_is_scipys_csr_of_the_array():
    X = np.array([[0.0, 1.5, 0.0], [0.0, 0.0, 0.0], [-2.0, 0.0, 3.0]])
    csr = CSRMatrix.from_dense(X)
    reference = sp.csr_matrix(X)
    assert csr.indptr.tolist() == reference.indptr.tolist()
    assert csr.indices.tolist() == reference.indices.tolist()
    assert csr.data.tolist() == reference.data.tolist() and csr.shape == X.shape
    assert np.array_equal(csr.toarray(), X)


def test_check_batch_counts_labels_against_rows():
    with pytest.raises(ValueError, match="got 1 labels for 2 events"):
        check_batch(np.zeros((2, 2)), [1])


@pytest.mark.parametrize("row_length", [2, 64, 65, 300])
def test_repeated_column_found_in_short_and_long_rows(row_length):
    columns = np.arange(row_length, dtype=np.int64)[::-1].copy()
    ok = CSRMatrix(
        np.array([0, 1, 1 + row_length]),
        np.concatenate([[7], columns]),
        np.ones(1 + row_length),
        1000,
    )
    assert as_features(ok).nnz == 1 + row_length
    columns[row_length // 2] = columns[0]
    bad = CSRMatrix(
        np.array([0, 1, 1 + row_length]),
        np.concatenate([[7], columns]),
        np.ones(1 + row_length),
        1000,
    )
    with pytest.raises(ValueError, match=f"row 1 repeats feature index {columns[0]}"):
        as_features(bad)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.int8, np.float64, np.bool_])
def test_labels_of_every_numeric_dtype_agree_with_the_plain_rule(dtype):
    """The integer fast path (range from two reductions) gives what the plain rule gives."""
    rng = np.random.default_rng(0)
    for values in ([0, 1], [1], [0], [-1, 1], [-1], [1, 1, 0]):
        if dtype in (np.uint8, np.bool_) and -1 in values:
            continue
        labels = rng.choice(np.array(values), size=50).astype(dtype)
        expected = np.array([1 if v == 1 else -1 for v in labels.tolist()], dtype=np.int64)
        got = as_labels(labels)
        assert got.dtype == np.int64 and np.array_equal(got, expected)
        assert not np.shares_memory(got, labels)
    with pytest.raises(ValueError, match="mix 0 and -1"):
        as_labels(np.array([0, -1, 1], dtype=np.int32))
    with pytest.raises(ValueError, match="got 2"):
        as_labels(np.array([0, 2, 1], dtype=np.int64))


def test_a_finite_sum_of_overflowing_values_still_finds_no_nan():
    # 1e308 + 1e308 overflows the sum: the exact check then runs and finds every value finite
    X = np.full((3, 2), 1e308)
    assert first_nonfinite(X) is None
    assert first_nonfinite(X.astype(np.float32).astype(np.float64)) == 0  # float32: infinite
    X[2, 1] = np.inf
    assert first_nonfinite(X) == 5


def test_features_beyond_the_feature_bound_are_refused_though_finite():
    # finite, but their squares overflow: refused by the row, as NaN is
    X = np.full((3, 2), 1.0)
    X[1, 0] = 1e308
    with pytest.raises(
        ValueError, match="beyond the feature bound of \\+-1e\\+100 \\(first at row 1\\)"
    ):
        as_features(X)


@pytest.mark.parametrize("value", [np.nan, -np.inf, 1e200])
@pytest.mark.parametrize("as_csr", [False, True])
def test_a_refused_value_carries_its_row_column_and_value(value, as_csr):
    X = np.ones((4, 5))
    X[2, 3] = value
    X[3, 1] = np.inf  # a later fault is not the one named
    batch = CSRMatrix.from_dense(X) if as_csr else X
    with pytest.raises(InvalidFeatures) as refused:
        as_features(batch, 5, accept_sparse=True)
    assert (refused.value.row, refused.value.column) == (2, 3)
    assert refused.value.value is not None
    np.testing.assert_equal(refused.value.value, value)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_first_nonfinite_finds_the_first_nan_or_infinity(dtype):
    """The vectorised count (float64) and the sum (other dtypes) agree with the plain rule, on
    contiguous and strided arrays."""
    rng = np.random.default_rng(1)
    values = rng.normal(size=(300, 7)).astype(dtype)
    assert first_nonfinite(values) is None
    assert first_nonfinite(values[:, ::3]) is None
    for bad in (np.nan, np.inf, -np.inf):
        for position in (0, 1000, 2099):
            broken = values.copy()
            broken.reshape(-1)[position] = bad
            broken.reshape(-1)[2099] = bad
            assert first_nonfinite(broken) == position
            strided = broken[:, ::2]
            expected = int(np.flatnonzero(~np.isfinite(strided).reshape(-1))[0])
            assert first_nonfinite(strided) == expected


def test_the_csr_structure_check_agrees_with_the_plain_rule():
    """first_bad_csr_entry's fast pass (rows that increase, all in range) and its row-by-row
    path report what sorting each row reports: the first row at fault, out-of-range first."""
    from core._kernels.validation import first_bad_csr_entry

    def plain(indptr, indices, width):
        for row in range(len(indptr) - 1):
            columns = indices[indptr[row] : indptr[row + 1]]
            for column in columns:
                if not 0 <= column < width:
                    return row, column, 1
            ordered = np.sort(columns)
            repeated = ordered[1:][ordered[1:] == ordered[:-1]]
            if repeated.size:
                return row, repeated[0], 2
        return -1, 0, 0

    rng = np.random.default_rng(5)
    for _ in range(2000):
        lengths = rng.integers(0, 5, rng.integers(1, 6))
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        width = int(rng.integers(1, 8))
        indices = rng.integers(-1, width + 1, indptr[-1]).astype(np.int64)
        if rng.random() < 0.5:  # mostly well-formed rows, increasing or not
            for row, length in enumerate(lengths):
                if length <= width:
                    columns = rng.choice(width, length, replace=False)
                    sort = rng.random() < 0.8
                    indices[indptr[row] : indptr[row + 1]] = np.sort(columns) if sort else columns
        got = tuple(int(v) for v in first_bad_csr_entry(indptr, indices, width))
        assert got == tuple(int(v) for v in plain(indptr, indices, width))


@pytest.mark.parametrize(
    "pair",
    [
        "0,0.1", b"01", (0.1,), (0.0, 0.1, 0.2), 0.1, None, {"alpha": 0, "beta": 1},
        (True, 0.5), (0.0, "0.1"), (0.0, None),
    ],
)  # fmt: skip
def test_fpr_pair_of_the_wrong_shape_or_type_names_the_parameter(pair):
    with pytest.raises(InvalidParameter, match=r"^pauc_range: expected \[alpha, beta\], two") as e:
        check_fpr_pair(pair)
    assert e.value.param == "pauc_range"


@pytest.mark.parametrize(
    "pair",
    [(0.1, 0.1), (0.2, 0.1), (-0.1, 0.5), (0.0, 1.5), (float("nan"), 0.5), (0.0, float("nan")),
     (0.0, float("inf")), (float("-inf"), 0.5)],
)  # fmt: skip
def test_fpr_pair_out_of_range_names_the_parameter(pair):
    with pytest.raises(InvalidParameter, match=r"^range: expected 0 <= alpha < beta <= 1") as e:
        check_fpr_pair(pair, param="range")
    assert e.value.param == "range"


def test_fpr_pair_takes_lists_tuples_and_arrays():
    for pair in ([0, 1], (0.0, 0.05), np.array([0.01, 0.2]), [np.int64(0), np.float32(0.5)]):
        alpha, beta = check_fpr_pair(pair)
        assert (alpha, beta) == (float(pair[0]), float(pair[1]))
        assert type(alpha) is float and type(beta) is float


@pytest.mark.parametrize(
    "dtype",
    [np.bool_, np.int8, np.uint16, np.int64, np.float16, np.float32, np.longdouble,
     np.complex64, np.complex128, "m8[s]", "M8[s]", "U3", "S3", object],
)  # fmt: skip
def test_scores_and_features_dtypes_accepted_and_refused_as_numpy_classes_them(dtype):
    """The dtype tests by kind accept exactly numpy's numbers (timedelta64 among them, a
    signed integer to numpy) and bool, and refuse complex numbers apart."""
    values = np.ones((1, 2)).astype(dtype)
    if np.issubdtype(values.dtype, np.complexfloating):
        with pytest.raises(ValueError, match="must be real numbers, got complex values"):
            as_features(values)
        with pytest.raises(ValueError, match="scores must be real numbers"):
            as_scores(values[0])
    elif np.issubdtype(values.dtype, np.number) or values.dtype == np.bool_:
        np.testing.assert_array_equal(as_features(values), np.ones((1, 2)))
        np.testing.assert_array_equal(as_scores(values[0]), np.ones(2))
    else:
        with pytest.raises(ValueError, match="must be numeric, got dtype"):
            as_features(values)
        with pytest.raises(ValueError, match="scores must be numeric"):
            as_scores(values[0])


def test_scores_already_float64_come_back_as_given():
    scores = np.array([0.5, -1.0])
    assert as_scores(scores) is scores
    strided = np.arange(4.0)[::2]
    assert as_scores(strided).flags.c_contiguous and as_scores(strided).tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match="first at position 1"):
        as_scores(np.array([0.0, np.nan]))
