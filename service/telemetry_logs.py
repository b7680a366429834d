"""The logs: ``AUCSTREAM_LOG_FORMAT=json`` writes one JSON object per line, and
:func:`record_request` counts and times every HTTP request and, with JSON logs, writes its line
(``request_id``, ``method``, ``route``, ``model``, ``status``, ``duration_ms``, the counts)."""

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
    """``json``: every logger writes JSON lines to stderr, uvicorn's access log replaced by
    :func:`record_request`'s; ``text``: only the level of ``aucstream`` is set."""
    logging.getLogger("aucstream").setLevel(level.upper())
    if log_format != "json":
        service_logger = logging.getLogger("aucstream")
        if not service_logger.handlers and not logging.getLogger().hasHandlers():
            # uvicorn configures only its own: the start-up lines would be dropped
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
    """Count and time one answered HTTP request (``scope`` as routed) and log its line."""
    route = scope.get("route")
    template = getattr(route, "path", None) or "unmatched"
    requested = (scope.get("path_params") or {}).get("model_id", "")
    model = telemetry.model_label(requested, status)
    elapsed = time.perf_counter() - started
    telemetry.count_request(method, template, status, model, elapsed)
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
