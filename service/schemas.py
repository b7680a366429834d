"""Request and response bodies of the HTTP API (pydantic), and the stored model configuration."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.validation import check_fpr_range

FeatureModeName = Literal["dense", "sparse", "hashed"]
ScalingName = Literal["auto", "none", "unit_norm", "standard", "scale"]

#: [CHOICE] Models created over HTTP scale by default: fraud teams post raw features (amounts
#: in the thousands next to 0/1 flags), and every learner here takes gradient steps whose size
#: assumes features of unit scale.  ``auto`` resolves at creation to ``standard`` (running
#: mean/variance) for dense models and to ``scale`` (running variance, keeps sparsity) for
#: sparse and hashed ones; pass ``"none"`` for features that are already scaled.
DEFAULT_SCALING: ScalingName = "auto"


#: [CHOICE] Regret tracking (``core.regret.RegretWindow``) keeps the window's features densified,
#: so it is on by default only where that is cheap: ``REGRET_WINDOW_DEFAULT`` events for models
#: with at most ``REGRET_DEFAULT_MAX_FEATURES`` features (any feature mode; sparse and hashed rows
#: are densified), off (0) above.  Explicitly, any ``regret_window`` up to ``REGRET_WINDOW_MAX``
#: with ``regret_window * n_features <= REGRET_MAX_CELLS`` (2 MB of features); a hashed model with
#: 2**20 columns cannot have one.  The caps bound the cost of a report, ``O(rounds * window *
#: (n_features + 1))`` for the penalties plus one ``svm_pauc`` solve on the window: measured on a
#: loaded 2-core machine (load ~5), 10-70 ms for the default 1,000 events x 50 features in
#: 1-100 rounds, 0.13-0.15 s for 1,000 single-event rounds x 50-250 features, 3 s at the worst
#: cap (5,000 single-event rounds x 50 features); the engine also throttles re-solving
#: (``Engine.regret_throttle``), so a solve takes at most ~1/10 of a core per model.
REGRET_WINDOW_DEFAULT = 1_000
REGRET_DEFAULT_MAX_FEATURES = 250
REGRET_WINDOW_MAX = 5_000
REGRET_MAX_CELLS = 250_000


def default_regret_window(n_features: int) -> int:
    return REGRET_WINDOW_DEFAULT if n_features <= REGRET_DEFAULT_MAX_FEATURES else 0


def resolve_scaling(scaling: str, feature_mode: str) -> str:
    if scaling != "auto":
        return scaling
    return "standard" if feature_mode == "dense" else "scale"


class ModelCreate(BaseModel):
    """``POST /v1/models``."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="model id")
    learner: str = Field(default="spam", description="learner name, see GET /v1/learners")
    params: dict[str, Any] = Field(default_factory=dict, description="learner hyper-parameters")
    n_features: int = Field(ge=1, le=1 << 24)
    feature_mode: FeatureModeName = "dense"
    scaling: ScalingName = Field(
        default=DEFAULT_SCALING,
        description="auto = standard for dense models, scale for sparse and hashed ones",
    )
    pauc_range: tuple[float, float] = Field(
        default=(0.0, 0.1), description="false-positive-rate range [alpha, beta] of the pAUC"
    )
    window: int = Field(default=10_000, ge=2, le=1_000_000, description="metrics window, in events")
    reservoir: int = Field(
        default=10_000,
        ge=2,
        le=1_000_000,
        description="scores kept per class for the since-start metrics (exact up to this many)",
    )
    regret_window: int | None = Field(
        default=None,
        ge=0,
        le=REGRET_WINDOW_MAX,
        validate_default=True,
        description=(
            "events kept to report regret and the metric gap against the best fixed model in "
            "hindsight (0 = off); default 1,000 when n_features <= 250, else 0; at most 5,000 "
            "and regret_window * n_features <= 250,000"
        ),
    )
    default_label: Literal[0, 1] | None = Field(
        default=None, description="label learned for a scored event whose label never came in time"
    )
    label_ttl_seconds: float | None = Field(
        default=None, gt=0, description="how long /score keeps an event waiting for its label"
    )

    @field_validator("pauc_range")
    @classmethod
    def _check_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        check_fpr_range(*value)  # the pAUC learners' own check (a ValueError: 422)
        return value

    @field_validator("regret_window")
    @classmethod
    def _check_regret_window(cls, value: int | None, info: ValidationInfo) -> int | None:
        n_features = info.data.get("n_features")
        if n_features is None:  # n_features itself is invalid and reported
            return value
        if value is None:
            return default_regret_window(n_features)
        if value * n_features > REGRET_MAX_CELLS:
            raise ValueError(
                f"regret_window * n_features must be <= {REGRET_MAX_CELLS:,} (the regret window "
                f"keeps its events' features densified); got {value} * {n_features}: use "
                f"regret_window <= {REGRET_MAX_CELLS // n_features} or 0 (off)"
            )
        return value

    @model_validator(mode="after")
    def _no_scaling_in_params(self) -> ModelCreate:
        if "scaling" in self.params:
            raise ValueError("set 'scaling' at the top level, not inside 'params'")
        return self


class ModelConfig(ModelCreate):
    """What the store keeps: the request with its defaults resolved."""

    scaling: ScalingName  # never "auto" once stored
    incarnation: str
    created_at: float


class Counts(BaseModel):
    events_learned: int
    positives: int
    negatives: int
    duplicates: int
    labels_joined: int
    labels_defaulted: int
    labels_expired: int


class ModelInfo(BaseModel):
    config: ModelConfig
    version: int
    counts: Counts


class ModelList(BaseModel):
    models: list[str]


class LearnResponse(BaseModel):
    model: str
    version: int
    received: int
    learned: int
    duplicates: int
    duplicate_ids: list[str]
    scores: list[float | None] | None = None


class QueuedResponse(BaseModel):
    """Queue mode: the batch was validated and appended; a worker learns it."""

    model: str
    queued: int = Field(description="events appended")
    stream_ids: list[str] = Field(description="ids of the stream entries holding them")
    backlog_events: int = Field(description="events queued and not yet learned, these included")


class ScoreResponse(BaseModel):
    model: str
    version: int
    scores: list[float]
    kept: int = Field(default=0, description="events whose features were kept for a later label")


class LabelStatus(BaseModel):
    id: str
    status: Literal["learned", "duplicate", "unknown", "expired"]


class LabelsResponse(BaseModel):
    model: str
    version: int
    learned: int
    results: list[LabelStatus]


class WeightsResponse(BaseModel):
    model: str
    version: int
    n_features: int
    coef: list[float]


class RocResponse(BaseModel):
    model: str
    version: int
    n_events: int
    fpr: list[float | None]
    tpr: list[float | None]
    thresholds: list[float | None]


class Problem(BaseModel):
    """application/problem+json (RFC 9457)."""

    type: str
    title: str
    status: int
    detail: str
    field: str | None = None
    line: int | None = None
    event: int | None = None
    event_id: str | None = None
