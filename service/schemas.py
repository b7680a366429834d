"""Request and response bodies of the HTTP API (pydantic), and the stored model configuration."""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.metrics.operating import DEFAULT_TARGET_ALERT_RATES, DEFAULT_TARGET_FPRS, DEFAULT_TOP_K
from core.validation import check_fpr_pair

FeatureModeName = Literal["dense", "sparse", "hashed"]
ScalingName = Literal["auto", "none", "unit_norm", "standard", "scale"]
MissingValuesName = Literal["refuse", "zero", "mean"]

#: [CHOICE] Models created over HTTP scale by default (docs/api.md, "Decisions").
DEFAULT_SCALING: ScalingName = "auto"

#: [CHOICE] Users do not tune: a model created without a learner runs ``auto``.
DEFAULT_LEARNER = "auto"


#: [CHOICE] The regret window keeps its events' features densified: on by default only where
#: that is cheap and the regret defined (a score linear in few features; docs/api.md, "Regret").
#: The caps bound a report's cost (docs/algorithms/regret.md).
REGRET_WINDOW_DEFAULT = 1_000
REGRET_DEFAULT_MAX_FEATURES = 250
REGRET_WINDOW_MAX = 5_000
REGRET_MAX_CELLS = 250_000


#: bounds of ``feature_names`` (they travel in every store read and snapshot manifest)
FEATURE_NAME_MAX_CHARS = 128
#: operating points a model reports per kind: each is a row in /metrics and a Prometheus series
OPERATING_TARGETS_MAX = 8
#: a rate strictly between 0 and 1 (0 would flag nothing, 1 everything)
OpenRate = Annotated[StrictFloat, Field(gt=0.0, lt=1.0)]
FEATURE_NAMES_MAX_BYTES = 512 * 1024
#: characters a feature name may not hold (Unicode's Cc): they would break or forge the outputs
#: that show names
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


#: the checks of ``ModelCreate._check_feature_names`` that JSON Schema can state
FeatureNames = Annotated[
    tuple[str, ...],
    Field(
        json_schema_extra={
            "minItems": 1,
            "uniqueItems": True,
            "items": {
                "type": "string",
                "minLength": 1,
                "maxLength": FEATURE_NAME_MAX_CHARS,
                "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$",  # CONTROL_CHARACTER
            },
        }
    ),
]


def resolve_scaling(scaling: str, feature_mode: str) -> str:
    if scaling != "auto":
        return scaling
    return "standard" if feature_mode == "dense" else "scale"


def default_regret_window(n_features: int, linear_in_features: bool) -> int:
    """The ``regret_window`` of a model created without one (see :data:`REGRET_WINDOW_DEFAULT`)."""
    cheap = n_features <= REGRET_DEFAULT_MAX_FEATURES
    return REGRET_WINDOW_DEFAULT if cheap and linear_in_features else 0


class ModelCreate(BaseModel):
    """``POST /v1/models``."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="model id")
    learner: str = Field(
        default=DEFAULT_LEARNER,
        description=(
            "learner name, see GET /v1/learners; the default `auto` runs a small tournament of "
            "candidates on the model's own stream and serves the best one on the pAUC range"
        ),
    )
    params: dict[str, Any] = Field(default_factory=dict, description="learner hyper-parameters")
    n_features: int = Field(ge=1, le=1 << 24, strict=True)
    feature_mode: FeatureModeName = "dense"
    feature_names: FeatureNames | None = Field(
        default=None,
        description=(
            "optional names of the features, one per column (dense and sparse models): events "
            'may then give x as {"name": value}, and /weights shows them; unique, 1 to '
            f"{FEATURE_NAME_MAX_CHARS} characters each, {FEATURE_NAMES_MAX_BYTES:,} bytes in all "
            "as JSON"
        ),
    )
    scaling: ScalingName = Field(
        default=DEFAULT_SCALING,
        description="auto = standard for dense models, scale for sparse and hashed ones",
    )
    pauc_range: tuple[StrictFloat, StrictFloat] = Field(
        default=(0.0, 0.1), description="false-positive-rate range [alpha, beta] of the pAUC"
    )
    target_fprs: tuple[OpenRate, ...] = Field(
        default=DEFAULT_TARGET_FPRS,
        max_length=OPERATING_TARGETS_MAX,
        description="false-positive rates at which /metrics reports the operating point (the "
        "most permissive threshold whose FPR does not exceed the target, with its TPR, "
        f"precision and alert rate); each in (0, 1), at most {OPERATING_TARGETS_MAX}, reported "
        "in increasing order",
    )
    target_alert_rates: tuple[OpenRate, ...] = Field(
        default=DEFAULT_TARGET_ALERT_RATES,
        max_length=OPERATING_TARGETS_MAX,
        description="alert budgets (fractions of all events flagged) at which /metrics reports "
        f"the operating point; each in (0, 1), at most {OPERATING_TARGETS_MAX}",
    )
    top_k: tuple[Annotated[int, Field(ge=1, le=1_000_000, strict=True)], ...] = Field(
        default=DEFAULT_TOP_K,
        max_length=OPERATING_TARGETS_MAX,
        description="review queue lengths k at which /metrics reports precision and recall "
        f"among the k highest scores; each 1 to 1,000,000, at most {OPERATING_TARGETS_MAX}",
    )
    window: int = Field(
        default=10_000, ge=2, le=1_000_000, strict=True, description="metrics window, in events"
    )
    reservoir: int = Field(
        default=10_000,
        ge=2,
        le=1_000_000,
        strict=True,
        description="scores kept per class for the since-start metrics (exact up to this many)",
    )
    regret_window: int | None = Field(
        default=None,
        ge=0,
        le=REGRET_WINDOW_MAX,
        strict=True,
        validate_default=True,
        description=(
            "events kept to report regret and the metric gap against the best fixed model in "
            f"hindsight (0 = off); default {REGRET_WINDOW_DEFAULT:,} for a learner whose score "
            f"is linear in the features with n_features <= {REGRET_DEFAULT_MAX_FEATURES}, else "
            "0 (the default auto scores by trees too: no regret, so no window unless asked); "
            f"at most {REGRET_WINDOW_MAX:,} and regret_window * n_features <= "
            f"{REGRET_MAX_CELLS:,}"
        ),
    )
    default_label: Literal[0, 1] | None = Field(
        default=None, description="label learned for a scored event whose label never came in time"
    )
    label_ttl_seconds: float | None = Field(
        default=None,
        gt=0,
        strict=True,
        description="how long /score keeps an event waiting for its label",
    )
    on_drift: Literal["none", "reset"] = Field(
        default="none",
        description=(
            "what a detected drift (Page-Hinkley on the prequential pairwise loss, reported in "
            "the metrics' `drift` section) does: `none` only reports it; `reset` also restarts "
            "the learner from scratch (steps, statistics, scaler), as a drift-reset baseline"
        ),
    )

    missing_values: MissingValuesName = Field(
        default="refuse",
        description=(
            "what a missing feature value does (null in JSON, NDJSON and stream messages, NaN "
            "in NPZ and LIBSVM; for a dense model with feature_names also an absent name): "
            "`refuse` (the default: a 422 naming the event and feature, nothing learned) or "
            "`zero` (read as 0; a sparse or hashed event leaves the feature out) or `mean` (a "
            "dense model reads it as the feature's mean over the values present in the events "
            "learned before it, 0 until there is one; scoring uses the current mean; a sparse "
            "or hashed model leaves the feature out, as with `zero`).  Infinity is always "
            "refused"
        ),
    )

    @field_validator("default_label", mode="before")
    @classmethod
    def _label_is_a_number(cls, value: Any) -> Any:
        # numbers as declared, not false / true, which pydantic would take
        if type(value) is bool:
            raise ValueError("default_label must be 0, 1 or null, not a boolean")
        return value

    @field_validator("pauc_range")
    @classmethod
    def _check_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        check_fpr_pair(value)  # the pAUC learners' own check (a ValueError: 422)
        return value

    @field_validator("target_fprs", "target_alert_rates", "top_k")
    @classmethod
    def _increasing(cls, value: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted(set(value)))

    @field_validator("feature_names")
    @classmethod
    def _check_feature_names(
        cls, names: tuple[str, ...] | None, info: ValidationInfo
    ) -> tuple[str, ...] | None:
        if names is None:
            return None
        if info.data.get("feature_mode") == "hashed":
            raise ValueError(
                'a hashed model takes its feature names in each event ({"name": value}); '
                "feature_names is for dense and sparse models"
            )
        n_features = info.data.get("n_features")
        if n_features is not None and len(names) != n_features:
            raise ValueError(f"expected {n_features} names (n_features), got {len(names)}")
        if len(orjson.dumps(names)) > FEATURE_NAMES_MAX_BYTES:
            raise ValueError(f"the names take more than {FEATURE_NAMES_MAX_BYTES:,} bytes as JSON")
        for index, name in enumerate(names):
            if not 0 < len(name) <= FEATURE_NAME_MAX_CHARS:
                raise ValueError(
                    f"name {index} must have 1 to {FEATURE_NAME_MAX_CHARS} characters, "
                    f"got {len(name)}"
                )
            control = CONTROL_CHARACTER.search(name)
            if control is not None:
                raise ValueError(
                    f"name {index} ({name!r}) holds the control character "
                    f"U+{ord(control.group()):04X}; feature names are printable text"
                )
        if len(set(names)) != len(names):
            repeated = next(name for name, count in Counter(names).items() if count > 1)
            raise ValueError(f"names must be unique; {repeated!r} is repeated")
        return names

    @field_validator("regret_window")
    @classmethod
    def _check_regret_window(cls, value: int | None, info: ValidationInfo) -> int | None:
        n_features = info.data.get("n_features")
        if n_features is None:  # n_features itself is invalid and reported
            return value
        if value is None:  # resolved with the learner's linearity (default_regret_window)
            return None
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
    """What a model has learned and refused.  A scored event whose label never came in time
    is counted once: in ``labels_defaulted`` or in ``labels_expired``."""

    events_learned: int = Field(description="labelled events learned (all routes)")
    positives: int
    negatives: int
    duplicates: int = Field(
        description="events and labels skipped because their id was already learned (or "
        "repeated in the request), in requests that learned something: a request of nothing "
        "but duplicates (a retry) changes nothing, this count included (its response and the "
        "Prometheus counters count them)"
    )
    labels_joined: int = Field(description="delayed labels joined to a scored event in time")
    labels_defaulted: int = Field(
        description="scored events whose label never came in time, learned with the model's "
        "default_label"
    )
    labels_expired: int = Field(
        description="scored events whose label never came in time and that were forgotten "
        "(no default_label, or their id had been learned meanwhile)"
    )


class FitStatus(BaseModel):
    part: str = Field(
        description="the state prefix of the boosted part ('' for a boosted_embedded model, "
        "'learner:c2:' for auto's third candidate)"
    )
    fits: int = Field(description="ensembles installed (state)")
    events: int = Field(description="labelled events the part learned (state)")
    fit_delay: int = Field(
        description="the most events from a fit's buffer (event N) to its install point: "
        "L(N) = min(fit_delay, max(fit_delay // 8, N // 16))"
    )
    due: bool = Field(description="a fit fell due and is not installed yet (state)")
    due_from: int | None = Field(description="the event count N whose buffer it learns")
    install_at: int | None = Field(description="N + L(N): the install point")
    fitter: str | None = Field(
        description="this process's background fitter on the due fit: queued, running, done, "
        "failed, taken (taken back by the learner); null when it has none (a library-like "
        "install point computes it)"
    )
    last_fit_from: int | None = Field(description="the last installed fit's N (state)")
    last_fit_at: int | None = Field(description="the event count it was installed at (state)")
    last_fit_seconds: float | None = Field(
        description="seconds the last fit installed in this process took to compute (fit and "
        "relearning), wherever it ran"
    )
    waits: int = Field(
        description="install points in this process the fitter had not finished by (the "
        "request then computed the fit, or took the fitter's result if it came first)"
    )
    wait_seconds: float = Field(description="the seconds those install points waited")
    fits_in_call: int = Field(
        description="fits computed by the request at the install point in this process (the "
        "fitter not done in time, or no result handed in: a model loaded with a fit due)"
    )


#: the ``fits`` member of a model's info and metrics
Fits = Annotated[
    list[FitStatus] | None,
    Field(description="boosted trees' fit status; present for models with them"),
]


class ModelInfo(BaseModel):
    config: ModelConfig
    version: int
    counts: Counts
    fits: Fits = None


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


class Contribution(BaseModel):
    feature: str | int = Field(
        description="the feature's name when the model has feature_names, else its column"
    )
    contribution: float = Field(
        description="how much this feature moved the score from the baseline (+: up)"
    )


class EventReasons(BaseModel):
    """An event's reason codes (docs/algorithms/reasons.md): ``sum(contributions) + others +
    baseline`` is its score."""

    contributions: list[Contribution] = Field(description="the largest by |contribution| first")
    others: float = Field(description="the sum of the other features' contributions")
    baseline: float = Field(description="the score of the reference event (the remainder)")


class ScoreResponse(BaseModel):
    model: str
    version: int
    scores: list[float]
    kept: int = Field(default=0, description="events whose features were kept for a later label")
    probabilities: list[Annotated[float, Field(ge=0.0, le=1.0)]] | None = Field(
        default=None,
        description="with ?probabilities=true: each score's calibrated probability of a "
        "positive label (the model's online Platt scaling on its labelled stream); null "
        "otherwise",
    )
    reasons: list[EventReasons] | None = Field(
        default=None, description="with ?reasons=k: each event's k top feature contributions"
    )


class LabelStatus(BaseModel):
    id: str
    status: Literal["learned", "duplicate", "unknown", "expired"]


class LabelsResponse(BaseModel):
    model: str
    version: int
    learned: int
    results: list[LabelStatus]


class WeightsResponse(BaseModel):
    """The served linear score, ``score(x) = raw_coef . x + raw_intercept`` on the features as
    posted (the online scaler's current statistics folded in), and ``coef . scaled(x) +
    intercept`` on the internal, scaled features."""

    model: str
    version: int
    n_features: int
    feature_names: list[str] | None = Field(
        description="the model's feature names, in the order of the coefficients (or null)"
    )
    scaling: str = Field(description="the model's online scaling")
    coef: list[float] = Field(description="weights of the scaled (internal) features")
    intercept: float = Field(description="constant term of the score on the scaled features")
    raw_coef: list[float] | None = Field(
        description=(
            "weights of the features as posted, to copy into a rules engine; null when the "
            "scaling is not linear in the features (unit_norm, see raw_note)"
        )
    )
    raw_intercept: float | None = Field(description="constant term of the raw-space score")
    raw_note: str = Field(description="how to use the raw weights, or why there are none")


class WarmupProgress(BaseModel):
    """How far the compilation of the kernels is."""

    groups_done: int
    groups_total: int
    compiling: str | None = Field(description="the group compiling (null when none is)")
    elapsed_seconds: float = Field(description="seconds so far")
    seconds_to_ready: float = Field(description="estimated seconds left until ready (0 once ready)")
    seconds_to_all: float = Field(description="estimated seconds until every group is compiled")


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
    warmup: WarmupProgress | None = Field(None, description="503 warming-up: as in /readyz")
