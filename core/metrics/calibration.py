"""Probabilities from a model's scores: online Platt scaling on its labelled stream, shrunk
toward the running base rate while it has seen few labels of either class
(docs/algorithms/calibration.md).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> scores = rng.normal(size=50_000)
>>> labels = np.where(rng.random(50_000) < 1 / (1 + np.exp(-(2 * scores - 3))), 1, -1)
>>> calibrator = OnlineCalibrator()
>>> calibrator.update(scores, labels)
>>> truth = 1 / (1 + np.exp(-(2 * scores - 3)))
>>> bool(np.abs(calibrator.probabilities(scores) - truth).max() < 0.05)
True
"""

from __future__ import annotations

import numpy as np

from core._kernels import calibration as _kernels
from core.errors import InvalidState
from core.learners._state import MAX_COUNT
from core.validation import check_labelled_scores

__all__ = ["OnlineCalibrator"]

#: [CHOICE] the calibrator's memory, in events: the curvature is discounted by
#: ``1 - 1 / memory`` per event (calibration.1), (calibration.3): a learner's scores move as it
#: learns, even on a stationary stream, and a short memory follows them (bench/README.md,
#: "Calibrated probabilities")
DEFAULT_MEMORY = 1_000
#: [CHOICE] the prior curvature on the diagonal, about four events' worth at u = +-1: bounds
#: the first steps; it fades with the discount
PRIOR_CURVATURE = 1.0
#: [CHOICE] the permanent ridge that keeps the 2x2 system invertible (calibration.4)
RIDGE = 1e-6
#: (calibration.5): scores are clipped to SCORE_BOUND (a squared deviation summed over the
#: memory stays finite), standardised scores to STANDARD_BOUND (the probability is 0 or 1 in
#: float64 long before) and the parameters to THETA_BOUND: every product in the update stays
#: finite whatever the learner scores
SCORE_BOUND = 1e100
STANDARD_BOUND = 1e3
THETA_BOUND = 1e6
#: the Platt fit starts at p = sigmoid(score) (no moments yet, u = score), the probability of a
#: logistic model's margin; what is served before both classes are seen is the base rate
#: (calibration.8)
INITIAL_THETA = (1.0, 0.0)
#: [CHOICE] kappa of (calibration.8): the strength, in events, of the prior centred on the base
#: rate; the Platt probability gets half the weight once the effective number of labels
#: n+ n- / (n+ + n-) reaches it (about two positives among many negatives).  Measured over
#: 1 to 20 in bench/README.md ("Early probabilities"): stronger priors lose on balanced sets
#: early and on every set over the whole stream
PRIOR_STRENGTH = 2.0
#: the largest prior strength a stored state may hold (a prior of more events than any stream
#: would never let the calibrated probability through)
MAX_PRIOR_STRENGTH = 1e9


class OnlineCalibrator:
    """``P(y = +1 | score) = sigmoid(a * u + b)`` with ``u`` the score standardised by the
    running moments of the labelled scores, ``(a, b)`` learned one Newton step per labelled
    event on its pre-update score (calibration.1)-(calibration.4); served shrunk toward the
    running base rate with a weight that grows with the labels seen of both classes
    (calibration.6)-(calibration.8).  ``prior_strength`` 0 serves the Platt probability
    unshrunk.

    State: flat arrays (:meth:`get_state` / :meth:`from_state`), no pickling.
    """

    _KEYS = ("parameters", "theta", "curvature", "moments", "counters", "labels")

    def __init__(
        self, memory: float = DEFAULT_MEMORY, prior_strength: float = PRIOR_STRENGTH
    ) -> None:
        if not (np.isfinite(memory) and memory >= 1):
            raise ValueError(f"memory must be a finite number >= 1, got {memory!r}")
        if not (np.isfinite(prior_strength) and prior_strength >= 0):
            raise ValueError(f"prior_strength must be a finite number >= 0, got {prior_strength!r}")
        #: [decay gamma of (calibration.1), prior strength kappa of (calibration.8)]
        self.parameters = np.array(
            [1.0 - 1.0 / float(memory), float(prior_strength)], dtype=np.float64
        )
        self.theta = np.array(INITIAL_THETA, dtype=np.float64)
        self.curvature = np.array([PRIOR_CURVATURE, 0.0, PRIOR_CURVATURE], dtype=np.float64)
        self.moments = np.zeros(3, dtype=np.float64)
        self.counters = np.zeros(1, dtype=np.int64)
        #: [negatives, positives] fed (calibration.6)
        self.labels = np.zeros(2, dtype=np.int64)

    def update(self, scores, labels, *, validated: bool = False) -> None:
        """Feed a batch of (pre-update score, label) pairs in order.  ``validated``: the
        caller has already checked them as :func:`~core.validation.check_labelled_scores`
        does (finite float64 scores; labels, positive when > 0) -- the service's learning
        step, which checks them once for the metrics window, the drift detector and this."""
        # validated: check_labelled_scores's arrays, contiguous float64 and int64, as they
        # come (a conversion that changes nothing still costs a microsecond on one event)
        signs = labels
        if not validated:
            signs, scores = check_labelled_scores(labels, scores)
        _kernels.platt_update(
            scores, signs, self.theta, self.curvature, self.moments, self.counters,
            self.labels, self.parameters.item(0), RIDGE, SCORE_BOUND, STANDARD_BOUND,
            THETA_BOUND,
        )  # fmt: skip

    def probabilities(self, scores: np.ndarray) -> np.ndarray:
        """The calibrated probability of each score (float64, in [0, 1]): (calibration.8)."""
        scores = np.ascontiguousarray(scores, dtype=np.float64).reshape(-1)
        out = np.empty(len(scores), dtype=np.float64)
        _kernels.platt_probabilities(
            scores, self.theta, self.moments, self.labels, float(self.parameters[1]),
            SCORE_BOUND, STANDARD_BOUND, out,
        )  # fmt: skip
        return out

    def get_state(self) -> dict[str, np.ndarray]:
        return {key: getattr(self, key).copy() for key in self._KEYS}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> OnlineCalibrator:
        """Rebuild from :meth:`get_state`; :class:`~core.errors.InvalidState` names the array
        at fault (checked by value before any kernel reads it)."""
        expected = {
            "parameters": (2, np.float64),
            "theta": (2, np.float64),
            "curvature": (3, np.float64),
            "moments": (3, np.float64),
            "counters": (1, np.int64),
            "labels": (2, np.int64),
        }
        calibrator = cls.__new__(cls)
        for key, (size, dtype) in expected.items():
            if key not in state:
                raise InvalidState(f"calibrator state has no {key!r}", field=key)
            value = np.asarray(state[key])
            if value.shape != (size,) or value.dtype != dtype:
                raise InvalidState(
                    f"calibrator array {key!r} has dtype {value.dtype} and shape "
                    f"{value.shape}; expected {np.dtype(dtype)} and ({size},)",
                    field=key,
                )
            setattr(calibrator, key, np.array(value, copy=True))
        decay, prior_strength = (float(value) for value in calibrator.parameters)
        if not (
            np.isfinite(decay)
            and 0.0 <= decay < 1.0
            and np.isfinite(prior_strength)
            and 0.0 <= prior_strength <= MAX_PRIOR_STRENGTH
        ):
            raise InvalidState("calibrator array 'parameters' holds impossible values",
                               field="parameters")  # fmt: skip
        memory = 1.0 / (1.0 - decay)
        h_ss, h_s1, h_11 = calibrator.curvature
        # the largest values the update can reach (sums over the memory of bounded terms)
        curvature_bound = (PRIOR_CURVATURE + 0.25 * STANDARD_BOUND**2 * memory) * (1.0 + 1e-9)
        squares_bound = 4.0 * SCORE_BOUND**2 * memory * (1.0 + 1e-9)
        checks = {
            "theta": bool(np.isfinite(calibrator.theta).all())
            and bool((np.abs(calibrator.theta) <= THETA_BOUND).all()),
            # a discounted sum of weighted outer products: finite and positive semi-definite
            # (up to rounding)
            "curvature": bool(np.isfinite(calibrator.curvature).all())
            and 0.0 <= h_ss <= curvature_bound
            and 0.0 <= h_11 <= curvature_bound
            and abs(h_s1) <= curvature_bound
            and h_s1 * h_s1 <= h_ss * h_11 * (1.0 + 1e-9) + 1e-300,
            # weight <= memory (a discounted count), a mean of clipped scores, squares >= 0
            "moments": bool(np.isfinite(calibrator.moments).all())
            and 0.0 <= calibrator.moments[0] * (1.0 - decay) <= 1.0 + 1e-9
            and abs(calibrator.moments[1]) <= SCORE_BOUND
            and 0.0 <= calibrator.moments[2] <= squares_bound,
            "counters": 0 <= calibrator.counters[0] <= MAX_COUNT,
            # every event fed is a negative or a positive
            "labels": bool((calibrator.labels >= 0).all())
            and sum(int(count) for count in calibrator.labels) == int(calibrator.counters[0]),
        }
        for key, ok in checks.items():
            if not ok:
                raise InvalidState(f"calibrator array {key!r} holds impossible values",
                                   field=key)  # fmt: skip
        return calibrator
