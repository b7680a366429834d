"""The typed FastAPI dependencies, resolved from the app's state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from service.engine import Engine
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
    """What the hot routes need, as one dependency (each one has a cost per request)."""

    engine: Engine
    settings: Settings
    telemetry: Telemetry
    #: queue mode: where validated batches are appended
    queue: StreamQueue | None = None


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
TelemetryDep = Annotated[Telemetry, Depends(get_telemetry)]
