"""The scale of ``auto``'s served mix (docs/algorithms/auto.md (auto.9)): each candidate's score
standardised by the running mean and spread of its prequential scores, weighted by its share,
and the whole pulled toward 0 while those statistics rest on few events.

The served scores (core._kernels.auto.serve_and_record), the scores and weights of new rows
(core.learners._tournament), the fallback's mix (core.learners._mix_fallback) and the drift
detector's rescored window (core.learners._auto_drift) all take their factors from here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SHRINK_EVENTS", "mix_factors", "shrink"]

#: [CHOICE] after ``n`` events the mix is multiplied by ``n / (n + SHRINK_EVENTS)``.  The
#: first scores of a candidate come from a model that has barely learned and spread little;
#: standardised by the spread of so few scores they spread as much as a trained model's, and
#: a pooled prequential AUC compares them with every later score.  Replayed on the recorded
#: candidates (5 seeds), 50 left the fewest sets with the served prequential AUC more than
#: 0.005 below the best candidate's on both the suite and the hold-out sets, and raised the
#: mean prequential AUC and pAUC on both; held-out scores keep their ranking (bench/README.md,
#: "Q2: the served scale of auto's mix")
SHRINK_EVENTS = 50.0


def shrink(count: int) -> float:
    """The factor of the served mix after ``count`` events learned."""
    return count / (count + SHRINK_EVENTS)


def mix_factors(own: dict[str, np.ndarray]) -> np.ndarray:
    """Each candidate's factor in the served mix after the events learned (``own``: auto's
    tournament arrays): its share over the population spread of its prequential scores, times
    :func:`shrink`; 0 for a candidate without a share or spread, and for all before two
    events.  The served score of a row is ``sum_k factor_k (s_k - mean_k)``."""
    count = int(own["n_seen"][0])
    weights = own["served_weights"]
    factors = np.zeros(len(weights))
    if count <= 1:
        return factors
    spreads = np.sqrt(own["score_m2"] / count)
    np.divide(weights, spreads, out=factors, where=spreads > 0.0)
    return factors * shrink(count)
