"""Calls handed from the event loop to threads, answered on the loop: the coalescer's hop.

A call is one tuple on a queue and its answer one ``call_soon_threadsafe`` that settles the
asyncio future directly, cheaper than ``run_in_executor``'s work item, concurrent future and
chained asyncio future (loadtest/README.md, ``loadtest.hop_cpu``).  Threads start as calls
find none idle, up to ``max_threads`` (beyond it calls wait), and live until
:meth:`Handoff.close`.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from service.threadnames import name_this_thread

T = TypeVar("T")

#: what a thread takes off the queue: (function, arguments, the future to settle, its loop)
_Call = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future, asyncio.AbstractEventLoop]


def settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # its waiter was cancelled (the client went away)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Handoff:
    """A bounded set of threads that run calls from an event loop."""

    def __init__(self, max_threads: int, name: str) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads}")
        self.max_threads = max_threads
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        #: threads waiting for a call (or about to: counted before the call is queued)
        self._idle = 0
        self._closed = False

    def submit(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``function(*args)`` queued for a thread; the running loop's future its answer settles
        (a caller that only attaches callbacks needs no task to await it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: closed")
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self.max_threads:
                thread = threading.Thread(
                    target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._calls.put((function, args, future, loop))
        return future

    def _serve(self) -> None:
        name_this_thread()
        while True:
            call = self._calls.get()
            if call is None:
                return
            function, args, future, loop = call
            result, error = None, None
            try:
                result = function(*args)
            except BaseException as raised:  # noqa: BLE001 - answered to the waiter
                error = raised
            with self._lock:
                self._idle += 1
            try:
                loop.call_soon_threadsafe(settle, future, result, error)
            except RuntimeError:  # the loop is closed: nobody waits for the answer
                pass
            del call, function, args, future, result, error

    def close(self) -> None:
        """Stop the threads once the calls queued before are done (does not wait)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._calls.put(None)
