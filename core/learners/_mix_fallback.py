"""``auto``'s served mix falls back to its best candidate when clearly behind it on the
evaluation window (docs/algorithms/auto.md (auto.12)).

A softmax of the candidates' windowed pAUCs can blur a clearly better candidate with weaker
ones: on a wide sparse set of rare positives the mix ranked below its own ``logistic`` run
alone.  After the mix's weights are set from an evaluation, the mix those weights give is scored
on the same window; when the best candidate is no worse there on the pAUC and ahead on the AUC
by more than :data:`UNCERTAINTY` standard errors of the two AUCs' difference, it is served
alone (its weight 1).
"""

from __future__ import annotations

import numpy as np

from core._kernels import auto as kernels

__all__ = ["UNCERTAINTY", "auc_difference_se", "fall_back_to_best"]

#: [CHOICE] the best candidate replaces the mix only when its windowed AUC leads the mix's by
#: more than this many standard errors of the paired difference (:func:`auc_difference_se`):
#: on a short stream's window of a few dozen positives a lead of a pair or two is noise, and the
#: mix, which hedges between the candidates, served the rest of such streams better
#: (bench/README.md, "The mix's fallback within the window's noise")
UNCERTAINTY = 0.5


def _placements(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's placements: each positive's share of the negatives scored below it, each
    negative's share of the positives scored above it (a tie counts one half)."""
    positive = labels > 0
    positives, negatives = scores[positive], scores[~positive]
    below = np.sort(negatives)
    above = np.sort(positives)
    of_positives = (
        np.searchsorted(below, positives, "left") + np.searchsorted(below, positives, "right")
    ) / (2.0 * negatives.size)
    of_negatives = 1.0 - (
        np.searchsorted(above, negatives, "left") + np.searchsorted(above, negatives, "right")
    ) / (2.0 * positives.size)
    return of_positives, of_negatives


def auc_difference_se(labels: np.ndarray, first: np.ndarray, second: np.ndarray) -> float:
    """The standard error of ``AUC(first) - AUC(second)`` on the same events (DeLong, DeLong
    and Clarke-Pearson 1988: the variances of the paired placements' differences over the
    positives and over the negatives); ``labels`` > 0 marks a positive.  Infinite with fewer than
    two events of either class (no estimate: the mix is kept)."""
    if np.count_nonzero(labels > 0) < 2 or np.count_nonzero(labels <= 0) < 2:
        return float("inf")
    first_positives, first_negatives = _placements(labels, first)
    second_positives, second_negatives = _placements(labels, second)
    over_positives = first_positives - second_positives
    over_negatives = first_negatives - second_negatives
    variance = (
        np.var(over_positives, ddof=1) / over_positives.size
        + np.var(over_negatives, ddof=1) / over_negatives.size
    )
    return float(np.sqrt(variance))


def fall_back_to_best(
    own: dict[str, np.ndarray],
    window_scores: np.ndarray,
    labels: np.ndarray,
    alpha: float,
    beta: float,
) -> None:
    """Set ``own["served_weights"]`` to the best candidate alone (highest windowed pAUC, then
    AUC, then the lowest index, from ``own["window_pauc"]`` / ``own["window_auc"]``) when the
    mix of the current weights is no better on the window's pAUC and behind on its AUC by more
    than :data:`UNCERTAINTY` standard errors of the difference (``window_scores`` (K, W) and
    ``labels`` (W,), both classes present).  The mix's window scores are each
    candidate's scores times ``weight / std`` (its mean, a constant, does not change the
    ranking)."""
    weights = own["served_weights"]
    paucs, aucs = own["window_pauc"], own["window_auc"]
    best = int(np.lexsort((np.arange(len(paucs)), -aucs, -paucs))[0])
    if weights[best] == 1.0:
        return
    count = int(own["n_seen"][0])
    spreads = np.sqrt(own["score_m2"] / count) if count > 1 else np.zeros(len(weights))
    factors = np.divide(weights, spreads, out=np.zeros(len(weights)), where=spreads > 0.0)
    mix = (factors @ window_scores)[None, :]
    positive = labels > 0
    mix_pauc, mix_auc = np.zeros(1), np.zeros(1)
    kernels.window_metrics(np.sort(mix[:, positive], axis=1), np.sort(mix[:, ~positive], axis=1),
                           alpha, beta, mix_pauc, mix_auc)  # fmt: skip
    # [CHOICE] the best candidate alone replaces the mix only when it is at least as good on
    # the pAUC and ahead on the AUC beyond the window's noise: on the few positives of a short
    # stream's window, pAUC(0, 0.1) rests on the top tenth of the negatives, and comparing
    # (pAUC, AUC) in that order let a pAUC tie or a one-pair lead there overrule the AUC
    # (bench/README.md, "The served mix against its best candidate")
    if mix_pauc[0] > paucs[best]:
        return
    margin = UNCERTAINTY * auc_difference_se(labels, window_scores[best], mix[0])
    if mix_auc[0] <= aucs[best] - margin:
        weights[:] = 0.0
        weights[best] = 1.0
