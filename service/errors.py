"""The service's errors, one HTTP status each, rendered as ``application/problem+json``
(docs/architecture.md, "Errors")."""

from __future__ import annotations

import re
from typing import Any

#: the media type of every error answer (RFC 9457)
PROBLEM_MEDIA_TYPE = "application/problem+json"


class ServiceError(Exception):
    """Base class; a subclass fixes ``status`` and ``title`` as class keywords.  Its ``slug``
    (the problem ``type`` and the rejection counters' label) is its name in kebab case, so
    renaming an error class changes the API."""

    status: int = 500
    title: str = "Internal error"
    slug: str = "internal-error"

    def __init_subclass__(cls, *, status: int, title: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.status, cls.title = status, title
        cls.slug = re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()

    def __init__(
        self,
        detail: str,
        *,
        field: str | None = None,
        line: int | None = None,
        event: int | None = None,
        event_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail, self.field, self.line, self.event = detail, field, line, event
        self.event_id, self.headers = event_id, headers or {}

    def problem(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"https://aucstream.dev/problems/{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        for key in ("field", "line", "event", "event_id"):
            value = getattr(self, key)
            if value is not None:
                body[key] = value
        return body


class MalformedBody(ServiceError, status=400, title="Malformed request body"):
    """The body could not be read at all."""


class InvalidInput(ServiceError, status=422, title="Invalid input"):
    """The body was read but its content is invalid."""


class Unauthorized(ServiceError, status=401, title="API key required"):
    """No API key, or an unknown one."""


class Forbidden(ServiceError, status=403, title="Forbidden"):
    """A read-only API key asked to write."""


class ModelNotFound(ServiceError, status=404, title="Model not found"):
    """No model has this id (never created, or deleted)."""


class ModelExists(ServiceError, status=409, title="Model already exists"):
    """A create named the id of an existing model."""


class ModelChanged(ServiceError, status=409, title="Model changed during the request"):
    """The model was deleted or replaced while the request was being handled."""


class PayloadTooLarge(ServiceError, status=413, title="Request body too large"):
    """The body, a batch, or what an archive inflates to is above its setting's bound."""


class RequestHeadTooLarge(ServiceError, status=431, title="Request header fields too large"):
    """The request line and headers exceed their bound (:mod:`service.http_limits`)."""


class QueueFull(ServiceError, status=429, title="Queue full"):
    """Queue mode: the model's backlog is at its bound (``Retry-After``)."""


class TooManyStreams(ServiceError, status=429, title="Too many streams"):
    """A client already holds as many server-sent metrics streams as it may."""


class StreamsFull(ServiceError, status=503, title="No stream slot free"):
    """The process already serves as many server-sent metrics streams as it may."""


class InsufficientStorage(ServiceError, status=507, title="Insufficient storage"):
    """A bound on what the service keeps (models, model bytes, kept records) is reached."""


class UnsupportedMediaType(ServiceError, status=415, title="Unsupported content type"):
    """A content type the route does not read, or that cannot carry what the model needs."""


class StoreUnavailable(ServiceError, status=503, title="Store unavailable"):
    """The store (Redis, SQLite) did not answer or failed (the client may retry)."""


class ReplicasUnconfirmed(StoreUnavailable, status=503, title="Replicas did not confirm the write"):
    """Too few Redis replicas confirmed a write in time; ``reply``: the primary's answer."""

    def __init__(self, detail: str, *, reply: Any = None, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.reply = reply


class StoreLostData(StoreUnavailable, status=503, title="The store lost data"):
    """The store went back in time: not served until ``POST /v1/store/acknowledge-loss``."""


class StoreReplaced(StoreUnavailable, status=503, title="The store's file was replaced"):
    """The SQLite file open is no longer the one at the path: nothing is served until a
    restart."""


class WarmingUp(ServiceError, status=503, title="Warming up"):
    """The kernels are still compiling; ``warmup``, a member of the problem: how far."""

    def __init__(self, detail: str, *, warmup: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.warmup = warmup

    def problem(self) -> dict[str, Any]:
        return {**super().problem(), "warmup": self.warmup}


class Contention(ServiceError, status=503, title="Too much write contention"):
    """Optimistic concurrency gave up after too many stale writes (the client may retry)."""


class CorruptState(ServiceError, status=500, title="Stored model state is corrupt"):
    """A stored state breaks its learner's invariants (``field``: the array); until reset,
    deleted or replaced, the model is not loaded."""


class StaleVersion(Exception):
    """A store write whose expected version is no longer current (retried by the engine)."""


class TurnTaken(StaleVersion):
    """Another process holds the model's write turn (:mod:`service.engine.turns`)."""


class LeaseLost(Exception):
    """A queue worker's commit refused, nothing written: another worker took the lease."""
