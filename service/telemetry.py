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
``aucstream_model_window_pauc`` are the window's AUC and pAUC (NaN while undefined),
``..._average_precision`` its average precision, and by target ``..._tpr_at_fpr{fpr}``,
``..._threshold_at_fpr{fpr}``, ``..._precision_at_alert_rate{alert_rate}``,
``..._threshold_at_alert_rate{alert_rate}`` and ``..._precision_at_k{k}`` its operating points
(at most 8 targets of each kind per model), as last computed by a metrics request: no extra
computation is made for them.  A queue worker serves
the same metric names (events learned, duplicates, entries, batch durations, lag) on its own port
(``AUCSTREAM_WORKER_METRICS_PORT``).  The lag gauges are read from Redis when scraped.

Series by model are bounded: only the ``AUCSTREAM_PROMETHEUS_MODEL_SERIES`` most recently
active models of a process have their own (ranked again at each scrape); the counters of every
other model add up under ``model=""``, and it has no window or lag gauges.  A model's series go
when it is deleted or leaves the process's cache.

Logs: ``AUCSTREAM_LOG_FORMAT=json`` writes one JSON object per line (``time``, ``level``,
``logger``, ``message`` and the record's fields) and one line per HTTP request with its
``request_id`` (the ``X-Request-ID`` header, or a new one, echoed in the response), ``method``,
``route``, ``model``, ``status``, ``duration_ms`` and the route's counts (events received,
learned, queued ...).  A worker logs one line per applied batch.
"""

from __future__ import annotations

import heapq
import itertools
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
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

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
    "average_precision": "Average precision (area under the precision-recall curve) over the "
    "model's metrics window, as last computed (NaN while undefined).",
}
#: the window's operating points by target (the model's target_fprs, target_alert_rates,
#: top_k): (the summary's list, the point's value, the target's key and label) by gauge suffix
_OPERATING_GAUGES = {
    "tpr_at_fpr": ("at_fpr", "tpr", "target", "fpr",
                   "Recall (TPR) at the most permissive threshold whose FPR on the model's "
                   "metrics window does not exceed the target FPR."),
    "threshold_at_fpr": ("at_fpr", "threshold", "target", "fpr",
                         "The score threshold of that operating point (NaN: nothing flagged)."),
    "precision_at_alert_rate": ("at_alert_rate", "precision", "target", "alert_rate",
                                "Precision at the most permissive threshold flagging at most "
                                "the target fraction of the window's events."),
    "threshold_at_alert_rate": ("at_alert_rate", "threshold", "target", "alert_rate",
                                "The score threshold of that operating point (NaN: nothing "
                                "flagged)."),
    "precision_at_k": ("at_k", "precision", "k", "k",
                       "Precision among the k highest scores of the model's metrics window."),
}  # fmt: skip
#: the queue lag gauges, by the keys of a queue's lag (``set_lag``)
_LAG_GAUGES = {
    "events": "Events queued and not yet learned.",
    "entries": "Stream entries appended and not yet applied.",
    "seconds": "Age of the oldest stream entry not yet applied (0 when caught up).",
}


class ModelCounter(Counter):
    """A counter labelled by model whose ``labels()`` names a model only while it has series
    of its own (:meth:`Telemetry.series_label`), and counts every other model under
    ``model=""``: callers label by model as with any counter, and the series stay bounded."""

    series_label: Callable[[str], str]
    #: the index of the ``model`` label
    model_position: int

    def labels(self, *values: Any, **named: Any) -> ModelCounter:
        if named:
            named["model"] = self.series_label(str(named["model"]))
            return super().labels(**named)
        mapped = list(values)
        mapped[self.model_position] = self.series_label(str(mapped[self.model_position]))
        return super().labels(*mapped)


class Telemetry:
    def __init__(self, *, log_requests: bool = False, model_series: int = 100) -> None:
        #: one JSON log line per request (``AUCSTREAM_LOG_FORMAT=json``)
        self.log_requests = log_requests
        #: most models with series of their own (``AUCSTREAM_PROMETHEUS_MODEL_SERIES``): see
        #: :meth:`series_label`
        self.model_series = model_series
        #: model -> when it was last active (a tick of ``_ticks``), for every model this
        #: process holds; the ``model_series`` most recent ones get series of their own
        self._active: dict[str, int] = {}
        self._ticks = itertools.count()
        #: the models with series of their own
        self._with_series: set[str] = set()
        #: per model with series, the operating-point targets its gauges are labelled with (by
        #: gauge suffix), to remove those of targets it no longer has
        self._operating_targets: dict[str, dict[str, set[str]]] = {}
        self.registry = CollectorRegistry()
        # first in the registry: the series are re-ranked before any metric is collected
        self.registry.register(_SeriesRanking(self))
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
        #: 1 while a model has series of its own in this process (multiprocess: in any)
        self.has_series = Gauge(
            "aucstream_model_has_series",
            "1 while the model has series of its own (one of the most recently active).",
            ["model"],
            registry=self.registry,
            multiprocess_mode="max",
        )
        #: per model, ``aucstream_model_window_auc`` and ``..._pauc`` (by window key)
        self.window = self._model_gauges("aucstream_model_window_", _WINDOW_GAUGES)
        #: per model and target, ``aucstream_model_window_tpr_at_fpr{fpr="0.01"}`` and the
        #: other operating points (by _OPERATING_GAUGES key)
        self.operating = {
            suffix: Gauge(
                "aucstream_model_window_" + suffix,
                text,
                ["model", label],
                registry=self.registry,
                multiprocess_mode="mostrecent",
            )
            for suffix, (_, _, _, label, text) in _OPERATING_GAUGES.items()
        }
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
            *self.window.values(), *self.operating.values(), self.has_series,
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
        """A counter on this process's registry, by model unless other ``labels`` are given
        (by model: a :class:`ModelCounter`)."""
        if "model" not in labels:
            return Counter(name, documentation, labels, registry=self.registry)
        counter = ModelCounter(name, documentation, labels, registry=self.registry)
        counter.series_label = self.series_label
        counter.model_position = labels.index("model")
        return counter

    def series_label(self, model_id: str) -> str:
        """The ``model`` label of an update for ``model_id``, which is active now: its id
        while it has series of its own, else ``""`` (the series of every other model).  The
        ``model_series`` most recently active models have their own: a model gets them at once
        while fewer have them, else when the series are ranked again (at each scrape,
        :meth:`rank_series`).  Bounds the exposition whatever the number of models."""
        if not model_id:
            return ""
        self._active[model_id] = next(self._ticks)
        if model_id in self._with_series:
            return model_id
        if len(self._with_series) < self.model_series:
            self._with_series.add(model_id)
            self.has_series.labels(model_id).set(1)
            return model_id
        return ""

    def rank_series(self) -> None:
        """Give series of their own to the ``model_series`` most recently active models, and
        drop those of the models that leave them (their later updates count under
        ``model=""``)."""
        with self._children_lock:
            active = list(self._active.items())
            recent = heapq.nlargest(self.model_series, active, key=lambda item: item[1])
            ranked = {model for model, _ in recent}
            if ranked == self._with_series:
                return
            self._remove_series(self._with_series - ranked)
            for model in ranked - self._with_series:
                self.has_series.labels(model).set(1)
            self._with_series = ranked

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
        """The model's window AUC / pAUC / average precision and operating points from a
        metrics summary already computed (only for a model with series of its own: an AUC of
        every other model together means nothing)."""
        label = self.series_label(model)
        if not label:
            return
        for key, gauge in self.window.items():
            value = window.get(key)
            gauge.labels(label).set(math.nan if value is None else float(value))
        points = window.get("operating_points") or {}
        targets = {
            suffix: {f"{point[target_key]:g}" for point in points.get(kind, ())}
            for suffix, (kind, _, target_key, _, _) in _OPERATING_GAUGES.items()
        }
        before = self._operating_targets.get(label)
        if before is not None and before != targets:  # the model was replaced with others
            for suffix, gauge in self.operating.items():
                for labels in list(gauge._metrics):  # noqa: SLF001 - prometheus_client has no API
                    if labels[0] == label and labels[1] not in targets[suffix]:
                        gauge.remove(*labels)
        self._operating_targets[label] = targets
        for suffix, (kind, field, target_key, _, _) in _OPERATING_GAUGES.items():
            gauge = self.operating[suffix]
            for point in points.get(kind, ()):
                value = point[field]
                gauge.labels(label, f"{point[target_key]:g}").set(
                    math.nan if value is None else float(value)
                )

    def set_lag(self, model: str, lag: dict[str, Any]) -> None:
        """The model's queue lag, for a model with series of its own."""
        if model not in self._with_series:
            return
        for key, gauge in self.lag.items():
            gauge.labels(model).set(lag[key])

    def models_with_series(self) -> list[str]:
        return list(self._with_series)

    def model_label(self, model_id: str, status: int) -> str:
        """The ``model`` label of a request: the model's id only for a model this process
        holds, with series of its own (:meth:`series_label`), and never for an
        unauthenticated request, so requests for unknown ids (404) or without a key (401/403)
        cannot create label sets."""
        if not model_id or status in (401, 403) or not self.model_exists(model_id):
            return ""
        return self.series_label(model_id)

    def forget_model(self, model_id: str) -> None:
        """Drop every label set of a model this process no longer holds (deleted, or evicted
        from its cache: it is no longer active here)."""
        self._active.pop(model_id, None)
        if model_id not in self._with_series:
            return
        with self._children_lock:
            self._with_series.discard(model_id)
            self._remove_series({model_id})

    def _remove_series(self, models: set[str]) -> None:
        """Remove the label sets of ``models`` (call holding ``_children_lock``); the cached
        children are forgotten, as any of them may be one of those."""
        self._children.clear()
        if not models:
            return
        for model in models:  # multiprocess mode: the value stays in this process's file
            self.has_series.labels(model).set(0)
            self._operating_targets.pop(model, None)
        for metric in self._per_model:
            position = metric._labelnames.index("model")  # noqa: SLF001 - no public API
            for labels in list(metric._metrics):  # noqa: SLF001
                if labels[position] in models:
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
        self.rank_series()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        if models is None:
            return generate_latest(registry)
        # a model that left a process's series keeps its values in that process's file: the
        # view keeps the models that some process still gives series of their own
        collected = list(registry.collect())
        ranked = {
            sample.labels["model"]
            for metric in collected
            if metric.name == self.has_series._name  # noqa: SLF001 - no public API
            for sample in metric.samples
            if sample.value > 0
        }
        view = _ExistingModels(_Collected(collected), models & ranked)  # type: ignore[arg-type]
        return generate_latest(view)  # type: ignore[arg-type]


class _SeriesRanking:
    """Ranks the models' series (:meth:`Telemetry.rank_series`) when the registry is
    collected, before the metrics (the first collector), and reports how many models have
    their own."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        self.telemetry.rank_series()
        yield GaugeMetricFamily(
            "aucstream_models_with_series",
            "Models with series of their own in this process (the most recently active, at "
            'most AUCSTREAM_PROMETHEUS_MODEL_SERIES); the others are counted under model="".',
            value=len(self.telemetry.models_with_series()),
        )


class _Collected:
    """Metrics already collected, as a registry to collect from again."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


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


#: the prefix of the metrics directories ``aucstream serve`` makes in the temporary directory
MULTIPROCESS_DIR_PREFIX = "aucstream-prometheus-"
#: the file in such a directory its server holds a lock on for as long as it runs
_OWNER_LOCK = "owner.lock"
#: a directory without an owner lock (made by an earlier version, or being made) is left alone
#: until it is this old (seconds)
_UNOWNED_GRACE_SECONDS = 600


def make_multiprocess_dir(parent: str | None = None) -> tuple[str, Any]:
    """A new directory for the multiprocess metrics of this server, in ``parent`` (the system's
    temporary directory), and the open lock file its server holds until it exits -- even
    ``kill -9`` releases it, which tells :func:`remove_stale_multiprocess_dirs` that the
    directory's owner is gone.  Stale directories are removed first."""
    import fcntl
    import tempfile

    parent = parent or tempfile.gettempdir()
    remove_stale_multiprocess_dirs(parent)
    path = tempfile.mkdtemp(prefix=MULTIPROCESS_DIR_PREFIX, dir=parent)
    owner = open(os.path.join(path, _OWNER_LOCK), "wb")  # noqa: SIM115 - held while serving
    fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, owner


def remove_stale_multiprocess_dirs(parent: str) -> list[str]:
    """Remove the metrics directories of servers that are gone (killed before they could
    remove their own): those of this user whose owner lock nobody holds.  Returns them."""
    import fcntl
    import shutil

    removed = []
    for entry in os.scandir(parent):
        try:
            if (
                not entry.name.startswith(MULTIPROCESS_DIR_PREFIX)
                or not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            lock = os.path.join(entry.path, _OWNER_LOCK)
            age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            if not os.path.exists(lock):
                if age < _UNOWNED_GRACE_SECONDS:
                    continue
            else:
                with open(lock, "rb") as handle:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:  # its server is running
                        continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        except OSError:  # gone meanwhile, or not ours to read: leave it
            continue
    return removed


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
