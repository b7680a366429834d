"""Domain errors of the service, each mapped to one HTTP status by ``service.app``.

Every error carries what a client needs to fix its request: a ``detail`` sentence and, where
there is one, the offending ``field`` (a JSON path such as ``params.eta0``), ``line`` (1-based,
for NDJSON and LIBSVM bodies) or ``event`` (0-based index of the event in the batch, and its id
when it has one).  They are rendered as ``application/problem+json`` (RFC 9457).
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base class: ``status`` and ``title`` are fixed per subclass."""

    status: int = 500
    title: str = "Internal error"
    slug: str = "internal-error"

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


class MalformedBody(ServiceError):
    """The body could not be read at all (bad JSON, a broken LIBSVM line, a corrupt NPZ)."""

    status, title, slug = 400, "Malformed request body", "malformed-body"


class InvalidInput(ServiceError):
    """The body was read but its content is invalid (NaN, wrong width, bad label, bad field)."""

    status, title, slug = 422, "Invalid input", "invalid-input"


class Unauthorized(ServiceError):
    status, title, slug = 401, "API key required", "unauthorized"


class Forbidden(ServiceError):
    status, title, slug = 403, "Forbidden", "forbidden"


class ModelNotFound(ServiceError):
    status, title, slug = 404, "Model not found", "model-not-found"


class ModelExists(ServiceError):
    status, title, slug = 409, "Model already exists", "model-exists"


class ModelChanged(ServiceError):
    """The model was deleted or replaced while the request was being handled."""

    status, title, slug = 409, "Model changed during the request", "model-changed"


class PayloadTooLarge(ServiceError):
    status, title, slug = 413, "Request body too large", "payload-too-large"


class QueueFull(ServiceError):
    """Queue mode: the model's backlog of events not yet learned is at its bound (retry later;
    the response carries ``Retry-After``)."""

    status, title, slug = 429, "Queue full", "queue-full"


class InsufficientStorage(ServiceError):
    """A bound on what the service keeps is reached (number of models, bytes of one model's
    state, records kept by ``/score`` for later labels); see ``service.settings``."""

    status, title, slug = 507, "Insufficient storage", "insufficient-storage"


class UnsupportedMediaType(ServiceError):
    status, title, slug = 415, "Unsupported content type", "unsupported-media-type"


class StoreUnavailable(ServiceError):
    status, title, slug = 503, "Store unavailable", "store-unavailable"


class WarmingUp(ServiceError):
    """The process is still compiling / loading its kernels (``/readyz`` says so too)."""

    status, title, slug = 503, "Warming up", "warming-up"


class Contention(ServiceError):
    """Optimistic concurrency gave up after too many stale writes (the client may retry)."""

    status, title, slug = 503, "Too much write contention", "contention"


class CorruptState(ServiceError):
    """A model's stored state breaks its learner's invariants (a damaged or forged store
    entry): the model cannot be loaded until it is reset, deleted or replaced by a snapshot.
    Refused before any kernel sees it; ``field`` names the array at fault."""

    status, title, slug = 500, "Stored model state is corrupt", "corrupt-state"


class StaleVersion(Exception):
    """A store write whose expected version is no longer current (retried by the engine)."""


class LeaseLost(Exception):
    """A queue worker's commit refused because the model's writer lease is no longer the one
    the worker took (it stalled and another worker took the model over): nothing was written,
    and the worker stops writing the model until it takes the lease again."""
