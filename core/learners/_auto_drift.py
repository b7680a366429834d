"""``auto(track_drift=True)``: fast-adapting candidates and a drift detector on the served
scores (docs/algorithms/auto.md (auto.8)).

With ``track_drift`` the default tournament gains :data:`FAST_CANDIDATES` (the precise learners
keep leading a stable stream; after a change the fast one recovers first), and auto runs a
:class:`~core.metrics.drift.DriftDetector` on its own prequential (served) scores.  After a
detection, the next evaluations compare the candidates on the window's events since the
detection only, and a better challenger takes over at once (no patience): the window's events
from before the change no longer vote for the old concept's leader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.learners._state import Count, Finite, StateInvariant
from core.metrics.drift import DriftDetector

#: [CHOICE] the fast-adapting candidate (docs/algorithms/forgetting.md): logistic's
#: discounted FTRL with a half-life of 2,000 events, the cheapest learner that recovered in
#: the fewest events on bench/drift.py's abrupt scenario (4,000, the window's minimum).
FAST_CANDIDATES: tuple[dict[str, Any], ...] = (
    {"learner": "logistic", "params": {"half_life": 2000}},
)

#: [CHOICE] after a detection the candidates are compared every this many events (at most
#: ``evaluate_every``) until a leader chosen after it: 500 recovered within 0.01 of River's
#: constant-step logistic regression on bench/drift.py's abrupt scenario, 2,000 lost 0.04 in
#: the 10,000 events after the change
FAST_EVERY = 500

#: auto's own arrays of the detector
DRIFT = "drift:"


def drift_state() -> dict[str, np.ndarray]:
    """A fresh detector's arrays (``drift:*``) and ``drift_since``: the event count of the last
    detection not yet followed by a change of leader's evaluation (0: none)."""
    state = {DRIFT + key: value for key, value in DriftDetector().get_state().items()}
    state["drift_since"] = np.zeros(1, dtype=np.int64)
    return state


def drift_invariants() -> dict[str, StateInvariant]:
    """Per-array bounds; :func:`check_drift_state` checks the detector's arrays together."""
    return {
        DRIFT + "parameters": Finite(0.0),
        DRIFT + "limits": Count(1),
        DRIFT + "recent": Finite(),
        DRIFT + "recent_fill": Count(),
        DRIFT + "recent_next": Count(),
        DRIFT + "statistics": Finite(),
        DRIFT + "counters": Count(-1),
        "drift_since": Count(0, "n_seen"),
    }


def check_drift_state(state: dict[str, np.ndarray]) -> None:
    """The detector's own consistency checks (shapes, fills within the rings, counters)."""
    DriftDetector.from_state(
        {key[len(DRIFT) :]: value for key, value in state.items() if key.startswith(DRIFT)}
    )


def watch(own: dict[str, np.ndarray], served: np.ndarray, labels: np.ndarray) -> None:
    """Feed a segment of served scores to the detector; a detection sets ``drift_since``."""
    detector = DriftDetector.over(
        {key[len(DRIFT) :]: value for key, value in own.items() if key.startswith(DRIFT)}
    )
    found = detector.update(served, labels)
    if found:
        own["drift_since"][0] = found[-1]


def restart_trees(candidates) -> None:
    """After a detection, every candidate that grows a tree on the stream (``tree_embedded``)
    grows it again on the events from then on (its ``restart_tree``): a tree split for the
    old concept cannot rank the new one, however its inner learner adapts."""
    for candidate in candidates:
        restart = getattr(candidate, "restart_tree", None)
        if restart is not None:
            restart()


def fast_boundary(seen: int, evaluate_every: int) -> int:
    """The next multiple of the fast period after ``seen`` (a function of the count alone, so
    batch = one at a time: a segment ends there whether or not an evaluation is due)."""
    period = min(FAST_EVERY, evaluate_every)
    return (seen // period + 1) * period


def comparison_start(own: dict[str, np.ndarray]) -> int:
    """The event count from which the next evaluation compares: the last detection, while
    the leader was chosen before it; 0 (the whole window) otherwise."""
    since = int(own["drift_since"][0])
    return since if since > int(own["leader_since"][0]) else 0
