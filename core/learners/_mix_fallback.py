"""``auto``'s served mix never below its best candidate on the evaluation window
(docs/algorithms/auto.md, "The mix falls back to its best candidate").

A softmax of the candidates' windowed pAUCs can blur a clearly better candidate with weaker
ones: on a wide sparse set of rare positives the mix ranked below its own ``logistic`` run
alone.  After the mix's weights are set from an evaluation, the mix those weights give is scored
on the same window; when the best candidate is at least as good there on both the pAUC and the
AUC, it is served alone (its weight 1).
"""

from __future__ import annotations

import numpy as np

from core._kernels import auto as kernels

__all__ = ["fall_back_to_best"]


def fall_back_to_best(
    own: dict[str, np.ndarray],
    window_scores: np.ndarray,
    labels: np.ndarray,
    alpha: float,
    beta: float,
) -> None:
    """Set ``own["served_weights"]`` to the best candidate alone (highest windowed pAUC, then
    AUC, then the lowest index, from ``own["window_pauc"]`` / ``own["window_auc"]``) when the
    mix of the current weights is no better on the window's pAUC and no better on its AUC
    (``window_scores`` (K, W) and ``labels`` (W,), both classes present).  The mix's window
    scores are each candidate's scores times ``weight / std`` (its mean, a constant, does not
    change the ranking)."""
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
    # both measures: on the few positives of a short stream's window, pAUC(0, 0.1) rests on
    # the top tenth of the negatives, and comparing (pAUC, AUC) in that order let a pAUC tie
    # or a one-pair lead there overrule the AUC (bench/README.md, "The served mix against its
    # best candidate")
    if mix_pauc[0] <= paucs[best] and mix_auc[0] <= aucs[best]:
        weights[:] = 0.0
        weights[best] = 1.0
