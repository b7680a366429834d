"""A bare ASGI app under the same uvicorn: the server's own floor, beside the service's
``/healthz`` (``python -m loadtest.one_event --bare``).

    uvicorn loadtest.bare:app

Every request is answered ``{"status":"ok"}`` (what ``/healthz`` sends), ``/readyz`` included,
so that the generators' readiness poll works unchanged.
"""

from __future__ import annotations

from typing import Any

_BODY = b'{"status":"ok"}'
_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"15")],
}
_END = {"type": "http.response.body", "body": _BODY}


async def app(scope: dict, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send(dict(_START))
    await send(dict(_END))
