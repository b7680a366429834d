"""Rows of events kept sparse, as CSR arrays: ``pmb``'s buffer and positive reservoir.

A store of ``rows`` rows is three state arrays: ``<prefix>_indptr`` (``rows + 1`` offsets),
``<prefix>_indices`` and ``<prefix>_values`` (one entry per non-zero value of a row, its
columns increasing, each once; the entries past ``indptr[-1]`` are zero).  The kernels
(:mod:`core._kernels.pmb`: ``place_row``, ``row_dot``, ``add_row_terms``) replace a row in
place, moving the rows after it, and read each row over its entries: the sums are those of
the dense rows, bit for bit.  The two entry arrays grow as the store fills
(:mod:`core.learners._growing`): a hashed model's rows take what their non-zeros take, not
``rows x n_features`` floats.

An event is placed when the store's arrays hold its entries and the event's (whichever row it
replaces); a kernel that finds no room stops at that event and says how long the arrays must
be (:func:`grow_stores`), so their lengths follow from the events' non-zeros alone, whether
they came dense or CSR: a batch learned at once leaves the state its events learned one at a
time leave.
"""

from __future__ import annotations

import numpy as np

from core._arrays import grown
from core.errors import InvalidState
from core.learners._growing import Growth
from core.learners._state import Count, Finite, Index, StateInvariant

__all__ = [
    "check_store",
    "grow_stores",
    "growing_store",
    "store_capacity",
    "store_invariants",
    "store_state",
]

#: the arrays of a store that grow as it fills (core.learners._growing)
ENTRY_ARRAYS = ("indices", "values")


def store_state(prefix: str, rows: int) -> dict[str, np.ndarray]:
    """An empty store of ``rows`` rows: no entries yet."""
    return {
        f"{prefix}_indptr": np.zeros(rows + 1, dtype=np.int64),
        f"{prefix}_indices": np.zeros(0, dtype=np.int64),
        f"{prefix}_values": np.zeros(0),
    }


def store_capacity(rows: int, n_features: int) -> int:
    """The most entries a store's arrays may need: every row dense, and room for one more
    event's (the room an event is placed with); none for a store without rows."""
    return (rows + 1) * n_features if rows else 0


def store_invariants(prefix: str, n_features: int) -> dict[str, StateInvariant]:
    """The declarations of a store's arrays; how they relate is :func:`check_store`'s."""
    return {
        f"{prefix}_indptr": Count(),
        f"{prefix}_indices": Index(n_features),
        f"{prefix}_values": Finite(),
    }


def growing_store(prefix: str, rows: int, n_features: int) -> dict[str, Growth]:
    """The store's growing arrays for ``_growing_arrays`` (name -> (axis, capacity))."""
    capacity = store_capacity(rows, n_features)
    return {f"{prefix}_{name}": (0, capacity) for name in ENTRY_ARRAYS}


def check_store(state: dict[str, np.ndarray], prefix: str, filled: int) -> None:
    """The store's offsets start at 0, never decrease and end within its entry arrays (of one
    length); the rows from ``filled`` on hold no entry; each row's columns increase and its
    values are non-zero; the entries past the rows are zero.  Raises
    :class:`~core.errors.InvalidState` naming the array at fault."""
    indptr = state[f"{prefix}_indptr"]
    indices, values = state[f"{prefix}_indices"], state[f"{prefix}_values"]

    def refuse(name: str, problem: str) -> None:
        raise InvalidState(f"state array '{prefix}_{name}' {problem}", field=f"{prefix}_{name}")

    if values.shape != indices.shape:
        refuse("values", f"has {values.shape[0]} entries; '{prefix}_indices' has {len(indices)}")
    steps = np.diff(indptr)
    if indptr[0] != 0 or (steps < 0).any():
        refuse("indptr", f"holds {indptr.tolist()}; expected offsets from 0, never decreasing")
    total = int(indptr[-1])
    if total > indices.shape[0]:
        refuse("indptr", f"ends at {total}; the store holds {indices.shape[0]} entries")
    if indptr[filled] != total:
        refuse("indptr", f"gives entries to rows from {filled} on, which hold no event")
    if indices[total:].any() or values[total:].any():
        refuse("values", f"holds non-zero entries past the rows' {total}")
    if not values[:total].all():
        refuse("values", f"holds a zero entry at {int(np.flatnonzero(values[:total] == 0)[0])}")
    # within a row the columns increase: a step down or a repeat is allowed only where a row
    # starts (an entry that is the first of its row)
    repeated = np.diff(indices[:total]) <= 0
    starts = indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < total)]
    repeated[starts - 1] = False
    if repeated.any():
        at = int(np.flatnonzero(repeated)[0]) + 1
        row = int(np.searchsorted(indptr, at, side="right")) - 1
        columns = indices[indptr[row] : indptr[row + 1]].tolist()
        refuse(
            "indices",
            f"holds the columns of row {row} out of order ({columns}); expected them "
            "increasing, each once",
        )


def grow_stores(
    state: dict[str, np.ndarray], prefixes: tuple[str, ...], room: np.ndarray, n_features: int
) -> None:
    """Grow the stores a kernel found short (``room[i]``: the length ``prefixes[i]``'s entry
    arrays need, 0 when they have it) and reset ``room``."""
    for which, prefix in enumerate(prefixes):
        needed = int(room[which])
        if needed:
            rows = state[f"{prefix}_indptr"].shape[0] - 1
            capacity = store_capacity(rows, n_features)
            for name in ENTRY_ARRAYS:
                key = f"{prefix}_{name}"
                state[key] = grown(state[key], needed, capacity)
            room[which] = 0
