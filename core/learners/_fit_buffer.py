"""The fit buffer of ``boosted_embedded`` (docs/algorithms/boosted_embedded.md
(boosted_embedded.3)): dense rows of labelled events for the trees' fits, a ring of at most
``capacity`` rows that keeps every positive and, once full, a weighted sample of the
negatives (He et al. 2014's negative down-sampling), its arrays grown as it fills.

Its state (in the learner's): ``buffer_X`` / ``buffer_y`` / ``buffer_w`` (rows, labels,
weights; :data:`BUFFER_ARRAYS`, which grow), ``buffer_fill`` (rows held), ``buffer_next`` (the
ring's next slot), ``buffer_written`` (rows ever written), ``buffer_seen`` (positives and
negatives seen, the sampling rate's counts) and ``buffer_rng`` (SplitMix64 state of the
draws).
"""

from __future__ import annotations

import numpy as np

from core._arrays import LABELS, grown
from core._kernels import boosted_embedding as kernels
from core._kernels.random import seed_state
from core.boosted_trees import TREE_KEYS, node_capacity
from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners._growing import Growth
from core.learners._row_pool import RowLink, detach, pooled_rows
from core.learners._state import RNG_STATE, Count, Finite, OneOf, StateInvariant

__all__ = ["BUFFER_ARRAYS", "HELD", "buffer_invariants", "buffer_state", "buffered",
           "check_buffer", "growing_arrays", "held_rows", "held_rows_problem", "hold",
           "oldest_first", "remember"]  # fmt: skip

#: the arrays that grow as the buffer fills (core.learners._growing), rows first
BUFFER_ARRAYS = ("buffer_X", "buffer_y", "buffer_w")


def buffer_state(n_features: int, random_state: int | None) -> dict[str, np.ndarray]:
    """An empty buffer: no rows yet (they grow as it fills)."""

    def counter() -> np.ndarray:
        return np.zeros(1, dtype=np.int64)

    return {
        "buffer_X": np.zeros((0, n_features)),
        "buffer_y": np.zeros(0, dtype=LABELS),
        "buffer_w": np.zeros(0),
        "buffer_next": counter(),
        "buffer_fill": counter(),
        "buffer_written": counter(),
        "buffer_seen": np.zeros(2, dtype=np.int64),
        "buffer_rng": seed_state(random_state),
    }


def buffer_invariants(capacity: int) -> dict[str, StateInvariant]:
    return {
        "buffer_X": Finite(),
        "buffer_y": OneOf((-1, 0, 1)),  # 0: a slot not written yet
        "buffer_w": Finite(0.0),  # >= 1 where written: check_buffer
        "buffer_next": Count(0, capacity - 1),
        "buffer_fill": Count(0, capacity),
        "buffer_written": Count(0),
        "buffer_seen": Count(0),
        "buffer_rng": RNG_STATE,
    }


def check_buffer(state: dict[str, np.ndarray], capacity: int) -> None:
    """The buffer's arrays have one length, which holds its fill; until it is full it was
    written from slot 0 on (its next slot is its fill); its written rows weigh at least 1."""
    rows = state["buffer_X"].shape[0]
    fill, start = int(state["buffer_fill"][0]), int(state["buffer_next"][0])
    for key in BUFFER_ARRAYS[1:]:
        if state[key].shape[0] != rows:
            raise InvalidState(
                f"state array {key!r} has {state[key].shape[0]} rows; 'buffer_X' has {rows}",
                field=key,
            )
    if fill > rows or (fill < capacity and start != fill):
        raise InvalidState(
            f"state array 'buffer_fill' holds {fill} (next slot {start}) in a buffer of {rows} "
            "rows; expected at most its rows, and its next slot until it is full",
            field="buffer_fill",
        )
    if (state["buffer_w"][:fill] < 1.0).any():
        raise InvalidState(
            "state array 'buffer_w' holds a weight below 1 in a written slot (a kept event "
            "weighs the inverse of its sampling rate)",
            field="buffer_w",
        )


def oldest_first(own: dict[str, np.ndarray], capacity: int) -> np.ndarray:
    """The buffer's slots, oldest event first."""
    fill, start = int(own["buffer_fill"][0]), int(own["buffer_next"][0])
    if fill < capacity:
        return np.arange(fill)
    return np.roll(np.arange(capacity), -start)


def buffered(
    own: dict[str, np.ndarray], capacity: int, link: RowLink | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The buffer's rows, labels (int64, as the fit takes them) and weights, oldest first
    (copies; the rows from ``link``'s pool while the buffer's rows are the pool's)."""
    order = oldest_first(own, capacity)
    labels = own["buffer_y"][order].astype(np.int64)
    if pooled_rows(link):  # a pooled buffer has not wrapped nor sampled: its weights are 1
        return link.rows(0, len(order)), labels, np.ones(len(order))
    return own["buffer_X"][order], labels, own["buffer_w"][order]


def remember(
    own: dict[str, np.ndarray],
    X,
    y,
    capacity: int,
    negatives_per_positive: float,
    link: RowLink | None = None,
) -> None:
    """Write the events of ``(X, y)`` that the buffer keeps (boosted_embedded.3; one kernel
    call draws them), growing its arrays first when they lack the slots (geometrically, up to
    ``capacity``).  ``own`` is updated in place (its grown arrays replaced).  While its rows
    are ``link``'s pool's, only the labels are written (the pool has the rows, and every
    weight is 1) until the buffer would wrap or sample: then it takes its rows and weights
    first (:func:`core.learners._row_pool.detach`)."""
    n = len(y)
    fill, start = int(own["buffer_fill"][0]), int(own["buffer_next"][0])
    labels = np.ascontiguousarray(y, dtype=np.int64)
    kept_index = np.empty(n, dtype=np.int64)
    weights = np.empty(n)
    n_kept = kernels.keep_events(
        labels, own["buffer_rng"], own["buffer_seen"], fill, capacity,
        float(negatives_per_positive), kept_index, weights,
    )  # fmt: skip
    if pooled_rows(link) and (n_kept < n or fill + n > capacity):
        detach(link, own, capacity)
    pooled = pooled_rows(link)
    # only the last `capacity` kept rows can stay
    skipped = max(n_kept - capacity, 0)
    index = kept_index[skipped:n_kept]
    if len(index):
        for key in ("buffer_y",) if pooled else BUFFER_ARRAYS:
            own[key] = grown(own[key], fill + n_kept, capacity)
        positions = (start + np.arange(skipped, n_kept)) % capacity
        if not pooled:
            rows = (
                X.take_rows(index).toarray() if isinstance(X, CSRMatrix) else np.asarray(X)[index]
            )
            own["buffer_X"][positions] = rows
            own["buffer_w"][positions] = weights[skipped:n_kept]
        own["buffer_y"][positions] = labels[index]
    own["buffer_next"][0] = (start + n_kept) % capacity
    own["buffer_fill"][0] = min(fill + n_kept, capacity)
    own["buffer_written"][0] += n_kept


#: the rows a learner holds while a fit is pending (``pending_fill`` of them), grown as they come
HELD = ("pending_X", "pending_y")


def growing_arrays(
    buffer_size: int, n_trees: int, max_leaves: int, fit_delay: int
) -> dict[str, Growth]:
    """A boosted learner's arrays that grow as they fill, with their axis and capacity: the
    buffer's, the rows held for a pending fit, and the ensemble's trees (their rows at the
    first fit, their nodes as many as the largest tree has: core.boosted_trees.trimmed_trees)."""
    sizes = dict.fromkeys(BUFFER_ARRAYS, buffer_size) | dict.fromkeys(HELD, fit_delay)
    growing: dict[str, Growth] = {key: (0, int(size)) for key, size in sizes.items()}
    trees = ((0, 1), (int(n_trees), node_capacity(max_leaves)))
    return growing | dict.fromkeys(TREE_KEYS, trees)


def hold(own: dict[str, np.ndarray], X, y: np.ndarray, capacity: int, pooled: bool) -> None:
    """Keep events learned while a fit is pending in ``own``'s held rows (grown as they come,
    at most ``capacity``; their labels alone when the pool has the rows); ``own`` is updated
    in place."""
    held = int(own["pending_fill"][0])
    own.update({key: grown(own[key], held + len(y), capacity) for key in HELD[pooled:]})
    if not pooled:
        rows = X.toarray() if isinstance(X, CSRMatrix) else np.asarray(X)
        own["pending_X"][held : held + len(y)] = rows
    own["pending_y"][held : held + len(y)] = y
    own["pending_fill"][0] = held + len(y)


def held_rows(own: dict[str, np.ndarray], link: RowLink | None) -> tuple[np.ndarray, np.ndarray]:
    """The rows and labels (int64) held for the pending fit (copies)."""
    fill, held = int(own["buffer_fill"][0]), int(own["pending_fill"][0])
    rows = link.rows(fill, fill + held) if pooled_rows(link) else own["pending_X"][:held].copy()
    return rows, own["pending_y"][:held].astype(np.int64)


def held_rows_problem(state: dict[str, np.ndarray]) -> str | None:
    """What is wrong with the rows held for a pending fit (None: nothing): ``pending_X`` and
    ``pending_y`` grow together, and hold at least ``pending_fill`` rows."""
    held = int(state["pending_fill"][0])
    rows, labels = len(state["pending_X"]), len(state["pending_y"])
    if rows != labels:
        return f"{labels} held labels for {rows} held rows"
    if held > rows:
        return f"{held} events held for a pending fit, in fewer rows"
    return None
