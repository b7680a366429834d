"""The in-memory store (``--store memory``: tests and throwaway runs; one process, lost at exit):
a checkpoint encoded as the other stores write it (:mod:`.fields`) and the entry objects
committed since, so a cache dropped after a failed write is always rebuilt (docs/architecture.md,
"Stores")."""

from __future__ import annotations

import copy
import heapq
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.errors import InsufficientStorage, StaleVersion
from service.stores.base import (
    Commit,
    StoredState,
    checkpoint_applies,
    creation_refused,
    no_model,
    pending_full,
)
from service.stores.fields import decode_fields, encode_fields


@dataclass
class _Model:
    config: dict[str, Any]
    incarnation: str
    version: int
    #: the checkpoint: the state's fields and layouts at version ``saved``
    fields: tuple[dict[str, bytes], dict[str, str]]
    saved: int
    #: the entries committed after ``saved``: (version, entry), oldest first
    entries: list[tuple[int, Any]] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    #: ids remembered -> expiry, oldest first (the order in which a bound forgets them)
    seen: OrderedDict[str, float] = field(default_factory=OrderedDict)
    expired: OrderedDict[str, float] = field(default_factory=OrderedDict)
    pending: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    #: (deadline, id) min-heap over ``pending``; entries whose id was consumed or re-scored
    #: since are skipped lazily
    deadlines: list[tuple[float, str]] = field(default_factory=list)
    next_forget: float = 0.0


def _encoded(arrays: dict[str, np.ndarray]) -> tuple[dict[str, bytes], dict[str, str]]:
    """:func:`encode_fields`, with the names and layouts interned: every model of a kind
    repeats them, and one copy of each serves them all."""
    fields, layouts = encode_fields(arrays)
    return (
        {sys.intern(name): data for name, data in fields.items()},
        {sys.intern(name): sys.intern(layout) for name, layout in layouts.items()},
    )


class MemoryStore:
    name = "memory"
    #: never waits on I/O: the HTTP layer calls it on the event loop (see service.offload)
    blocking = False

    def __init__(self) -> None:
        self._models: dict[str, _Model] = {}
        self._lock = threading.Lock()

    def ping(self) -> None:
        return None

    def close(self) -> None:
        return None

    def _get(self, model_id: str) -> _Model:
        try:
            return self._models[model_id]
        except KeyError:
            raise no_model(model_id) from None

    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        with self._lock:
            stored = self._models.get(model_id)
            incarnation_stored = None if stored is None else stored.incarnation
            refused = creation_refused(model_id, incarnation_stored, replace, replaces)
            if refused is not None:
                raise refused
            self._models[model_id] = _Model(
                copy.deepcopy(config),
                incarnation,
                1,
                _encoded(arrays),
                1,
                meta={"incarnation": incarnation},
            )
            return 1

    def list_models(self) -> list[str]:
        with self._lock:
            return sorted(self._models)

    def delete_model(self, model_id: str) -> None:
        with self._lock:
            self._get(model_id)
            del self._models[model_id]

    def load(self, model_id, known_version=None, known_incarnation=None) -> StoredState:
        with self._lock:
            model = self._get(model_id)
            if model.incarnation == known_incarnation and known_version is not None:
                if model.version == known_version:
                    return StoredState(model.version, model.incarnation)
                if model.saved <= known_version < model.version:  # the cache catches up
                    tail = [pair for pair in model.entries if pair[0] > known_version]
                    return StoredState(
                        model.version, model.incarnation, meta=dict(model.meta), entries=tail
                    )
            return StoredState(
                model.version,
                model.incarnation,
                copy.deepcopy(model.config),
                decode_fields(*model.fields),
                dict(model.meta),
                saved=model.saved,
                entries=list(model.entries),
            )

    def commit(self, model_id: str, commit: Commit) -> int:
        with self._lock:
            model = self._get(model_id)
            if model.version != commit.expected_version or model.incarnation != commit.incarnation:
                raise StaleVersion(model_id)
            model.entries.append((model.version + 1, commit.entry))
            model.meta.update(commit.meta)
            for memory, ids in ((model.seen, commit.learned_ids),
                                (model.expired, commit.expired_ids)):  # fmt: skip
                self._remember(memory, ids, commit.id_expiry, commit.max_remembered_ids)
            for event_id in commit.remove_pending:
                model.pending.pop(event_id, None)
            if commit.now >= model.next_forget:
                # a dict has no index by expiry: sweep at most once a minute, O(ids remembered)
                model.next_forget = commit.now + 60.0
                self._forget(model.seen, commit.now)
                self._forget(model.expired, commit.now)
            model.version += 1
            return model.version

    # one process: no other writer to take turns with (service.engine.turns)
    def take_turn(self, model_id: str, seconds: float) -> bool:
        return True

    def turn_taken(self, model_id: str) -> bool:
        return False

    def release_turn(self, model_id: str) -> None:
        pass

    def checkpoint(self, model_id, incarnation, version, arrays) -> bool:
        fields = _encoded(arrays)  # outside the lock
        with self._lock:
            model = self._models.get(model_id)
            stored = None if model is None else (model.version, model.incarnation, model.saved)
            if model is None or not checkpoint_applies(stored, incarnation, version):
                return False
            model.fields, model.saved = fields, version
            model.entries = [pair for pair in model.entries if pair[0] > version]
            return True

    @staticmethod
    def _remember(
        memory: OrderedDict[str, float], ids: Sequence[str], expiry: float, bound: int
    ) -> None:
        """Remember ``ids`` until ``expiry``, in order of expiry (the newest last), then forget
        the oldest beyond ``bound`` (0: none), as the Redis store does."""
        for event_id in ids:
            memory[event_id] = expiry
            memory.move_to_end(event_id)
        while bound and len(memory) > bound:
            memory.popitem(last=False)

    @staticmethod
    def _forget(memory: dict[str, float], now: float) -> None:
        for key in [key for key, expiry in memory.items() if expiry <= now]:
            del memory[key]

    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, "seen", ids, now)

    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._alive(model_id, "expired", ids, now)

    def _alive(self, model_id: str, kind: str, ids: Sequence[str], now: float) -> np.ndarray:
        with self._lock:
            memory = getattr(self._get(model_id), kind)
            return np.array([memory.get(i, 0.0) > now for i in ids], dtype=bool)

    def put_pending(self, model_id, records, deadline, max_records=None, incarnation=None):
        with self._lock:
            model = self._get(model_id)
            if incarnation is not None and model.incarnation != incarnation:
                raise StaleVersion(f"model {model_id!r} was replaced since its scores were given")
            if max_records is not None:
                kept = len(model.pending) + sum(1 for i in records if i not in model.pending)
                if kept > max_records:
                    raise InsufficientStorage(pending_full(model_id, max_records))
            for event_id, record in records.items():
                model.pending[event_id] = (record, deadline)
                heapq.heappush(model.deadlines, (deadline, event_id))
            if len(model.deadlines) > 2 * len(model.pending) + 1024:
                # ids scored again leave their old deadline behind: rebuild, or the heap
                # would grow with every /score of the same id
                model.deadlines = [(entry[1], i) for i, entry in model.pending.items()]
                heapq.heapify(model.deadlines)

    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
        with self._lock:
            pending = self._get(model_id).pending
            return {i: pending[i] for i in ids if i in pending}

    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        with self._lock:
            model = self._get(model_id)
            heap, pending = model.deadlines, model.pending
            due: list[tuple[float, str]] = []
            chosen: set[str] = set()
            while heap and heap[0][0] <= now and len(due) < limit:
                deadline, event_id = heapq.heappop(heap)
                entry = pending.get(event_id)
                if entry is not None and entry[1] == deadline and event_id not in chosen:
                    chosen.add(event_id)
                    due.append((deadline, event_id))
            for item in due:  # they stay due until a commit consumes them
                heapq.heappush(heap, item)
            return [event_id for _, event_id in due]
