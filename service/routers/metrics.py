"""Live metrics of a model: summary, ROC curve of the window, server-sent stream."""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from service.auth import presented_key
from service.deps import EngineDep, ServicesDep, SettingsDep, TelemetryDep
from service.engine import Engine
from service.errors import ModelNotFound, StreamsFull, TooManyStreams
from service.metrics_schema import HistoryResponse, MetricsResponse, RocResponse
from service.offload import run_engine
from service.openapi import PROBLEM_MEDIA_TYPE, problems
from service.settings import Settings
from service.telemetry import Telemetry

router = APIRouter(prefix="/v1/models", tags=["metrics"])


async def _metrics(engine: Engine, model_id: str, telemetry: Telemetry) -> dict[str, Any]:
    """``engine.metrics`` (in the thread pool when it may solve the regret), also set as the
    model's Prometheus gauges."""
    if engine.regret_pending(model_id):
        summary = await run_in_threadpool(engine.metrics, model_id)
    else:
        summary = await run_engine(engine, engine.metrics, model_id)
    telemetry.set_window_metrics(model_id, summary["window"])
    return summary


@router.get("/{model_id}/metrics", response_model=MetricsResponse)
async def metrics(model_id: str, services: ServicesDep) -> Response:
    """Prequential metrics of the pre-update scores, over the window of the last ``window``
    labelled events and since the start: AUC, pAUC over the model's FPR range, average
    precision, operating points, counts, throughput, drift; ``regret``: on the last
    ``regret_window`` events, the online pAUC-surrogate loss against the best fixed model in
    hindsight (``svm_pauc`` on the same events, solved once per version); in queue mode
    ``queue``, the learning lag.  Undefined metrics are null with a ``reason``."""
    engine = services.engine
    lag = None
    if services.queue is not None:
        # the lag first: the metrics read after it include everything it counts as applied
        lag = await run_in_threadpool(services.queue.lag, model_id)
        services.telemetry.set_lag(model_id, lag)
    summary = await _metrics(engine, model_id, services.telemetry)
    if lag is not None:
        summary["queue"] = lag
    return Response(orjson.dumps(summary), media_type="application/json")


def _finite_or_none(values: list[float]) -> list[float | None]:
    return [value if math.isfinite(value) else None for value in values]


@router.get("/{model_id}/metrics/roc", response_model=RocResponse)
async def roc(model_id: str, engine: EngineDep) -> RocResponse:
    """ROC points of the window (infinite / undefined values as null), with the window's
    average precision and operating points at the model's target FPRs, alert rates and k (as
    in ``/metrics``; each point at a target is one of the curve's vertices)."""
    version, n_events, fpr, tpr, thresholds, points = await run_engine(engine, engine.roc, model_id)
    return RocResponse(
        model=model_id,
        version=version,
        n_events=n_events,
        fpr=_finite_or_none(fpr.tolist()),
        tpr=_finite_or_none(tpr.tolist()),
        thresholds=_finite_or_none(thresholds.tolist()),
        **points,
    )


@router.get("/{model_id}/metrics/history", response_model=HistoryResponse)
async def history(
    model_id: str,
    engine: EngineDep,
    resolution: Literal["minute", "hour"] = Query(
        "minute", description="a point per minute (the last day) or per hour (the last 31 days)"
    ),
    since: float | None = Query(
        None,
        ge=0,
        allow_inf_nan=False,
        description="only the points written after this time (unix seconds)",
    ),
) -> Response:
    """The model's metrics history, kept by the server with the model: at each resolution a
    ring of points (the window's AUC, pAUC, average precision and TPR at the first target FPR,
    and the counts since the start), written by the first commit of each minute or hour.  An
    idle model writes no points; ``last_learned_at`` says when it last learned."""
    body = await run_engine(engine, engine.history, model_id, resolution, since)
    return Response(orjson.dumps(body), media_type="application/json")


def _message(event: str, media_type: str, schema: str, **fields: Any) -> dict[str, Any]:
    """The schema of a message of the metrics stream."""
    data = {"type": "string", "contentMediaType": media_type,
            "contentSchema": {"$ref": f"#/components/schemas/{schema}"}}  # fmt: skip
    return {
        "type": "object",
        "properties": {"event": {"const": event}, **fields, "data": data},
        "required": ["event", "data"],
    }


_RETRY_AFTER = {
    "description": "seconds (AUCSTREAM_SSE_RETRY_AFTER_SECONDS for a refused stream)",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}


class StreamSlots:
    """The server-sent streams this process holds open, per client (API key, or address
    without keys) and in total: each reads a model's metrics at every check."""

    def __init__(self, settings: Settings) -> None:
        self.per_client = settings.sse_max_streams_per_client
        self.total = settings.sse_max_streams
        self.retry_after = {"Retry-After": str(settings.sse_retry_after_seconds)}
        self.auth_enabled = settings.auth_enabled
        self.open: Counter[str] = Counter()

    def client_of(self, request: Request) -> tuple[str, str]:
        """``(the client's counting key, its name in a problem)``; a key by its digest."""
        if self.auth_enabled:
            key = presented_key(request) or ""
            return "key:" + hashlib.sha256(key.encode()).hexdigest(), "this API key"
        address = request.client.host if request.client else "unknown"
        return "address:" + address, f"the client address {address}"

    def acquire(self, request: Request) -> str:
        """Take a slot for the request's client (429, 503); returns the client to release."""
        client, named = self.client_of(request)
        if self.open[client] >= self.per_client:
            raise TooManyStreams(
                f"{named} already holds {self.open[client]} metrics streams, the most one "
                f"client may hold (AUCSTREAM_SSE_MAX_STREAMS_PER_CLIENT={self.per_client}); "
                "close one, or retry after Retry-After seconds",
                headers=self.retry_after,
            )
        in_use = self.open.total()
        if in_use >= self.total:
            raise StreamsFull(
                f"the server already holds {in_use} metrics streams, the most it serves at once "
                f"(AUCSTREAM_SSE_MAX_STREAMS={self.total}); retry after Retry-After seconds",
                headers=self.retry_after,
            )
        self.open[client] += 1
        return client

    def release(self, client: str) -> None:
        self.open[client] -= 1
        if self.open[client] <= 0:
            del self.open[client]


class SlotStreamingResponse(StreamingResponse):
    """A stream that gives its slot back however it ends, even never iterated."""

    def __init__(self, *args: Any, release: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()


@router.get(
    "/{model_id}/metrics/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "`event: metrics` messages whose data is a MetricsResponse",
            "content": {
                "text/event-stream": {
                    "schema": {  # of each message (OpenAPI 3.1)
                        "oneOf": [
                            _message(
                                "metrics",
                                "application/json",
                                "MetricsResponse",
                                id={"type": "string", "description": "the model version"},
                            ),
                            {
                                "title": "deleted",
                                **_message("deleted", PROBLEM_MEDIA_TYPE, "Problem"),
                            },
                        ]
                    },  # fmt: skip
                    "example": 'event: metrics\nid: 7\ndata: {"model": "fraud", "version": 7}\n\n',
                }
            },
            "headers": {
                "X-Stream-Interval": {
                    "description": "seconds between two checks, as used (the interval asked "
                    "for, raised to the server's minimum)",
                    "schema": {"type": "string"},
                }
            },
        },
        429: {
            **problems(429)[429],
            "description": "This API key (or client address, without keys) already holds "
            "AUCSTREAM_SSE_MAX_STREAMS_PER_CLIENT streams; retry after Retry-After seconds",
            "headers": {"Retry-After": _RETRY_AFTER},
        },
        503: {
            **problems(503)[503],
            "description": "The process already holds AUCSTREAM_SSE_MAX_STREAMS streams, the "
            "store is unavailable or the kernels are warming up; retry after Retry-After",
            "headers": {"Retry-After": _RETRY_AFTER},
        },
    },
)
async def stream(
    model_id: str,
    request: Request,
    engine: EngineDep,
    settings: SettingsDep,
    telemetry: TelemetryDep,
    max_events: int | None = Query(None, ge=1, description="close after this many messages"),
    interval: float | None = Query(
        None,
        ge=0.1,
        le=60,
        description="seconds between checks (each reads the metrics); one below the server's "
        "minimum (AUCSTREAM_SSE_MIN_INTERVAL_SECONDS, 0.5 by default) is raised to it, and the "
        "interval used is sent back in the X-Stream-Interval header",
    ),
) -> StreamingResponse:
    """Server-sent events: a ``metrics`` message now and each time the model's version
    changes (checked every ``interval`` seconds); a comment line keeps idle connections open.
    If the model is deleted, a last ``deleted`` message (a problem object) ends the stream.
    Streams are bounded per client and per process (429, 503)."""
    slots: StreamSlots = request.app.state.sse_slots
    client = slots.acquire(request)
    try:
        first = await _metrics(engine, model_id, telemetry)  # 404 before streaming
    except BaseException:
        slots.release(client)
        raise
    period = max(interval or settings.stream_interval_seconds, settings.sse_min_interval_seconds)

    async def messages() -> AsyncIterator[bytes]:
        sent = 0
        current = first
        last_version: int | None = None
        idle = 0.0
        while True:
            if current["version"] != last_version:
                last_version = current["version"]
                sent += 1
                data = orjson.dumps(current)
                yield b"event: metrics\nid: %d\ndata: %s\n\n" % (last_version, data)
                idle = 0.0
                if max_events is not None and sent >= max_events:
                    return
            elif idle >= 15.0:
                idle = 0.0
                yield b": keep-alive\n\n"
            await asyncio.sleep(period)
            idle += period
            if await request.is_disconnected():
                return
            try:
                current = await _metrics(engine, model_id, telemetry)
            except ModelNotFound as gone:
                # the model was deleted while watched: say so and end the stream cleanly
                # (raising here would cut the chunked response mid-way)
                yield b"event: deleted\ndata: " + orjson.dumps(gone.problem()) + b"\n\n"
                return

    return SlotStreamingResponse(
        messages(),
        release=lambda: slots.release(client),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            "X-Stream-Interval": f"{period:g}",
        },
    )
