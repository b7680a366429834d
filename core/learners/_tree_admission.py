"""``auto``'s served mix takes in a boosted candidate at its first fit (docs/algorithms/auto.md
(auto.14)).

Until its first fit a candidate that grows boosted trees (``boosted_embedded``) ranks as its
inner learner alone, so the start of the mix leaves it out (auto.11), and the window compares
its trees only from an evaluation after that fit.  A short stream may have none: a stream of a
few hundred events with a few dozen positives has its last evaluation before the first fit is
installed, or its windows hold too few positives to decide, and the mix served its start's
candidates to the end although the trees, once fitted, ranked better (bench/README.md, "The
trees join the mix at their first fit (branch h-Q)").  At the install of its first fit such a
candidate that does not forget (the fast one is made for drifting streams) and holds no share
gets one: the mean share of the candidates that hold one, the weights renormalised.  The
evaluations then judge it as any other: a deciding one sets every weight, an undecided one
sheds it when clearly behind (auto.13).

The install comes at a fixed event count (a function of the labels seen,
docs/algorithms/boosted_embedded.md, "Fit points"), and auto's segments end there and where the
fit falls due (:func:`events_to_first_fit_point`), so the share starts with the event after the
install however the events were batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.learners._auto_drift import rescore_rings
from core.learners._mix_fallback import window_metrics

__all__ = ["admit_fitted", "awaiting_first_fit", "events_to_first_fit_point", "joined_columns",
           "joins_at_first_fit", "judge_since_joined", "until_first_fit"]  # fmt: skip


def _forgets(candidate: Any) -> bool:
    """Whether the candidate's learner discounts the past (its own ``half_life``, or its inner
    learner's)."""
    inner = getattr(candidate, "params", None)
    own = getattr(candidate, "half_life", None)
    return own is not None or (isinstance(inner, dict) and inner.get("half_life") is not None)


def joins_at_first_fit(candidate: Any) -> bool:
    """Whether the candidate grows boosted trees (``fit_points_``) and does not forget: what
    its learner and parameters say, so a composite may keep the answer for its candidates."""
    # ``fit_points_`` looked up on the class (``hasattr`` on the candidate runs the property)
    return hasattr(type(candidate), "fit_points_") and not _forgets(candidate)


def awaiting_first_fit(
    candidates: list[Any],
    weights: np.ndarray,
    temperature: float,
    joiners: Sequence[int] | None = None,
) -> list[int]:
    """The candidates that would join the served mix (``temperature`` > 0) at their first fit:
    boosted candidates that do not forget (:func:`joins_at_first_fit`; ``joiners``: their
    indices, when the caller keeps them), hold no share and have installed no fit yet."""
    if temperature == 0.0:
        return []
    if joiners is None:
        joiners = [k for k, candidate in enumerate(candidates) if joins_at_first_fit(candidate)]
    # read at every event: the shares in one C call first (a candidate with one awaits
    # nothing), then the fit count from the state (``fits_`` re-checks the initialisation, ~0.5
    # us: a candidate the evaluations shed is asked at every event)
    shares = weights.tolist()
    return [k for k in joiners if shares[k] == 0.0 and not candidates[k]._own_state["fits"][0]]


def events_to_first_fit_point(candidate: Any, upcoming: np.ndarray) -> int | None:
    """Events of the ``upcoming`` labels after which ``candidate``'s first fit falls due or is
    installed (its next fit point), None when neither comes among them: a segment that ends
    there has the fit due, or installed, at its last event."""
    if candidate.fit_due():
        left = candidate._delay() - int(candidate._own_state["pending_fill"][0])
        return max(left, 1) if left <= upcoming.shape[0] else None
    if candidate._until_counted() > upcoming.shape[0]:
        return None
    due = np.flatnonzero(candidate._due(upcoming)[1:])
    return int(due[0]) + 1 if due.size else None


def until_first_fit(candidates: list[Any], awaiting: list[int], upcoming: np.ndarray) -> int:
    """Events of the ``upcoming`` labels until the first fit point of an ``awaiting``
    candidate (:func:`events_to_first_fit_point`), all of them when none comes."""
    ends = [events_to_first_fit_point(candidates[k], upcoming) for k in awaiting]
    return min([end for end in ends if end is not None], default=upcoming.shape[0])


def admit_fitted(
    own: dict[str, np.ndarray], candidates: list[Any], awaiting: list[int], temperature: float
) -> None:
    """Give each of the ``awaiting`` candidates that has now installed a fit the mean share of
    the candidates holding one in ``own["served_weights"]`` (``1 / count``), renormalised;
    when any joined, the drift detector's rings take the new served function's scores
    (core.learners._auto_drift.rescore_rings), as after an evaluation that changed it."""
    weights = own["served_weights"]
    fitted = [k for k in awaiting if candidates[k].fits_ > 0]
    if not fitted:
        return
    share = 1.0 / np.count_nonzero(weights > 0.0)
    weights[fitted] = share
    weights /= np.sum(weights)
    own["joined_at"][fitted] = own["n_seen"][0]
    rescore_rings(own, temperature)


def joined_columns(own: dict[str, np.ndarray], start: int | None) -> np.ndarray | None:
    """(auto.15): each candidate's first compared column on which it is judged, the compared
    events starting at event ``start`` (None: not in event order): a candidate that joined the
    mix at its first fit after ``start`` from its join, the others from 0; None when none did."""
    if start is None:
        return None
    columns = np.maximum(own["joined_at"] - start, 0)
    return columns if columns.any() else None


def judge_since_joined(
    own: dict[str, np.ndarray],
    paucs: np.ndarray,
    aucs: np.ndarray,
    window_scores: np.ndarray,
    labels: np.ndarray,
    alpha: float,
    beta: float,
    start: int | None,
) -> np.ndarray | None:
    """(auto.15) in a deciding evaluation: the windowed pAUC and AUC (``paucs`` / ``aucs``,
    in place) of each candidate that joined after the compared events' ``start`` taken on its
    events since its join, when they hold both classes; returns :func:`joined_columns`."""
    joined = joined_columns(own, start)
    firsts = [] if joined is None else joined.tolist()
    for k, first in enumerate(firsts):
        since = labels[first:]
        if first and 0 < np.count_nonzero(since > 0) < since.shape[0]:
            scores = np.ascontiguousarray(window_scores[k : k + 1, first:])
            (paucs[k],), (aucs[k],) = window_metrics(scores, since, alpha, beta)
    return joined
