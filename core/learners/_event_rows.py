"""A batch's rows as the kernels take them, and the bound on the dense buffers that keep them
(pmb's, spdam's, svm_pauc's, poise's, ftrl_pauc's and the tree candidates'), in a module of
their own so that a learner using them does not import pmb and its kernels."""

from __future__ import annotations

import numpy as np

from core.csr import CSRMatrix

_NO_INDEX = np.empty(0, dtype=np.int64)
_NO_DATA = np.empty(0, dtype=np.float64)

#: [CHOICE] dense buffers (spdam's, svm_pauc's, poise's, boosted_embedded's): refuse layouts
#: whose buffers would exceed 2**27 floats (1 GiB)
MAX_BUFFER_FLOATS = 2**27


def event_arrays(X):
    """``(X, indptr, indices, data)`` for the kernels: a dense batch with empty CSR arrays, or a
    CSR batch (read row by row, never densified) with an empty ``(0, n_features)`` array."""
    if isinstance(X, CSRMatrix):
        return np.empty((0, X.n_features)), X.indptr, X.indices, X.data
    return X, _NO_INDEX, _NO_INDEX, _NO_DATA


def check_buffer_size(name: str, n_rows: int, n_features: int) -> None:
    if n_rows * n_features > MAX_BUFFER_FLOATS:
        raise ValueError(
            f"{name} keeps {n_rows} dense rows of {n_features} features "
            f"({n_rows * n_features * 8 / 2**30:.1f} GiB), more than the "
            f"{MAX_BUFFER_FLOATS * 8 / 2**30:.0f} GiB allowed; use fewer (e.g. hashed) features "
            "or smaller buffers"
        )
