"""Prometheus metrics of one process (``GET /metrics``), on a registry owned by the app, and
the structured logs.

With several uvicorn workers (``aucstream serve --workers N``, N > 1) the metrics are
prometheus_client's multiprocess ones: ``aucstream serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at
an emptied directory before the workers start, every worker writes its values there, and any
worker's ``/metrics`` renders the sum over all of them (gauges: the most recent value; the
retried-writes gauge: the sum) -- one view, whichever worker the scraper reaches.  Series of
deleted models are left out of that view (a worker cannot delete another's values).  The
per-model learning counters that must be exact are in the model's state
(``GET /v1/models/{id}/metrics``).  Per model, ``aucstream_model_window_auc`` and
``aucstream_model_window_pauc`` are the window's AUC and pAUC (NaN while undefined) as last
computed by a metrics request: no extra computation is made for them.  A queue worker serves
the same metric names (events learned, duplicates, entries, batch durations, lag) on its own port
(``AUCSTREAM_WORKER_METRICS_PORT``).  The lag gauges are read from Redis when scraped.

Logs: ``AUCSTREAM_LOG_FORMAT=json`` writes one JSON object per line (``time``, ``level``,
``logger``, ``message`` and the record's fields) and one line per HTTP request with its
``request_id`` (the ``X-Request-ID`` header, or a new one, echoed in the response), ``method``,
``route``, ``model``, ``status``, ``duration_ms`` and the route's counts (events received,
learned, queued ...).  A worker logs one line per applied batch.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

__all__ = ["CONTENT_TYPE_LATEST", "JsonFormatter", "Telemetry", "TimingMiddleware"]

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


#: the window gauges, by the keys of a metrics summary's window (``set_window_metrics``)
_WINDOW_GAUGES = {
    "auc": "AUC over the model's metrics window, as last computed (NaN while undefined).",
    "pauc": "pAUC over the model's FPR range on its metrics window, as last computed (NaN while "
    "undefined).",
}
#: the queue lag gauges, by the keys of a queue's lag (``set_lag``)
_LAG_GAUGES = {
    "events": "Events queued and not yet learned.",
    "entries": "Stream entries appended and not yet applied.",
    "seconds": "Age of the oldest stream entry not yet applied (0 when caught up).",
}


class Telemetry:
    def __init__(self, *, log_requests: bool = False) -> None:
        #: one JSON log line per request (``AUCSTREAM_LOG_FORMAT=json``)
        self.log_requests = log_requests
        self.registry = CollectorRegistry()
        self.requests = self._counter(
            "aucstream_http_requests_total",
            "HTTP requests by route template, method, status and model ('' for none).",
            ("method", "route", "status", "model"),
        )
        self.latency = Histogram(
            "aucstream_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.events_learned = self._counter("aucstream_events_learned_total", "Events learned.")
        self.duplicates = self._counter(
            "aucstream_events_duplicate_total",
            "Events skipped because their id was already learned.",
        )
        self.drifts = self._counter(
            "aucstream_drift_detected_total",
            "Drifts detected on the model's prequential pairwise loss (Page-Hinkley).",
        )
        self.scored = self._counter("aucstream_events_scored_total", "Events scored.")
        self.stale_writes = Gauge(
            "aucstream_stale_writes_retried",
            "Writes rejected for a stale version and retried (contention), summed over the "
            "processes.",
            registry=self.registry,
            multiprocess_mode="sum",
        )
        self.store_data_lost = Gauge(
            "aucstream_store_data_lost",
            "Losses of data noticed in the store and not yet acknowledged (1 for the whole "
            "store, 1 per model that went back in time); the store or model answers 503 "
            "meanwhile.",
            registry=self.registry,
            multiprocess_mode="max",
        )
        #: per model, ``aucstream_model_window_auc`` and ``..._pauc`` (by window key)
        self.window = self._model_gauges("aucstream_model_window_", _WINDOW_GAUGES)
        self.rejected = self._counter(
            "aucstream_requests_rejected_total",
            "Requests rejected with a problem response, by problem type.",
            ("problem",),
        )

        self.labels = self._counter(
            "aucstream_labels_total",
            "Delayed labels by outcome: learned, duplicate, expired, unknown.",
            ("model", "status"),
        )
        # queue mode (API: events queued; worker: entries applied, batch durations; both: lag)
        self.events_queued = self._counter(
            "aucstream_events_queued_total", "Events appended to the model's stream (queue mode)."
        )
        self.entries = self._counter(
            "aucstream_worker_entries_total",
            "Stream entries a worker handled, by outcome: applied, redelivered (at or before "
            "the checkpoint, skipped), rejected (invalid; skipped and logged).",
            ("model", "outcome"),
        )
        self.batch_duration = Histogram(
            "aucstream_worker_batch_duration_seconds",
            "Time a worker took to learn and commit one read of entries.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        #: per model, ``aucstream_queue_lag_events``, ``..._entries``, ``..._seconds`` (by lag key)
        self.lag = self._model_gauges("aucstream_queue_lag_", _LAG_GAUGES)
        # the WebSocket stream (docs/stream.md)
        self.stream_messages = self._counter(
            "aucstream_stream_messages_total",
            "Stream messages answered, by operation and status (the HTTP status of the reply).",
            ("op", "status"),
        )
        self.stream_connections = Gauge(
            "aucstream_stream_connections",
            "Open stream connections.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )

        #: the metrics labelled by model (label sets dropped when the model is deleted)
        self._per_model = (
            self.requests, self.events_learned, self.duplicates, self.drifts, self.scored,
            self.labels, self.events_queued, self.entries, *self.lag.values(),
            *self.window.values(),
        )  # fmt: skip
        #: whether this process holds a model (the app sets it to the engine's cache)
        self.model_exists: Callable[[str], bool] = lambda model_id: False
        #: (metric, label values) -> the metric's child: see :meth:`child`
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        #: held to add a child and to remove label sets, so that none is kept once removed
        self._children_lock = threading.Lock()

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: prometheus_client's lookup takes a lock and checks
        the values each time (~1 us; three per one-event ``/score``).  The same child objects
        (prometheus_client keeps one per label set), forgotten whenever label sets are removed
        (:meth:`forget_model`, :meth:`forget_models`)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            with self._children_lock:
                child = self._children[key] = metric.labels(*labels)
        return child

    def _counter(
        self, name: str, documentation: str, labels: tuple[str, ...] = ("model",)
    ) -> Counter:
        """A counter on this process's registry, by model unless other ``labels`` are given."""
        return Counter(name, documentation, labels, registry=self.registry)

    def _model_gauges(self, prefix: str, documentation: dict[str, str]) -> dict[str, Gauge]:
        """``{key: the gauge <prefix><key>}``, a gauge per model for each key of
        ``documentation``; with several worker processes, the most recent value."""
        return {
            key: Gauge(
                prefix + key,
                text,
                ["model"],
                registry=self.registry,
                multiprocess_mode="mostrecent",
            )
            for key, text in documentation.items()
        }

    @property
    def multiprocess(self) -> bool:
        """Whether values go to ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client decides when it
        is imported, so the variable must be set before: ``aucstream serve`` does)."""
        return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

    def set_window_metrics(self, model: str, window: dict[str, Any]) -> None:
        """The model's window AUC / pAUC from a metrics summary already computed."""
        for key, gauge in self.window.items():
            value = window.get(key)
            gauge.labels(model).set(math.nan if value is None else float(value))

    def set_lag(self, model: str, lag: dict[str, Any]) -> None:
        for key, gauge in self.lag.items():
            gauge.labels(model).set(lag[key])

    def model_label(self, model_id: str, status: int) -> str:
        """The ``model`` label of a request: the model's id only for a model this process
        holds, and never for an unauthenticated request, so requests for unknown ids (404) or
        without a key (401/403) cannot create label sets (each one is kept for ever)."""
        if not model_id or status in (401, 403) or not self.model_exists(model_id):
            return ""
        return model_id

    def forget_model(self, model_id: str) -> None:
        """Drop every label set of a deleted model."""
        with self._children_lock:
            self._children.clear()
            for metric in self._per_model:
                position = metric._labelnames.index("model")  # noqa: SLF001 - no public API
                for labels in list(metric._metrics):  # noqa: SLF001
                    if labels[position] == model_id:
                        metric.remove(*labels)

    def forget_models(self, keep: set[str]) -> None:
        """Drop the lag gauges of deleted models."""
        with self._children_lock:
            self._children.clear()
            for gauge in self.lag.values():
                for labels in list(gauge._metrics):  # noqa: SLF001 - prometheus_client has no API
                    if labels[0] not in keep:
                        gauge.remove(*labels)

    def render(self, models: set[str] | None = None) -> bytes:
        """The exposition text: this process's registry, or in multiprocess mode every
        process's values aggregated, keeping only the series of ``models`` (the existing ones)
        among those labelled by model when ``models`` is given."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        if models is None:
            return generate_latest(registry)
        return generate_latest(_ExistingModels(registry, models))  # type: ignore[arg-type]


class _ExistingModels:
    """A collector view without the series of deleted models: in multiprocess mode a label set
    lives in the file of every process that wrote it, and ``remove`` in one process does not
    reach the others' files."""

    def __init__(self, registry: CollectorRegistry, models: set[str]) -> None:
        self.registry = registry
        self.models = models

    def collect(self) -> Iterator[Metric]:
        for metric in self.registry.collect():
            metric.samples = [
                sample
                for sample in metric.samples
                if sample.labels.get("model", "") in self.models or not sample.labels.get("model")
            ]
            yield metric


def reset_multiprocess_dir(path: str) -> None:
    """Empty ``PROMETHEUS_MULTIPROC_DIR`` of a previous run's values (prometheus_client
    requires it before the processes start: old files would be summed in)."""
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.remove(os.path.join(path, name))


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
