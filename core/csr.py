"""The CSR batch that sparse features reach the kernels in: the three arrays of scipy's
layout plus the width, without importing scipy (checked by :mod:`core.validation`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    def rows_from(self, start: int) -> CSRMatrix:
        """Rows ``start`` to the end, as a batch of its own (views of ``indices`` and
        ``data``; only ``indptr`` is rebuilt)."""
        return self.row_range(start, self.shape[0])

    def row_range(self, start: int, stop: int) -> CSRMatrix:
        """Rows ``start`` to ``stop`` (exclusive), as a batch of its own (views of ``indices``
        and ``data``; only ``indptr`` is rebuilt)."""
        first, last = self.indptr[start], self.indptr[stop]
        return CSRMatrix(
            self.indptr[start : stop + 1] - first,
            self.indices[first:last],
            self.data[first:last],
            self.n_features,
        )

    @classmethod
    def from_dense(cls, X: np.ndarray) -> CSRMatrix:
        """The nonzero values of the 2-d array ``X``, row by row."""
        rows, columns = np.nonzero(X)
        indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
        return cls(indptr, columns.astype(np.int64), X[rows, columns], X.shape[1])

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
