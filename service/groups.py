"""Requests applied as a group: what a client error is, and the one split-and-retry rule of the
coalescer, the stream and the queue worker (docs/architecture.md, "The coalescer and group
commit").  :class:`ThreadCombiner` groups callers already on threads (queue mode's appends,
SQLite's group commit), the coalescer those awaiting on the event loop: a second mechanism
rather than a hop per call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from service.errors import ModelNotFound, ServiceError

P = TypeVar("P")
R = TypeVar("R")


def refused_alone(error: BaseException) -> bool:
    """Whether ``error`` is a client error: it refused one request's content before anything
    was written, so the group it refused may be redone request by request."""
    if isinstance(error, ServiceError):
        return error.status < 500 and not isinstance(error, ModelNotFound)
    return isinstance(error, ValueError)


def each_alone(
    merged: Callable[[list[P]], list[R]], single: Callable[[P], R], payloads: list[P]
) -> list[R | Exception]:
    """Each payload's result or error: ``merged(payloads)``, or, refused with a client error,
    ``single(payload)`` for each in order until a server error, the outcome of the rest."""
    if len(payloads) > 1:
        try:
            return list(merged(payloads))
        except Exception as error:  # noqa: BLE001 - the group's answer, or its error path
            if not refused_alone(error):
                return [error] * len(payloads)
    outcomes: list[R | Exception] = []
    for payload in payloads:
        try:
            outcomes.append(single(payload))
        except Exception as error:  # noqa: BLE001 - the payload's own answer
            outcomes.append(error)
            if not refused_alone(error):
                outcomes.extend([error] * (len(payloads) - len(outcomes)))
                break
    return outcomes


# ---------------------------------------------------------------------------- from threads
class _Waiter(Generic[P]):
    __slots__ = ("payload", "done", "outcome")

    def __init__(self, payload: P, done: threading.Event | None) -> None:
        self.payload = payload
        #: set for a caller that waits (one that leads at once never does: no event)
        self.done = done
        self.outcome: Any = None


_LEAD = object()  # the outcome that makes a waiter the next group's leader


class ThreadCombiner(Generic[P, R]):
    """A caller finding its key idle applies what is queued for it as one group (``apply(key,
    payloads)`` -> one outcome each) and hands the next group to the first caller queued
    meanwhile; a caller applies one group at most."""

    def __init__(self, apply: Callable[[str, list[P]], list[R | Exception]]) -> None:
        self._apply = apply
        self._lock = threading.Lock()
        self._queues: dict[str, list[_Waiter[P]]] = {}
        #: groups applied and calls they held
        self.groups = 0
        self.calls = 0

    def __call__(self, key: str, payload: P) -> R:
        with self._lock:
            queue = self._queues.get(key)
            lead = queue is None
            me: _Waiter[P] = _Waiter(payload, None if lead else threading.Event())
            if queue is None:
                self._queues[key] = [me]
            else:
                queue.append(me)
        if me.done is not None:
            me.done.wait()
            if me.outcome is not _LEAD:
                return self._result(me)
        with self._lock:
            group = self._queues[key]
            self._queues[key] = []
            self.groups += 1
            self.calls += len(group)
        try:
            outcomes: list[Any] = self._apply(key, [waiter.payload for waiter in group])
        except BaseException as error:  # noqa: BLE001 - every waiter gets it
            outcomes = [error] * len(group)
        for waiter, outcome in zip(group, outcomes, strict=True):
            waiter.outcome = outcome
            if waiter is not me:
                waiter.done.set()  # type: ignore[union-attr]
        with self._lock:
            rest = self._queues[key]
            if rest:
                rest[0].outcome = _LEAD
                rest[0].done.set()  # type: ignore[union-attr]
            else:
                del self._queues[key]
        return self._result(me)

    @staticmethod
    def _result(waiter: _Waiter) -> Any:
        if isinstance(waiter.outcome, BaseException):
            raise waiter.outcome
        return waiter.outcome
