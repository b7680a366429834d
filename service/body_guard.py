"""Request bodies that never finish: a read deadline (408) and clients that leave mid-body (499).

uvicorn has no timeout on reading a request body: a client that sends half a body and stalls,
or drips a byte a second, would hold the request (and the memory it read) for ever.  And a
client that disconnects mid-body makes Starlette raise ``ClientDisconnect`` in the route, which
uvicorn logs with a traceback and the request metrics count as a 500.

:class:`BodyGuard` is a pure ASGI middleware, placed inside the request-metrics middleware so
that the status it answers with is the one counted:

- the whole body must arrive within ``timeout_seconds`` of the app's first read of it; else the
  guard answers ``408`` (problem+json, ``Connection: close``) itself, tells the app the client
  left (``http.disconnect``) and drops whatever the app answers after that;
- a disconnect before the end of the body is logged as one line and recorded with status
  ``499`` (nginx's "client closed request"): the answer goes to no one (uvicorn discards sends
  to a closed connection), the exception the app raises on reading the body is not propagated.

Requests without a body (no ``Content-Length`` > 0, no ``Transfer-Encoding``) pass through
untouched; with one, the cost is a wrapper per ``receive`` plus one timer while body chunks
are awaited (~5 us per request, measured).  After the body is complete, ``receive`` is
passed through with no deadline (a streaming response waits on it for the disconnect).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

logger = logging.getLogger("aucstream.request")

#: status recorded for a request whose client disconnected before sending its whole body
CLIENT_CLOSED_REQUEST = 499
_DISCONNECT = {"type": "http.disconnect"}


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def timeout_problem(timeout_seconds: float, received: int) -> bytes:
    return orjson.dumps(
        {
            "type": "https://aucstream.dev/problems/request-timeout",
            "title": "Request body timed out",
            "status": 408,
            "detail": f"the request body did not arrive within {timeout_seconds:g} s "
            f"({received} bytes received); send it faster or in smaller requests",
        }
    )


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
        deadline: float | None = None
        body_complete = False
        received = 0
        #: None while all is well; "timeout" or "disconnect" once the guard took over
        outcome: str | None = None
        app_started = False  # the app's own response has started (and was passed on)

        async def guarded_receive() -> dict:
            nonlocal deadline, body_complete, received, outcome
            if outcome is not None:
                return _DISCONNECT
            if body_complete:
                return await receive()
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + timeout
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                outcome = "timeout"
                if not app_started:
                    await _answer_timeout(send, timeout, received)
                logger.info(
                    "%s %s: request body timed out after %g s (%d bytes received)",
                    scope.get("method", ""),
                    scope.get("path", ""),
                    timeout,
                    received,
                )
                return _DISCONNECT
            kind = message["type"]
            if kind == "http.request":
                received += len(message.get("body", b""))
                body_complete = not message.get("more_body", False)
            elif kind == "http.disconnect":
                outcome = "disconnect"
                logger.info(
                    "%s %s: client disconnected after %d bytes of the request body",
                    scope.get("method", ""),
                    scope.get("path", ""),
                    received,
                )
            return message

        async def guarded_send(message: dict) -> None:
            nonlocal app_started
            if outcome is not None and not app_started:
                return  # the guard answered (408) or no one is listening (499)
            if message["type"] == "http.response.start":
                app_started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            # ClientDisconnect (Starlette), FastAPI's 400 wrapping it, or what the app raised
            # on reading a body cut short: the guard's outcome is the request's outcome
            if outcome is None or app_started:
                raise
        if outcome == "disconnect" and not app_started:
            # recorded by the request metrics as 499; uvicorn drops it (the socket is closed)
            await send({"type": "http.response.start", "status": CLIENT_CLOSED_REQUEST})
            await send({"type": "http.response.body", "body": b""})


async def _answer_timeout(send: Any, timeout: float, received: int) -> None:
    body = timeout_problem(timeout, received)
    await send(
        {
            "type": "http.response.start",
            "status": 408,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),  # the rest of the body is never read
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
