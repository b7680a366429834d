"""Request bodies that never finish: a read deadline (408) and clients that leave mid-body (499).

uvicorn has no timeout on reading a request body: a client that sends half a body and stalls,
or drips a byte a second, would hold the request (and the memory it read) for ever.  And a
client that disconnects mid-body made Starlette raise ``ClientDisconnect`` in the route, which
uvicorn logged with a traceback and the request metrics counted as a 500.

:class:`BodyGuard` is a pure ASGI middleware that wraps ``receive`` while a request body is
being read:

- the whole body must arrive within ``timeout_seconds`` of the app's first read of it; past
  that, the read raises :class:`RequestTimeout` (408 problem+json, ``Connection: close``: the
  rest of the body is never read);
- a disconnect before the end of the body is logged as one line and the read raises
  :class:`ClientClosedRequest`: status 499 (nginx's "client closed request") in the request
  metrics; the answer goes to no one (uvicorn discards sends to a closed connection).

Both are ``ServiceError`` (rendered by the app's handler, like every problem) *and* Starlette
``HTTPException``, because FastAPI turns any other exception raised while it reads a declared
body into a 400.  Requests without a body (no ``Content-Length`` > 0, no ``Transfer-Encoding``)
pass through untouched.  With one, the cost is a wrapper per ``receive`` and one timer per
request (~4 us, measured in-process on a one-event ``/score``; an ``asyncio.timeout`` around
each read cost ~12 us).  After the body is complete, ``receive`` is passed through with no
deadline (a streaming response waits on it for the disconnect).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.exceptions import HTTPException

from service.errors import ServiceError

logger = logging.getLogger("aucstream.request")


class RequestTimeout(ServiceError, HTTPException):  # type: ignore[misc]  # headers: a dict
    status, title, slug = 408, "Request body timed out", "request-timeout"

    def __init__(self, detail: str) -> None:
        ServiceError.__init__(self, detail, headers={"Connection": "close"})
        self.status_code = self.status


class ClientClosedRequest(ServiceError, HTTPException):  # type: ignore[misc]
    """The client disconnected before sending its whole body (nobody reads the answer)."""

    status, title, slug = 499, "Client closed the request", "client-closed-request"

    def __init__(self, detail: str) -> None:
        ServiceError.__init__(self, detail)
        self.status_code = self.status


def _has_body(headers: Any) -> bool:
    for name, value in headers:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


class BodyGuard:
    """See the module docstring."""

    def __init__(self, app: Any, timeout_seconds: float) -> None:
        self.app = app
        self.timeout_seconds = timeout_seconds

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _has_body(scope.get("headers", ())):
            await self.app(scope, receive, send)
            return
        timeout = self.timeout_seconds
        timer: asyncio.TimerHandle | None = None
        task: asyncio.Task | None = None
        body_complete = False
        expired = False  # the deadline passed before the body was complete
        waiting = False  # the request's task is awaiting a body chunk
        received = 0

        def on_deadline() -> None:
            nonlocal expired
            expired = True
            if waiting and task is not None:  # else the next read raises
                task.cancel()

        def timed_out() -> RequestTimeout:
            logger.info(
                "%s %s: request body timed out after %g s (%d bytes received)",
                scope.get("method", ""),
                scope.get("path", ""),
                timeout,
                received,
            )
            return RequestTimeout(
                f"the request body did not arrive within {timeout:g} s ({received} bytes "
                "received); send it faster or in smaller requests"
            )

        async def guarded_receive() -> dict:
            nonlocal timer, task, body_complete, waiting, received
            if body_complete:
                return await receive()
            if expired:
                raise timed_out()
            if timer is None:
                loop = asyncio.get_running_loop()
                task = asyncio.current_task()
                timer = loop.call_at(loop.time() + timeout, on_deadline)
            waiting = True
            try:
                message = await receive()
            except asyncio.CancelledError:
                if not expired or task is None or task.uncancel() > 0:
                    raise  # not (only) the deadline's cancellation
                raise timed_out() from None
            finally:
                waiting = False
            kind = message["type"]
            if kind == "http.request":
                received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    body_complete = True
                    timer.cancel()
            elif kind == "http.disconnect":
                timer.cancel()
                logger.info(
                    "%s %s: client disconnected after %d bytes of the request body",
                    scope.get("method", ""),
                    scope.get("path", ""),
                    received,
                )
                raise ClientClosedRequest(
                    f"the client disconnected after {received} bytes of the request body"
                )
            return message

        try:
            await self.app(scope, guarded_receive, send)
        finally:
            if timer is not None:
                timer.cancel()  # the app answered without reading the whole body
