"""The structured logs: ``AUCSTREAM_LOG_FORMAT=json`` writes one JSON object per line
(``time``, ``level``, ``logger``, ``message`` and the record's fields), and
:class:`TimingMiddleware` counts and times every HTTP request (the Prometheus request metrics
of :class:`~service.telemetry.Telemetry`) and, with JSON logs, writes one line per request with
its ``request_id`` (the ``X-Request-ID`` header, or a new one, echoed in the response),
``method``, ``route``, ``model``, ``status``, ``duration_ms`` and the route's counts (events
received, learned, queued ...).  A worker logs one line per applied batch.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from service.telemetry import Telemetry

request_logger = logging.getLogger("aucstream.request")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra={"fields": {...}}`` adds fields to the object."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            body.update(fields)
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(body, default=str).decode()


def configure_logging(log_format: str, level: str) -> None:
    """``json``: every logger (uvicorn's included) writes JSON lines to stderr, and uvicorn's
    own access log is replaced by the request lines of :class:`TimingMiddleware`.  ``text``
    leaves the logging configuration as it is, except for the level of ``aucstream``."""
    logging.getLogger("aucstream").setLevel(level.upper())
    if log_format != "json":
        service_logger = logging.getLogger("aucstream")
        if not service_logger.handlers and not logging.getLogger().hasHandlers():
            # uvicorn configures only its own loggers: without a handler the start-up lines
            # (which kernels are compiling, for how long) would be dropped below WARNING
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
            service_logger.addHandler(handler)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = False
    access.disabled = True


class TimingMiddleware:
    """Pure ASGI middleware (no per-request task as BaseHTTPMiddleware would add)."""

    def __init__(self, app: Any, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]
        log = self.telemetry.log_requests
        request_id = ""
        if log:
            for name, value in scope.get("headers", ()):
                if name == b"x-request-id":
                    request_id = value.decode("latin-1")[:128]
                    break
            request_id = request_id or uuid.uuid4().hex
            scope.setdefault("state", {})

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if log:
                    message.setdefault("headers", [])
                    message["headers"] = [
                        *message["headers"],
                        (b"x-request-id", request_id.encode("latin-1")),
                    ]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            requested = (scope.get("path_params") or {}).get("model_id", "")
            model = self.telemetry.model_label(requested, status[0])
            elapsed = time.perf_counter() - started
            telemetry = self.telemetry
            telemetry.child(telemetry.requests, method, template, str(status[0]), model).inc()
            telemetry.child(telemetry.latency, method, template).observe(elapsed)
            if log:
                fields = {
                    "request_id": request_id,
                    "method": method,
                    "route": template,
                    "path": scope.get("path", ""),
                    "model": requested or None,
                    "status": status[0],
                    "duration_ms": round(elapsed * 1000.0, 3),
                }
                fields.update((scope.get("state") or {}).get("log_fields") or {})
                request_logger.info(
                    "%s %s %s", method, template, status[0], extra={"fields": fields}
                )
