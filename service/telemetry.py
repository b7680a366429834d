"""Prometheus metrics of one process (``GET /metrics``); with several workers, prometheus_client's
multiprocess ones, rendered summed over the workers without the series of deleted models.  And
the logs: ``AUCSTREAM_LOG_FORMAT=json`` writes one JSON object per line, and
:func:`record_request` counts and times every HTTP request and, with JSON logs, writes its line
(``request_id``, ``method``, ``route``, ``model``, ``status``, ``duration_ms``, the counts)."""

from __future__ import annotations

import bisect
import logging
import math
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from starlette.types import Scope

from service.telemetry_series import ModelCounter, ModelSeries

__all__ = ["CONTENT_TYPE_LATEST", "Telemetry", "configure_logging", "record_request"]

request_logger = logging.getLogger("aucstream.request")

#: the request latency histogram's bucket bounds, seconds (the last: prometheus_client's own)
_LATENCY_BOUNDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   math.inf)  # fmt: skip


class Telemetry(ModelSeries):
    """The metrics of one process; the series by model are bounded (:class:`ModelSeries`)."""

    def __init__(self, *, log_requests: bool = False, model_series: int = 100) -> None:
        super().__init__(model_series)  # the registry and the gauges by model
        #: one JSON log line per request (``AUCSTREAM_LOG_FORMAT=json``)
        self.log_requests = log_requests
        self.requests = self._counter(
            "aucstream_http_requests_total",
            "HTTP requests by route template, method, status and model ('' for none).",
            ("method", "route", "status", "model"),
        )
        self.latency = Histogram(
            "aucstream_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route"],
            buckets=_LATENCY_BOUNDS,
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
        summed = "summed over the processes"
        self.stale_writes = self._gauge(
            "aucstream_stale_writes_retried",
            f"Writes rejected for a stale version and retried (contention), {summed}.",
        )
        self.shared_writes = self._gauge(
            "aucstream_shared_model_writes",
            "What a process did when another process had written the model, by outcome, "
            f"{summed}: caught_up (applied the entries it had not applied), undone (a stale "
            "append went back to its undo point and caught up), reloaded (a stale append "
            "rebuilt the model from its checkpoint and log), reread (a cached model read "
            "whole: another process's checkpoint truncated the entries it lacked, or the "
            "model was re-created), turn_taken (a stale append took the model's write turn), "
            "turn_waited (a write waited for another process's turn).",
            ("outcome",),
        )
        self.coalesced_groups = self._gauge(
            "aucstream_coalesced_groups",
            "Groups of concurrent requests to one model applied as one engine call and one "
            f"commit, {summed} (requests per group: aucstream_coalesced_requests / "
            "aucstream_coalesced_groups).",
        )
        self.coalesced_requests = self._gauge(
            "aucstream_coalesced_requests",
            "Requests (/events, /score, /labels and stream runs) applied in those groups, "
            f"{summed}.",
        )
        # set by the worker answering the scrape: another worker's may predate an acknowledgement
        self.store_data_lost = self._gauge(
            "aucstream_store_data_lost",
            "Losses of data noticed in the store and not yet acknowledged (1 for the whole "
            "store, 1 per model that went back in time); the store or model answers 503 "
            "meanwhile.",
            mode="mostrecent",
        )
        self.fits = self._gauge(
            "aucstream_boosted_fits",
            f"Fits of boosted ensembles by stage, {summed}: submitted (handed to the background "
            "fitter when due), fitted (by it), installed (at their install points), in_call "
            "(computed by the learner call at the install point), waits (install points that "
            "waited for the fitter), patient (waits the fitter ended within), raced (waits "
            "that ran out and computed the fit in the call too), race_lost (races the fitter "
            "won: the fit computed twice), from_log (installed by a replay from its log entry's "
            "arrays).",
            ("stage",),
        )
        self.fit_wait_seconds = self._gauge(
            "aucstream_boosted_fit_wait_seconds",
            f"Seconds install points waited for the background fitter, {summed}.",
        )
        self.fit_race_cpu_seconds = self._gauge(
            "aucstream_boosted_fit_race_cpu_seconds",
            f"CPU seconds of fits computed in a learner call while the fitter ran the same job, "
            f"{summed}.",
        )
        self.fits_pending = self._gauge(
            "aucstream_boosted_fits_pending",
            "Jobs the background fitters hold now: queued or running.",
            ("state",),
            mode="livesum",
        )
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
        self.stream_messages = self._counter(
            "aucstream_stream_messages_total",
            "Stream messages answered, by operation and status (the HTTP status of the reply).",
            ("op", "status"),
        )
        self.stream_connections = self._gauge(
            "aucstream_stream_connections", "Open stream connections.", mode="livesum"
        )

    def _counter(
        self, name: str, documentation: str, labels: tuple[str, ...] = ("model",)
    ) -> Counter:
        """A counter on this process's registry, by model (bounded) unless other ``labels``."""
        if "model" not in labels:
            return Counter(name, documentation, labels, registry=self.registry)
        counter = ModelCounter(name, documentation, labels, registry=self.registry)
        counter.series_label = self.series_label
        counter.model_position = labels.index("model")
        self._per_model.append(counter)
        return counter

    def count_request(
        self, method: str, route: str, status: int, model: str, seconds: float
    ) -> None:
        """One answered HTTP request, counted and timed (``model``: its label, from
        :meth:`model_label`).  Both children in one cached lookup: it is paid by every
        request, ``/healthz`` included."""
        key = ("request", method, route, status, model)
        values = self._children.get(key)
        if values is None:
            counter = self.child(self.requests, method, route, str(status), model)
            latency = self.child(self.latency, method, route)
            # the children's values themselves: ``inc`` and ``observe`` check on each call that
            # the child is one (it is) and search the buckets in a Python loop, ~1 us of the
            # floor (loadtest/README.md, HZ); a value's ``inc`` is what they end in
            values = (counter._value, latency._sum, latency._buckets)  # noqa: SLF001
            with self._children_lock:
                self._children[key] = values
        values[0].inc(1)
        values[1].inc(seconds)
        # the first bucket whose bound is at least ``seconds``, as ``observe`` finds it
        values[2][bisect.bisect_left(_LATENCY_BOUNDS, seconds)].inc(1)

    def count_learned(self, model_id: str, learned: int, drifts: int) -> None:
        """Events learned and drifts detected for ``model_id``: the one count of every path
        that learns (the HTTP routes, the WebSocket stream, the queue worker).  ``labels()``,
        not :meth:`child`: each call marks the model active, as the stream and the worker
        need (their updates are a model's only activity there)."""
        self.events_learned.labels(model_id).inc(learned)
        if drifts:
            self.drifts.labels(model_id).inc(drifts)

    def set_fits(self, stats: dict[str, float]) -> None:
        """The fit gauges from a refitter's :meth:`~service.engine.refit.Refitter.stats`."""
        stages = ("submitted", "fitted", "installed", "in_call", "waits", "patient", "raced",
                  "race_lost", "from_log")  # fmt: skip
        for stage in stages:
            self.fits.labels(stage).set(stats[stage])
        self.fit_wait_seconds.set(stats["wait_seconds"])
        self.fit_race_cpu_seconds.set(stats["race_cpu_seconds"])
        for state in ("queued", "running"):
            self.fits_pending.labels(state).set(stats[state])

    @property
    def multiprocess(self) -> bool:
        """Whether values go to ``PROMETHEUS_MULTIPROC_DIR`` (set before the import)."""
        return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

    def render(self, models: set[str] | None = None) -> bytes:
        """The exposition text: this process's registry, or every process's values, with only
        the series of ``models`` (when given) among those labelled by model."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        self.rank_series()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        if models is None:
            return generate_latest(registry)
        # a process's file keeps the values of a model it dropped: keep models some process has
        collected = list(registry.collect())
        ranked = {
            sample.labels["model"]
            for metric in collected
            if metric.name == self.has_series._name  # noqa: SLF001 - no public API
            for sample in metric.samples
            if sample.value > 0
        }
        return generate_latest(_ExistingModels(collected, models & ranked))  # type: ignore[arg-type]


class _ExistingModels:
    """Metrics collected, without the series of other ``models``, as a registry (``remove`` in
    one process does not reach the others' files)."""

    def __init__(self, metrics: list[Metric], models: set[str]) -> None:
        self.metrics, self.models = metrics, models

    def collect(self) -> Iterator[Metric]:
        for metric in self.metrics:
            metric.samples = [
                sample
                for sample in metric.samples
                if sample.labels.get("model", "") in self.models or not sample.labels.get("model")
            ]
            yield metric


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
