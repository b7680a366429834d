"""Operating points of a scoring rule "flag an event when its score >= threshold": the
threshold, recall (TPR), precision and alert rate at target false-positive rates and at target
alert rates, precision and recall at k, and average precision (conventions:
:mod:`core.metrics`; definitions: docs/algorithms/metrics.md (metrics.9)-(metrics.13)).

Every value is read off the ROC curve's vertices (:func:`core.metrics.roc_curve`), built in one
O(n) merge of the per-class sorted scores that the AUC already sorted: nothing is re-sorted
per metric, and the targets are located by binary search over the vertices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.metrics.ranking import _roc_counts, _sorted_input, _warn_undefined

__all__ = [
    "DEFAULT_TARGET_ALERT_RATES",
    "DEFAULT_TARGET_FPRS",
    "DEFAULT_TOP_K",
    "average_precision",
    "operating_points",
]

#: false-positive rates a fraud or risk team typically runs at: 0.1 %, 1 %, 5 %
DEFAULT_TARGET_FPRS: tuple[float, ...] = (0.001, 0.01, 0.05)
#: alert budgets ("review 0.5 % of the events"), as fractions of all events
DEFAULT_TARGET_ALERT_RATES: tuple[float, ...] = (0.005, 0.01)
#: review queue lengths for precision and recall at k
DEFAULT_TOP_K: tuple[int, ...] = (100, 1000)


class RocCounts:
    """The ROC curve's vertices in counts, highest threshold first (vertex 0 flags nothing),
    with per-class weights that scale a sample's counts up to the population's.

    In a window every event is there and both weights are 1.  For the since-start metrics the
    per-class reservoirs are samples of different sizes: a positive of the sample stands for
    ``positives_seen / positives_in_sample`` positives (the same for negatives), so that the
    rates within a class are the sample's and the mix of the classes (precision, alert rate)
    is the stream's (metrics.13)."""

    def __init__(
        self,
        positive_sorted: np.ndarray,
        negative_sorted: np.ndarray,
        positive_weight: float = 1.0,
        negative_weight: float = 1.0,
    ) -> None:
        self.false_positives, self.true_positives, self.thresholds = _roc_counts(
            positive_sorted, negative_sorted
        )
        self.n_positive = positive_sorted.size
        self.n_negative = negative_sorted.size
        self.positive_weight = float(positive_weight)
        self.negative_weight = float(negative_weight)
        # weighted events flagged at each vertex, non-decreasing from 0 to `total`
        self.alerts = (
            self.positive_weight * self.true_positives + self.negative_weight * self.false_positives
        )
        self.total = self.positive_weight * self.n_positive + self.negative_weight * self.n_negative
        self.fpr = self.false_positives / self.n_negative
        self.tpr = self.true_positives / self.n_positive

    def point(self, vertex: int, target: float) -> dict[str, Any]:
        """The operating point at ``vertex``: (metrics.9)-(metrics.10)'s fields."""
        flagged = self.alerts[vertex]
        positives_flagged = self.positive_weight * self.true_positives[vertex]
        return {
            "target": target,
            # vertex 0 flags nothing: no finite threshold does that (null in JSON)
            "threshold": float(self.thresholds[vertex]) if vertex > 0 else None,
            "tpr": float(self.tpr[vertex]),
            "fpr": float(self.fpr[vertex]),
            "precision": float(positives_flagged / flagged) if flagged > 0 else None,
            "alert_rate": float(flagged / self.total),
        }

    def at_rates(self, rates: np.ndarray, targets: Sequence[float]) -> list[dict[str, Any]]:
        """For each target, the most permissive vertex whose ``rates`` do not exceed it
        (``rates`` is non-decreasing and 0 at vertex 0, so there is always one)."""
        vertices = np.searchsorted(rates, np.asarray(targets, dtype=np.float64), side="right") - 1
        return [
            self.point(int(vertex), float(target))
            for vertex, target in zip(vertices, targets, strict=True)
        ]

    def at_k(self, ks: Sequence[int]) -> list[dict[str, Any]]:
        """Precision and recall among the k highest scores, a tie group cut by the k-th place
        counted by its expected share (metrics.11)."""
        rows = []
        for k in ks:
            reviewed = min(float(k), self.total)
            vertex = int(np.searchsorted(self.alerts, reviewed, side="right")) - 1
            true_positives = float(self.true_positives[vertex])
            if self.alerts[vertex] < reviewed:  # the next tie group is cut by the k-th place
                share = (reviewed - self.alerts[vertex]) / (
                    self.alerts[vertex + 1] - self.alerts[vertex]
                )
                true_positives += share * float(
                    self.true_positives[vertex + 1] - self.true_positives[vertex]
                )
            rows.append(
                {
                    "k": int(k),
                    "reviewed": float(reviewed),
                    "precision": float(self.positive_weight * true_positives / reviewed),
                    "recall": float(true_positives / self.n_positive),
                }
            )
        return rows

    def average_precision(self) -> float:
        """(metrics.12): precision at each vertex weighted by the recall it adds."""
        flagged = self.alerts[1:]
        precision = self.positive_weight * self.true_positives[1:] / flagged
        recall_added = np.diff(self.true_positives) / self.n_positive
        return float(np.dot(recall_added, precision))


def _checked_targets(name: str, targets: Sequence[float]) -> list[float]:
    values = [float(target) for target in targets]
    for value in values:
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    return values


def _checked_ks(ks: Sequence[int]) -> list[int]:
    values = [int(k) for k in ks]
    for value, given in zip(values, ks, strict=True):
        if value != given or value < 1:
            raise ValueError(f"top_k must hold integers >= 1, got {given!r}")
    return values


def undefined_operating_points(
    target_fprs: Sequence[float], target_alert_rates: Sequence[float], top_k: Sequence[int]
) -> dict[str, Any]:
    """The shape of :func:`operating_points_of` with every value null (one class missing)."""

    def empty(target: float) -> dict[str, Any]:
        return {"target": target, "threshold": None, "tpr": None, "fpr": None,
                "precision": None, "alert_rate": None}  # fmt: skip

    return {
        "at_fpr": [empty(target) for target in target_fprs],
        "at_alert_rate": [empty(target) for target in target_alert_rates],
        "at_k": [{"k": k, "reviewed": None, "precision": None, "recall": None} for k in top_k],
    }


def operating_points_of(
    counts: RocCounts,
    target_fprs: Sequence[float],
    target_alert_rates: Sequence[float],
    top_k: Sequence[int],
) -> dict[str, Any]:
    """``{"at_fpr", "at_alert_rate", "at_k"}`` of a curve with both classes present."""
    return {
        "at_fpr": counts.at_rates(counts.fpr, target_fprs),
        "at_alert_rate": counts.at_rates(counts.alerts / counts.total, target_alert_rates),
        "at_k": counts.at_k(top_k),
    }


def operating_points(
    y_true,
    scores,
    target_fprs: Sequence[float] = DEFAULT_TARGET_FPRS,
    target_alert_rates: Sequence[float] = DEFAULT_TARGET_ALERT_RATES,
    top_k: Sequence[int] = DEFAULT_TOP_K,
) -> dict[str, Any]:
    """Operating points of the rule "flag an event when its score >= threshold".

    At a target false-positive rate f the operating point is the *most permissive* threshold
    whose FPR does not exceed f (metrics.9); at a target alert rate a, the most permissive one
    flagging at most a fraction a of all events (metrics.10).  An event scoring exactly at the
    threshold is flagged, so a group of tied scores is wholly flagged or wholly not: the
    thresholds are the distinct scores (the ROC curve's vertices), and a target that falls
    inside a tie group stops before it.  When even the highest score exceeds the target,
    nothing is flagged: ``threshold`` is None, ``tpr`` 0, ``precision`` None.

    Precision and recall at k are those of the k highest scores; a tie group cut by the k-th
    place counts the expected number of its positives among the places left, as a uniformly
    random order within the tie would (metrics.11).  For k above the number of events, all
    events are reviewed (``reviewed``).

    Parameters
    ----------
    y_true, scores : array-like of shape (n_samples,)
        As for :func:`core.metrics.auc`.
    target_fprs, target_alert_rates : sequence of float
        Each in (0, 1).
    top_k : sequence of int
        Each >= 1.

    Returns
    -------
    dict
        ``at_fpr`` and ``at_alert_rate``: one dict per target with ``target``, ``threshold``,
        ``tpr`` (recall), ``fpr``, ``precision`` and ``alert_rate`` achieved; ``at_k``: one
        dict per k with ``k``, ``reviewed``, ``precision``, ``recall``.  With one class missing
        every value is None (with an :class:`UndefinedMetricWarning`).

    Examples
    --------
    >>> points = operating_points([0, 0, 1, 1, 0], [0.1, 0.4, 0.35, 0.8, 0.4],
    ...                           target_fprs=[0.5], target_alert_rates=[0.5], top_k=[2])
    >>> points["at_fpr"][0]["threshold"]  # 0.4 would flag two of three negatives
    0.8
    >>> points["at_alert_rate"][0]["threshold"], points["at_alert_rate"][0]["alert_rate"]
    (0.8, 0.2)
    >>> points["at_k"][0]["precision"]  # 0.8, then one of the two tied 0.4 (negatives)
    0.5
    """
    fprs = _checked_targets("target_fprs", target_fprs)
    alert_rates = _checked_targets("target_alert_rates", target_alert_rates)
    ks = _checked_ks(top_k)
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        _warn_undefined("operating points", reason)
        return undefined_operating_points(fprs, alert_rates, ks)
    return operating_points_of(RocCounts(positive_sorted, negative_sorted), fprs, alert_rates, ks)


def average_precision(y_true, scores) -> float:
    """Average precision, the step-wise area under the precision-recall curve (metrics.12).

    Equal to :func:`sklearn.metrics.average_precision_score`: the precision at each distinct
    threshold (ties flagged together) weighted by the recall it adds.  NaN with an
    :class:`UndefinedMetricWarning` if only one class is present (scikit-learn gives 1 or 0
    there, which would read as a perfect or worthless ranking).

    Examples
    --------
    >>> average_precision([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.8333333333333333
    """
    positive_sorted, negative_sorted, reason = _sorted_input(y_true, scores)
    if reason is not None:
        return _warn_undefined("average precision", reason)
    return RocCounts(positive_sorted, negative_sorted).average_precision()
