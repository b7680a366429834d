"""``auto``'s drift tracking (docs/algorithms/auto.md (auto.8)): a wrapper around the tournament
that watches the served scores and, after a change, makes the tournament forget the old
concept.

:class:`DriftTracking` runs a :class:`~core.metrics.drift.DriftDetector` on auto's own
prequential (served) scores.  After a detection, the next evaluations compare the candidates
on the window's events since the detection only, every :data:`FAST_EVERY` events, and a
better challenger takes over at once (no patience): the window's events from before the change
no longer vote for the old concept's leader; the candidates that grow a tree grow it again.
The default tournament gains the fast-adapting candidate with it
(core.learners._candidates.FAST_CANDIDATES, and FAST_TREE_CANDIDATE up to 250 features): the
precise learners keep leading a stable stream, after a change the fast ones recover first.
"""

from __future__ import annotations

import numpy as np

from core._kernels.drift import page_hinkley
from core.learners._state import Count, Finite, StateInvariant
from core.metrics.drift import DriftDetector

__all__ = ["DRIFT", "FAST_EVERY", "DriftTracking"]

#: [CHOICE] after a detection the candidates are compared every this many events (at most
#: ``evaluate_every``) until a leader chosen after it: 500 recovered within 0.01 of River's
#: constant-step logistic regression on bench/drift.py's abrupt scenario, 2,000 lost 0.04 in
#: the 10,000 events after the change
FAST_EVERY = 500

#: the prefix of the detector's arrays among auto's own
DRIFT = "drift:"


class DriftTracking:
    """The drift wrapper of a tournament evaluated every ``evaluate_every`` events.

    Segments of events (learned, served and recorded together) end at every multiple of the
    fast period as well as at the evaluations (:meth:`boundary`): a function of the event count
    alone, so batch = one event at a time holds bit for bit, and a restart of the trees comes
    before the candidates learn the events after it however the events were batched."""

    def __init__(self, evaluate_every: int) -> None:
        self.evaluate_every = int(evaluate_every)
        self.period = min(FAST_EVERY, self.evaluate_every)
        self._detector: DriftDetector | None = None

    @staticmethod
    def state() -> dict[str, np.ndarray]:
        """A fresh detector's arrays (``drift:*``) and ``drift_since``: the event count of the
        last detection not yet followed by a change of leader's evaluation (0: none)."""
        state = {DRIFT + key: value for key, value in DriftDetector().get_state().items()}
        state["drift_since"] = np.zeros(1, dtype=np.int64)
        return state

    @staticmethod
    def invariants() -> dict[str, StateInvariant]:
        """Per-array bounds; :meth:`check_state` checks the detector's arrays together."""
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

    @staticmethod
    def check_state(state: dict[str, np.ndarray]) -> None:
        """The detector's own consistency checks (shapes, fills within the rings, counters)."""
        DriftDetector.from_state(_detector_arrays(state))

    def boundary(self, seen: int) -> int:
        """The next multiple of the fast period after ``seen``: a segment ends there whether or
        not an evaluation is due."""
        return (seen // self.period + 1) * self.period

    def detector(self, own: dict[str, np.ndarray]) -> DriftDetector:
        """The detector working in place on ``own``'s arrays (kept while they are the same
        arrays: a new state gives new ones; a rejected batch is put back in place)."""
        detector = self._detector
        if detector is None or detector.counters is not own[DRIFT + "counters"]:
            detector = self._detector = DriftDetector.over(_detector_arrays(own))
        return detector

    def watch(
        self, own: dict[str, np.ndarray], served: np.ndarray, labels: np.ndarray, candidates
    ) -> int:
        """Feed a segment of served scores to the detector (a detection sets
        ``drift_since``); at the first multiple of the fast period after a detection, the
        candidates that grow trees on the stream (``boosted_embedded``, ``tree_embedded``:
        their ``restart_tree``) grow them again on the events from then on (a tree split for
        the old concept cannot rank the new one, however its inner learner adapts).  Returns
        the event count from which the next evaluation compares: the last detection while the
        leader was chosen before it, 0 (the whole window) otherwise."""
        # DriftDetector.update without its checks: the served scores are finite float64 and
        # the labels the learner's validated +-1 int64 (a per-event saving on one-event
        # batches); the same kernel on the same arrays, so the same detections
        detector = self.detector(own)
        start = int(detector.counters[0])
        detected_at = np.empty(labels.shape[0], dtype=np.int64)
        found = page_hinkley(
            served, labels, detector.recent, detector.recent_fill, detector.recent_next,
            detector.statistics, detector.counters, float(detector.parameters[0]),
            float(detector.parameters[1]), int(detector.limits[1]), detected_at,
        )  # fmt: skip
        if found:
            own["drift_since"][0] = start + int(detected_at[found - 1])
        detected = int(own["drift_since"][0])
        if detected and int(own["n_seen"][0]) == self.boundary(detected):
            for candidate in candidates:
                restart = getattr(candidate, "restart_tree", None)
                if restart is not None:
                    restart()
        return detected if detected > int(own["leader_since"][0]) else 0


def _detector_arrays(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key[len(DRIFT) :]: value for key, value in state.items() if key.startswith(DRIFT)}
