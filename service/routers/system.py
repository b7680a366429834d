"""Health, readiness, Prometheus metrics and the list of learners."""

from __future__ import annotations

import contextlib
import logging
from typing import Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from service import kernels
from service.auth import require_api_key
from service.deps import EngineDep, TelemetryDep
from service.engine import Engine
from service.errors import ServiceError, StoreLostData, StoreReplaced
from service.fastlane import lane
from service.models import servable_learners
from service.openapi import problems
from service.queue import StreamQueue
from service.schemas import WarmupProgress
from service.telemetry import CONTENT_TYPE_LATEST, Telemetry

logger = logging.getLogger("aucstream")
router = APIRouter(tags=["system"])
#: /v1 routes here are protected by the API-key check like every /v1 route
v1_router = APIRouter(prefix="/v1", tags=["models"])


#: the one answer of ``/healthz``, built once (Starlette's responses are not changed by sending)
_OK = Response(b'{"status":"ok"}', media_type="application/json")


@router.get("/healthz", response_model=dict[str, str])
@lane
async def healthz() -> Response:
    """The process is up (liveness)."""
    return _OK


class ReadinessChecks(BaseModel):
    store: Literal["ok", "unavailable", "data lost"]
    store_detail: str | None = Field(None, description="why the store is not served")
    kernels: Literal["ok", "compiling"]


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    checks: ReadinessChecks
    warmup: WarmupProgress


@router.get(
    "/readyz",
    responses={
        200: {"description": "ready", "model": Readiness},
        503: {
            "description": "not ready: the store does not answer or lost data (until "
            "acknowledged), or the kernels are compiling",
            "model": Readiness,
        },
    },
)
async def readyz(request: Request, engine: EngineDep) -> JSONResponse:
    """Ready when the store answers and the kernels of the default path, the metrics and the
    regret window are compiled or loaded; ``warmup`` says how far the compilation is, with
    estimates of the seconds left (``/v1`` answers 503 ``warming-up`` until ready)."""
    checks: dict[str, str] = {}
    try:
        await run_in_threadpool(engine.store.ping)
        checks["store"] = "ok"
    except (StoreLostData, StoreReplaced) as error:  # logged when noticed; the probe says why
        checks["store"] = "data lost" if isinstance(error, StoreLostData) else "unavailable"
        checks["store_detail"] = error.detail
    except Exception as error:  # anything: a probe answers, and never with the store's address
        logger.warning("readiness: the store did not answer: %s", error)
        checks["store"] = "unavailable"
    warm = request.app.state.warm.is_set()
    checks["kernels"] = "ok" if warm else "compiling"
    ready = all(value == "ok" for name, value in checks.items() if not name.endswith("_detail"))
    warmup = kernels.readiness.progress()
    if warm:  # also when the warm-up is off, or ended early
        warmup["seconds_to_ready"] = 0.0
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks, "warmup": warmup},
        status_code=200 if ready else 503,
    )


@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(require_api_key)],
    responses={
        200: {
            "description": "Prometheus text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **problems(401),
    },
)
async def prometheus(request: Request, telemetry: TelemetryDep, engine: EngineDep) -> Response:
    """Prometheus text exposition format: this process's counters (in queue mode also the
    learning lag, read from Redis).  When API keys are configured it needs one, read-only
    keys included (``X-API-Key``, or ``Authorization: Bearer``: Prometheus's
    ``authorization`` scrape setting).  Series by model exist for the
    ``AUCSTREAM_PROMETHEUS_MODEL_SERIES`` most recently active models (100 by default);
    every other model is counted under ``model=""``."""
    telemetry.stale_writes.set(engine.writes_retried)
    repository = engine.repository
    for outcome, count in (
        ("caught_up", repository.caught_up),
        ("undone", repository.writes_undone),
        ("reloaded", repository.writes_reloaded),
        ("reread", repository.reread),
        ("turn_taken", repository.turns.taken),
        ("turn_waited", repository.turns.waited),
    ):
        telemetry.shared_writes.labels(outcome).set(count)
    telemetry.coalesced_groups.set(engine.coalesce.groups)
    telemetry.coalesced_requests.set(engine.coalesce.requests)
    telemetry.set_fits(request.app.state.refitter.stats())
    if getattr(engine.store, "watch", None) is not None:
        telemetry.store_data_lost.set(await run_in_threadpool(_store_alarms, engine))
    queue = request.app.state.queue
    if queue is not None:
        await run_in_threadpool(_refresh_lag, engine, queue, telemetry)
    # rendering takes seconds with many models
    return Response(
        await run_in_threadpool(_render, engine, telemetry), media_type=CONTENT_TYPE_LATEST
    )


def _store_alarms(engine: Engine) -> int:
    """The store's alarms, read from it (another worker may have acknowledged one)."""
    try:
        return len(engine.store.alarms())  # type: ignore[attr-defined]
    except ServiceError:
        return len(engine.store.watch.alarms)  # type: ignore[attr-defined]


def _render(engine: Engine, telemetry: Telemetry) -> bytes:
    """The exposition, without (multiprocess mode) the series of deleted models."""
    try:
        models = set(engine.list_models()) if telemetry.multiprocess else None
    except ServiceError:  # store down: the scrape still answers, unfiltered
        models = None
    return telemetry.render(models)


def _refresh_lag(engine: Engine, queue: StreamQueue, telemetry: Telemetry) -> None:
    """The lag of the models with series of their own."""
    with contextlib.suppress(ServiceError):  # Redis down: the scrape answers the last values
        existing = set(engine.list_models())
        telemetry.rank_series()
        for model in telemetry.models_with_series():
            if model in existing:
                telemetry.set_lag(model, queue.lag(model))
        telemetry.forget_models(existing)


@v1_router.get("/learners", response_model=dict[str, list[str]])
async def learners() -> dict[str, list[str]]:
    """Learner names accepted by ``POST /v1/models``: the online learners and the window
    solvers that stream (``spdam``)."""
    return {"learners": servable_learners()}


class Acknowledged(BaseModel):
    acknowledged: dict[str, str] = Field(description="the alarms cleared, by name")


@v1_router.post("/store/acknowledge-loss", responses={200: {"model": Acknowledged}})
async def acknowledge_loss(engine: EngineDep) -> JSONResponse:
    """An operator knows that the store lost data (a Redis restarted empty or from an old
    dump) and has dealt with it: the alarms (``store``, ``model:<id>``) are cleared, every
    process of the service adopts the store as it is now and serves again.  Answers the
    alarms acknowledged (none: nothing was lost)."""
    acknowledge = getattr(engine.store, "acknowledge_loss", None)
    acknowledged = await run_in_threadpool(acknowledge) if acknowledge is not None else {}
    engine.repository.clear()  # cached states may be later than what the store holds now
    logger.warning("store loss acknowledged over HTTP: %s", acknowledged or "nothing lost")
    return JSONResponse({"acknowledged": acknowledged})
