"""Request bodies that never finish: a read deadline (408; uvicorn has none) and clients that
leave mid-body (499).  Both errors are Starlette ``HTTPException`` too, or FastAPI would turn
them into a 400 while it reads a declared body."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import Scope

from service.errors import ServiceError

logger = logging.getLogger("aucstream.request")


class RequestTimeout(  # type: ignore[misc]  # headers: a dict
    ServiceError, HTTPException, status=408, title="Request body timed out"
):
    """The whole body did not arrive within the deadline (the connection is then closed)."""

    def __init__(self, detail: str) -> None:
        ServiceError.__init__(self, detail, headers={"Connection": "close"})
        self.status_code = self.status


class ClientClosedRequest(  # type: ignore[misc]
    ServiceError, HTTPException, status=499, title="Client closed the request"
):
    """The client disconnected before sending its whole body (nobody reads the answer)."""

    def __init__(self, detail: str) -> None:
        ServiceError.__init__(self, detail)
        self.status_code = self.status


class BodyDeadlines:
    """The deadlines of the bodies being read: one watchdog task per event loop wakes every
    ``min(1 s, timeout / 4)`` while bodies are read (cheaper than a timer per request)."""

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds
        self._period = min(1.0, timeout_seconds / 4)
        self._reads: set[GuardedReceive] = set()
        self._watchdog: asyncio.Task | None = None

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        watchdog = self._watchdog
        if watchdog is None or watchdog.done() or watchdog.get_loop() is not loop:
            self._watchdog = loop.create_task(self._expire_reads(loop))

    async def _expire_reads(self, loop: asyncio.AbstractEventLoop) -> None:
        idle = 0.0
        while idle < 60.0:
            await asyncio.sleep(self._period)
            if not self._reads:
                idle += self._period
                continue
            idle = 0.0
            now = loop.time()
            for read in [read for read in self._reads if (read.deadline or 0.0) <= now]:
                self._reads.discard(read)
                read.expire()


class GuardedReceive:
    """One request's ``receive`` under its body's deadline; ``release()`` it once answered."""

    __slots__ = ("body_complete", "deadline", "deadlines", "expired", "receive", "received",
                 "scope", "task", "waiting")  # fmt: skip

    def __init__(self, deadlines: BodyDeadlines, scope: Scope, receive: Any) -> None:
        self.deadlines, self.scope, self.receive = deadlines, scope, receive
        self.deadline: float | None = None  # set by the first read
        self.task: asyncio.Task | None = None
        self.waiting = False  # the task is awaiting a body chunk
        self.expired = False  # the deadline passed before the body was complete
        self.body_complete = False
        self.received = 0

    def expire(self) -> None:
        self.expired = True
        if self.waiting and self.task is not None:  # else the next read raises
            self.task.cancel()

    def release(self) -> None:
        self.deadlines._reads.discard(self)

    def _timed_out(self) -> RequestTimeout:
        timeout, scope = self.deadlines.timeout_seconds, self.scope
        logger.info(
            "%s %s: request body timed out after %g s (%d bytes received)",
            scope.get("method", ""), scope.get("path", ""), timeout, self.received,
        )  # fmt: skip
        return RequestTimeout(
            f"the request body did not arrive within {timeout:g} s ({self.received} bytes "
            "received); send it faster or in smaller requests"
        )

    async def __call__(self) -> dict:
        if self.body_complete:
            return await self.receive()  # type: ignore[no-any-return]
        deadlines = self.deadlines
        if self.deadline is None:
            loop = asyncio.get_running_loop()
            self.deadline = loop.time() + deadlines.timeout_seconds
            self.task = asyncio.current_task()
            deadlines._reads.add(self)
            deadlines._watch(loop)
        elif self.expired:
            raise self._timed_out()
        self.waiting = True
        try:
            message = await self.receive()
        except asyncio.CancelledError:
            if not self.expired or self.task is None or self.task.uncancel() > 0:
                raise  # not (only) the deadline's cancellation
            raise self._timed_out() from None
        finally:
            self.waiting = False
        kind = message["type"]
        if kind == "http.request":
            self.received += len(message.get("body", b""))
            if not message.get("more_body", False):
                self.body_complete = True
                self.release()
        elif kind == "http.disconnect":
            self.release()
            logger.info(
                "%s %s: client disconnected after %d bytes of the request body",
                self.scope.get("method", ""), self.scope.get("path", ""), self.received,
            )  # fmt: skip
            raise ClientClosedRequest(
                f"the client disconnected after {self.received} bytes of the request body"
            )
        return message  # type: ignore[no-any-return]
