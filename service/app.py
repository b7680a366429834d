"""``create_app()`` (uvicorn: ``service.app:create_app --factory``); the store is opened in the
lifespan, not at import."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TextIO

from fastapi import Depends, FastAPI

from core.warmup import kernel_groups
from service import kernels
from service.auth import require_api_key
from service.body_guard import BodyDeadlines
from service.deps import Services
from service.engine import Engine
from service.engine.refit import Refitter
from service.errors import StoreUnavailable
from service.fastlane import ServiceApp
from service.hosts import HostCheck
from service.kernels import progress_bar_stream, warm_up
from service.queue import StreamQueue
from service.routers import dashboard, events, metrics, models, system
from service.settings import LEARNING_SETTINGS, Settings
from service.stores.base import Store
from service.stream import endpoint as stream_endpoint
from service.telemetry import Telemetry, configure_logging

logger = logging.getLogger("aucstream")

#: the settings the engine takes as keywords of the same names
ENGINE_SETTINGS = LEARNING_SETTINGS | {
    "max_write_retries", "max_models", "max_model_bytes", "max_pending_records",
}  # fmt: skip


def make_store(settings: Settings) -> Store:
    if settings.store == "redis":
        from service.stores.redis import RedisStore

        return RedisStore.open(settings)
    if settings.store == "sqlite":
        from service.stores.sqlite import SQLiteStore

        store = SQLiteStore.open(settings.data_dir, settings.sqlite_synchronous)
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
        app.state.engine = Engine(app.state.store, **settings.model_dump(include=ENGINE_SETTINGS))
        # Prometheus labels only for models this process holds
        repository = app.state.engine.repository
        telemetry.model_exists = lambda model_id: repository.cached(model_id) is not None
        repository.on_forget.append(telemetry.forget_model)
        app.state.queue = make_queue(app.state.store, settings)
        app.state.services = Services(app.state.engine, settings, telemetry, app.state.queue)
        app.state.sse_slots = metrics.StreamSlots(settings)
        app.state.warm = threading.Event()
        if settings.warmup:
            kernels.readiness.plan(kernel_groups())
            bar_stream = progress_bar_stream(settings.log_format, settings.workers)
            threading.Thread(target=_warm, args=(app.state.warm, bar_stream), daemon=True).start()
        else:
            app.state.warm.set()
        # boosted ensembles are fitted off the request path (in queue mode by the worker)
        refitter = app.state.refitter = Refitter()
        if app.state.queue is None:
            refitter.start()
        engine = app.state.engine
        tasks = [
            asyncio.create_task(_every(seconds, work, what))
            for seconds, work, what in (
                (settings.sweep_interval_seconds, engine.sweep_all, "sweep of expired labels"),
                (settings.history_catch_up_seconds, engine.catch_up_history, "history catch-up"),
            )
        ]
        unwatch = _stop_when_orphaned(asyncio.get_running_loop())
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            unwatch()
            await asyncio.to_thread(refitter.stop)
            app.state.engine.close()
            if store is None:
                app.state.store.close()

    app = ServiceApp(
        title="aucstream",
        version="0.1.0",
        summary="Online AUC / partial-AUC learning with live, exact metrics.",
        lifespan=lifespan,
        # served by service/routers/dashboard.py from vendored assets (FastAPI's use a CDN)
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.telemetry = telemetry
    secured = [Depends(require_api_key)]
    app.router.routes.append(stream_endpoint.route)  # checks the key on connect
    for router in (models.router, events.router, metrics.router, system.v1_router):
        app.include_router(router, dependencies=secured)
    app.include_router(system.router)
    dashboard.install(app)

    app.install(
        telemetry,
        HostCheck(settings.allowed_hosts),
        BodyDeadlines(settings.body_read_timeout_seconds),
    )
    return app


def _warm(ready: threading.Event, bar_stream: TextIO | None) -> None:
    """The warm-up thread: ``ready`` is set once the default path's kernels are, or at its end."""
    try:
        warm_up(ready, bar_stream)
    except Exception:  # pragma: no cover - warm-up is an optimisation
        logger.exception("kernel warm-up failed")
    finally:
        kernels.readiness.abandon()  # nothing once the warm-up has run its plan
        ready.set()


def _stop_when_orphaned(loop: asyncio.AbstractEventLoop) -> Callable[[], object]:
    """A uvicorn worker whose server was killed stops itself (SIGTERM: in-flight requests
    finish), or it would keep the port from the restarted server.  The server is watched
    through multiprocessing's sentinel of the parent (a pipe it holds open while it lives),
    not by comparing ``os.getppid()`` with a pid read at start-up: a server killed while its
    worker was still importing has already left the worker with another parent.  Returns
    the call that stops watching; a process that is not a spawned worker watches nothing."""
    server = multiprocessing.parent_process()
    if server is None:
        return lambda: None
    sentinel = server.sentinel

    def server_gone() -> None:
        loop.remove_reader(sentinel)
        logger.warning("the server process %d is gone: this worker process stops", server.pid)
        os.kill(os.getpid(), signal.SIGTERM)

    loop.add_reader(sentinel, server_gone)
    return partial(loop.remove_reader, sentinel)


async def _every(seconds: float, work: Callable[[], object], what: str) -> None:
    """``work`` in the thread pool every ``seconds``; a failure is logged, the next round runs."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await asyncio.to_thread(work)
        except StoreUnavailable as error:  # an outage, already logged by the store: no trace
            logger.warning("%s skipped: %s", what, error.detail)
        except Exception:
            logger.exception("%s failed", what)
