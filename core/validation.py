"""Input coercion shared by every learner: done once per batch, never per event.

Two feature layouts reach the kernels:

* dense: a C-contiguous ``float64`` array of shape ``(n_samples, n_features)``;
* CSR: :class:`CSRMatrix`, the three CSR arrays (``indptr`` int64, ``indices`` int64,
  ``data`` float64) plus ``n_features``.  Any object with a ``tocsr()`` method (a
  ``scipy.sparse`` matrix or array) is converted to it without importing scipy here.

Feature values must be finite and of magnitude at most :data:`FEATURE_BOUND` (1e100): learning
squares and sums them, and the bound keeps every such sum finite (see its note).

Labels are accepted as {0, 1}, {-1, +1} or bool and returned as ``int64`` values in {-1, +1}.
Scores (of the metrics) are finite float64 vectors; an FPR range is ``0 <= alpha < beta <= 1``.

This module is the only home of these checks.  Bad features or labels raise
:class:`~core.errors.InvalidFeatures` with ``row`` set where one event is at fault; a bad FPR
range raises :class:`~core.errors.InvalidParameter` naming ``alpha`` or ``beta``.  Both are
ValueErrors.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from core._kernels.validation import (
    FEATURE_BOUND,
    count_nonfinite,
    count_out_of_range,
    first_bad_csr_entry,
    labels_to_pm1,
)
from core.csr import CSRMatrix
from core.errors import InvalidFeatures, InvalidParameter

__all__ = [
    "FEATURE_BOUND",
    "as_csr",
    "as_features",
    "as_labels",
    "as_scores",
    "check_batch",
    "check_fpr_pair",
    "check_fpr_range",
    "check_labelled_scores",
    "check_rows",
    "first_nonfinite",
    "first_out_of_range",
    "rows_out_of_range",
    "n_rows",
    "row_of_entry",
    "row_range",
]


def n_rows(X: np.ndarray | CSRMatrix) -> int:
    return X.shape[0]


def row_range(X: np.ndarray | CSRMatrix, start: int, stop: int) -> np.ndarray | CSRMatrix:
    """Rows ``start`` to ``stop`` (exclusive) of a dense or CSR batch, as views."""
    return X.row_range(start, stop) if isinstance(X, CSRMatrix) else X[start:stop]


def _is_sparse_like(X) -> bool:
    return isinstance(X, CSRMatrix) or (hasattr(X, "tocsr") and hasattr(X, "nnz"))


def width_refused(n_features: int, got: int) -> str:
    """What refuses events of ``got`` features for a model of ``n_features`` (every path that
    checks the width, the service's parsers included, says it so)."""
    return f"expected {n_features} features per event, got {got}"


def as_features(
    X, n_features: int | None = None, *, accept_sparse: bool = True, check_finite: bool = True
) -> np.ndarray | CSRMatrix:
    """Validate and coerce a feature batch once.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), scipy sparse matrix or :class:`CSRMatrix`
    n_features : int, optional
        The expected width; a batch of another width is rejected.
    accept_sparse : bool
        Learners whose algorithm needs dense rows set this to False.
    check_finite : bool
        False leaves the checks of each row to the caller, who must make them (with
        :func:`check_rows`) before any row is used: NaN / infinity, and for a CSR batch its
        column indices (in range, none repeated; its ``indptr`` is checked here).  A learner
        checks a large dense batch block by block, each block just before learning it, while
        it is in cache, or lets its kernel check each row as it reads it
        (``OnlineLearner._learn_rows``).

    Returns
    -------
    A C-contiguous float64 ndarray, or a :class:`CSRMatrix` with int64 indices and float64 data.

    Raises
    ------
    ValueError
        Naming what was wrong: empty batch, wrong number of dimensions or features,
        NaN or infinite values (with the first offending row), bad sparse structure.
    """
    if (
        type(X) is np.ndarray
        and X.dtype == np.float64
        and X.ndim == 2
        and X.shape[0]
        and (n_features is None or X.shape[1] == n_features)
        and X.flags.c_contiguous
    ):  # the common case (the service's parsed batches): nothing to coerce, nothing refused
        if check_finite:
            check_finite_rows(X)
        return X
    if _is_sparse_like(X):
        if not accept_sparse:
            raise InvalidFeatures(
                "this learner needs dense features; got a sparse matrix "
                "(convert it with .toarray())"
            )
        X = as_csr(X, n_features, check_columns=check_finite)
        if check_finite:
            _check_csr_values(X)
        return X

    array = _real_array(X, "features", InvalidFeatures)
    if array.ndim == 1 and n_features is not None and array.size == n_features:
        array = array.reshape(1, -1)
    if array.ndim != 2:
        raise InvalidFeatures(
            f"features must be a 2-d array of shape (n_samples, n_features), got {array.ndim}-d"
        )
    if array.shape[0] == 0:
        raise InvalidFeatures("empty batch: features have 0 rows")
    if n_features is not None and array.shape[1] != n_features:
        raise InvalidFeatures(width_refused(n_features, array.shape[1]))
    array = np.ascontiguousarray(array, dtype=np.float64)
    if check_finite:
        check_finite_rows(array)
    return array


def check_finite_rows(array: np.ndarray, first_row: int = 0) -> None:
    """Raise :class:`~core.errors.InvalidFeatures` naming the first row of the dense batch
    ``array`` with a NaN, an infinity or a value beyond :data:`FEATURE_BOUND` (rows counted
    from ``first_row``)."""
    position = first_out_of_range(array)
    if position is not None:
        row, column = divmod(position, array.shape[1])
        raise _out_of_range(array.reshape(-1)[position], first_row + row, column)


def _out_of_range(value: float, row: int, column: int) -> InvalidFeatures:
    value = float(value)
    if np.isfinite(value):
        detail = (
            f"{value!r}, beyond the feature bound of +-{FEATURE_BOUND:g} (first at row {row}): "
            "rescale such features (e.g. take their logarithm)"
        )
    else:
        detail = f"NaN or infinity (first at row {row})"
    return InvalidFeatures(f"features contain {detail}", row=row, column=column, value=value)


def check_rows(features: np.ndarray | CSRMatrix, first_row: int = 0) -> None:
    """The checks :func:`as_features` leaves to the caller with ``check_finite=False``, in
    its order: a CSR batch's column indices, then NaN / infinity; rows counted from
    ``first_row`` in the errors."""
    if isinstance(features, CSRMatrix):
        _check_csr_columns(features.indptr, features.indices, features.n_features, first_row)
        _check_csr_values(features, first_row)
    else:
        check_finite_rows(features, first_row)


def _check_csr_columns(indptr, indices, width: int, first_row: int = 0) -> None:
    row, column, reason = first_bad_csr_entry(indptr, indices, width)
    row = int(row) + first_row
    if reason == 1:
        raise InvalidFeatures(
            f"sparse feature index {column} is outside [0, {width}) (row {row})", row=row
        )
    if reason == 2:
        # duplicate columns would be summed by some code paths and not others: reject them
        raise InvalidFeatures(f"row {row} repeats feature index {column}", row=row)


def _check_csr_values(X: CSRMatrix, first_row: int = 0) -> None:
    position = first_out_of_range(X.data)
    if position is not None:
        row = first_row + row_of_entry(X.indptr, position)
        raise _out_of_range(X.data[position], row, int(X.indices[position]))


def _real_array(values, what: str, error: type[ValueError]) -> np.ndarray:
    """``values`` as an array of real numbers (bool included), else ``error`` naming ``what``."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as problem:
        raise error(f"{what} could not be read as a numeric array: {problem}") from None
    kind = array.dtype.kind
    if kind not in _REAL_KINDS:
        if kind == "c":
            raise error(f"{what} must be real numbers, got complex values")
        raise error(f"{what} must be numeric, got dtype {array.dtype}")
    return array


#: dtype kinds (``dtype.kind``), tested instead of np.issubdtype (~3.5 us a call on a
#: one-event request): np.number's, np.integer's (timedelta64 is a signed integer to numpy),
#: and the real values a feature or score may hold (numbers but complex, and bool)
_NUMBER_KINDS = frozenset("iufcm")
_INTEGER_KINDS = frozenset("ium")
_REAL_KINDS = (_NUMBER_KINDS - {"c"}) | {"b"}

_FLOAT64 = np.dtype(np.float64)


def first_nonfinite(values: np.ndarray) -> int | None:
    """The flat (C-order) position of the first NaN or infinity in ``values``, or None."""
    if values.dtype == np.float64:
        # one vectorised read proves the common case (all finite); the position is looked
        # for only in a batch that is refused
        if count_nonfinite(values.reshape(-1)) == 0:
            return None
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            total = values.sum()
        # a finite sum proves every value finite (an infinite sum of finite values, an
        # overflow, falls through to the exact check)
        if np.isfinite(total):
            return None
    finite = np.isfinite(values)
    if finite.all():
        return None
    return int(np.flatnonzero(~finite.reshape(-1))[0])


def first_out_of_range(values: np.ndarray, bound: float = FEATURE_BOUND) -> int | None:
    """The flat (C-order) position of the first NaN, infinity or value of magnitude above
    ``bound`` in the float64 ``values``, or None: the check of feature values, one vectorised
    read (the position is looked for only in a batch that is refused)."""
    flat = values.reshape(-1)
    if count_out_of_range(flat, bound) == 0:
        return None
    with np.errstate(invalid="ignore"):
        return int(np.flatnonzero(~(np.abs(flat) <= bound))[0])


def rows_out_of_range(X: np.ndarray | CSRMatrix, bound: float = FEATURE_BOUND) -> np.ndarray:
    """A boolean mask of the rows of a dense or CSR batch holding a NaN, an infinity or a value
    of magnitude above ``bound`` (for callers that drop such rows one by one rather than refuse
    the batch)."""
    values = X.data if isinstance(X, CSRMatrix) else X
    bad = np.zeros(X.shape[0], dtype=bool)
    if count_out_of_range(values.reshape(-1), bound) == 0:
        return bad
    with np.errstate(invalid="ignore"):
        outside = ~(np.abs(values) <= bound)
    if isinstance(X, CSRMatrix):
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        bad[rows[outside]] = True
        return bad
    return outside.any(axis=1)


def row_of_entry(indptr, position: int) -> int:
    """The row of a CSR matrix that holds its ``position``-th stored entry."""
    return int(np.searchsorted(np.asarray(indptr), position, side="right") - 1)


def as_csr(X, n_features: int | None = None, check_columns: bool = True) -> CSRMatrix:
    """Check the structure of a :class:`CSRMatrix` or scipy sparse batch; coerce its arrays.

    Values are not checked for NaN here (:func:`as_features` does it, naming the row), nor,
    with ``check_columns=False``, the column indices (:func:`check_rows` does it then).
    """
    if isinstance(X, CSRMatrix):
        indptr, indices, data, width = X.indptr, X.indices, X.data, X.n_features
    else:
        csr = X.tocsr()
        indptr, indices, data, width = csr.indptr, csr.indices, csr.data, csr.shape[1]
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    try:
        data = np.ascontiguousarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidFeatures("sparse feature values must be numeric") from None
    width = int(width)
    if indptr.ndim != 1 or len(indptr) < 2:
        raise InvalidFeatures("empty batch: sparse features have 0 rows")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(indices):
        raise InvalidFeatures(
            "malformed sparse matrix: indptr must start at 0, never decrease, "
            "and end at len(indices)"
        )
    if len(data) != len(indices):
        raise InvalidFeatures("malformed sparse matrix: data and indices differ in length")
    if n_features is not None and width != n_features:
        raise InvalidFeatures(width_refused(n_features, width))
    if check_columns:
        _check_csr_columns(indptr, indices, width)
    return CSRMatrix(indptr, indices, data, width)


def as_labels(y, n_samples: int | None = None) -> np.ndarray:
    """Coerce labels given as {0, 1}, {-1, +1} or bool into int64 values in {-1, +1}.

    A batch mixing 0 and -1 is ambiguous (which one is the negative class?) and rejected.

    >>> as_labels([0, 1, True]).tolist()
    [-1, 1, 1]
    >>> as_labels([-1, 1]).tolist()
    [-1, 1]
    """
    try:
        labels = np.asarray(y)
    except (TypeError, ValueError) as error:
        raise InvalidFeatures(
            f"labels could not be read as an array: {error}", field="labels"
        ) from None
    if labels.ndim != 1:
        labels = labels.reshape(-1) if labels.ndim == 2 and 1 in labels.shape else labels
    if labels.ndim != 1:
        raise InvalidFeatures(f"labels must be 1-d, got shape {labels.shape}", field="labels")
    if labels.size == 0:
        raise InvalidFeatures("empty batch: no labels", field="labels")
    if n_samples is not None and labels.size != n_samples:
        raise InvalidFeatures(f"got {labels.size} labels for {n_samples} events", field="labels")
    if labels.dtype == np.int64:  # the common case: one vectorised pass, numpy's take three
        converted = np.empty(labels.size, dtype=np.int64)
        if labels_to_pm1(labels, converted):
            return converted
    if labels.dtype == np.bool_:
        return np.where(labels, 1, -1).astype(np.int64)
    kind = labels.dtype.kind
    if kind not in _NUMBER_KINDS:
        values = labels.tolist()
        row = next(
            (i for i, v in enumerate(values) if v not in (0, 1, -1) or isinstance(v, str)), None
        )
        bad = None if row is None else values[row]
        raise InvalidFeatures(
            f"labels must be 0/1, -1/+1 or bool; got {bad!r} (dtype {labels.dtype})",
            row=row,
            field="labels",
        )
    if kind in _INTEGER_KINDS and labels.size:
        # integers: the range says it all in two vectorised reductions (most batches)
        low, high = int(labels.min()), int(labels.max())
        if -1 <= low and high <= 1 and not (low == -1 and (labels == 0).any()):
            as_int = labels.astype(np.int64, copy=False)
            return as_int.copy() if low == -1 else 2 * as_int - 1
    valid = (labels == 1) | (labels == 0) | (labels == -1)
    if not valid.all():
        row = int(np.flatnonzero(~valid)[0])
        raise InvalidFeatures(
            f"labels must be 0/1, -1/+1 or bool; got {labels[row].item()!r}",
            row=row,
            field="labels",
        )
    if (labels == 0).any() and (labels == -1).any():
        raise InvalidFeatures(
            "labels mix 0 and -1; use {0, 1} or {-1, +1}, not both", field="labels"
        )
    return np.where(labels == 1, 1, -1).astype(np.int64)


def check_batch(
    X, y, n_features: int | None = None, *, accept_sparse: bool = True, check_finite: bool = True
):
    """Validate a labelled batch whole: ``(features, labels_pm1)`` (``check_finite``: see
    :func:`as_features`)."""
    features = as_features(X, n_features, accept_sparse=accept_sparse, check_finite=check_finite)
    labels = as_labels(y, n_rows(features))
    return features, labels


def as_scores(scores) -> np.ndarray:
    """Coerce scores to a finite 1-d float64 array (a column or row vector is flattened)."""
    if type(scores) is np.ndarray and scores.dtype is _FLOAT64 and scores.ndim == 1:
        array = scores  # the common case (a learner's scores): nothing to read or convert
    else:
        array = _real_array(scores, "scores", ValueError)
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise ValueError(f"scores must be 1-d, got shape {array.shape}")
    array = np.ascontiguousarray(array, dtype=np.float64)
    position = first_nonfinite(array)
    if position is not None:
        raise ValueError(
            f"scores contain NaN or infinity (first at position {position}, value "
            f"{array[position]!r}); only finite scores can be ranked"
        )
    return array


def check_labelled_scores(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    """``(labels in {-1, +1} as int64, scores as float64)``, validated together."""
    if (
        isinstance(y_true, np.ndarray)
        and isinstance(scores, np.ndarray)
        and y_true.shape == scores.shape == (1,)
        and y_true.dtype == np.int64
        and scores.dtype == np.float64
        and (y_true[0] == 1 or y_true[0] == -1)
        and math.isfinite(scores[0])
    ):
        # a request's one event, already a sign and a float: numpy's checks cost microseconds
        # on one value
        return y_true, scores
    score_array = as_scores(scores)
    labels = np.asarray(y_true)
    n_labels = labels.size if labels.ndim else 1
    if n_labels != score_array.size:
        raise ValueError(
            f"y_true and scores differ in length: {n_labels} labels, {score_array.size} scores"
        )
    if score_array.size == 0:
        raise ValueError("empty input: y_true and scores hold no events")
    return as_labels(labels), score_array


def check_fpr_range(alpha, beta, *, param: str | None = None) -> tuple[float, float]:
    """Check a false-positive-rate range ``0 <= alpha < beta <= 1``; ``(alpha, beta)`` as floats.

    The one check of an FPR range: the pAUC metrics, the pAUC learners, ``auto``'s and the tree
    embedding's ``pauc_range`` and the service's schema all call it (a range given as one
    ``[alpha, beta]`` value through :func:`check_fpr_pair`).  Each bound must be a real number
    (not a bool), which rejects NaN and the infinities by the range itself.  The error is an
    :class:`~core.errors.InvalidParameter` whose ``param`` names the bound at fault, or
    ``param`` when the two bounds are one parameter (``"pauc_range"``), whose name then leads
    the message.

    >>> check_fpr_range(0, 0.1)
    (0.0, 0.1)
    >>> check_fpr_range(0.2, 0.1)
    Traceback (most recent call last):
    ...
    core.errors.InvalidParameter: Expected beta in (alpha, 1], got: 0.1 (an FPR range needs 0 <= alpha < beta <= 1; alpha=0.2)
    >>> check_fpr_range(0.2, 0.1, param="pauc_range")
    Traceback (most recent call last):
    ...
    core.errors.InvalidParameter: pauc_range: expected 0 <= alpha < beta <= 1, got [0.2, 0.1]
    """  # noqa: E501
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            if param is not None:
                raise InvalidParameter(
                    f"{param}: expected [alpha, beta], two numbers, got {[alpha, beta]!r}",
                    param=param,
                )
            raise InvalidParameter(f"{name} must be a real number, got: {value!r}", param=name)
    alpha, beta = float(alpha), float(beta)
    if param is not None:
        if not 0.0 <= alpha < beta <= 1.0:  # also rejects NaN and the infinities
            raise InvalidParameter(
                f"{param}: expected 0 <= alpha < beta <= 1, got {[alpha, beta]!r}", param=param
            )
        return alpha, beta
    if not 0.0 <= alpha < 1.0:  # also rejects NaN
        raise InvalidParameter(
            f"Expected alpha in [0, beta), got: {alpha!r} (an FPR range needs "
            "0 <= alpha < beta <= 1)",
            param="alpha",
        )
    if not alpha < beta <= 1.0:
        raise InvalidParameter(
            f"Expected beta in (alpha, 1], got: {beta!r} (an FPR range needs "
            f"0 <= alpha < beta <= 1; alpha={alpha!r})",
            param="beta",
        )
    return alpha, beta


def check_fpr_pair(pair, param: str = "pauc_range") -> tuple[float, float]:
    """:func:`check_fpr_range` of a range given as one value ``[alpha, beta]`` (a list, tuple
    or array of two numbers; not a string), every error naming ``param``.

    >>> check_fpr_pair([0, 0.05])
    (0.0, 0.05)
    >>> check_fpr_pair("0,0.1")
    Traceback (most recent call last):
    ...
    core.errors.InvalidParameter: pauc_range: expected [alpha, beta], two numbers, got '0,0.1'
    """
    if isinstance(pair, str | bytes | dict) or not hasattr(pair, "__len__") or len(pair) != 2:
        raise InvalidParameter(
            f"{param}: expected [alpha, beta], two numbers, got {pair!r}", param=param
        )
    return check_fpr_range(pair[0], pair[1], param=param)
