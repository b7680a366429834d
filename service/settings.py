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
    #: how long an event id is remembered for idempotent ingest (seconds)
    event_id_ttl_seconds: float = Field(default=86_400.0, gt=0)
    #: how long ``/score`` keeps an event's features and score waiting for its label (seconds)
    label_ttl_seconds: float = Field(default=86_400.0, gt=0)
    #: how often expired pending labels are swept (default label applied) (seconds)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    #: stale-write retries before a request gives up with 503
    max_write_retries: int = Field(default=50, ge=1)

    #: API keys that may read and write; when any key is set every /v1 route requires one
    api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: API keys that may only read (GET)
    read_only_api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)

    #: compile every learner's kernels at start-up (``/readyz`` waits for it); tests and
    #: single-learner deployments may turn it off and compile on first use
    warmup: bool = True

    #: server-sent metrics: seconds between two checks of the model version
    stream_interval_seconds: float = Field(default=1.0, gt=0)

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
        overlap = set(self.api_keys) & set(self.read_only_api_keys)
        if overlap:
            raise ValueError("a key cannot be both read-write and read-only")
        return self

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys or self.read_only_api_keys)
