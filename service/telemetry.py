"""Prometheus metrics of one process (``GET /metrics``), on a registry owned by the app.

With several uvicorn workers each process serves its own counters (the scraper sees whichever
worker answers); the per-model learning counters that must be exact across processes are in
the model's state (``GET /v1/models/{id}/metrics``).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Telemetry", "TimingMiddleware"]


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "aucstream_http_requests_total",
            "HTTP requests by route template, method and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "aucstream_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.events_learned = Counter(
            "aucstream_events_learned_total", "Events learned.", ["model"], registry=self.registry
        )
        self.duplicates = Counter(
            "aucstream_events_duplicate_total",
            "Events skipped because their id was already learned.",
            ["model"],
            registry=self.registry,
        )
        self.scored = Counter(
            "aucstream_events_scored_total", "Events scored.", ["model"], registry=self.registry
        )
        self.stale_writes = Gauge(
            "aucstream_stale_writes_retried",
            "Writes of this process rejected for a stale version and retried (contention).",
            registry=self.registry,
        )
        self.rejected = Counter(
            "aucstream_requests_rejected_total",
            "Requests rejected with a problem response, by problem type.",
            ["problem"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


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

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.telemetry.requests.labels(method, template, str(status[0])).inc()
            self.telemetry.latency.labels(method, template).observe(time.perf_counter() - started)
