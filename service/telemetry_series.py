"""The Prometheus series by model, bounded: the ``AUCSTREAM_PROMETHEUS_MODEL_SERIES`` most
recently active models of a process have their own (ranked at each scrape), every other model
counts under ``model=""``.  Window gauges are as last computed by a metrics request."""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

#: how the values of several worker processes combine (prometheus_client's ``multiprocess_mode``)
Mode = Literal["max", "sum", "livesum", "mostrecent"]
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
    """A counter by model whose ``labels()`` counts a model without series of its own under
    ``model=""`` (:meth:`ModelSeries.series_label`)."""

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


class ModelSeries:
    """Which models have series of their own, and the gauges by model: the base of
    :class:`~service.telemetry.Telemetry`."""

    def __init__(self, model_series: int) -> None:
        self.model_series = model_series
        #: model -> when it was last active (a tick of ``_ticks``)
        self._active: dict[str, int] = {}
        self._ticks = itertools.count()
        #: the models with series of their own
        self._with_series: set[str] = set()
        #: the metrics labelled by model (label sets dropped when the model is deleted), each
        #: added as it is made
        self._per_model: list[Any] = []
        #: per model, the operating-point targets its gauges have (by suffix), to remove old ones
        self._operating_targets: dict[str, dict[str, set[str]]] = {}
        self.registry = CollectorRegistry()
        # first in the registry: the series are re-ranked before any metric is collected
        self.registry.register(_SeriesRanking(self))
        self.has_series = self._gauge(
            "aucstream_model_has_series",
            "1 while the model has series of its own (one of the most recently active).",
            ("model",),
            mode="max",
        )
        self.window = self._model_gauges("aucstream_model_window_", _WINDOW_GAUGES)
        self.operating = {
            suffix: self._gauge(
                "aucstream_model_window_" + suffix, text, ("model", label), "mostrecent"
            )
            for suffix, (_, _, _, label, text) in _OPERATING_GAUGES.items()
        }
        self.lag = self._model_gauges("aucstream_queue_lag_", _LAG_GAUGES)
        #: whether this process holds a model (the app sets it to the engine's cache)
        self.model_exists: Callable[[str], bool] = lambda model_id: False
        #: (metric, label values) -> the metric's child: see :meth:`child` (and a request's
        #: pair of children, ``Telemetry.count_request``)
        self._children: dict[tuple[Any, ...], Any] = {}
        #: held to add a child and to remove label sets, so that none is kept once removed
        self._children_lock = threading.Lock()

    def _gauge(
        self, name: str, documentation: str, labels: tuple[str, ...] = (), mode: Mode = "sum"
    ) -> Gauge:
        """A gauge; ``mode``: how the values of several worker processes combine."""
        gauge = Gauge(name, documentation, labels, registry=self.registry, multiprocess_mode=mode)
        if "model" in labels:
            self._per_model.append(gauge)
        return gauge

    def _model_gauges(self, prefix: str, documentation: dict[str, str]) -> dict[str, Gauge]:
        """``{key: the gauge <prefix><key>}`` by model, for each key of ``documentation``."""
        return {
            key: self._gauge(prefix + key, text, ("model",), "mostrecent")
            for key, text in documentation.items()
        }

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached (prometheus_client's lookup takes a lock, which
        shows on a one-event ``/score``); forgotten whenever label sets are removed."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            with self._children_lock:
                child = self._children[key] = metric.labels(*labels)
        return child

    def series_label(self, model_id: str) -> str:
        """The ``model`` label of an update for ``model_id``, active now: its id while it has
        series of its own (at once while fewer than ``model_series`` have, else from the next
        :meth:`rank_series`), else ``""``."""
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
        """Give series of their own to the ``model_series`` most recently active models."""
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

    def set_window_metrics(self, model: str, window: dict[str, Any]) -> None:
        """The window gauges from a metrics summary, for a model with series of its own."""
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
        """The ``model`` label of a request: never a model this process does not hold, nor
        from an unauthenticated request (they could create label sets)."""
        if not model_id or status in (401, 403) or not self.model_exists(model_id):
            return ""
        return self.series_label(model_id)

    def forget_model(self, model_id: str) -> None:
        """Drop every label set of a model this process no longer holds."""
        self._active.pop(model_id, None)
        if model_id not in self._with_series:
            return
        with self._children_lock:
            self._with_series.discard(model_id)
            self._remove_series({model_id})

    def _remove_series(self, models: set[str]) -> None:
        """Remove the label sets of ``models`` (holding ``_children_lock``)."""
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


class _SeriesRanking:
    """The registry's first collector: ranks the series, and counts the models that have one."""

    def __init__(self, telemetry: ModelSeries) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        self.telemetry.rank_series()
        yield GaugeMetricFamily(
            "aucstream_models_with_series",
            "Models with series of their own in this process (the most recently active, at "
            'most AUCSTREAM_PROMETHEUS_MODEL_SERIES); the others are counted under model="".',
            value=len(self.telemetry.models_with_series()),
        )
