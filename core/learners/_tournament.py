"""``auto``'s tournament (docs/algorithms/auto.md): the candidates' prequential scores kept
over a window, the schedule and the exact pAUC / AUC comparison with hysteresis that picks a
leader, the served mix of standardised scores weighted by those pAUCs, and the leaderboard.

The functions work on auto's own state arrays (``own``: :func:`tournament_state` and
:func:`tournament_invariants`), so the learner class keeps only the composition: which
candidates learn (core.learners._candidates), in which segments, and the drift tracking
around them (core.learners._auto_drift).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from core._arrays import LABELS, grown
from core._kernels import auto as kernels
from core.errors import InvalidState
from core.learners._auto_drift import rescore_rings
from core.learners._growing import Growth
from core.learners._mix_fallback import (
    SortedWindow,
    best_candidate,
    drop_clearly_behind,
    extended_columns,
    fall_back_to_best,
    later_half_if_deciding,
    passes_guard,
    shed_undecided,
    whole_window,
    window_metrics,
)
from core.learners._served_scale import SHRINK_EVENTS, shrink
from core.learners._state import (
    VALUE_BOUND,
    Count,
    Finite,
    Fraction,
    Grown,
    Index,
    OneOf,
    StateInvariant,
)
from core.learners._tree_admission import joined_columns, judge_since_joined
from core.validation import check_fpr_pair

__all__ = [
    "MIN_WEIGHT",
    "check_tournament_state",
    "coef_of_mix",
    "evaluate",
    "initial_weights",
    "leaderboard",
    "mix_terms",
    "next_evaluation",
    "serve_and_record",
    "steady_candidates",
    "served_coef",
    "served_contributions",
    "served_decision",
    "tournament_invariants",
    "tournament_state",
]

#: [CHOICE] a weight below this share of the mix is dropped (auto.10): scoring then skips that
#: candidate, and a candidate ``temperature * ln(1000)`` (0.69 at the default 0.1) of pAUC
#: behind the best no longer blurs its ranking
MIN_WEIGHT = 1e-3


def mix_weights(paucs: np.ndarray, temperature: float, weights: np.ndarray) -> None:
    """The served mix's weights from the candidates' windowed pAUCs (auto.10): a softmax at
    ``temperature``, the shares below :data:`MIN_WEIGHT` dropped, renormalised (the best
    candidate always keeps a share: its term is ``exp(0) = 1``)."""
    shares = np.exp((paucs - np.max(paucs)) / temperature)
    shares /= np.sum(shares)
    shares[shares < MIN_WEIGHT] = 0.0
    weights[:] = shares / np.sum(shares)


def initial_weights(candidates: list[Any]) -> np.ndarray:
    """[CHOICE] The mix's weights before the window first decides (auto.11): equal shares of
    the candidates that neither grow trees (``restart_tree``: until its first fit such a
    candidate ranks as its inner learner, then on another scale) nor forget (``half_life``:
    made to follow a drifting stream, noisier on a short one); equal shares of all if every
    candidate does.  On the real-data suite and the hold-out sets this left fewer sets with the
    served AUC below the best candidate's and raised the prequential AUC and pAUC (bench/README.md,
    "The served mix against its best candidate")."""
    steady = np.array(steady_candidates(candidates))
    if not steady.any():
        steady[:] = True
    return steady / np.count_nonzero(steady)


def steady_candidates(candidates: list[Any]) -> list[bool]:
    """Whether each candidate is steady: it neither grows trees (``restart_tree``) nor forgets
    (``half_life``), so its scores over the whole window are those of one learner."""
    return [
        getattr(candidate, "restart_tree", None) is None
        and getattr(candidate, "half_life", None) is None
        for candidate in candidates
    ]


def mix_terms(own: dict[str, np.ndarray], candidates: list[Any]) -> list[tuple[Any, float, float]]:
    """``(candidate, weight / std * shrink, mean)`` of every candidate in the served mix
    (auto.9), with the statistics of all events learned; a candidate with no weight or no
    spread yet adds nothing (and is not scored)."""
    return [(candidates[k], factor, mean) for k, factor, mean in _mix_factors(own)]


def _mix_factors(own: dict[str, np.ndarray]) -> list[tuple[int, float, float]]:
    """:func:`mix_terms` by the candidates' indices."""
    count = own["n_seen"].item()
    if count <= 1:
        return []
    # the arrays read back as Python floats, the spreads taken in Python: numpy's operations
    # on K elements cost ~1 us each, and this runs for every served score and coef_.  IEEE
    # division and square root are correctly rounded, so math's are numpy's bit for bit; a
    # sum of squares that is not positive (0, or NaN) has no spread, as np.sqrt's 0 or NaN
    weights = own["served_weights"].tolist()
    means = own["score_mean"].tolist()
    factor = shrink(count)
    terms = []
    for k, (weight, m2, mean) in enumerate(
        zip(weights, own["score_m2"].tolist(), means, strict=True)
    ):
        if weight > 0.0 and m2 > 0.0:
            spread = math.sqrt(m2 / count)
            if spread > 0.0:
                terms.append((k, weight / spread * factor, mean))
    return terms


def serve_and_record(
    own: dict[str, np.ndarray],
    candidate_scores: np.ndarray,
    labels: np.ndarray,
    temperature: float,
    served: np.ndarray,
) -> None:
    """A segment of events that come before the next evaluation, after the candidates learned
    it (``candidate_scores``: their prequential scores, K x segment): ``served`` gets the
    served scores, the mix (auto.9) or with ``temperature`` 0 the leader's mapped by (auto.7);
    the mix's statistics take every event either way (so the mix can be turned on later); the
    window's ring buffers take the segment (only its last ``window`` events can stay)."""
    seen = int(own["n_seen"][0])
    kernels.serve_and_record(
        candidate_scores, labels, own["served_weights"], own["score_mean"], own["score_m2"],
        seen, SHRINK_EVENTS, own["window_scores"], own["window_labels"], served,
    )  # fmt: skip
    if temperature == 0.0:
        leader_scores = candidate_scores[int(own["leader"][0])]
        served[:] = own["served_scale"][0] * leader_scores + own["served_offset"][0]
    own["n_seen"][0] = seen + labels.shape[0]


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
    and remainder times its factor (its mean taken off the remainder), or the leader's
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
    """The served weights: the mix's sum of each candidate's weights times its factor
    (``weight / std * shrink``, (auto.9); the served scores also subtract the means and add
    the intercepts, scaled alike), or the leader's times ``served_scale``."""
    if temperature == 0.0:
        return own["served_scale"][0] * candidates[int(own["leader"][0])].coef_
    total = np.zeros(n_features)
    for k, factor, _ in _mix_factors(own):
        total += factor * candidates[k].coef_
    return total


def coef_of_mix(
    own: dict[str, np.ndarray], coefs: list, n_features: int, temperature: float
) -> np.ndarray:
    """:func:`served_coef` of the candidates' weights ``coefs`` (taken where the mix's
    statistics in ``own`` are; only those the mix reads need be there)."""
    if temperature == 0.0:
        return own["served_scale"][0] * coefs[int(own["leader"][0])]
    total = np.zeros(n_features)
    for k, factor, _ in _mix_factors(own):
        total += factor * coefs[k]
    return total


def tournament_state(candidates: list[Any]) -> dict[str, np.ndarray]:
    """The tournament's arrays for ``candidates``, before any event: the window's ring buffers
    empty (they grow as it fills: :func:`grow_window`); the mix's weights
    :func:`initial_weights`."""
    n_candidates = len(candidates)

    def counter(value=0):
        return np.array([value], dtype=np.int64)

    return {
        "n_seen": counter(),
        "window_scores": np.zeros((n_candidates, 0)),
        "window_labels": np.zeros(0, dtype=LABELS),
        "leader": counter(),
        "leader_since": counter(),
        # served score = served_scale * (leader's score) + served_offset
        "served_scale": np.ones(1),
        "served_offset": np.zeros(1),
        "challenger": counter(-1),
        "challenger_streak": counter(),
        "window_pauc": np.full(n_candidates, np.nan),
        "window_auc": np.full(n_candidates, np.nan),
        "evaluated_at": counter(),
        "served_weights": initial_weights(candidates),
        "score_mean": np.zeros(n_candidates),
        "score_m2": np.zeros(n_candidates),
        "joined_at": np.zeros(n_candidates, dtype=np.int64),  # (auto.15)
    }


def tournament_invariants(n_candidates: int) -> dict[str, StateInvariant]:
    """What each array of :func:`tournament_state` may hold once events were learned."""
    return {
        "n_seen": Count(),
        "window_scores": Finite(),
        "window_labels": OneOf((-1, 0, 1)),  # 0: a slot not written yet
        "leader": Index(n_candidates),
        "leader_since": Count(0, "n_seen"),
        "served_scale": Grown(0.0, strict=True),  # the score map keeps the order
        "served_offset": Grown(),
        "challenger": Count(-1, n_candidates - 1),  # -1: no challenger
        "challenger_streak": Count(0, "evaluated_at"),
        "window_pauc": Fraction(),
        "window_auc": Fraction(),
        "evaluated_at": Count(0, "n_seen"),
        "served_weights": Fraction(),  # summing to 1: check_tournament_state
        "score_mean": Grown(),
        "score_m2": Grown(0.0, bound=VALUE_BOUND),
        "joined_at": Count(0, "n_seen"),
    }


def grow_window(own: dict[str, np.ndarray], window: int, needed: int) -> None:
    """Give the window's ring buffers ``needed`` slots (at most ``window``) before events are
    recorded in them: they grow as they fill (core.learners._growing), and stay a ring of
    ``window`` slots once full, so until then the events up to ``n_seen`` are in slot order."""
    labels = own["window_labels"]
    if labels.shape[0] >= min(needed, window):  # most events: full, or room left
        return
    own["window_scores"] = grown(own["window_scores"], needed, window, axis=1)
    own["window_labels"] = grown(own["window_labels"], needed, window)


def window_growing_arrays(window: int) -> dict[str, Growth]:
    """The window's growing arrays: name -> (axis, capacity)."""
    return {"window_scores": (1, window), "window_labels": (0, window)}


def check_tournament_state(state: dict[str, np.ndarray], window: int) -> None:
    """What the per-array declarations cannot say: the window's buffers have one length,
    which holds the events seen up to ``window`` and, until it is ``window``, all of them
    (:func:`grow_window`); the mix's weights sum to 1."""
    length, seen = state["window_labels"].shape[0], int(state["n_seen"][0])
    if state["window_scores"].shape[1] != length or (length < window and seen > length):
        raise InvalidState(
            f"state arrays 'window_scores' / 'window_labels' hold {state['window_scores'].shape[1]}"
            f" / {length} slots after {seen} events; expected one length, all of the events "
            f"until it is the window's {window}",
            field="window_labels",
        )
    total = float(np.sum(state["served_weights"]))
    if not abs(total - 1.0) <= 1e-9:
        raise InvalidState(
            f"state array 'served_weights' sums to {total!r}; expected 1", field="served_weights"
        )


def next_evaluation(seen: int, evaluate_every: int, first_evaluation: int) -> int:
    """The first event count after ``seen`` at which the candidates are compared: the
    multiples of ``evaluate_every`` and, before the first of them, ``first_evaluation``, twice
    that, four times that, ... (a function of the count alone, so batch = one at a time)."""
    due = (seen // evaluate_every + 1) * evaluate_every
    if seen >= evaluate_every:  # every early count is behind: most events
        return due
    early = first_evaluation
    while early < evaluate_every:
        if early > seen:
            return min(early, due)
        early *= 2
    return due


def evaluate(own: dict[str, np.ndarray], pauc_range, **options) -> None:
    """:func:`decide`, then, when it changed what is served (the mix's weights, or the leader
    with ``temperature=0``), the drift detector's rings rescored
    (core.learners._auto_drift.rescore_rings)."""
    weights, leader = own["served_weights"].copy(), int(own["leader"][0])
    decide(own, pauc_range, **options)
    if not np.array_equal(weights, own["served_weights"]) or leader != int(own["leader"][0]):
        rescore_rings(own, float(options.get("temperature", 0.0)))


def decide(
    own: dict[str, np.ndarray],
    pauc_range,
    *,
    min_positives: int,
    min_negatives: int,
    margin: float,
    patience: int,
    since: int = 0,
    temperature: float = 0.0,
    steady: Sequence[bool] | None = None,
) -> None:
    """Each candidate's exact pAUC and AUC on the window (auto.1), counted as in (auto.3), then
    the leader choice with hysteresis (auto.4)-(auto.6): the challenger takes over after
    ``patience`` consecutive evaluations ahead by more than ``margin``; windows with too few
    positives or negatives in the FPR range decide nothing.  The window's events compared are
    at most the later half of the events seen (with the mix, of the window too).  ``since``:
    only the window's events from that event count on are compared (after a detected drift,
    docs/algorithms/auto.md (auto.8)).  With ``temperature`` > 0 a deciding evaluation also
    sets the mix's weights (auto.10), (auto.12)-(auto.13), (auto.15); one that decides nothing
    still sheds the candidates clearly behind (auto.13); ``steady``: those the fallback checks
    on the whole window too."""
    seen = int(own["n_seen"][0])
    filled = min(seen, own["window_labels"].shape[0])
    labels = own["window_labels"][:filled].astype(np.int64)  # the metrics' dtype
    window_scores = own["window_scores"][:, :filled]
    # [CHOICE] at most the later half of the events seen, and for the mix of the window once
    # full: the weights set here serve what comes next, and the first events' scores are those
    # of models that no longer exist (every candidate before its first positives; a tree
    # candidate before its first fit, or its older fits) (docs/algorithms/auto.md (auto.1))
    first = max(since, seen // 2)
    alpha, beta = check_fpr_pair(pauc_range)
    if temperature > 0.0 and seen > filled:  # unless that half fails the guard after (auto.3)
        half = later_half_if_deciding(own, seen - filled // 2, min_positives, min_negatives,
                                      beta - alpha)  # fmt: skip
        first = max(first, half)
    if first > seen - filled:
        columns = np.arange(first, seen) % own["window_labels"].shape[0]
        labels = own["window_labels"][columns].astype(np.int64)
        window_scores = own["window_scores"][:, columns]
    own["evaluated_at"][0] = seen
    compared = labels.shape[0]
    n_positive = int(np.count_nonzero(labels > 0))
    undecided = not passes_guard(n_positive, compared, min_positives, min_negatives, beta - alpha)
    # [CHOICE] after a detection, too few positives since it to decide keeps the mix: the
    # events before it are no longer compared, and those since hold too few positives to shed
    # on (bench/README.md, "Drift alarms on rare positives (branch h-T)")
    if temperature > 0.0 and undecided and not since:
        # [CHOICE] a short stream of rare positives may never pass the guard, and its mix would
        # keep its first weights to the end: the candidates clearly behind (beyond the noise
        # DeLong's error measures) leave it on the later half extended back to the guard's
        # positives (bench/README.md, "The mix against its best candidate (branch h-P)")
        earliest, needed = max(since, seen - filled), min_positives - n_positive
        extended = extended_columns(own, earliest, first, needed)
        shed_undecided(own["served_weights"], own["window_scores"][:, extended],
                       own["window_labels"][extended].astype(np.int64), alpha, beta,
                       joined_columns(own, seen - extended.shape[0]))  # fmt: skip
    if n_positive == 0 or n_positive == compared:
        own["window_pauc"][:] = np.nan
        own["window_auc"][:] = np.nan
        return
    # the mix's weights compare the candidates' placements too: each candidate's window sorted
    # once, for its metrics and its placements
    window = SortedWindow(window_scores, labels) if temperature > 0.0 and not undecided else None
    own["window_pauc"][:], own["window_auc"][:] = (
        window_metrics(window_scores, labels, alpha, beta)
        if window is None
        else window.metrics(alpha, beta)
    )
    if undecided:
        return
    paucs, aucs = own["window_pauc"], own["window_auc"]
    if window is not None:  # temperature > 0
        joined = judge_since_joined(own, paucs, aucs, window_scores, labels, alpha, beta,
                                    seen - compared if first > seen - filled else None)  # fmt: skip
        mix_weights(paucs, temperature, own["served_weights"])
        drop_clearly_behind(own["served_weights"], paucs, aucs, window_scores, labels,
                            window=window, joined=joined)  # fmt: skip
        fall_back_to_best(own, window_scores, labels, alpha, beta, window,
                          whole_window(own, max(since, seen - filled), first), steady)  # fmt: skip
    best = best_candidate(paucs, aucs)
    leader = int(own["leader"][0])
    if best != leader and paucs[best] > paucs[leader] + margin:
        if int(own["challenger"][0]) == best:
            own["challenger_streak"][0] += 1
        else:
            own["challenger"][0] = best
            own["challenger_streak"][0] = 1
        if own["challenger_streak"][0] >= patience:
            match_scale(own, leader, best, filled)
            own["leader"][0] = best
            own["leader_since"][0] = seen
            own["challenger"][0] = -1
            own["challenger_streak"][0] = 0
    else:
        own["challenger"][0] = -1
        own["challenger_streak"][0] = 0


def match_scale(own: dict[str, np.ndarray], old: int, new: int, filled: int) -> None:
    """[CHOICE] At a change of leader, map the new leader's scores affinely (a positive
    scale: its ranking is unchanged) so that, over the window, they have the mean and
    standard deviation the served scores had (auto.7): a logit and a pAUC learner's score live
    on different scales, and without this a user's thresholds, and every prequential metric
    over events on both sides of the change, would mix the two scales."""
    window_scores = own["window_scores"]
    served = own["served_scale"][0] * window_scores[old, :filled] + own["served_offset"][0]
    incoming = window_scores[new, :filled]
    served_std, incoming_std = float(np.std(served)), float(np.std(incoming))
    scale = served_std / incoming_std if served_std > 0.0 and incoming_std > 0.0 else 1.0
    own["served_scale"][0] = scale
    own["served_offset"][0] = float(np.mean(served)) - scale * float(np.mean(incoming))


def leaderboard(
    own: dict[str, np.ndarray], specs: list[dict[str, Any]], pauc_range, temperature: float
) -> dict[str, Any]:
    """The tournament as JSON-able data: each candidate's effective learner and params, its
    windowed pAUC and AUC at the last evaluation (None while undefined), its share of the
    served scores, which one leads and since which event count."""
    leader = int(own["leader"][0])
    if temperature > 0.0:
        weights = [float(w) for w in own["served_weights"]]
    else:  # the leader alone is served
        weights = [float(k == leader) for k in range(len(specs))]

    def number(value: float) -> float | None:
        return None if math.isnan(value) else float(value)

    rows = [
        {
            "index": k,
            "learner": spec["learner"],
            "params": spec["params"],
            "window_pauc": number(own["window_pauc"][k]),
            "window_auc": number(own["window_auc"][k]),
            "leader": k == leader,
            "weight": weights[k],
        }
        for k, spec in enumerate(specs)
    ]
    challenger = int(own["challenger"][0])
    return {
        "leader": leader,
        "leader_since": int(own["leader_since"][0]),
        "served_scale": float(own["served_scale"][0]),
        "served_offset": float(own["served_offset"][0]),
        "challenger": None if challenger < 0 else challenger,
        "challenger_streak": int(own["challenger_streak"][0]),
        "n_seen": int(own["n_seen"][0]),
        "evaluated_at": int(own["evaluated_at"][0]),
        "window": int(min(own["n_seen"][0], own["window_labels"].shape[0])),
        "pauc_range": list(check_fpr_pair(pauc_range)),
        "temperature": float(temperature),
        "candidates": rows,
    }
