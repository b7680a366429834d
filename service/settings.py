"""Service settings: one pydantic-settings class, environment prefix ``AUCSTREAM_``.

Invalid values fail at start-up (``Settings()`` raises), never on the first request.

>>> Settings(store="memory").store
'memory'
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split_keys(value: object) -> object:
    if isinstance(value, str):
        return [key.strip() for key in value.split(",") if key.strip()]
    return value


class Settings(BaseSettings):
    """Every knob of the service; set by ``AUCSTREAM_<NAME>`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="AUCSTREAM_", extra="forbid")

    #: ``memory`` (embedded, per process) or ``redis``; chosen from ``redis_url`` when unset
    store: Literal["memory", "redis"] | None = None
    redis_url: str | None = None
    #: uvicorn worker processes (``aucstream serve``); more than one needs the Redis store
    workers: int = Field(default=1, ge=1, le=64)

    #: largest accepted request body, in bytes
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    #: largest accepted batch, in events
    max_batch_events: int = Field(default=100_000, ge=1)
    #: most bytes the members of a zip upload (an NPZ body, a snapshot) may inflate to,
    #: read from the zip's central directory before anything is inflated (else 413)
    max_inflated_bytes: int = Field(default=256 * 2**20, ge=1024)
    #: most bytes of a snapshot's manifest.json (else 413)
    max_manifest_bytes: int = Field(default=2**20, ge=1024)
    #: sparse input (LIBSVM, NPZ CSR) to a dense model is densified: most values
    #: (events x n_features) one request may densify to (else 413); 2**24 = 128 MiB
    max_dense_cells: int = Field(default=2**24, ge=1024)
    #: most models the store may hold (creating or importing another: 507)
    max_models: int = Field(default=10_000, ge=1)
    #: most bytes of one model's committed state (learner, windows, counters) when it is
    #: created or imported (else 507); n_features = 2**24 would otherwise be ~770 MB a model
    max_model_bytes: int = Field(default=256 * 2**20, ge=2**20)
    #: most characters of event ids one request may ask to remember (ids are kept for
    #: event_id_ttl_seconds; else 413)
    max_event_id_bytes: int = Field(default=4 * 2**20, ge=1024)
    #: most records (features + score) ``/score`` keeps per model waiting for their labels
    #: (a request that would keep more: 507)
    max_pending_records: int = Field(default=1_000_000, ge=1)
    #: how long an event id is remembered for idempotent ingest (seconds)
    event_id_ttl_seconds: float = Field(default=86_400.0, gt=0)
    #: how long ``/score`` keeps an event's features and score waiting for its label (seconds)
    label_ttl_seconds: float = Field(default=86_400.0, gt=0)
    #: how often expired pending labels are swept (default label applied) (seconds)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    #: stale-write retries before a request gives up with 503
    max_write_retries: int = Field(default=50, ge=1)
    #: models kept in memory per process (least recently used evicted, then read back from
    #: the store when used again)
    max_cached_models: int = Field(default=1024, ge=1)

    #: API keys that may read and write; when any key is set every /v1 route requires one
    api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: API keys that may only read (GET)
    read_only_api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)

    #: compile every learner's kernels at start-up (``/readyz`` waits for it); tests and
    #: single-learner deployments may turn it off and compile on first use
    warmup: bool = True

    #: server-sent metrics: seconds between two checks of the model version (at least 0.1:
    #: each check reads the model's metrics)
    stream_interval_seconds: float = Field(default=1.0, ge=0.1)

    # -- request bodies and the event loop
    #: a request body must arrive within this many seconds of its first read, else 408 (a
    #: client that stalls or drips its body does not hold the request for ever)
    body_read_timeout_seconds: float = Field(default=60.0, gt=0)
    #: bodies larger than this are parsed, and their batch learned or scored, in the thread
    #: pool instead of on the event loop (JSON / NDJSON of dense models: 16 times this, NPZ: 64
    #: times, compressed NPZ: always; see ``service.deps.inline_limit``); smaller ones inline,
    #: where a thread hop would cost more CPU than it saves
    offload_body_bytes: int = Field(default=256 * 1024, ge=0)

    #: ``sync``: a request learns before it returns; ``queue``: it appends the validated batch
    #: to the model's Redis Stream and returns 202, and ``aucstream worker`` learns it
    mode: Literal["sync", "queue"] = "sync"
    #: queue mode: most events queued and not yet learned, per model (then 429 + Retry-After)
    queue_max_backlog_events: int = Field(default=1_000_000, ge=1)
    #: queue mode: a batch is split into stream entries of at most this many events
    queue_entry_events: int = Field(default=10_000, ge=1)
    #: queue mode: the Retry-After of a 429 (seconds)
    queue_retry_after_seconds: int = Field(default=1, ge=1)

    #: worker: stream entries read per model and learned per commit (XREADGROUP COUNT)
    worker_batch_entries: int = Field(default=100, ge=1, le=10_000)
    #: worker: how long one read waits for new entries (XREADGROUP BLOCK, milliseconds)
    worker_block_ms: int = Field(default=1000, ge=1, le=5_000)  # < the 10 s socket timeout
    #: worker: pending entries of another consumer idle this long are claimed (XAUTOCLAIM)
    worker_claim_min_idle_ms: int = Field(default=10_000, ge=1)
    #: worker: a model's writer lease lasts this long unless renewed (milliseconds)
    worker_lease_ms: int = Field(default=10_000, ge=100)
    #: worker: how often the list of models is read again (seconds)
    worker_discover_seconds: float = Field(default=2.0, gt=0)
    #: worker: consumer name in the group; ``<hostname>-<pid>`` when unset
    worker_name: str | None = None
    #: worker: port of its Prometheus endpoint (``/metrics``); none when unset
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)

    #: ``text`` (human) or ``json`` (one JSON object per line, with one line per request)
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("api_keys", "read_only_api_keys", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split_keys(value)

    @model_validator(mode="after")
    def _check_store(self) -> Settings:
        if self.store is None:
            self.store = "redis" if self.redis_url else "memory"
        if self.store == "redis" and not self.redis_url:
            raise ValueError("AUCSTREAM_STORE=redis needs AUCSTREAM_REDIS_URL")
        if self.redis_url and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"AUCSTREAM_REDIS_URL must start with redis://, rediss:// or unix://; "
                f"got {self.redis_url!r}"
            )
        if self.store == "memory" and self.workers > 1:
            raise ValueError(
                "the memory store lives inside one process; with AUCSTREAM_WORKERS > 1 "
                "use the Redis store (AUCSTREAM_REDIS_URL)"
            )
        if self.mode == "queue" and self.store != "redis":
            raise ValueError(
                "AUCSTREAM_MODE=queue appends to Redis Streams: set AUCSTREAM_REDIS_URL"
            )
        if self.queue_max_backlog_events < self.max_batch_events:
            raise ValueError(
                f"AUCSTREAM_QUEUE_MAX_BACKLOG_EVENTS ({self.queue_max_backlog_events}) must be at "
                f"least AUCSTREAM_MAX_BATCH_EVENTS ({self.max_batch_events}), or a full batch "
                "could never be queued"
            )
        if self.worker_lease_ms < 2 * self.worker_block_ms:
            raise ValueError(
                f"AUCSTREAM_WORKER_LEASE_MS ({self.worker_lease_ms}) must be at least twice "
                f"AUCSTREAM_WORKER_BLOCK_MS ({self.worker_block_ms}): a worker renews its lease "
                "between two reads"
            )
        overlap = set(self.api_keys) & set(self.read_only_api_keys)
        if overlap:
            raise ValueError("a key cannot be both read-write and read-only")
        return self

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys or self.read_only_api_keys)
