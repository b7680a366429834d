"""The structured logs: ``AUCSTREAM_LOG_FORMAT=json`` writes one JSON object per line
(``time``, ``level``, ``logger``, ``message`` and the record's fields), and
:func:`record_request` counts and times every HTTP request (the Prometheus request metrics
of :class:`~service.telemetry.Telemetry`) and, with JSON logs, writes one line per request with
its ``request_id`` (the ``X-Request-ID`` header, or a new one, echoed in the response),
``method``, ``route``, ``model``, ``status``, ``duration_ms`` and the route's counts (events
received, learned, queued ...).  A worker logs one line per applied batch.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import Scope

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
    own access log is replaced by the request lines of :func:`record_request`.  ``text``
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


def record_request(
    telemetry: Telemetry, scope: Scope, method: str, status: int, started: float, request_id: str
) -> None:
    """Count and time one answered HTTP request (``scope``: as routing left it, with its
    ``route`` and ``path_params``) and, with JSON logs, write its line."""
    route = scope.get("route")
    template = getattr(route, "path", None) or "unmatched"
    requested = (scope.get("path_params") or {}).get("model_id", "")
    model = telemetry.model_label(requested, status)
    elapsed = time.perf_counter() - started
    telemetry.child(telemetry.requests, method, template, str(status), model).inc()
    telemetry.child(telemetry.latency, method, template).observe(elapsed)
    if telemetry.log_requests:
        fields = {
            "request_id": request_id,
            "method": method,
            "route": template,
            "path": scope.get("path", ""),
            "model": requested or None,
            "status": status,
            "duration_ms": round(elapsed * 1000.0, 3),
        }
        fields.update((scope.get("state") or {}).get("log_fields") or {})
        request_logger.info("%s %s %s", method, template, status, extra={"fields": fields})
