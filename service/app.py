"""The FastAPI application: ``create_app()`` (uvicorn: ``service.app:create_app --factory``).

Clients (the store) are created in the lifespan, not at import; domain errors become
``application/problem+json`` responses in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import threading
from collections.abc import AsyncIterator
from typing import Any, TextIO

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware

from core.warmup import kernel_groups
from service import fastlane, kernels
from service import openapi as openapi_document
from service.auth import require_api_key
from service.body_guard import BodyGuard
from service.deps import Services
from service.engine import Engine
from service.engine.refit import Refitter
from service.errors import MalformedBody, ServiceError, StoreUnavailable
from service.fastlane import LaneApp
from service.hosts import HostGuard, HostPolicy
from service.ingest.objects import json_error_detail
from service.kernels import progress_bar_stream, warm_up, warming_up
from service.queue import StreamQueue
from service.routers import dashboard, events, metrics, models, system
from service.settings import Settings
from service.stores.base import Store
from service.stream import endpoint as stream_endpoint
from service.telemetry import Telemetry
from service.telemetry_logs import TimingMiddleware, configure_logging

logger = logging.getLogger("aucstream")
PROBLEM = "application/problem+json"


def make_store(settings: Settings) -> Store:
    if settings.store == "redis":
        from service.stores.redis import RedisStore

        assert settings.redis_url is not None
        return RedisStore.open(settings)
    if settings.store == "sqlite":
        from service.stores.sqlite import SQLiteStore

        store = SQLiteStore.open(
            settings.data_dir, settings.sqlite_synchronous, settings.max_cached_models
        )
        logger.info("store: SQLite at %s (synchronous=%s)", store.path, store.synchronous)
        return store
    from service.stores.memory import MemoryStore

    return MemoryStore()


def make_queue(store: Store, settings: Settings) -> StreamQueue | None:
    """Queue mode: the model streams, on the Redis store's connection pool."""
    if settings.mode != "queue":
        return None
    from service.stores.redis import RedisStore

    if not isinstance(store, RedisStore):
        raise RuntimeError("AUCSTREAM_MODE=queue needs the Redis store")
    return StreamQueue(
        store.client,
        max_backlog_events=settings.queue_max_backlog_events,
        entry_events=settings.queue_entry_events,
        retry_after_seconds=settings.queue_retry_after_seconds,
        replica_wait=lambda: store.wait,
    )


#: the order methods are listed in ``Allow``
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(app: FastAPI, path: str) -> list[str] | None:
    """The methods served at ``path``, read from the OpenAPI document (which declares every
    route, the plain ``/events`` and ``/score`` ones included), with HEAD beside GET and
    OPTIONS; None for a path the document does not have."""
    templates = getattr(app.state, "path_patterns", None)
    if templates is None:
        templates = app.state.path_patterns = [
            (re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)) + "$"), methods)
            for template, methods in app.openapi()["paths"].items()
        ]
    for pattern, methods in templates:
        if pattern.match(path):
            served = {method.upper() for method in methods} | {"OPTIONS"}
            if "GET" in served:
                served.add("HEAD")
            return sorted(served, key=_METHOD_ORDER.index)
    return None


async def malformed_json(request: Request, error: dict[str, Any]) -> MalformedBody:
    """FastAPI's ``json_invalid`` error as the 400 the hand-parsed routes give."""
    location = error.get("loc", ())
    position = location[-1] if location and isinstance(location[-1], int) else -1
    reason = (error.get("ctx") or {}).get("error") or error.get("msg", "JSON decode error")
    body = await request.body()  # already read (and kept) by FastAPI
    return MalformedBody(json_error_detail(body, position, f"{reason} at character {position}"))


def problem_response(error: ServiceError) -> JSONResponse:
    return JSONResponse(
        error.problem(), status_code=error.status, media_type=PROBLEM, headers=error.headers
    )


def create_app(settings: Settings | None = None, *, store: Store | None = None) -> FastAPI:
    """Build the app; ``Settings()`` is read (and checked) here, at start-up."""
    settings = settings or Settings()
    configure_logging(settings.log_format, settings.log_level)
    telemetry = Telemetry(
        log_requests=settings.log_format == "json", model_series=settings.prometheus_model_series
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = store or make_store(settings)
        app.state.engine = Engine(
            app.state.store,
            event_id_ttl_seconds=settings.event_id_ttl_seconds,
            label_ttl_seconds=settings.label_ttl_seconds,
            max_cached_models=settings.max_cached_models,
            max_write_retries=settings.max_write_retries,
            max_models=settings.max_models,
            max_model_bytes=settings.max_model_bytes,
            max_pending_records=settings.max_pending_records,
            max_remembered_ids=settings.max_remembered_ids,
        )
        # Prometheus labels only for models this process holds, dropped when one is deleted
        # or evicted from the cache
        repository = app.state.engine.repository
        telemetry.model_exists = lambda model_id: repository.cached(model_id) is not None
        repository.on_forget.append(telemetry.forget_model)
        app.state.queue = make_queue(app.state.store, settings)
        app.state.services = Services(app.state.engine, settings, telemetry, app.state.queue)
        app.state.warm = threading.Event()
        if settings.warmup:
            # planned before the thread starts: a /readyz meanwhile already counts the groups
            kernels.readiness.plan(kernel_groups())
            bar_stream = progress_bar_stream(settings.log_format, settings.workers)
            threading.Thread(target=_warm, args=(app.state.warm, bar_stream), daemon=True).start()
        else:
            app.state.warm.set()
        # boosted ensembles are fitted by a thread of their own, off the request path (in
        # queue mode by the writer, the queue worker)
        refitter = app.state.refitter = Refitter()
        if app.state.queue is None:
            refitter.start()
        sweeper = asyncio.create_task(_sweep_forever(app.state.engine, settings))
        history = asyncio.create_task(_catch_up_history_forever(app.state.engine, settings))
        tasks = [sweeper, history]
        if settings.workers > 1:
            tasks.append(asyncio.create_task(_stop_when_orphaned(os.getppid())))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await asyncio.to_thread(refitter.stop)
            app.state.engine.coalesce.close()
            if store is None:
                app.state.store.close()

    app = LaneApp(
        title="aucstream",
        version="0.1.0",
        summary="Online AUC / partial-AUC learning with live, exact metrics.",
        lifespan=lifespan,
        # served from vendored assets by service/routers/dashboard.py (FastAPI's load a CDN)
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.telemetry = telemetry
    secured = [Depends(require_api_key)]
    app.router.routes.extend(events.hot_routes)  # check the API key themselves
    app.router.routes.append(stream_endpoint.route)  # checks the key on connect
    app.include_router(models.router, dependencies=secured)
    app.include_router(events.router, dependencies=secured)
    app.include_router(metrics.router, dependencies=secured)
    app.include_router(system.v1_router, dependencies=secured)
    app.include_router(system.router)
    dashboard.install(app)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, error: ServiceError) -> JSONResponse:
        telemetry.rejected.labels(error.slug).inc()
        return problem_response(error)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        first: dict[str, Any] = error.errors()[0] if error.errors() else {}
        if first.get("type") == "json_invalid":  # as /events answers it: 400, not a field
            return await service_error(request, await malformed_json(request, first))
        location = [str(part) for part in first.get("loc", ()) if part != "body"]
        message = first.get("msg", "invalid request")
        field = ".".join(location) or None
        detail = f"{field}: {message}" if field else message
        telemetry.rejected.labels("invalid-input").inc()
        return JSONResponse(
            {
                "type": "https://aucstream.dev/problems/invalid-input",
                "title": "Invalid input",
                "status": 422,
                "detail": detail,
                "field": field,
            },
            status_code=422,
            media_type=PROBLEM,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        headers = getattr(error, "headers", None)
        if error.status_code == 405:
            # Starlette names the methods of the first route matching the path only
            methods = allowed_methods(app, request.url.path)
            if methods is not None:
                if request.method == "OPTIONS":
                    return Response(status_code=204, headers={"Allow": ", ".join(methods)})
                headers = {**(headers or {}), "Allow": ", ".join(methods)}
        return JSONResponse(
            {
                "type": "about:blank",
                "title": str(error.detail),
                "status": error.status_code,
                "detail": f"{request.method} {request.url.path}: {error.detail}",
            },
            status_code=error.status_code,
            media_type=PROBLEM,
            headers=headers,
        )

    # every request passes these, innermost first: FastAPI's stack and the lane's
    # (service.fastlane: POST /events and /score) alike
    middlewares = [
        Middleware(HeadAsGet),
        Middleware(NoStore),
        Middleware(WarmGate, owner=app),
        # inside the timing middleware, so that the 408 / 499 it records are what is counted
        Middleware(BodyGuard, timeout_seconds=settings.body_read_timeout_seconds),
        # before anything reads the body; inside the timing middleware, so that its 400s
        # are counted and logged
        Middleware(
            HostGuard,
            policy=HostPolicy(settings.allowed_hosts),
            on_refusal=lambda error: telemetry.rejected.labels(error.slug).inc(),
        ),
        Middleware(TimingMiddleware, telemetry=telemetry),
    ]
    fastlane.install(app, events.hot_routes, middlewares, service_error)

    def openapi() -> dict[str, Any]:
        """FastAPI's document, plus ``/events`` and ``/score`` as declared on
        ``events.documented`` (the app serves them through plain routes), completed by
        :func:`service.openapi.complete`."""
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=[*app.routes, *events.documented.routes],
            )
            app.openapi_schema = openapi_document.complete(
                document, auth_enabled=settings.auth_enabled
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


class NoStore:
    """``Cache-Control: no-store`` on every ``/v1`` response that sets none itself: they carry
    model state, metrics and scores, which neither a shared cache nor the browser's may keep
    (a read through a proxy with another user's key, a page left on a shared machine)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return

        async def send_no_store(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers") or []
                if not any(name.lower() == b"cache-control" for name, _ in headers):
                    message["headers"] = [*headers, (b"cache-control", b"no-store")]
            await send(message)

        await self.app(scope, receive, send_no_store)


class HeadAsGet:
    """HEAD on every route that serves GET: the GET is served and its body dropped (RFC 9110
    9.3.2: the same header fields, no content).  FastAPI's routes take only the methods they
    declare, so HEAD was a 405 whose ``Allow`` listed HEAD.  A stream (server-sent metrics)
    ends after its headers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # a copy: the server reads the request's own scope to know that it answers a HEAD
        as_get = {**scope, "method": "GET"}
        ended = False

        async def send_headers_only(message: dict) -> None:
            nonlocal ended
            if message["type"] != "http.response.body":
                await send(message)
            elif not ended:
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await self.app(as_get, receive, send_headers_only)
        finally:
            # what routing found, for the request metrics (labelled with the route's path)
            for key in ("route", "path_params"):
                if key in as_get:
                    scope[key] = as_get[key]


class WarmGate:
    """Until the kernels of the default path, the metrics and the regret window are ready,
    ``/v1`` requests get 503 ``warming-up`` (with the warm-up's progress, and Retry-After its
    estimate of the time left: :func:`service.kernels.warming_up`) instead of compiling kernels
    inside the request -- on the event loop for small bodies, which held ``/healthz`` for 23 s.
    Probes and ``/metrics`` pass.  Once ready, one attribute read per request; a model whose
    learner's kernels are still compiling in the background is refused where it is loaded
    (:func:`service.kernels.require_kernels`)."""

    def __init__(self, app: Any, owner: FastAPI) -> None:
        self.app = app
        self.owner = owner
        self.open = False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if not self.open and scope["type"] == "http" and scope["path"].startswith("/v1/"):
            warm = getattr(self.owner.state, "warm", None)
            if warm is not None and not warm.is_set():
                await problem_response(warming_up())(scope, receive, send)
                return
            self.open = warm is not None
        await self.app(scope, receive, send)


def _warm(ready: threading.Event, bar_stream: TextIO | None) -> None:
    """The warm-up thread: ``ready`` is set once the default path's kernels are, and in any
    case when the warm-up ends."""
    try:
        warm_up(ready, bar_stream)
    except Exception:  # pragma: no cover - warm-up is an optimisation
        logger.exception("kernel warm-up failed")
    finally:
        kernels.readiness.abandon()  # nothing once the warm-up has run its plan
        ready.set()


#: how often a worker process of a multi-worker server checks that the server is still there
ORPHAN_CHECK_SECONDS = 1.0


async def _stop_when_orphaned(server_pid: int) -> None:
    """A uvicorn worker whose server process was killed (``kill -9``: it could not stop its
    workers) stops itself (SIGTERM: in-flight requests finish).  Left running it would keep
    the port, so the restarted server could not listen on it, and nothing would replace it."""
    while os.getppid() == server_pid:
        await asyncio.sleep(ORPHAN_CHECK_SECONDS)
    logger.warning("the server process %d is gone: this worker process stops", server_pid)
    os.kill(os.getpid(), signal.SIGTERM)


async def _sweep_forever(engine: Engine, settings: Settings) -> None:
    """Apply default labels / forget expired pending labels, every few seconds."""
    while True:
        await asyncio.sleep(settings.sweep_interval_seconds)
        try:
            await asyncio.to_thread(engine.sweep_all)
        except StoreUnavailable as error:  # an outage, already logged by the store: no trace
            logger.warning("sweep of expired labels skipped: %s", error.detail)
        except Exception:
            logger.exception("sweep of expired labels failed")


async def _catch_up_history_forever(engine: Engine, settings: Settings) -> None:
    """Write the metrics-history points of models gone quiet since their last point
    (:meth:`Engine.catch_up_history`), every few seconds."""
    while True:
        await asyncio.sleep(settings.history_catch_up_seconds)
        try:
            await asyncio.to_thread(engine.catch_up_history)
        except Exception:  # each model's failure is logged inside: this is a bug
            logger.exception("metrics history catch-up failed")
