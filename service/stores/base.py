"""The store protocol: where model configurations, versioned state and event-id memory live
(docs/architecture.md, "Stores").  Every change of a model is one atomic :meth:`Store.commit`
at the caller's expected version carrying a log entry; the state is written later by
:meth:`Store.checkpoint`.  ``incarnation`` changes whenever a model id is re-created, reset or
imported, so a cache keyed by ``(incarnation, version)`` never mistakes a new model for an old
one.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from service.errors import ModelChanged, ModelExists, ModelNotFound, ServiceError

T = TypeVar("T")
#: ids (or model ids) per query or command over many of them: a bounded reply each, well
#: under SQLite's limit of bound parameters
CHUNK = 500


@dataclass
class StoredState:
    """What :meth:`Store.load` returns; ``config`` and ``arrays`` are None when the caller's
    cached ``(incarnation, version)`` is still current."""

    version: int
    incarnation: str
    config: dict[str, Any] | None = None
    arrays: dict[str, np.ndarray] | None = None
    meta: dict[str, str] = field(default_factory=dict)
    #: the version ``arrays`` are the state of (the checkpoint; ``version`` without a log)
    saved: int = 0
    #: the logged ``(version, entry)`` pairs after ``arrays`` (or, without arrays, after the
    #: caller's known version: its cached copy catches up by replaying them), oldest first
    entries: list[tuple[int, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Fence:
    """A queue worker's writer lease (:mod:`service.queue.lease`, Redis only): a commit
    carrying one is written only while ``holder`` holds the lease at ``generation``
    (:class:`~service.errors.LeaseLost` otherwise)."""

    holder: str
    generation: int


@dataclass
class Commit:
    """One atomic, versioned write (see :meth:`Store.commit`)."""

    expected_version: int
    incarnation: str
    #: the change as a log entry (:class:`service.engine.entries.Entry`), appended at the new
    #: version (the state itself is written by :meth:`Store.checkpoint`)
    entry: Any
    #: event ids learned by this write, remembered until ``id_expiry`` (unix seconds)
    learned_ids: Sequence[str] = ()
    id_expiry: float = 0.0
    #: pending labels consumed by this write
    remove_pending: Sequence[str] = ()
    #: ids whose label expired, remembered until ``id_expiry``
    expired_ids: Sequence[str] = ()
    #: checkpoint fields stored with the state (e.g. a queue worker's last stream id)
    meta: dict[str, str] = field(default_factory=dict)
    #: current time (unix seconds), used to forget expired ids
    now: float = 0.0
    #: the writer lease the commit needs (queue workers), None for the HTTP routes
    fence: Fence | None = None
    #: most ids the model remembers as learned (and as expired): beyond it the oldest are
    #: forgotten before their expiry (0: no bound); see ``AUCSTREAM_MAX_REMEMBERED_IDS``
    max_remembered_ids: int = 0


class Store(Protocol):
    """Protocol of every store.  All methods are synchronous and thread-safe; the parameter
    types of the long signatures are declared here once, the implementations name them only."""

    name: str
    #: whether calls may wait on I/O (then the HTTP layer runs them in the thread pool)
    blocking: bool

    def ping(self) -> None:
        """Raise :class:`~service.errors.StoreUnavailable` if the store does not answer."""

    def close(self) -> None: ...

    def create_model(
        self,
        model_id: str,
        config: dict[str, Any],
        arrays: dict[str, np.ndarray],
        incarnation: str,
        *,
        replace: bool = False,
        replaces: str | None = None,
    ) -> int:
        """Create a model (version 1), refused as :func:`creation_refused` says (``replace``:
        wipe an existing one; ``replaces``: a reset, only of that incarnation)."""

    def list_models(self) -> list[str]: ...

    def delete_model(self, model_id: str) -> None: ...

    def load(
        self, model_id: str, known_version: int | None = None, known_incarnation: str | None = None
    ) -> StoredState: ...

    def commit(self, model_id: str, commit: Commit) -> int:
        """Apply ``commit`` atomically; the new version. :class:`~service.errors.StaleVersion`
        when the expected version or incarnation is not current,
        :class:`~service.errors.ModelNotFound` when the model is gone."""

    def checkpoint(
        self, model_id: str, incarnation: str, version: int, arrays: dict[str, np.ndarray]
    ) -> bool:
        """Store ``arrays`` as the state at ``version`` and drop the entries up to it; nothing
        when the model is gone, of another incarnation, or checkpointed at ``version`` or later.
        Whether it was written."""

    def take_turn(self, model_id: str, seconds: float) -> bool:
        """Whether this process holds ``model_id``'s write turn for ``seconds`` now (taken, or
        its own renewed), refusing the others' appends (:mod:`service.engine.turns`)."""

    def turn_taken(self, model_id: str) -> bool:
        """Whether another process holds ``model_id``'s write turn."""

    def release_turn(self, model_id: str) -> None:
        """This process's turn of ``model_id``, if it holds it, ended without an append."""

    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        """Boolean mask: which ``ids`` were learned and are still remembered."""

    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        """Boolean mask: which ``ids`` had a pending label that expired (still remembered)."""

    def put_pending(
        self,
        model_id: str,
        records: dict[str, bytes],
        deadline: float,
        max_records: int | None = None,
        incarnation: str | None = None,
    ) -> None:
        """Keep all ``records`` (features + score of scored events) until ``deadline``, or none:
        :class:`~service.errors.InsufficientStorage` beyond ``max_records``,
        :class:`~service.errors.StaleVersion` when the model is no longer ``incarnation``."""

    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
        """The pending records of ``ids`` that exist, with their deadlines."""

    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        """Up to ``limit`` pending ids whose deadline has passed."""


def writer_token() -> str:
    """This process among the writers of a shared store: host, process id and a random part
    (a process id is reused after a restart, or by a fork)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def no_model(model_id: str) -> ModelNotFound:
    return ModelNotFound(f"no model with id {model_id!r}", field="model_id")


def creation_refused(
    model_id: str, stored: str | None, replace: bool, replaces: str | None
) -> ServiceError | None:
    """Why :meth:`Store.create_model` refuses, ``stored`` being the incarnation under
    ``model_id`` (None: no model): it exists and not ``replace``, or a reset (``replaces``) finds
    none or another incarnation. The Redis script answers the same codes
    (:data:`CREATION_REFUSALS`)."""
    if stored is not None and not replace:
        return CREATION_REFUSALS[-1](model_id)
    if replaces is not None and stored != replaces:  # a reset: only the incarnation it read
        return CREATION_REFUSALS[-2 if stored is None else -3](model_id)
    return None


#: the refusals of :func:`creation_refused` by the code of the Redis store's script
CREATION_REFUSALS = {
    -1: lambda model_id: ModelExists(f"a model with id {model_id!r} already exists", field="id"),
    -2: no_model,
    -3: lambda model_id: ModelChanged(f"model {model_id!r} was re-created during the reset"),
}


def checkpoint_applies(stored: tuple[int, str, int] | None, incarnation: str, version: int) -> bool:
    """Whether :meth:`Store.checkpoint` at ``version`` of ``incarnation`` writes, given the
    model's stored ``(version, incarnation, saved)`` (None: no model)."""
    return stored is not None and stored[1] == incarnation and stored[2] < version <= stored[0]


def pending_full(model_id: str, max_records: int) -> str:
    return (
        f"model {model_id!r} already keeps the most records waiting for labels "
        f"({max_records:,}, AUCSTREAM_MAX_PENDING_RECORDS); send their labels or let them "
        "expire, or score without ids"
    )


@functools.lru_cache(maxsize=4096)
def layout_of(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    """``<dtype>|<shape>`` (``<f8|50``, ``<i8|2,3``; little-endian), cached: a state holds ~100
    arrays of a few dozen layouts. A one-byte dtype loses numpy's "|" (``i1``), the separator."""
    return f"{dtype.str.lstrip('|')}|{','.join(map(str, shape))}"


def decode_array(raw: bytes, layout: str) -> np.ndarray:
    dtype_text, _, shape_text = layout.partition("|")
    dtype = np.dtype(dtype_text)
    if dtype.kind not in "iuf" or dtype.hasobject:
        raise ValueError(f"refusing to decode state array of dtype {dtype_text!r}")
    shape = tuple(int(part) for part in shape_text.split(",")) if shape_text else ()
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def to_little_endian(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array
