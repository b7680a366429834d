"""Input coercion shared by every learner: done once per batch, never per event.

Two feature layouts reach the kernels:

* dense: a C-contiguous ``float64`` array of shape ``(n_samples, n_features)``;
* CSR: :class:`CSRMatrix`, the three CSR arrays (``indptr`` int64, ``indices`` int64,
  ``data`` float64) plus ``n_features``.  Any object with a ``tocsr()`` method (a
  ``scipy.sparse`` matrix or array) is converted to it without importing scipy here.

Labels are accepted as {0, 1}, {-1, +1} or bool and returned as ``int64`` values in {-1, +1}.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core._kernels.validation import first_bad_csr_entry
from core.errors import InvalidFeatures

__all__ = [
    "CSRMatrix",
    "as_features",
    "as_labels",
    "check_batch",
    "n_rows",
]


@dataclass(frozen=True)
class CSRMatrix:
    """A compressed-sparse-row batch: row ``i`` holds ``data[indptr[i]:indptr[i+1]]`` at
    columns ``indices[indptr[i]:indptr[i+1]]``.

    Column indices inside a row need not be sorted, but must be unique and lie in
    ``[0, n_features)``; :func:`as_features` checks both.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_features: int

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.indptr) - 1, self.n_features)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def toarray(self) -> np.ndarray:
        """The same batch as a dense ``float64`` array."""
        dense = np.zeros(self.shape, dtype=np.float64)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        dense[rows, self.indices] = self.data
        return dense

    def take_rows(self, rows: np.ndarray) -> CSRMatrix:
        """A new CSR batch made of ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.indptr[rows]
        lengths = self.indptr[rows + 1] - starts
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        gather = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        return CSRMatrix(
            indptr, self.indices[gather].copy(), self.data[gather].copy(), self.n_features
        )


def n_rows(X: np.ndarray | CSRMatrix) -> int:
    return X.shape[0]


def _is_sparse_like(X) -> bool:
    return isinstance(X, CSRMatrix) or (hasattr(X, "tocsr") and hasattr(X, "nnz"))


def as_features(
    X, n_features: int | None = None, *, accept_sparse: bool = True
) -> np.ndarray | CSRMatrix:
    """Validate and coerce a feature batch once.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), scipy sparse matrix or :class:`CSRMatrix`
    n_features : int, optional
        The expected width; a batch of another width is rejected.
    accept_sparse : bool
        Learners whose algorithm needs dense rows set this to False.

    Returns
    -------
    A C-contiguous float64 ndarray, or a :class:`CSRMatrix` with int64 indices and float64 data.

    Raises
    ------
    ValueError
        Naming what was wrong: empty batch, wrong number of dimensions or features,
        NaN or infinite values (with the first offending row), bad sparse structure.
    """
    if _is_sparse_like(X):
        if not accept_sparse:
            raise ValueError(
                "this learner needs dense features; got a sparse matrix "
                "(convert it with .toarray())"
            )
        X = _as_csr(X, n_features)
        values = X.data
        if values.size and not np.isfinite(values).all():
            position = int(np.flatnonzero(~np.isfinite(values))[0])
            row = int(np.searchsorted(X.indptr, position, side="right") - 1)
            raise InvalidFeatures(f"features contain NaN or infinity (first at row {row})", row=row)
        return X

    try:
        array = np.asarray(X)
    except (TypeError, ValueError) as error:
        raise ValueError(f"features could not be read as a numeric array: {error}") from None
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_
    ):
        raise ValueError(f"features must be numeric, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.complexfloating):
        raise ValueError("features must be real numbers, got complex values")
    if array.ndim == 1 and n_features is not None and array.size == n_features:
        array = array.reshape(1, -1)
    if array.ndim != 2:
        raise ValueError(
            f"features must be a 2-d array of shape (n_samples, n_features), got {array.ndim}-d"
        )
    if array.shape[0] == 0:
        raise ValueError("empty batch: features have 0 rows")
    if n_features is not None and array.shape[1] != n_features:
        raise ValueError(f"expected {n_features} features per event, got {array.shape[1]}")
    array = np.ascontiguousarray(array, dtype=np.float64)
    if not np.isfinite(array).all():
        row = int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])
        raise InvalidFeatures(f"features contain NaN or infinity (first at row {row})", row=row)
    return array


def _as_csr(X, n_features: int | None) -> CSRMatrix:
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
        raise ValueError("sparse feature values must be numeric") from None
    width = int(width)
    if indptr.ndim != 1 or len(indptr) < 2:
        raise ValueError("empty batch: sparse features have 0 rows")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(indices):
        raise ValueError(
            "malformed sparse matrix: indptr must start at 0, never decrease, "
            "and end at len(indices)"
        )
    if len(data) != len(indices):
        raise ValueError("malformed sparse matrix: data and indices differ in length")
    if n_features is not None and width != n_features:
        raise ValueError(f"expected {n_features} features per event, got {width}")
    row, column, reason = first_bad_csr_entry(indptr, indices, width)
    if reason == 1:
        raise InvalidFeatures(
            f"sparse feature index {column} is outside [0, {width}) (row {row})", row=row
        )
    if reason == 2:
        # duplicate columns would be summed by some code paths and not others: reject them
        raise InvalidFeatures(f"row {row} repeats feature index {column}", row=row)
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
        raise ValueError(f"labels could not be read as an array: {error}") from None
    if labels.ndim != 1:
        labels = labels.reshape(-1) if labels.ndim == 2 and 1 in labels.shape else labels
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-d, got shape {labels.shape}")
    if labels.size == 0:
        raise ValueError("empty batch: no labels")
    if n_samples is not None and labels.size != n_samples:
        raise ValueError(f"got {labels.size} labels for {n_samples} events")
    if labels.dtype == np.bool_:
        return np.where(labels, 1, -1).astype(np.int64)
    if labels.dtype == object or not np.issubdtype(labels.dtype, np.number):
        bad = next((v for v in labels.tolist() if v not in (0, 1, -1) or isinstance(v, str)), None)
        raise ValueError(f"labels must be 0/1, -1/+1 or bool; got {bad!r} (dtype {labels.dtype})")
    valid = (labels == 1) | (labels == 0) | (labels == -1)
    if not valid.all():
        bad = labels[~valid][0]
        raise ValueError(f"labels must be 0/1, -1/+1 or bool; got {bad.item()!r}")
    if (labels == 0).any() and (labels == -1).any():
        raise ValueError("labels mix 0 and -1; use {0, 1} or {-1, +1}, not both")
    return np.where(labels == 1, 1, -1).astype(np.int64)


def check_batch(X, y, n_features: int | None = None, *, accept_sparse: bool = True):
    """Validate a labelled batch whole: ``(features, labels_pm1)``."""
    features = as_features(X, n_features, accept_sparse=accept_sparse)
    labels = as_labels(y, n_rows(features))
    return features, labels
