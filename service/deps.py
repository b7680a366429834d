"""The typed FastAPI dependencies (``EngineDep``, ``SettingsDep``, ``TelemetryDep``, and
``ServicesDep`` for the hot routes), resolved from the app's state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.routing import Match, Route
from starlette.types import Scope

from service.engine import Engine
from service.errors import InvalidInput
from service.queue import StreamQueue
from service.settings import Settings
from service.telemetry import Telemetry


# The dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in
# the thread pool, a hop that costs more CPU than these functions and than scoring one event.
async def get_engine(request: Request) -> Engine:
    return request.app.state.engine


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_telemetry(request: Request) -> Telemetry:
    return request.app.state.telemetry


@dataclass(frozen=True)
class Services:
    """What the hot routes need, resolved as one dependency (each FastAPI dependency has a cost
    per request, which shows on the ingest and score routes)."""

    engine: Engine
    settings: Settings
    telemetry: Telemetry
    #: queue mode: where validated batches are appended (None in sync mode)
    queue: StreamQueue | None = None


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
TelemetryDep = Annotated[Telemetry, Depends(get_telemetry)]


# ---------------------------------------------------------------------- the hot routes
class HotRoute(Route):
    """A plain Starlette route for the per-event paths (``/events``, ``/score``).

    FastAPI's machinery (resolving the declared parameters and dependencies, validating and
    serialising the response model) costs ~0.13-0.15 ms of CPU per request, measured on
    1,000-event NPZ ingest (0.63 -> 0.49 ms per request in-process): a fifth of the request,
    and as much as learning 1,000 events.  So these paths are served by a plain route that
    calls the same endpoint function with its arguments read by hand (:func:`query_flag`,
    :func:`check_api_key`); the function stays declared on a FastAPI router that only the
    OpenAPI document reads, so ``/docs`` shows the same parameters and response models.
    A ``POST`` reaches the endpoint through the app's short lane
    (``service.routers.events.HotLane``), whose errors the app's handlers render as for any
    route; the router keeps the route for the 405 of other methods.

    Unlike a plain Starlette route it records itself as ``scope["route"]``, as FastAPI's
    routes do, so the request metrics are labelled with its path template.
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def query_count(request: Request, name: str, most: int) -> int:
    """A count query parameter from 0 (the default, when absent) to ``most``; anything else
    is a 422 naming ``query.<name>``."""
    if not request.scope.get("query_string"):
        return 0
    value = request.query_params.get(name)
    if value is None:
        return 0
    count = int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else -1
    if not 0 <= count <= most:
        raise InvalidInput(
            f"query.{name}: must be a whole number from 0 to {most}, got {value[:40]!r}",
            field=f"query.{name}",
        )
    return count


def query_flag(request: Request, name: str, default: bool) -> bool:
    """A boolean query parameter, read as FastAPI reads ``name: bool = default`` (the same
    spellings, any case); anything else is a 422 naming ``query.<name>``."""
    if not request.scope.get("query_string"):  # none at all: no need to parse it
        return default
    value = request.query_params.get(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidInput(
        f"query.{name}: Input should be a valid boolean (true or false), got {value!r}",
        field=f"query.{name}",
    )
