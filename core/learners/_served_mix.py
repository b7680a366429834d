"""``auto``'s served mix (docs/algorithms/auto.md (auto.9)-(auto.10)): each candidate's score
standardised by the running mean and spread of its own prequential scores, the candidates
weighted by a softmax of their windowed pAUCs.

The functions work on auto's own state arrays (``served_weights``, ``score_mean``,
``score_m2``; the streaming update is the kernel :func:`core._kernels.auto.standardised_mix`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core._kernels.auto import standardised_mix
from core.errors import InvalidState
from core.learners._state import VALUE_BOUND, Fraction, Grown, StateInvariant

__all__ = [
    "MIN_WEIGHT",
    "check_mix_state",
    "mix_invariants",
    "mix_state",
    "mix_terms",
    "mix_weights",
    "serve_segment",
    "served_coef",
    "served_contributions",
    "served_decision",
    "upgrade_to_mix",
]

#: [CHOICE] a weight below this share of the mix is dropped (auto.10): scoring then skips that
#: candidate, and a candidate ``temperature * ln(1000)`` (0.69 at the default 0.1) of pAUC
#: behind the best no longer blurs its ranking
MIN_WEIGHT = 1e-3


def mix_state(n_candidates: int) -> dict[str, np.ndarray]:
    """Equal weights and empty score statistics, before any event."""
    return {
        "served_weights": np.full(n_candidates, 1.0 / n_candidates),
        "score_mean": np.zeros(n_candidates),
        "score_m2": np.zeros(n_candidates),
    }


def mix_invariants() -> dict[str, StateInvariant]:
    """Per-array bounds; :func:`check_mix_state` checks that the weights sum to 1."""
    return {
        "served_weights": Fraction(),
        "score_mean": Grown(),
        "score_m2": Grown(0.0, bound=VALUE_BOUND),
    }


def check_mix_state(state: dict[str, np.ndarray]) -> None:
    total = float(np.sum(state["served_weights"]))
    if not abs(total - 1.0) <= 1e-9:
        raise InvalidState(
            f"state array 'served_weights' sums to {total!r}; expected 1", field="served_weights"
        )


def mix_weights(paucs: np.ndarray, temperature: float, weights: np.ndarray) -> None:
    """The served mix's weights from the candidates' windowed pAUCs (auto.10): a softmax at
    ``temperature``, the shares below :data:`MIN_WEIGHT` dropped, renormalised (the best
    candidate always keeps a share: its term is ``exp(0) = 1``)."""
    shares = np.exp((paucs - np.max(paucs)) / temperature)
    shares /= np.sum(shares)
    shares[shares < MIN_WEIGHT] = 0.0
    weights[:] = shares / np.sum(shares)


def mix_terms(own: dict[str, np.ndarray], candidates: list[Any]) -> list[tuple[Any, float, float]]:
    """``(candidate, weight / std, mean)`` of every candidate in the served mix (auto.9), with
    the statistics of all events learned; a candidate with no weight or no spread yet adds
    nothing (and is not scored)."""
    count = int(own["n_seen"][0])
    terms = []
    for k, candidate in enumerate(candidates):
        weight = float(own["served_weights"][k])
        spread = float(np.sqrt(own["score_m2"][k] / count)) if count > 1 else 0.0
        if weight > 0.0 and spread > 0.0:
            terms.append((candidate, weight / spread, float(own["score_mean"][k])))
    return terms


def serve_segment(
    own: dict[str, np.ndarray],
    candidate_scores: np.ndarray,
    seen: int,
    temperature: float,
    served: np.ndarray,
) -> None:
    """``served``: the served scores of a segment of events that come after ``seen`` and
    before the next evaluation, from the candidates' prequential scores (K, segment): the mix
    (auto.9), or with ``temperature`` 0 the leader's mapped by (auto.7).  The mix's statistics
    take every event either way (so the mix can be turned on later)."""
    standardised_mix(
        candidate_scores, own["served_weights"], own["score_mean"], own["score_m2"], seen, served
    )
    if temperature == 0.0:
        leader_scores = candidate_scores[int(own["leader"][0])]
        served[:] = own["served_scale"][0] * leader_scores + own["served_offset"][0]


def served_decision(own: dict[str, np.ndarray], candidates: list[Any], X, temperature: float):
    """The served scores of new rows (already scaled): the mix with the statistics of every
    event learned, scoring only the candidates with a share; or the leader's, mapped."""
    if temperature == 0.0:
        leader = candidates[int(own["leader"][0])]
        return own["served_scale"][0] * leader._decision(X) + own["served_offset"][0]
    served = np.zeros(X.shape[0])
    for candidate, factor, mean in mix_terms(own, candidates):
        served += factor * (candidate._decision(X) - mean)
    return served


def served_contributions(
    own: dict[str, np.ndarray], candidates: list[Any], X, temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`~core.learners._base.OnlineLearner.contributions` of the served score of new rows
    (already scaled), term by term as :func:`served_decision`: each candidate's contributions
    and remainder times ``weight / std`` (its mean taken off the remainder), or the leader's
    mapped (docs/algorithms/reasons.md (reasons.5))."""
    if temperature == 0.0:
        scale = own["served_scale"][0]
        leader = candidates[int(own["leader"][0])]
        contributions, remainder = leader._contributions(X)
        return scale * contributions, scale * remainder + own["served_offset"][0]
    contributions = np.zeros(X.shape)
    remainder = np.zeros(X.shape[0])
    for candidate, factor, mean in mix_terms(own, candidates):
        own_contributions, own_remainder = candidate._contributions(X)
        contributions += factor * own_contributions
        remainder += factor * (own_remainder - mean)
    return contributions, remainder


def served_coef(
    own: dict[str, np.ndarray], candidates: list[Any], n_features: int, temperature: float
) -> np.ndarray:
    """The served weights: the mix's sum of each candidate's weights times ``weight / std``
    (the served scores also subtract the means and add the intercepts, scaled alike), or the
    leader's times ``served_scale``."""
    if temperature == 0.0:
        return own["served_scale"][0] * candidates[int(own["leader"][0])].coef_
    total = np.zeros(n_features)
    for candidate, factor, _ in mix_terms(own, candidates):
        total += factor * candidate.coef_
    return total


def upgrade_to_mix(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A state saved before the mix, with its arrays: the leader's weight 1, and score
    statistics estimated from the window (its mean; its spread taken as that of all
    ``n_seen`` events).  A state that has them, or whose tournament arrays are broken (the
    layout check names what), is returned as it is."""
    if "score_mean" in state or "window_scores" not in state:
        return state
    try:
        window_scores = np.asarray(state["window_scores"], dtype=np.float64)
        seen = int(np.asarray(state["n_seen"]).reshape(-1)[0])
        leader = int(np.asarray(state["leader"]).reshape(-1)[0])
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):
        return state
    n_candidates = window_scores.shape[0] if window_scores.ndim == 2 else 0
    filled = min(max(seen, 0), window_scores.shape[-1]) if n_candidates else 0
    weights = np.zeros(n_candidates)
    if 0 <= leader < n_candidates:
        weights[leader] = 1.0
    if filled:
        recent = window_scores[:, :filled]
        mean, m2 = recent.mean(axis=1), recent.var(axis=1) * seen
    else:
        mean, m2 = np.zeros(n_candidates), np.zeros(n_candidates)
    return {**state, "served_weights": weights, "score_mean": mean, "score_m2": m2}
