"""Structure checks of CSR batches, one pass over the non-zeros."""

import numpy as np

from core._kernels._config import kernel


@kernel
def first_bad_csr_entry(indptr, indices, n_features):
    """Check every row's column indices: all in ``[0, n_features)`` and none repeated.

    Returns ``(-1, 0, 0)`` when the batch is well formed, else ``(row, column, reason)`` for the
    first offence, with reason 1 = out of range and 2 = repeated in the row.  Each row is
    checked on a sorted copy of its indices — insertion sort for the short rows of event
    streams, ``np.sort`` for long ones — which is O(nnz log row_length) and needs no
    (row * width + column) key array for the whole batch.
    """
    scratch = np.empty(64, dtype=np.int64)
    for row in range(len(indptr) - 1):
        start, stop = indptr[row], indptr[row + 1]
        for k in range(start, stop):
            if indices[k] < 0 or indices[k] >= n_features:
                return row, indices[k], 1
        length = stop - start
        if length > 64:
            ordered = np.sort(indices[start:stop])
        else:
            for k in range(length):
                column = indices[start + k]
                position = k
                while position > 0 and scratch[position - 1] > column:
                    scratch[position] = scratch[position - 1]
                    position -= 1
                scratch[position] = column
            ordered = scratch[:length]
        for k in range(1, length):
            if ordered[k] == ordered[k - 1]:
                return row, ordered[k], 2
    return -1, 0, 0
