"""Where models live in this process: a bounded LRU cache over the store, per-model locks
(weakly held: requests for ids that do not exist leave nothing behind), and the load / commit /
retry cycle every write goes through; a stale append goes back to an undo point (:mod:`.undo`),
takes the model's write turn (:mod:`.turns`) and catches up (docs/architecture.md, "The log
and checkpoints").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypedDict, TypeVar

import numpy as np

from core.boosted_fits import fits_in_call
from service.engine.checkpoints import Checkpoints
from service.engine.entries import Entry, ReplayFailed
from service.engine.history import behind as history_behind
from service.engine.model import Loaded, OtherStateFormat, from_arrays, from_store
from service.engine.passes import Pass
from service.engine.replay import replay
from service.engine.turns import Turns
from service.engine.undo import UndoPoint, UndoPoints, load_with_point
from service.errors import (
    Contention,
    CorruptState,
    ModelNotFound,
    StaleVersion,
    StoreUnavailable,
    TurnTaken,
)
from service.schemas import ModelConfig
from service.stores.base import Commit, Fence, Store, StoredState

logger = logging.getLogger("aucstream")
P = ParamSpec("P")
R = TypeVar("R")
#: default bound of the per-process model cache
MAX_CACHED_MODELS = 1024
#: defaults of AUCSTREAM_CHECKPOINT_EVENTS and _SECONDS (service.settings)
CHECKPOINT_EVENTS = 10_000
CHECKPOINT_SECONDS = 60.0


class ModelLock:
    """A model's lock (a plain ``threading.Lock`` cannot be weakly referenced)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> ModelLock:
        self._lock.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self._lock.release()

    def acquire_now(self) -> bool:
        """Take the lock if free, without waiting (True: taken; release with ``__exit__``): all
        the event loop may do."""
        return self._lock.acquire(blocking=False)


class RepositoryOptions(TypedDict, total=False):
    """The keyword options of :class:`ModelRepository` (and of :class:`service.engine.Engine`)."""

    clock: Callable[[], float]
    max_write_retries: int
    max_cached_models: int
    event_id_ttl_seconds: float
    max_remembered_ids: int | None
    checkpoint_events: int
    checkpoint_seconds: float


class ModelRepository:
    """The models of one store as cached by this process.  Thread-safe."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        max_write_retries: int = 50,
        max_cached_models: int = MAX_CACHED_MODELS,
        event_id_ttl_seconds: float = 86_400.0,
        max_remembered_ids: int | None = None,
        checkpoint_events: int = CHECKPOINT_EVENTS,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
    ) -> None:
        self.store = store
        #: how long the ids a commit learns (or expires) are remembered
        self.event_id_ttl_seconds = event_id_ttl_seconds
        #: most ids remembered per model (the oldest are forgotten first; None: no bound)
        self.max_remembered_ids = max_remembered_ids
        self.clock = clock
        self.max_write_retries = max_write_retries
        self.max_cached_models = max_cached_models
        self.writes_retried = 0
        #: cached models brought up to the store's version by replaying its entries
        self.caught_up = 0
        #: stale appends undone to their undo point (then caught up), and those reloaded
        self.writes_undone = 0
        self.writes_reloaded = 0
        #: cached models read whole because another process's checkpoint truncated the entries
        #: they needed, or re-created the model
        self.reread = 0
        self._undo_points = UndoPoints()  # the undo points and write turns: module docstring
        self.turns = Turns(store)
        #: model id -> (its lock, kept alive while cached; the model)
        self._cache: OrderedDict[str, tuple[ModelLock, Loaded]] = OrderedDict()
        self._locks: weakref.WeakValueDictionary[str, ModelLock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()
        #: called with a model id when it leaves this process (deleted, evicted, gone)
        self.on_forget: list[Callable[[str], None]] = []
        #: called with a model id when it no longer exists (deleted here, or found deleted)
        self.on_gone: list[Callable[[str], None]] = []
        #: model id -> the writer lease every commit of it needs (a queue worker's models)
        self.fences: dict[str, Fence] = {}
        #: models whose commits here learned events their metrics history does not show yet
        self._history_behind: set[str] = set()
        #: ``held``: the pass (:meth:`deferred`) this thread is applying, if any
        self._local = threading.local()
        #: the models whose state is ahead of their checkpoint (stores that log)
        self.checkpoints = Checkpoints(
            self, every_events=checkpoint_events, every_seconds=checkpoint_seconds
        )

    # ------------------------------------------------------------------ locks & cache
    def lock(self, model_id: str) -> ModelLock:
        entry = self._cache.get(model_id)  # the common case: a cached model pins its lock
        if entry is not None:
            return entry[0]
        with self._guard:
            lock = self._locks.get(model_id)
            if lock is None:
                lock = self._locks[model_id] = ModelLock()
            return lock

    def cached_ids(self) -> list[str]:
        """The models cached in this process, least recently used first."""
        return list(self._cache)

    def cached(self, model_id: str) -> Loaded | None:
        """The cached model, or None (never blocks, never asks the store)."""
        entry = self._cache.get(model_id)
        return None if entry is None else entry[1]

    def current(self, model_id: str) -> Loaded | None:
        """The cached model when the store's head is its version (the store's ``head_now``:
        SQLite), else None (the caller then calls :meth:`load`).  Call under the model's lock."""
        cached = self.cached(model_id)
        head_now = getattr(self.store, "head_now", None)
        if cached is None or head_now is None:
            return None
        if head_now(model_id) != (cached.version, cached.incarnation):
            return None
        self.touch(model_id)
        return cached

    def _keep(self, model_id: str, loaded: Loaded) -> None:
        with self._guard:
            lock = self._locks.get(model_id) or self._locks.setdefault(model_id, ModelLock())
            self._cache[model_id] = (lock, loaded)
            self._cache.move_to_end(model_id)
            evicted = []
            while len(self._cache) > self.max_cached_models:
                evicted.append(self._cache.popitem(last=False))
        for other, (_, left) in evicted:
            self.checkpoints.evicted(other, left)
            self._forget(other)

    def touch(self, model_id: str) -> None:
        """Mark the cached model as used (the cache's LRU order)."""
        try:  # one atomic call: another thread may have evicted it meanwhile
            self._cache.move_to_end(model_id)
        except KeyError:
            pass

    def drop(self, model_id: str) -> None:
        """Forget the cached state (it may hold uncommitted changes); reload on next use."""
        self._cache.pop(model_id, None)
        self._undo_points.dropped(model_id)
        self.checkpoints.forget_evicted(model_id)

    def clear(self) -> None:
        """Drop every cached model (the next request reads each one back from the store)."""
        self._cache.clear()

    def _forget(self, model_id: str) -> None:
        self._undo_points.forget(model_id)
        for listener in self.on_forget:
            listener(model_id)

    def _gone(self, model_id: str) -> None:
        self._forget(model_id)
        self.history_caught_up(model_id)
        for listener in self.on_gone:
            listener(model_id)

    # ------------------------------------------------------------------ load & commit
    def load(self, model_id: str) -> Loaded:
        """The current model, from the cache when its (incarnation, version) is current; one
        store round trip either way. Call under the model's lock."""
        cached = self.cached(model_id)
        held = getattr(self._local, "held", None)
        if cached is not None and held is not None:
            if held.heads.get(model_id) == (cached.version, cached.incarnation):
                self.touch(model_id)  # current: the pass read its head (Pass.read_heads)
                return cached
        try:
            stored = self.store.load(
                model_id,
                None if cached is None else cached.version,
                None if cached is None else cached.incarnation,
            )
            if cached is not None and stored.arrays is None:
                if stored.entries:  # another process wrote: catch up
                    self._replay(model_id, cached, stored.entries)
                    cached.meta = stored.meta
                    self.caught_up += 1
                    if self._undo_points.caught_up(model_id):  # now shared: see .undo
                        self._undo_points.stand(model_id, cached)
                if cached.version == stored.version:
                    self.touch(model_id)
                    return cached
                # the log stops short of the head (a damaged or forged store): a write would
                # find its append stale, go back and catch up to the same place for ever
                self.drop(model_id)
                stored = self.store.load(model_id)
            loaded = self._built(model_id, stored)
            if cached is not None:
                self.reread += 1
        except ModelNotFound:
            self.drop(model_id)
            self._gone(model_id)
            raise
        except (ValueError, KeyError, TypeError) as error:  # undecodable or corrupt arrays
            self.drop(model_id)
            logger.error("model %r: stored state refused: %s", model_id, error)
            if isinstance(error, OtherStateFormat):  # written by another version of aucstream
                detail = (
                    f"{error}: reset the model (POST .../reset, which keeps its configuration) "
                    "or run the version of aucstream that wrote it (a snapshot cannot carry a "
                    "state across format versions)"
                )
            else:
                detail = (
                    f"its stored state cannot be loaded ({error}); reset it (POST .../reset), "
                    "delete it, or import a snapshot with replace=true"
                )
            raise CorruptState(
                f"model {model_id!r}: {detail}", field=getattr(error, "field", None)
            ) from None
        self._keep(model_id, loaded)
        # a standing undo point, so that even the first stale append of the model goes back
        # to it rather than rebuild (this copy is the one taken after the version read)
        self._undo_points.stand(model_id, loaded)
        return loaded

    def _replay(self, model_id: str, loaded: Loaded, entries: list[tuple[int, Entry]]) -> None:
        """``entries`` applied to ``loaded``; one that does not apply stops the model (503 naming
        it) until it is reset: never skipped."""
        try:
            with fits_in_call():  # the replay reaches each install point at once
                replay(loaded, entries)
        except ReplayFailed as error:
            self.drop(model_id)
            logger.error("model %r: %s", model_id, error, exc_info=error.__cause__)
            raise StoreUnavailable(
                f"model {model_id!r}: its log entry {error.version} does not apply "
                f"({error.__cause__!r}); the model is stopped at the entry before it: export "
                "what it serves or reset it (POST .../reset)"
            ) from None

    def _built(self, model_id: str, stored: StoredState) -> Loaded:
        """The model of a whole read (its arrays checked by value before any kernel sees
        them: :func:`~service.engine.model.from_arrays`), its log tail replayed."""
        loaded = from_store(stored)
        loaded.version = stored.saved or stored.version
        if stored.entries:
            self._replay(model_id, loaded, stored.entries)
        return loaded

    def rebuilt(self, model_id: str) -> Loaded:
        """The model as stored, built afresh, not cached: what a write's error path learns again
        from."""
        return self._built(model_id, self.store.load(model_id))

    def stored_config(self, model_id: str) -> ModelConfig:
        """The configuration as stored, without building the model (a corrupt state can still be
        reset)."""
        stored = self.store.load(model_id)
        assert stored.config is not None
        return ModelConfig.model_validate(stored.config)

    def read(self, model_id: str) -> Loaded:
        """The current model, loaded under its lock (read-only use)."""
        with self.lock(model_id):
            return self.load(model_id)

    def commit(self, model_id: str, loaded: Loaded, entry: Entry, **fields: Any) -> int:
        """Commit the change ``entry`` made on ``loaded`` with ``fields`` (:class:`Commit`) at
        its version; :class:`StaleVersion` when another writer went first."""
        commit = Commit(
            expected_version=loaded.version,
            incarnation=loaded.incarnation,
            entry=entry,
            now=entry.now,
            id_expiry=entry.now + self.event_id_ttl_seconds,
            fence=self.fences.get(model_id),
            max_remembered_ids=self.max_remembered_ids or 0,
            **fields,
        )
        held = getattr(self._local, "held", None)
        if held is not None:
            return held.defer(model_id, loaded, commit)
        version = self.store.commit(model_id, commit)
        self.after_commit(model_id, loaded, commit, version)
        return version

    def after_commit(self, model_id: str, loaded: Loaded, commit: Commit, version: int) -> None:
        """After a commit returned: the cached model at its version, the checkpoint's and
        history's bookkeeping."""
        loaded.version = version
        loaded.meta.update(commit.meta)
        self.turns.appended(model_id)
        self.checkpoints.changed(model_id, commit.entry.n_events)
        if history_behind(loaded.history, int(loaded.stats["events_learned"][0])):
            with self._guard:
                self._history_behind.add(model_id)
        else:
            self.history_caught_up(model_id)

    def history_behind(self) -> list[str]:
        """The models whose last commit here learned events their history does not show."""
        with self._guard:
            return sorted(self._history_behind)

    def history_caught_up(self, model_id: str) -> None:
        """``model_id``'s history shows its events (or the model is gone)."""
        with self._guard:
            self._history_behind.discard(model_id)

    def write(
        self,
        model_id: str,
        step: Callable[Concatenate[str, Loaded, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """``step(model_id, loaded, *args, **kwargs)`` (which changes ``loaded`` and commits it)
        under the model's lock, run again at the store's head while its append is stale (module
        docstring); on any other failure the cache is dropped."""
        held = getattr(self._local, "held", None)
        if held is not None:
            return held.write(model_id, step, *args, **kwargs)
        with self.lock(model_id):
            self.turns.before_write(model_id)
            try:
                for _ in range(self.max_write_retries):
                    loaded, undo = load_with_point(self, model_id)
                    try:
                        return step(model_id, loaded, *args, **kwargs)
                    except StaleVersion as error:
                        try:  # the turn first: the other processes wait while this one goes back
                            self.turns.after_stale(model_id, isinstance(error, TurnTaken))
                        finally:
                            self.stale(model_id, loaded, undo)
                    except BaseException:
                        self.drop(model_id)
                        raise
            finally:
                self.turns.release(model_id)
        raise Contention(
            f"model {model_id!r}: gave up after {self.max_write_retries} stale writes; retry"
        )

    @contextlib.contextmanager
    def deferred(self) -> Iterator[Pass]:
        """A pass over several models in this thread: each :meth:`write` keeps its model's lock
        and defers its commit to :meth:`Pass.commit` (one transaction for all); leaving the
        block releases what is still held, the uncommitted models dropped."""
        held = Pass(self)
        self._local.held = held
        try:
            yield held
        finally:
            self._local.held = None
            held.release(drop=True)

    def stale(self, model_id: str, loaded: Loaded, undo: UndoPoint | None) -> None:
        """After a stale append of ``loaded`` (alone or in a pass): the model is contended from
        now on, and its cache goes back to ``undo`` (or is dropped without one)."""
        self.writes_retried += 1
        self._undo_points.stale(model_id)
        self._undo(model_id, loaded, undo)

    def undo_point(self, model_id: str) -> UndoPoint | None:
        """The cached model's version, incarnation and a copy of its arrays, when it keeps one
        (:mod:`.undo`: a contended model before each write, a standing point otherwise)."""
        return self._undo_points.point(model_id, self.cached(model_id))

    def _undo(self, model_id: str, loaded: Loaded, undo: UndoPoint | None) -> None:
        """The cache back at the undo point, or dropped without one (or with one of another
        incarnation)."""
        if undo is None or undo[1] != loaded.incarnation:
            self.writes_reloaded += 1
            self.drop(model_id)
            return
        version, incarnation, arrays = undo
        self._undo_points.used(model_id, undo)
        try:
            restored = from_arrays(loaded.config, incarnation, version, arrays)
        except Exception:  # never expected (the arrays are the model's own): rebuild instead
            logger.exception("model %r: undo point not restored; reloading", model_id)
            self.writes_reloaded += 1
            self.drop(model_id)
            return
        restored.meta = dict(loaded.meta)
        self.writes_undone += 1
        self._keep(model_id, restored)

    # ------------------------------------------------------------------ lifecycle
    def create(self, loaded: Loaded, *, replace: bool, replaces: str | None = None) -> int:
        """Store ``loaded`` as a new model (``replace``, ``replaces``: see
        ``Store.create_model``)."""
        model_id = loaded.config.id
        with self.lock(model_id):
            version = self.store.create_model(
                model_id,
                loaded.config.model_dump(mode="json"),
                loaded.arrays(),
                loaded.incarnation,
                replace=replace,
                replaces=replaces,
            )
            loaded.version = version
            self.checkpoints.saved(model_id)
            self._keep(model_id, loaded)
            self._undo_points.stand(model_id, loaded)  # as a model loaded whole
            return version

    def close(self) -> None:
        """Checkpoint every model behind its log (shutdown)."""
        self.checkpoints.close()

    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        """``Store.seen``, as read with the heads of the pass this thread applies if any."""
        held = getattr(self._local, "held", None)
        known = None if held is None else held.seen(model_id, ids)
        return self.store.seen(model_id, ids, now) if known is None else known

    def delete(self, model_id: str) -> None:
        with self.lock(model_id):
            self.store.delete_model(model_id)
            self.checkpoints.saved(model_id)
            self.drop(model_id)
        self._gone(model_id)
