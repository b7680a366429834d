"""``auto``'s pool of rows as posted, shared by its candidates that keep rows for their fits
(``boosted_embedded``): each of them keeps the same events in its fit buffer, in the order they
came, until that buffer is full, and holds the events after it while a fit is pending, so one
copy of those rows serves them all.

Its state (auto's own arrays): ``rows_X`` (the rows of events ``rows_from .. rows_from +
rows_fill``, grown as they come, :data:`ROWS`), ``rows_from`` / ``rows_fill``, and
``rows_pooled``: per candidate, the event its buffer's slot 0 holds while its rows are the
pool's (-1: it keeps its own, or keeps none).  A pooled candidate's ``buffer_X``,
``pending_X`` and ``buffer_w`` hold nothing (its weights are 1: it has not sampled): its
buffer is the pool's rows from that event on (``buffer_fill`` of them), its held rows the
``pending_fill`` after them; it has learned every event the pool holds.  It leaves the pool
for good (its rows and weights copied into its own arrays: :func:`detach`) before its buffer
would wrap or sample, the only changes that keep events out of order; its ``restart_tree``
starts its buffer at the next event.  After each segment the pool drops the
rows no pooled candidate holds any more and takes the length its rows need
(:func:`core._arrays.slots_for`), so the state is a function of the events, not of their
batching.

A candidate whose reservoirs are the stream's prefix as auto scaled it (``ftrl_pauc`` with
uniform reservoirs, under auto's ``standard`` scaling) keeps no rows while the pool holds every
event from the first (:class:`PrefixLink`): its rows are auto's scaler replayed from its
initial state over the pool's rows, the same bits (the scaler learns event by event). It
keeps its rows for good (:func:`release_prefix`) before the pool leaves the first event.
"""

from __future__ import annotations

from typing import TypeGuard

import numpy as np

from core._arrays import grown, slots_for
from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners._state import Count, Finite, StateInvariant
from core.preprocessing import initial_scaler_state, scale_batch

__all__ = ["ROWS", "PrefixLink", "RowLink", "anchored", "check_pool", "dense", "detach",
           "keeps_rows", "pool_capacity", "pool_invariants", "pool_state", "pooled_rows",
           "pooled_weights", "prefix_view", "release_prefix", "replays_prefix", "restart_rows",
           "rows_kept", "settle", "unpooled"]  # fmt: skip

#: the one scaling whose replay a candidate's prefix is (``scale`` may come sparse, and
#: ``none`` / ``unit_norm`` models keep no scaler to replay: they keep their rows)
REPLAYED_SCALING = "standard"

#: the pool's arrays that grow as it fills
ROWS = "rows_X"


def pool_state(n_features: int, pooled: list[bool]) -> dict[str, np.ndarray]:
    """An empty pool that every candidate marked in ``pooled`` shares from event 0."""
    return {
        ROWS: np.zeros((0, n_features)),
        "rows_from": np.zeros(1, dtype=np.int64),
        "rows_fill": np.zeros(1, dtype=np.int64),
        "rows_pooled": np.array([0 if kept else -1 for kept in pooled], dtype=np.int64),
    }


def pool_capacity(candidates: list) -> int:
    """The most rows the pool holds: a pooled candidate's buffer and the events held after it."""
    spans = [int(c.buffer_size) + int(c.fit_delay) for c in candidates if keeps_rows(c)]
    return max(spans, default=0)


def keeps_rows(candidate) -> bool:
    """Whether a candidate keeps rows as posted for its fits (the pool serves it)."""
    return getattr(candidate, "pools_rows", False)


def rows_kept(candidates: list, prefix: str) -> list[tuple[str, int, int] | None]:
    """What :func:`check_pool` knows of each candidate (``prefix``: their prefixes' format)."""
    return [
        (prefix.format(k), int(c.buffer_size), int(c.fit_delay)) if keeps_rows(c) else None
        for k, c in enumerate(candidates)
    ]


def pool_invariants(capacity: int) -> dict[str, StateInvariant]:
    return {
        ROWS: Finite(),
        "rows_from": Count(0),
        "rows_fill": Count(0, capacity),
        "rows_pooled": Count(-1),
    }


class RowLink:
    """A candidate's link to its composite's pool (its slot ``index`` in ``rows_pooled``).
    While a segment is learned its rows are the composite's ``_rows_segment`` (dense), the
    events after the pool's: they join the pool when the segment is learned (:func:`settle`)."""

    __slots__ = ("index", "owner")

    def __init__(self, owner, index: int) -> None:
        self.owner, self.index = owner, index

    def first(self) -> int:
        """The event the candidate's buffer starts at (-1: it keeps its own rows)."""
        return int(self.owner._own_state["rows_pooled"][self.index])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Its rows ``start .. stop`` (counted from its buffer's slot 0), a copy."""
        own = self.owner._own_state
        base, end = int(own["rows_from"][0]), int(own["rows_from"][0] + own["rows_fill"][0])
        first = int(own["rows_pooled"][self.index])
        low, high = first + start, first + stop
        pooled = own[ROWS][low - base : max(min(high, end) - base, low - base)]
        if high <= end:
            return pooled.copy()
        segment = self.owner.__dict__["_rows_segment"][max(low, end) - end : high - end]
        return np.concatenate((pooled, segment))

    def restart(self, held: int, fill: int) -> None:
        """Its buffer starts again at the event after those it has (``fill`` + ``held``)."""
        self.owner._own_state["rows_pooled"][self.index] += fill + held
        release_prefix(self.owner)

    def leave(self) -> None:
        self.owner._own_state["rows_pooled"][self.index] = -1
        release_prefix(self.owner)


def replays_prefix(candidate, scaling: str) -> bool:
    """Whether a candidate may keep its rows as the pool's replayed (:class:`PrefixLink`)."""
    return scaling == REPLAYED_SCALING and getattr(candidate, "replays_prefix", False)


def anchored(own: dict[str, np.ndarray]) -> bool:
    """Whether the pool holds every event from the stream's first (a pooled candidate's buffer
    starts there; :func:`check_pool` and :func:`settle` keep ``rows_from`` at the earliest)."""
    if ROWS not in own:
        return False
    marks = [mark for mark in own["rows_pooled"].tolist() if mark >= 0]
    return bool(marks) and min(marks) == 0


class PrefixLink:
    """A candidate's link to the first events' rows as its composite scaled them (for
    ``ftrl_pauc``'s reservoirs while they are the stream's prefix)."""

    __slots__ = ("owner",)

    def __init__(self, owner) -> None:
        self.owner = owner

    def anchored(self) -> bool:
        return anchored(self.owner._own_state)

    def scaled(self, count: int) -> np.ndarray:
        """The rows of events ``0 .. count`` as the composite's scaling gave them: its scaler
        replayed from its initial state (the pool's rows, then the segment's being learned)."""
        own = self.owner._own_state
        fill = int(own["rows_fill"][0])
        rows = own[ROWS][: min(count, fill)]
        if count > fill:
            segment = self.owner.__dict__["_rows_segment"][: count - fill]
            rows = np.concatenate((rows, segment))
        scaler = initial_scaler_state(REPLAYED_SCALING, rows.shape[1])
        return scale_batch(REPLAYED_SCALING, scaler, rows, learn=True)


def release_prefix(owner) -> None:
    """Once the pool no longer starts at the stream's first event (it drops those rows at the
    segment's end, :func:`settle`), the candidates that replay their rows from it keep them."""
    if anchored(owner._own_state):
        return
    for candidate in owner.__dict__.get("_prefix_readers", ()):
        candidate.keep_rows()


def pooled_rows(link: RowLink | None) -> TypeGuard[RowLink]:
    """Whether a learner's rows are its composite's pool's."""
    return link is not None and link.first() >= 0


def restart_rows(link: RowLink | None, own: dict[str, np.ndarray]) -> None:
    """A pooled buffer (``own``: its learner's arrays) starts again at the next event."""
    if pooled_rows(link):
        link.restart(int(own["pending_fill"][0]), int(own["buffer_fill"][0]))


def detach(link: RowLink, own: dict[str, np.ndarray], capacity: int) -> None:
    """The candidate keeps its own rows from now on: its buffer's and its held rows copied from
    the pool into its ``buffer_X`` / ``pending_X`` (the lengths they grow to holding them), and
    its weights into ``buffer_w`` (:func:`pooled_weights`)."""
    fill, held = int(own["buffer_fill"][0]), int(own["pending_fill"][0])
    own["buffer_w"] = pooled_weights(own["buffer_y"])
    rows, width = link.rows(0, fill + held), link.owner._own_state[ROWS].shape[1]
    # the lengths of the labels beside them (grown as they filled)
    own["buffer_X"] = np.zeros((len(own["buffer_y"]), width))
    own["buffer_X"][:fill] = rows[:fill]
    own["pending_X"] = np.zeros((len(own["pending_y"]), width))
    own["pending_X"][:held] = rows[fill:]
    link.leave()


def pooled_weights(labels: np.ndarray) -> np.ndarray:
    """The weights a pooled buffer does not keep, of its ``labels``: 1 in every slot it wrote
    (it never sampled), 0 in the slots never written (label 0), as the buffer grew them."""
    return (labels != 0).astype(np.float64)


def dense(X) -> np.ndarray:
    return X.toarray() if isinstance(X, CSRMatrix) else np.asarray(X)


def settle(own: dict[str, np.ndarray], segment: np.ndarray, capacity: int) -> None:
    """After a segment is learned: the pool holds the events from the earliest pooled
    candidate's start to the segment's end (``segment``: its rows), in the length they need
    (grown in place as they come; taken anew when rows are dropped); nothing when no candidate
    is pooled any more."""
    # the K marks as ints (one C call): this runs after every segment, and numpy's masks on
    # a few slots cost ~2 us
    starts = [mark for mark in own["rows_pooled"].tolist() if mark >= 0]
    start, fill = int(own["rows_from"][0]), int(own["rows_fill"][0])
    end = start + fill
    if not starts:
        if fill or start or len(own[ROWS]):
            own[ROWS] = own[ROWS][:0].copy()
            own["rows_from"][0] = own["rows_fill"][0] = 0
        return
    first = min(starts)
    new = segment[max(first - end, 0) :]
    if first == start:
        own[ROWS] = grown(own[ROWS], fill + len(new), capacity)
        own[ROWS][fill : fill + len(new)] = new
        own["rows_fill"][0] = fill + len(new)
        return
    old = own[ROWS][min(first - start, fill) : fill]
    total = len(old) + len(new)
    rows = np.zeros((min(capacity, slots_for(total)) if total else 0, own[ROWS].shape[1]))
    rows[: len(old)] = old
    rows[len(old) : total] = new
    own[ROWS] = rows
    own["rows_from"][0], own["rows_fill"][0] = first, total


def check_pool(state: dict[str, np.ndarray], pooled: list[tuple[str, int, int] | None]) -> None:
    """The pool's arrays agree: its rows hold its fill, its first event is the earliest pooled
    candidate's start, each pooled candidate (``pooled[k]``: its prefix, buffer size and fit
    delay; None for a candidate that keeps no rows) has learned its last event, keeps no rows
    of its own nor weights (they are 1), and its labels have a length they grow to (the rows'
    lengths, which a pooled candidate does not have, are what relate them otherwise)."""
    marks, start = state["rows_pooled"], int(state["rows_from"][0])
    fill = int(state["rows_fill"][0])

    def refuse(message: str, field: str = "rows_pooled") -> None:
        raise InvalidState(f"inconsistent state: {message}", field=field)

    if len(marks) != len(pooled):
        refuse(f"'rows_pooled' has {len(marks)} entries for {len(pooled)} candidates")
    if fill > state[ROWS].shape[0]:
        refuse(f"'rows_fill' holds {fill} rows in a pool of {state[ROWS].shape[0]}", "rows_fill")
    if not (marks >= 0).any() and (start or fill):
        refuse("the pool holds rows and no candidate is pooled", "rows_fill")
    if (marks >= 0).any() and int(marks[marks >= 0].min()) != start:
        refuse(f"the pool starts at event {start}, no pooled candidate there", "rows_from")
    for mark, kept in zip(marks.tolist(), pooled, strict=True):
        if mark >= 0 and kept is None:
            refuse("a candidate that keeps no rows is marked as pooled")
        if mark < 0 or kept is None:
            continue
        prefix, buffer_size, fit_delay = kept
        held = int(state[f"{prefix}buffer_fill"][0]) + int(state[f"{prefix}pending_fill"][0])
        if mark + held != start + fill:
            refuse(
                f"{prefix[:-1]}'s buffer starts at event {mark} and holds {held} events; the "
                f"pool holds events {start} to {start + fill}"
            )
        for key in ("buffer_X", "pending_X", "buffer_w"):
            if state[prefix + key].shape[0]:
                refuse(f"{prefix[:-1]} keeps rows or weights of its own while pooled",
                       prefix + key)  # fmt: skip
        for key, capacity in (("buffer_y", buffer_size), ("pending_y", fit_delay)):
            length = len(state[prefix + key])
            if length and length != min(capacity, slots_for(length)):
                refuse(f"state array {prefix + key!r} has {length} rows, not a length it grows "
                       "to", prefix + key)  # fmt: skip


def unpooled(state: dict[str, np.ndarray], prefix: str, mark: int) -> dict[str, np.ndarray]:
    """A pooled candidate's arrays (unprefixed) with its rows as it would keep them itself:
    for its own checks."""
    own = {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
    if mark < 0:
        return own
    offset = mark - int(state["rows_from"][0])
    # check_pool found the candidate's events in the pool; its own checks relate its fills to
    # the lengths of its labels (a fill beyond them is refused there)
    fill, held = int(own["buffer_fill"][0]), int(own["pending_fill"][0])
    width = state[ROWS].shape[1]
    for key, labels, first, count in (("buffer_X", "buffer_y", 0, fill),
                                      ("pending_X", "pending_y", fill, held)):  # fmt: skip
        rows = np.zeros((len(own[labels]), width))
        copied = min(count, len(rows))
        rows[:copied] = state[ROWS][offset + first : offset + first + copied]
        own[key] = rows
    own["buffer_w"] = pooled_weights(own["buffer_y"])
    return own


def prefix_view(state: dict[str, np.ndarray], own: dict[str, np.ndarray], candidate,
                scaling: str) -> dict[str, np.ndarray]:  # fmt: skip
    """A candidate's arrays (``own``, unprefixed) as its own checks read them: if it replays
    its reservoirs' rows from the pool (its ``prefix_labels`` hold its events' labels, 1 or 0,
    then zeros), its reservoirs as arrays of their fills' rows (zeros, allocated by no one; the
    rows its arrays may hold are not read) and no labels, once the labels are found to agree
    with its fills and the pool with its events."""
    labels = own.get("prefix_labels")
    if labels is None or not len(labels):
        return own
    positives, negatives = int(own["positive_fill"][0]), int(own["negative_fill"][0])
    count = positives + negatives

    def refuse(message: str, field: str = "prefix_labels") -> None:
        raise InvalidState(f"inconsistent state: {message}", field=field)

    if not replays_prefix(candidate, scaling):
        refuse(f"labels of replayed rows for a candidate that keeps its rows (scaling {scaling})")
    if not anchored(state) or int(state["rows_fill"][0]) != count:
        refuse(f"the reservoirs hold {count} events that the pool does not hold from the first")
    if (int(own["positive_seen"][0]), int(own["negative_seen"][0])) != (positives, negatives):
        refuse("replayed reservoirs are not the stream's prefix", "positive_seen")
    if int(own["negative_admitted"][0]) != negatives:
        refuse("replayed reservoirs are not the stream's prefix", "negative_admitted")
    if count > len(labels) or labels[count:].any():
        refuse(f"the labels do not hold {count} events, then zeros")
    if int(np.count_nonzero(labels[:count])) != positives:
        refuse(f"the labels hold not the {positives} positives of 'positive_fill'")
    width = own["positive_X"].shape[1]
    view = dict(own, prefix_labels=labels[:0])
    view["positive_X"] = np.broadcast_to(np.zeros(width), (positives, width))
    view["negative_X"] = np.broadcast_to(np.zeros(width), (negatives, width))
    return view
