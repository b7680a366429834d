"""Service settings, ``AUCSTREAM_<NAME>`` environment variables, checked at start-up.

>>> Settings(store=None, redis_url=None, data_dir="aucstream-data").store  # the default store
'sqlite'
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: URL schemes of AUCSTREAM_REDIS_URL (the ``+cluster`` ones: a Redis Cluster)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


#: the engine's keywords of every process that learns (the server, the queue worker)
LEARNING_SETTINGS = {
    "event_id_ttl_seconds", "label_ttl_seconds", "max_cached_models", "max_remembered_ids",
    "checkpoint_events", "checkpoint_seconds",
}  # fmt: skip


class Settings(BaseSettings):
    """Every knob of the service; set by ``AUCSTREAM_<NAME>`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="AUCSTREAM_", extra="forbid")

    #: ``sqlite`` (on disk, one machine), ``redis`` or ``memory`` (one process, lost at exit);
    #: unset: ``redis`` if ``redis_url`` is set, else ``sqlite``
    store: Literal["sqlite", "memory", "redis"] | None = None
    #: ``redis://host:port/db``, ``rediss://`` (TLS), ``unix:///path``; a Redis Cluster:
    #: ``redis+cluster://h1:p1[,h2:p2...]`` (or ``rediss+cluster://``), seeds of its nodes
    redis_url: str | None = None
    #: accept a Redis that keeps nothing across a restart (no AOF, no RDB): refused otherwise
    allow_volatile_redis: bool = False
    #: acknowledge a write only once this many Redis replicas confirmed it (``WAIT``); unset:
    #: 1 when every master has a replica, else 0 (no waiting)
    redis_wait_replicas: int | None = Field(default=None, ge=0, le=16)
    #: how long a write waits for its replicas before it is refused as unconfirmed (503)
    redis_wait_timeout_ms: int = Field(default=2_000, ge=1, le=60_000)
    #: the SQLite store's directory (created if missing), holding ``aucstream.sqlite3``
    data_dir: Path = Path("aucstream-data")
    #: SQLite durability: ``full`` syncs every commit (survives a power cut); ``normal`` only
    #: at WAL checkpoints (survives ``kill -9``, not a power cut; commits cost less)
    sqlite_synchronous: Literal["full", "normal"] = "full"
    #: uvicorn worker processes (``aucstream serve``); more than one needs SQLite or Redis
    workers: int = Field(default=1, ge=1, le=64)

    #: largest accepted request body, in bytes
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    #: largest accepted batch, in events
    max_batch_events: int = Field(default=100_000, ge=1)
    #: most bytes the members of a zip upload (NPZ, snapshot) may inflate to (else 413)
    max_inflated_bytes: int = Field(default=256 * 2**20, ge=1024)
    #: most bytes of a snapshot's manifest.json (else 413)
    max_manifest_bytes: int = Field(default=2**20, ge=1024)
    #: most values (events x n_features) sparse input to a dense model may densify to (413)
    max_dense_cells: int = Field(default=2**24, ge=1024)
    #: most reason codes (top feature contributions) ``/score?reasons=k`` returns per event
    max_reasons: int = Field(default=20, ge=1, le=1000)
    #: most models the store may hold (creating or importing another: 507)
    max_models: int = Field(default=10_000, ge=1)
    #: most bytes of one model's state when it is created or imported (else 507)
    max_model_bytes: int = Field(default=256 * 2**20, ge=2**20)
    #: most characters of event ids one request may ask to remember (else 413)
    max_event_id_bytes: int = Field(default=4 * 2**20, ge=1024)
    #: most records ``/score`` keeps per model waiting for their labels (else 507)
    max_pending_records: int = Field(default=1_000_000, ge=1)
    #: most event ids one model remembers for idempotent ingest (and, apart, expired labels'
    #: ids); beyond it the oldest are forgotten early (docs/architecture.md, "Bounds")
    max_remembered_ids: int = Field(default=1_000_000, ge=1)
    #: how long an event id is remembered for idempotent ingest (seconds)
    event_id_ttl_seconds: float = Field(default=86_400.0, gt=0)
    #: how long ``/score`` keeps an event's features and score waiting for its label (seconds)
    label_ttl_seconds: float = Field(default=86_400.0, gt=0)
    #: how often expired pending labels are swept (default label applied) (seconds)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    #: how often the metrics history catches up with models that learned since (seconds)
    history_catch_up_seconds: float = Field(default=10.0, gt=0)
    #: stale-write retries before a request gives up with 503
    max_write_retries: int = Field(default=50, ge=1)
    #: models kept in memory per process (least recently used evicted)
    max_cached_models: int = Field(default=1024, ge=1)
    #: a model's state is checkpointed in the background after this many events, or
    #: ``checkpoint_seconds`` after its first change since (docs/operations.md)
    checkpoint_events: int = Field(default=10_000, ge=1)
    checkpoint_seconds: float = Field(default=60.0, gt=0)

    #: API keys that may read and write; when any key is set every /v1 route requires one
    api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: API keys that may only read (GET)
    read_only_api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)

    #: compile every learner's kernels at start-up (off: compiled on first use)
    warmup: bool = True

    #: server-sent metrics: seconds between two checks of the model version
    stream_interval_seconds: float = Field(default=1.0, ge=0.1)
    #: server-sent metrics: the shortest interval a client may ask for (a smaller is raised)
    sse_min_interval_seconds: float = Field(default=0.5, ge=0.1, le=60)
    #: server-sent metrics: most streams one client (key or address) holds open (else 429)
    sse_max_streams_per_client: int = Field(default=16, ge=1)
    #: server-sent metrics: most streams this process holds open (else 503)
    sse_max_streams: int = Field(default=256, ge=1)
    #: server-sent metrics: the Retry-After of those 429 / 503 (seconds)
    sse_retry_after_seconds: int = Field(default=5, ge=1)

    # -- request bodies and the event loop
    #: a request body must arrive within this many seconds of its first read, else 408
    body_read_timeout_seconds: float = Field(default=60.0, gt=0)
    #: bodies and frames larger than this (times their media type's factor) are handled in
    #: the thread pool (``service.offload``)
    offload_body_bytes: int = Field(default=256 * 1024, ge=0)

    # -- the WebSocket stream (``/v1/models/{id}/stream``, docs/stream.md)
    #: most messages one engine call groups (a drain of what has arrived stops there)
    ws_max_batch_messages: int = Field(default=4096, ge=1)
    #: bytes of received frames waiting per connection; above it the socket is not read
    ws_max_queued_bytes: int = Field(default=4 * 2**20, ge=1024)
    #: after a first message, wait up to this long for more (0: only what has arrived)
    ws_batch_wait_ms: float = Field(default=0.0, ge=0, le=1000)
    #: most messages one frame may hold (else the frame is refused whole: one 413 reply)
    ws_max_frame_messages: int = Field(default=4096, ge=1)
    #: most events one frame may carry (else one 413 reply); also where a batch of frames
    #: stops taking more
    ws_max_frame_events: int = Field(default=20_000, ge=1)
    #: most bytes of one frame (else one 413 reply, the frame unread)
    ws_max_frame_bytes: int = Field(default=8 * 2**20, ge=1024)
    #: browser origins allowed to open the stream besides the server's own, comma-separated
    #: (``https://app.example.com``; ``null`` for file:// pages, ``*`` for any)
    ws_allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: ``Host`` names allowed besides localhost and IP addresses (service/hosts.py),
    #: comma-separated: ``api.example.com``, ``*.example.com``, ``*`` for any
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)

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
    #: worker on a Redis Cluster: the longest one read blocks on one slot's streams, i.e.
    #: how long another slot's new entry may wait (milliseconds; at most worker_block_ms)
    worker_cluster_block_ms: int = Field(default=100, ge=1, le=5_000)
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

    #: Prometheus: most (recently active) models with series of their own per process; the
    #: others are counted under ``model=""``
    prometheus_model_series: int = Field(default=100, ge=0, le=100_000)

    #: ``text`` or ``json`` (one JSON object per line, one line per request)
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator(
        "api_keys", "read_only_api_keys", "ws_allowed_origins", "allowed_hosts", mode="before"
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [entry.strip() for entry in value.split(",") if entry.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        from service.hosts import allowed_host_entry

        return [allowed_host_entry(entry) for entry in value]

    @model_validator(mode="after")
    def _check_store(self) -> Settings:
        if self.store is None:
            self.store = "redis" if self.redis_url else "sqlite"
        if self.store == "redis" and not self.redis_url:
            raise ValueError("AUCSTREAM_STORE=redis needs AUCSTREAM_REDIS_URL")
        if self.redis_url and not self.redis_url.startswith(REDIS_SCHEMES):
            raise ValueError(
                "AUCSTREAM_REDIS_URL must start with redis://, rediss://, unix://, or "
                f"redis+cluster:// / rediss+cluster:// for a Redis Cluster; got {self.redis_url!r}"
            )
        if self.redis_url and "+cluster://" in self.redis_url:
            from service.stores.client import cluster_seeds

            cluster_seeds(self.redis_url)  # ValueError naming a seed that is not host:port
        if self.store == "memory" and self.workers > 1:
            raise ValueError(
                "the memory store lives inside one process; with AUCSTREAM_WORKERS > 1 "
                "use the SQLite store (AUCSTREAM_STORE=sqlite, one machine) or the Redis store "
                "(AUCSTREAM_REDIS_URL)"
            )
        if self.mode == "queue" and self.store != "redis":
            raise ValueError(
                f"AUCSTREAM_MODE=queue appends to Redis Streams and needs the Redis store, not "
                f"the {self.store} store: set AUCSTREAM_REDIS_URL"
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
        if self.stream_interval_seconds < self.sse_min_interval_seconds:
            raise ValueError(
                f"AUCSTREAM_STREAM_INTERVAL_SECONDS ({self.stream_interval_seconds}) must be at "
                f"least AUCSTREAM_SSE_MIN_INTERVAL_SECONDS ({self.sse_min_interval_seconds})"
            )
        overlap = set(self.api_keys) & set(self.read_only_api_keys)
        if overlap:
            raise ValueError("a key cannot be both read-write and read-only")
        return self

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys or self.read_only_api_keys)
