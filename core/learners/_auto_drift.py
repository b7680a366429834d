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

import operator
import sys

import numpy as np

from core._kernels.auto import serve_record_and_watch
from core._kernels.drift import page_hinkley
from core.learners._mix_fallback import placements
from core.learners._served_scale import SHRINK_EVENTS, mix_factors
from core.learners._state import Count, Finite, StateInvariant
from core.metrics.drift import DriftDetector

__all__ = [
    "CONFIRMATION",
    "DRIFT",
    "FAST_EVERY",
    "DriftTracking",
    "auc_and_variance",
    "confirmed",
    "rescore_rings",
    "served_window",
]

#: [CHOICE] after a detection the candidates are compared every this many events (at most
#: ``evaluate_every``) until a leader chosen after it: 500 recovered within 0.01 of River's
#: constant-step logistic regression on bench/drift.py's abrupt scenario, 2,000 lost 0.04 in
#: the 10,000 events after the change
FAST_EVERY = 500

#: [CHOICE] a detection is confirmed when the served AUC since it is below the AUC on the
#: window's events before it by more than this many standard errors of the difference: one
#: error (a one-sided 16 % chance for a stationary stream's false alarm to stand) keeps the
#: restart of every detection whose served ranking did fall, the gradual change's too, whose
#: drop stands at about two errors (bench/README.md, "Drift alarms on rare positives (branch
#: h-T)" and "DR: every drift alarm confirmed on the served ranking")
CONFIRMATION = 1.0

#: the prefix of the detector's arrays among auto's own
DRIFT = "drift:"

#: the detector's counters among auto's own arrays: the array its kept view is checked against
_COUNTERS = DRIFT + "counters"

#: the mix's arrays that serving a segment reads and writes, in one C call
_SERVED = operator.itemgetter(
    "served_weights", "score_mean", "score_m2", "window_scores", "window_labels"
)


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
        #: the detector's arrays and parameters as its kernel takes them, read with it
        self._arguments: tuple = ()
        #: the kernel's detection positions for a one-event segment, read within the call
        #: that wrote them (a new array a call cost ~0.3 us of the service's one-event batch)
        self._detected_one = np.empty(1, dtype=np.int64)

    @staticmethod
    def state() -> dict[str, np.ndarray]:
        """A fresh detector's arrays (``drift:*``) and ``drift_since``: the event count of the
        last detection not yet followed by a change of leader's evaluation (0: none)."""
        # interned: one copy of each name for every model (core.learners._composed)
        detector = DriftDetector().get_state()
        state = {sys.intern(DRIFT + key): value for key, value in detector.items()}
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
        arrays: a new state gives new ones; a rejected batch is put back in place), and its
        kernel's arguments (:meth:`_detector_arguments`: its parameters do not change while
        its arrays are the same, ~0.5 us a segment to read again)."""
        detector = self._detector
        if detector is None or detector.counters is not own[_COUNTERS]:
            detector = self._detector = DriftDetector.over(_detector_arrays(own))
            self._arguments = self._detector_arguments(detector)
        return detector

    def watch(
        self,
        own: dict[str, np.ndarray],
        served: np.ndarray,
        labels: np.ndarray,
        candidates,
        *,
        min_positives: int = 1,
        temperature: float = 0.0,
    ) -> int:
        """Feed a segment of served scores to the detector (a detection sets
        ``drift_since``); at the first multiple of the fast period after a detection whose
        events since it hold ``min_positives`` positives, the detection is confirmed or
        dismissed (:func:`confirmed`): confirmed, the candidates that grow trees on the stream
        (``boosted_embedded``, ``tree_embedded``: their ``restart_tree``) grow them again on
        the events from then on (a tree split for the old concept cannot rank the new one,
        however its inner learner adapts); dismissed, ``drift_since`` returns to 0 and the
        trees keep their buffers.  Returns the event count from which the next evaluation
        compares: the last detection while the leader was chosen before it, 0 (the whole
        window) otherwise."""
        # DriftDetector.update without its checks: the served scores are finite float64 and
        # the labels the learner's validated +-1 int64 (a per-event saving on one-event
        # batches); the same kernel on the same arrays, so the same detections
        detector = self.detector(own)
        start = int(detector.counters[0])
        detected_at = np.empty(labels.shape[0], dtype=np.int64)
        found = page_hinkley(served, labels, *self._arguments, detected_at)
        return self._after_feed(own, start, found, detected_at, candidates, min_positives,
                                temperature)  # fmt: skip

    def serve_record_and_watch(
        self,
        own: dict[str, np.ndarray],
        candidate_scores: np.ndarray,
        labels: np.ndarray,
        served: np.ndarray,
        candidates,
        *,
        min_positives: int,
        temperature: float,
    ) -> int:
        """:func:`~core.learners._tournament.serve_and_record` of a segment served as the mix
        (``temperature`` > 0), then :meth:`watch` of its served scores, the two kernels in one
        call (:func:`core._kernels.auto.serve_record_and_watch`): the same arrays in the same
        order, so the same state."""
        detector = self._detector
        if detector is None or detector.counters is not own[_COUNTERS]:
            detector = self.detector(own)
        start = detector.counters.item(0)  # Python ints, as int() of the elements, cheaper
        seen = own["n_seen"].item()
        n_events = labels.shape[0]
        detected_at = self._detected_one if n_events == 1 else np.empty(n_events, dtype=np.int64)
        weights, means, m2, window_scores, window_labels = _SERVED(own)
        found = serve_record_and_watch(
            candidate_scores, labels, weights, means, m2, seen, SHRINK_EVENTS, window_scores,
            window_labels, served, *self._arguments, detected_at,
        )  # fmt: skip
        own["n_seen"][0] = seen + n_events
        if not found and not own["drift_since"][0]:  # most segments: nothing to confirm
            return 0
        return self._after_feed(own, start, found, detected_at, candidates, min_positives,
                                temperature)  # fmt: skip

    @staticmethod
    def _detector_arguments(detector: DriftDetector) -> tuple:
        """The detector's arrays and parameters as :func:`page_hinkley` takes them after the
        scores and labels, before ``detected_at``."""
        return (
            detector.recent, detector.recent_fill, detector.recent_next, detector.statistics,
            detector.counters, float(detector.parameters[0]), float(detector.parameters[1]),
            int(detector.limits[1]),
        )  # fmt: skip

    def _after_feed(self, own, start, found, detected_at, candidates, min_positives,
                    temperature) -> int:  # fmt: skip
        """:meth:`watch` after the detector took the segment (``found`` detections at
        ``detected_at``, its event count ``start`` before it)."""
        if found:
            own["drift_since"][0] = start + int(detected_at[found - 1])
        # Python ints (.item(): as int() of the element, cheaper): read at every event while a
        # detection waits for its confirmation
        detected, seen = own["drift_since"].item(), own["n_seen"].item()
        if detected and seen % self.period == 0 and seen > detected:
            # [CHOICE] a restart empties the trees' buffers, on a rare class the positives of
            # tens of thousands of events: it waits for the positives an evaluation may decide
            # on, and a detection the served ranking does not confirm on them changes nothing,
            # however soon they came (a burst of positives made magic's false restarts:
            # bench/README.md, "DR: every drift alarm confirmed on the served ranking")
            verdict = confirmed(own, detected, self.period, min_positives, temperature)
            if verdict is False:
                own["drift_since"][0] = detected = 0
            elif verdict:
                for candidate in candidates:
                    restart = getattr(candidate, "restart_tree", None)
                    if restart is not None:
                        restart()
        return detected if detected > own["leader_since"].item() else 0


def served_window(own: dict[str, np.ndarray], temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The window's events, oldest first: their served scores as the current served function
    scores them (auto.9)-(auto.10), with the statistics of every event learned (the mix), or
    the leader's mapped (``temperature=0``); and their labels."""
    seen, capacity = int(own["n_seen"][0]), own["window_labels"].shape[0]
    filled = min(seen, capacity)
    columns = np.arange(seen - filled, seen) % capacity
    scores = own["window_scores"][:, columns]
    labels = own["window_labels"][columns].astype(np.int64)  # held as int8
    if temperature == 0.0:
        leader = int(own["leader"][0])
        return own["served_scale"][0] * scores[leader] + own["served_offset"][0], labels
    return mix_factors(own) @ (scores - own["score_mean"][:, None]), labels


def confirmed(
    own: dict[str, np.ndarray], detected: int, period: int, min_positives: int, temperature: float
) -> bool | None:
    """At a multiple of the fast period after the detection at event count ``detected``:
    None while the events since it hold fewer than ``min_positives`` positives or they were
    reached at an earlier multiple (nothing to do); otherwise, at the first multiple after it
    as at a later one, whether the served ranking (:func:`served_window`) is worse since the
    detection than on the window's events before it (but for the fast period's before it,
    the detector's lag): its AUC lower by more than
    :data:`CONFIRMATION` standard errors of the difference of the two independent AUCs
    (DeLong's variances); True when either part lacks two events of either class (no
    estimate: the detection stands).  When the window no longer holds the
    events since the detection: None if its events before this multiple hold
    ``min_positives`` positives (decided before), False otherwise (it cannot be confirmed)."""
    seen = int(own["n_seen"][0])
    served, labels = served_window(own, temperature)
    since = labels.shape[0] - (seen - detected)
    if since < 0:  # decided at an earlier multiple if the window shows it, else never can be
        earlier = labels[: max(0, labels.shape[0] - period)] > 0
        return None if earlier.sum() >= min_positives else False
    positive = labels[since:] > 0
    before_boundary = max(0, seen - period - detected)
    if positive.sum() < min_positives or positive[:before_boundary].sum() >= min_positives:
        return None
    # [CHOICE] the fast period's events before the detection are left out of the part before
    # it: the detector's lag, events of a new concept already (the tests' flip was detected
    # 220 events after it, bench/drift.py's abrupt change 450-700); with them in, a change
    # detected within a short window was not confirmed
    old = max(0, since - period)
    before, after = (
        auc_and_variance(labels[:old], served[:old]),
        auc_and_variance(labels[since:], served[since:]),
    )
    if before is None or after is None:
        return True
    return bool(before[0] - after[0] > CONFIRMATION * np.sqrt(before[1] + after[1]))


def auc_and_variance(labels: np.ndarray, scores: np.ndarray) -> tuple[float, float] | None:
    """The AUC of ``scores`` and DeLong's variance of it (the placements' variances over the
    positives and over the negatives); None with fewer than two events of either class."""
    positive = labels > 0
    if min(np.count_nonzero(positive), np.count_nonzero(~positive)) < 2:
        return None
    of_positives, of_negatives = placements(labels, scores)
    variance = (
        np.var(of_positives, ddof=1) / of_positives.size
        + np.var(of_negatives, ddof=1) / of_negatives.size
    )
    return float(np.mean(of_positives)), float(variance)


def rescore_rings(own: dict[str, np.ndarray], temperature: float) -> None:
    """After an evaluation changed what is served (the mix's weights, or the leader with
    ``temperature=0``): the detector's rings (``drift:recent``) take the served scores of the
    window's latest events of each class (up to its capacity, oldest first) as the new served
    function scores them (auto.9)-(auto.10), with the statistics of every event learned.

    [CHOICE] The pairwise loss (drift.1) compares an event with the other class's recent served
    scores: after the served function changed, scores of the old one rank the new one's on a
    different scale, and on a rare class their ring (tens of thousands of events old) made the
    loss of every later event rise on a stationary stream (bench/README.md, "Drift alarms on
    rare positives (branch h-T)").  The walk's statistics are kept."""
    if DRIFT + "recent" not in own:
        return
    served, labels = served_window(own, temperature)
    recent = own[DRIFT + "recent"]
    for row, of_class in enumerate((labels <= 0, labels > 0)):
        latest = served[of_class][-recent.shape[1] :]
        recent[row, : latest.shape[0]] = latest
        own[DRIFT + "recent_fill"][row] = latest.shape[0]
        own[DRIFT + "recent_next"][row] = latest.shape[0] % recent.shape[1]


def _detector_arrays(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key[len(DRIFT) :]: value for key, value in state.items() if key.startswith(DRIFT)}
