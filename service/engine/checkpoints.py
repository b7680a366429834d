"""Checkpoints: the models' states written off the request path (``Store.checkpoint``) by one
thread, never needed for correctness: the log is the durable record, and a failed checkpoint
only leaves a longer tail to replay (docs/architecture.md, "The log and checkpoints").
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from service.engine.undo import copy_of
from service.errors import ServiceError
from service.threadnames import name_this_thread

if TYPE_CHECKING:
    from service.engine.model import Loaded
    from service.engine.repository import ModelRepository

logger = logging.getLogger("aucstream")


class Checkpoints:
    """The models of a repository whose state is ahead of their checkpoint.  Thread-safe."""

    def __init__(
        self, repository: ModelRepository, *, every_events: int, every_seconds: float
    ) -> None:
        self.repository = repository
        self.every_events = every_events
        self.every_seconds = every_seconds
        #: model id -> [changes since its checkpoint (events, at least 1 a change), since when]
        self._behind: dict[str, list[float]] = {}
        #: models that left the cache with changes not checkpointed: written from the
        #: object they left as
        self._evicted: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.written = 0

    def changed(self, model_id: str, events: int) -> None:
        """``model_id`` took a change of ``events`` events (0: a change without events)."""
        with self._lock:
            behind = self._behind.get(model_id)
            if behind is None:
                behind = self._behind[model_id] = [0.0, time.monotonic()]
            behind[0] += max(events, 1)
            due = behind[0] >= self.every_events
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="aucstream-checkpoints", daemon=True
                )
                self._thread.start()
        if due:
            self._wake.set()

    def saved(self, model_id: str) -> None:
        """``model_id``'s state was written whole (or the model is gone)."""
        with self._lock:
            self._behind.pop(model_id, None)
            self._evicted.pop(model_id, None)

    def forget_evicted(self, model_id: str) -> None:
        """A write of ``model_id`` failed: what it left the cache as may hold the change, not
        checkpointed."""
        with self._lock:
            self._evicted.pop(model_id, None)

    def evicted(self, model_id: str, loaded: Loaded) -> None:
        """``model_id`` left the cache as ``loaded``: checkpoint it soon if it is behind."""
        with self._lock:
            if model_id in self._behind:
                self._evicted[model_id] = loaded
        self._wake.set()

    def _due(self) -> tuple[list[str], float]:
        """The models due now, and how long until the next one is."""
        now = time.monotonic()
        due, wait = [], self.every_seconds
        with self._lock:
            for model_id, (events, since) in self._behind.items():
                left = since + self.every_seconds - now
                if events >= self.every_events or left <= 0 or model_id in self._evicted:
                    due.append(model_id)
                else:
                    wait = min(wait, left)
        return due, wait

    def _run(self) -> None:
        name_this_thread()
        while not self._stop.is_set():
            due, wait = self._due()
            for model_id in due:
                self.write(model_id)
            if not due:
                self._wake.wait(wait)
                self._wake.clear()

    def write(self, model_id: str) -> bool:
        """Checkpoint ``model_id`` now, from the cached model (or the one it was evicted as);
        whether a checkpoint was written.  Failures are logged: the model stays behind."""
        repository = self.repository
        behind = None
        try:
            with repository.lock(model_id):
                # taken under the model's lock: a write that failed meanwhile (its model
                # holds what is not durable) forgot the evicted object first
                with self._lock:
                    loaded = self._evicted.pop(model_id, None)
                    behind = self._behind.pop(model_id, None)
                if behind is None:
                    return False
                if loaded is None:
                    loaded = repository.cached(model_id)
                if loaded is None:  # dropped: what it held is rebuilt from the log
                    return False
                # copies under the lock: the model goes on learning meanwhile
                version, incarnation, arrays = copy_of(loaded)
            written = repository.store.checkpoint(model_id, incarnation, version, arrays)
        except Exception as error:  # the thread must live on: the log is the record
            logger.warning(
                "checkpoint of model %r not written: %s",
                model_id,
                error,
                exc_info=not isinstance(error, (ServiceError, OSError)),
            )
            if behind is not None:
                with self._lock:  # tried again at the next period, or after K more events
                    self._behind.setdefault(model_id, [0.0, time.monotonic()])
            return False
        self.written += int(written)
        return written

    def stop(self) -> None:
        """Stop the thread (what it has not written stays in the log: a restart replays it)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join()

    def close(self) -> None:
        """:meth:`stop`, then checkpoint every model behind (shutdown)."""
        self.stop()
        with self._lock:
            behind = sorted(self._behind)
        for model_id in behind:
            self.write(model_id)
