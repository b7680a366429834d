"""Domain errors of the service, each with one HTTP status, rendered as
``application/problem+json`` naming what a client needs to fix its request (docs/architecture.md,
"Errors").
"""

from __future__ import annotations

import re
from typing import Any

#: the media type of every error answer (RFC 9457)
PROBLEM_MEDIA_TYPE = "application/problem+json"


class ServiceError(Exception):
    """Base class.  A subclass fixes its HTTP ``status`` and ``title`` as class keywords
    (``class ModelNotFound(ServiceError, status=404, title="Model not found")``); its ``slug``,
    the end of the problem ``type`` URI and the label of the rejection counters, is its name
    in kebab case (``model-not-found``), so renaming an error class changes the API."""

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
        self.detail = detail
        self.field = field
        self.line = line
        self.event = event
        self.event_id = event_id
        self.headers = headers or {}

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
    """The body could not be read at all (bad JSON, a broken LIBSVM line, a corrupt NPZ)."""


class InvalidInput(ServiceError, status=422, title="Invalid input"):
    """The body was read but its content is invalid (NaN, wrong width, bad label, bad field)."""


class Unauthorized(ServiceError, status=401, title="API key required"):
    """No API key, or one the service does not know (``WWW-Authenticate`` says how to send
    one)."""


class Forbidden(ServiceError, status=403, title="Forbidden"):
    """A read-only API key asked to write."""


class ModelNotFound(ServiceError, status=404, title="Model not found"):
    """No model has this id (never created, or deleted)."""


class ModelExists(ServiceError, status=409, title="Model already exists"):
    """A create named the id of an existing model."""


class ModelChanged(ServiceError, status=409, title="Model changed during the request"):
    """The model was deleted or replaced while the request was being handled."""


class PayloadTooLarge(ServiceError, status=413, title="Request body too large"):
    """The body, a batch, or what an archive inflates to is above its bound
    (``service.settings``)."""


class RequestHeadTooLarge(ServiceError, status=431, title="Request header fields too large"):
    """The request line and headers exceed their bound (answered by the HTTP protocol itself,
    :mod:`service.http_limits`, before the app sees the request)."""


class QueueFull(ServiceError, status=429, title="Queue full"):
    """Queue mode: the model's backlog of events not yet learned is at its bound (retry later;
    the response carries ``Retry-After``)."""


class TooManyStreams(ServiceError, status=429, title="Too many streams"):
    """A client (an API key, or a client address when no keys are set) already holds as many
    server-sent metrics streams as it may (retry after ``Retry-After`` seconds, or close one)."""


class StreamsFull(ServiceError, status=503, title="No stream slot free"):
    """The process already serves as many server-sent metrics streams as it may, from every
    client together (retry after ``Retry-After`` seconds)."""


class InsufficientStorage(ServiceError, status=507, title="Insufficient storage"):
    """A bound on what the service keeps is reached (number of models, bytes of one model's
    state, records kept by ``/score`` for later labels); see ``service.settings``."""


class UnsupportedMediaType(ServiceError, status=415, title="Unsupported content type"):
    """A content type the route does not read, or one that cannot carry what the model needs
    (hashed features without their names)."""


class StoreUnavailable(ServiceError, status=503, title="Store unavailable"):
    """The store (Redis, SQLite) did not answer or failed (the client may retry)."""


class ReplicasUnconfirmed(StoreUnavailable, status=503, title="Replicas did not confirm the write"):
    """``AUCSTREAM_REDIS_WAIT_REPLICAS``: too few Redis replicas confirmed a write in time, so
    it is not acknowledged (a failover could lose it).  ``reply`` is the primary's answer to
    the write."""

    def __init__(self, detail: str, *, reply: Any = None, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.reply = reply


class StoreLostData(StoreUnavailable, status=503, title="The store lost data"):
    """The store's contents vanished or went back in time while this service knew a later
    state (a Redis restarted without persistence or from an old dump, an SQLite file replaced
    by an older copy): the model, or the whole store, is not served until an operator
    acknowledges it (``POST /v1/store/acknowledge-loss``)."""


class StoreReplaced(StoreUnavailable, status=503, title="The store's file was replaced"):
    """The SQLite file was renamed over or removed while the service ran: the file this
    process has open is no longer the store, so nothing is read from or acknowledged into it
    until the service is restarted (which opens the file now at the path and checks its epoch
    marker against the copy of the last one accepted)."""


class WarmingUp(ServiceError, status=503, title="Warming up"):
    """The process is still compiling / loading its kernels (``/readyz`` says so too);
    ``warmup`` is how far it is (:meth:`core.warmup.KernelReadiness.progress`), a member of
    the problem."""

    def __init__(self, detail: str, *, warmup: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.warmup = warmup

    def problem(self) -> dict[str, Any]:
        return {**super().problem(), "warmup": self.warmup}


class Contention(ServiceError, status=503, title="Too much write contention"):
    """Optimistic concurrency gave up after too many stale writes (the client may retry)."""


class CorruptState(ServiceError, status=500, title="Stored model state is corrupt"):
    """A model's stored state breaks its learner's invariants (a damaged or forged store
    entry): the model cannot be loaded until it is reset, deleted or replaced by a snapshot.
    Refused before any kernel sees it; ``field`` names the array at fault."""


class StaleVersion(Exception):
    """A store write whose expected version is no longer current (retried by the engine)."""


class TurnTaken(StaleVersion):
    """A store write refused, writing nothing, because another process holds the model's
    write turn (:mod:`service.engine.turns`): retried by the engine once the turn is over."""


class LeaseLost(Exception):
    """A queue worker's commit refused because the model's writer lease is no longer the one
    the worker took (it stalled and another worker took the model over): nothing was written,
    and the worker stops writing the model until it takes the lease again."""
