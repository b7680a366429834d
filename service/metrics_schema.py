"""The typed responses of the metrics routes: they send the dictionaries ``service.engine``
builds, which tests validate against these models.  Undefined metrics are ``null``, never NaN."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from service.engine.model import DRIFT_LOG_CAPACITY
from service.schemas import Counts, Fits


class OperatingPoint(BaseModel):
    """The rule "flag an event when its score >= threshold" at the most permissive threshold
    whose false-positive rate (``at_fpr``) or alert rate (``at_alert_rate``) does not exceed the
    target (docs/algorithms/metrics.md (metrics.9)-(metrics.10)).  An event scoring exactly at
    the threshold is flagged, so tied scores are flagged together.  All null but ``target``
    while the metrics are undefined (the section's ``reason``)."""

    target: float = Field(description="the target FPR or alert rate (the model's setting)")
    threshold: float | None = Field(
        description="flag scores >= this; null when even the highest score would exceed the "
        "target (nothing flagged) or while undefined"
    )
    tpr: float | None = Field(description="recall: the fraction of positives flagged")
    fpr: float | None = Field(description="the fraction of negatives flagged (<= target)")
    precision: float | None = Field(
        description="the fraction of flagged events that are positive; null when none is"
    )
    alert_rate: float | None = Field(description="the fraction of all events flagged")


class AtK(BaseModel):
    """Precision and recall among the k highest scores; a tie group cut by the k-th place
    counts its expected share of positives (metrics.11)."""

    k: int
    reviewed: float | None = Field(description="events reviewed: min(k, events)")
    precision: float | None
    recall: float | None


class OperatingPoints(BaseModel):
    """At the model's ``target_fprs``, ``target_alert_rates`` and ``top_k``, in that order."""

    at_fpr: list[OperatingPoint]
    at_alert_rate: list[OperatingPoint]
    at_k: list[AtK]


class WindowMetrics(BaseModel):
    """Prequential metrics of the last ``window_capacity`` labelled events (each scored
    before it was learned)."""

    events: int = Field(description="labelled events in the window now")
    positives: int
    negatives: int
    auc: float | None = Field(description="ROC AUC; null while undefined (see reason)")
    pauc: float | None = Field(description="partial AUC over the FPR range [alpha, beta]")
    pauc_standardized: float | None = Field(
        description="McClish-standardised pAUC (0.5 = random ranking, 1 = perfect)"
    )
    average_precision: float | None = Field(
        description="average precision (the step-wise area under the precision-recall curve, "
        "as scikit-learn's average_precision_score)"
    )
    operating_points: OperatingPoints
    reason: str | None = Field(description="why the metrics are null (e.g. no negative yet)")


class SinceStartMetrics(WindowMetrics):
    """The same metrics since the model's start, from per-class reservoirs of scores (for
    precision, alert rate and k, each reservoir's scores stand for the events of their class
    seen since the start)."""

    events: int = Field(description="labelled events learned since the start")
    cumulative_exact: bool = Field(
        description="true while the reservoirs hold every score (the metrics are exact)"
    )
    reservoir_capacity: int = Field(description="scores kept per class")


class Throughput(BaseModel):
    events_per_second_recent: float = Field(
        description="exponentially weighted learning rate (time constant 10 s)"
    )
    events_per_second_mean: float | None = Field(
        description="events learned / time between the first and the last learned event"
    )


class Regret(BaseModel):
    """Regret against the best fixed model in hindsight on the regret window (module
    docstring of ``core.regret``)."""

    regret: float | None = Field(
        description="online minus hindsight loss, normalised per pair; null for a model whose "
        "score is not linear in its features (online_loss_note)"
    )
    regret_per_event: float | None
    online_loss: float | None
    hindsight_loss: float
    prequential_pauc: float
    hindsight_pauc: float
    pauc_gap: float = Field(description="hindsight_pauc - prequential_pauc")
    n_events: int
    rounds: int = Field(description="requests (served weight vectors) in the regret window")
    window_capacity: int
    hindsight_C: float
    hindsight_converged: bool
    solve_seconds: float
    version: int = Field(description="the model version this solution describes")
    online_loss_note: str | None = Field(
        default=None,
        description="why online_loss and regret are null: the model (tree_embedded, or auto "
        "with it among its candidates) does not score linearly in its features",
    )


class Candidate(BaseModel):
    index: int
    learner: str
    params: dict[str, Any]
    window_pauc: float | None
    window_auc: float | None
    leader: bool
    weight: float = Field(
        description="its share of the served scores: the softmax of the windowed pAUCs at "
        "temperature (shares below 0.001 dropped); 1 for the leader and 0 for the others when "
        "temperature is 0"
    )


class Leaderboard(BaseModel):
    """``auto`` models: the candidates' windowed pAUC / AUC and which one is served."""

    leader: int = Field(description="index of the best candidate, chosen with hysteresis")
    leader_since: int = Field(description="event count at which it took the lead")
    served_scale: float
    served_offset: float
    challenger: int | None
    challenger_streak: int
    n_seen: int
    evaluated_at: int
    window: int
    pauc_range: list[float]
    temperature: float = Field(
        description="0: the leader's scores are served, mapped by served_scale and "
        "served_offset; > 0: the served score is the weighted sum of the candidates' "
        "standardised scores"
    )
    candidates: list[Candidate]


class QueueLag(BaseModel):
    """Queue mode: how far learning is behind the model's stream."""

    entries: int = Field(description="stream entries appended and not yet learned")
    events: int = Field(description="events in them")
    seconds: float = Field(description="age of the oldest of them (0 when caught up)")
    last_applied_id: str | None = Field(description="stream id of the last entry learned")


class DriftMark(BaseModel):
    """One detected drift: where in the stream and when."""

    event: int = Field(description="the event (counted from the model's start) it was found at")
    time: float = Field(
        description="unix time (s) of the learning call that detected it: the x value of the "
        "dashboard's time charts"
    )


class Drift(BaseModel):
    """The Page-Hinkley detector on the model's prequential pairwise loss
    (docs/algorithms/drift.md)."""

    detected: int = Field(description="drifts reported since the model was created or reset")
    last_detected_at: int | None = Field(
        description="the event (counted from the model's start) of the last report"
    )
    events: int = Field(description="events the detector has read")
    mean_loss: float | None = Field(description="running mean of the per-event pairwise loss")
    statistic: float = Field(description="Page-Hinkley statistic: cumulative rise over its minimum")
    threshold: float = Field(description="the statistic above which a drift is reported")
    on_drift: str = Field(description="the model's action on a report: none or reset")
    recent: list[DriftMark] = Field(
        description=f"the last drifts detected (at most {DRIFT_LOG_CAPACITY}), oldest first; the "
        "dashboard draws a marker at each on its time charts"
    )


class MetricsResponse(BaseModel):
    model: str
    version: int
    learner: str
    pauc_range: list[float] = Field(description="[alpha, beta], the model's FPR range")
    window_capacity: int
    alpha: float
    beta: float
    window: WindowMetrics
    since_start: SinceStartMetrics
    counts: Counts
    throughput: Throughput
    regret: Regret | None = Field(description="null when off or undefined (regret_reason)")
    regret_reason: str | None
    drift: Drift
    leaderboard: Leaderboard | None = Field(
        default=None, description="present for `auto` models only"
    )
    queue: QueueLag | None = Field(default=None, description="present in queue mode only")
    fits: Fits = None


class RocResponse(BaseModel):
    """``GET /v1/models/{model_id}/metrics/roc``: the window's ROC curve and, marked on it,
    its operating points."""

    model: str
    version: int
    n_events: int
    fpr: list[float | None]
    tpr: list[float | None]
    thresholds: list[float | None]
    average_precision: float | None = Field(description="of the window, as in /metrics")
    operating_points: OperatingPoints = Field(
        description="the window's, as in /metrics: each point at a target FPR or alert rate is "
        "a vertex of this curve (the origin when nothing is flagged)"
    )
    reason: str | None = Field(description="why the metrics are null (one class missing)")


class HistoryPoint(BaseModel):
    """The window's metrics just after the first commit of a minute (or hour)."""

    time: float = Field(description="unix seconds of the commit that wrote the point")
    auc: float | None = Field(description="the window's AUC (null: a class missing)")
    pauc: float | None = Field(description="the window's pAUC over the model's pauc_range")
    average_precision: float | None = Field(description="the window's average precision")
    recall_at_target_fpr: float | None = Field(
        description="the window's TPR at the model's first target FPR (target_fpr)"
    )
    events_learned: int = Field(description="events learned since the start")
    positives: int = Field(description="positive events learned since the start")


class HistoryResponse(BaseModel):
    """``GET /v1/models/{model_id}/metrics/history``: the model's metrics history, kept by the
    server with the model (it survives restarts and is shared by every worker)."""

    model: str
    version: int
    resolution: Literal["minute", "hour"]
    interval_seconds: float = Field(description="at most one point per interval")
    capacity: int = Field(description="points kept at this resolution (the oldest leave)")
    pauc_range: list[float]
    target_fpr: float | None = Field(description="the FPR of recall_at_target_fpr")
    last_learned_at: float | None = Field(
        description="unix seconds of the last learned event (null: none yet)"
    )
    points: list[HistoryPoint] = Field(description="oldest first")
