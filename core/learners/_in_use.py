"""The columns in use: ``logistic(max_columns=K)`` learns its Laplace posterior on the first
``K`` distinct columns the stream gives a non-zero value, whatever the model's width
(docs/algorithms/logistic.md (logistic.15)).

A hashed model is 65,536 columns wide, but a stream of a few numbers and categories uses tens
of them; the Laplace solver's ``O(D^2)`` per event is then paid on the columns in use, not on
the width.  The state array ``columns`` (K,) holds the column of each slot, ``-1`` for a free
slot; slots are taken in the order in which columns first appear in the stream (within an
event, in the order of its indices), so a batch learns what its events learn one at a time: a
slot taken for a later event of the batch is still at the prior, untouched, when an earlier
event is learned.  A column first seen once every slot is taken is left out of this learner
(its weight is 0; in ``auto`` the other candidates still see it).
"""

from __future__ import annotations

import numpy as np

from core.csr import CSRMatrix
from core.errors import InvalidState


def free_columns(size: int) -> np.ndarray:
    return np.full(size, -1, dtype=np.int64)


def taken(columns: np.ndarray) -> int:
    """How many slots are taken (they form a prefix: :func:`check_columns`)."""
    return int(np.count_nonzero(columns >= 0))


def _as_csr(X) -> CSRMatrix:
    return X if isinstance(X, CSRMatrix) else CSRMatrix.from_dense(X)


def on_slots(X, columns: np.ndarray, take: bool) -> CSRMatrix:
    """``X`` on the slots: each non-zero value of a column that holds a slot, at that slot (a
    CSR matrix ``len(columns)`` wide); the values of the other columns are left out.  With
    ``take``, a column without a slot first takes a free one, in the order the columns appear
    in ``X`` (rows in order, each row's indices in order), written into ``columns``.

    A dictionary over the taken slots and a loop over the batch's indices: one event holds a
    few, where numpy's set operations would cost more than the solver's update."""
    X = _as_csr(X)
    start, stop = int(X.indptr[0]), int(X.indptr[-1])
    used, size = taken(columns), columns.shape[0]
    slot_of = dict(zip(columns[:used].tolist(), range(used), strict=True))
    slots = []
    for column in X.indices[start:stop].tolist():
        slot = slot_of.get(column)
        if slot is None and take and used < size:
            slot = slot_of[column] = used
            used += 1
        slots.append(-1 if slot is None else slot)
    if take:
        columns[: len(slot_of)] = list(slot_of)  # insertion order: the slots' order
    at = np.array(slots, dtype=np.int64)
    found = at >= 0
    if found.all():
        return CSRMatrix(X.indptr - start, at, X.data[start:stop], size)
    kept = np.zeros(found.shape[0] + 1, dtype=np.int64)
    np.cumsum(found, out=kept[1:])
    data = np.ascontiguousarray(X.data[start:stop][found])
    return CSRMatrix(kept[X.indptr - start], at[found], data, size)


def scatter(weights: np.ndarray, columns: np.ndarray, n_features: int) -> np.ndarray:
    """The slots' weights at their columns, 0 elsewhere (``n_features`` wide)."""
    out = np.zeros(n_features)
    used = taken(columns)
    out[columns[:used]] = weights[:used]
    return out


def check_columns(columns: np.ndarray, n_features: int | None) -> None:
    """Taken slots form a prefix, hold distinct columns inside the width."""
    used = taken(columns)
    if np.any(columns[used:] != -1):
        raise InvalidState(
            "state array 'columns' has a free slot (-1) before a taken one; expected the taken "
            "slots first",
            field="columns",
        )
    held = columns[:used]
    if np.unique(held).shape[0] != used:
        raise InvalidState("state array 'columns' holds a column twice", field="columns")
    if n_features is not None and used and int(held.max()) >= n_features:
        raise InvalidState(
            f"state array 'columns' holds column {int(held.max())}; expected below the model's "
            f"width ({n_features})",
            field="columns",
        )


def check_magnitudes(magnitudes: np.ndarray, columns: np.ndarray) -> None:
    """Each slot's magnitude (``number_prior_variance``) is 0 for a free slot, and for a taken
    one 0, a positive magnitude or -1 (varied)."""
    if np.any(magnitudes[taken(columns) :] != 0.0):
        raise InvalidState(
            "state array 'magnitudes' is not 0 at a free slot; expected 0 before a slot's "
            "first value",
            field="magnitudes",
        )
    if np.any((magnitudes < 0.0) & (magnitudes != -1.0)):
        raise InvalidState(
            "state array 'magnitudes' holds a negative value other than -1; expected 0, a "
            "magnitude, or -1 for a slot whose values varied",
            field="magnitudes",
        )
