"""A model's lock, shared by the repository (one writer of a model per process), the passes
and the regret reports."""

from __future__ import annotations

import threading


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
        """Take the lock if it is free, without waiting (True: taken, release it with
        ``__exit__``): what the event loop may do, which must never wait for a thread."""
        return self._lock.acquire(blocking=False)
