"""API keys (``X-API-Key`` or ``Authorization: Bearer``): every ``/v1`` route and the stream
need one when keys are configured; read-only keys may only read."""

from __future__ import annotations

import hmac

from fastapi import Request
from starlette.requests import HTTPConnection

from service.errors import Forbidden, Unauthorized
from service.settings import Settings

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def presented_key(connection: HTTPConnection) -> str | None:
    """The key the request presents (``X-API-Key`` first, then a bearer token), or None."""
    key = connection.headers.get("x-api-key")
    if key:
        return key
    authorization = connection.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(key: str, keys: list[str]) -> bool:
    return any(hmac.compare_digest(key.encode(), candidate.encode()) for candidate in keys)


def check_api_key(connection: HTTPConnection, settings: Settings, *, writes: bool) -> None:
    """401 without a known key, 403 for a read-only key on a route that ``writes``."""
    if not settings.auth_enabled:
        return
    key = presented_key(connection)
    if key is None:
        raise Unauthorized(
            "this server requires an API key: send it as 'X-API-Key' or "
            "'Authorization: Bearer <key>'",
            field="X-API-Key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if _matches(key, settings.api_keys):
        return
    if _matches(key, settings.read_only_api_keys):
        if not writes:
            return
        raise Forbidden("this API key is read-only; writing needs a read-write key")
    raise Unauthorized("unknown API key", field="X-API-Key", headers={"WWW-Authenticate": "Bearer"})


async def require_api_key(request: Request) -> None:
    """The dependency of every /v1 route (``async``: a plain ``def`` would run in a thread)."""
    check_api_key(request, request.app.state.settings, writes=request.method not in READ_METHODS)
