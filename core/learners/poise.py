"""POISE: pAUC Optimization In Supervised Experiments (Rao & Acharyya, 2020), the pAUC game.

Equations, choices and errata: docs/algorithms/poise.md (poise.1)-(poise.7), (poise.11)-(poise.12).
"""

from __future__ import annotations

import numpy as np

from core._kernels import poise as kernels
from core._kernels.pauc_buffers import decision
from core.learners import register
from core.learners._base import OnlineLearner, WeightVectorLearner
from core.learners._event_rows import check_buffer_size, event_arrays
from core.learners._forgetting import (
    HALF_LIFE,
    HalfLife,
    half_life_arg,
    row_reservoir,
    row_reservoir_invariants,
)
from core.learners._params import BOOLEAN, FPR_RANGE, Interval
from core.learners._state import Count, Grown
from core.validation import check_fpr_range

__all__ = ["POISE", "reservoir_size"]


def reservoir_size(alpha: float, beta: float, sd_ratio: float, cap: int) -> int:
    """``m`` of (poise.4): the Beta order statistic ``k / (m + 1) = f`` has standard deviation
    ``sd_ratio * f`` for ``f`` the smaller non-zero bound of the range, so
    ``m = (1 - f) / (sd_ratio^2 f) - 2`` (rounded, at least 2, at most ``cap``).

    >>> reservoir_size(0.0, 0.1, 0.1, 10**6), reservoir_size(0.02, 0.05, 0.1, 10**6)
    (898, 4898)
    """
    fraction = alpha if alpha > 0 else beta
    spread = sd_ratio**2 * fraction
    if spread == 0.0:  # a subnormal bound: the formula's size is beyond any cap
        return int(cap)
    size = (1.0 - fraction) / spread - 2.0
    return int(cap) if size >= cap else int(max(round(size), 2))


@register
class POISE(HalfLife, WeightVectorLearner):
    """pAUC over FPR ``[alpha, beta]`` as a game against an adversary who picks the
    highest-scoring negatives; Pegasos steps on the hinge of those negatives against the
    positives (Rao & Acharyya, §5, Algorithm 1 as corrected in docs/algorithms/poise.md).

    Per negative event ``x``: its score is compared with order statistics of a reservoir of
    earlier negatives (scores cached and refreshed after every step): if it is strictly above
    the estimated top-``beta`` threshold (and, for ``alpha > 0``, not above the top-``alpha``
    one), one Pegasos step is taken on ``(1/P) sum_j max(0, 1 - w.(p_j - x))`` over the ``P``
    buffered positives.  With ``auc_weight`` > 0 every other negative takes a smaller step on
    the same hinge against a few positives drawn from the reservoir (the all-negatives term of
    docs/algorithms/poise.md (poise.14)-(poise.15)).  Positives only join their reservoir (they
    are rare).  O((1 + auc_positives) d) per event outside the adversary's set; O((P + m) d)
    per adversary step.

    Parameters
    ----------
    alpha, beta : float, default 0.0, 0.1
        FPR range ``0 <= alpha < beta <= 1`` (a model's ``pauc_range`` sets them).
    lam : float, default 0.3
        Pegasos' L2 weight: steps ``eta_t = 1 / (lam t)`` with the shrink ``1 - eta_t lam``.
        [CHOICE] 0.3: on a 5 %-positive, 20-feature Gaussian stream held-out pAUC(0, 0.1) was
        0.38 / 0.45 / 0.50 / 0.53 / 0.54 (one pass) for lam = 1e-3 / 1e-2 / 0.1 / 0.3 / 1;
        batch logistic regression 0.55.  The paper gives no value.
    project : bool, default True
        Project onto Pegasos' ball ``||w|| <= 1 / sqrt(lam)`` after each step.
    sd_ratio : float, default 0.1
        Standard deviation of the threshold's quantile, relative to the fraction (the paper's
        ``sigma = alpha / 10``); sets the reservoir size (``reservoir_size``).
    max_negatives : int, default 10000
        Cap on the reservoir of negatives (``beta = 0.01`` asks for 9898).
    positive_capacity : int, default 1000
        [CHOICE] The stream keeps a uniform reservoir of this many positives for the hinge
        (the paper uses every positive of the training set).
    auc_weight : float, default 30.0
        Weight of the pairwise hinge over *every* negative (FPR range [0, 1]) added to the
        pAUC surrogate, as ``ftrl_pauc`` and ``pmb`` have it (poise.14); 0 is the paper's
        game.  [CHOICE] 30: the game steps only on the ~``beta`` share of negatives the
        adversary picks, too few in one pass over a short stream, and driven by the outlying
        negatives of heavy-tailed features; over the 32 real-data sets held-out AUC rose from
        0.853 to 0.884 and pAUC(0, 0.1) from 0.551 to 0.567 (standardised, 5 seeds; batch
        logistic regression 0.887; 10 gave 0.881; bench/README.md, "POISE's all-negatives
        term").
    auc_positives : int, default 8
        Positives drawn (uniformly, with replacement) from the reservoir for the hinge of a
        step on the all-negatives term alone (poise.15): O(auc_positives d) instead of
        O(P d) per negative.
    average : bool, default True
        Serve the averaged iterate (docs/algorithms/poise.md (poise.13)): after step ``k``,
        ``w_avg += 2 / (k + 1) (w - w_avg)``, while the game (the adversary's threshold, the
        hinge) plays the last iterate ``w``.  [CHOICE] Pegasos' last iterate swings with the
        few negatives that trigger a step: on phoneme (5 features, 29 % positives) the
        held-out AUC of the last iterate over five shuffles was 0.63 +- 0.15, of the average
        0.80 +- 0.01.  False serves ``w`` (the paper's model).
    half_life : float or None, default None
        Forget the stream's past (docs/algorithms/poise.md (poise.11)-(poise.12)), for streams
        that change: both reservoirs become biased towards the last ``half_life`` events and
        the Pegasos step stops shrinking after about ``half_life`` events.  None: uniform
        reservoirs of the whole history, steps ``1 / (lam t)`` for ever.  About 3000 suits
        POISE: on an abrupt change of a 7 %-positive stream it recovered (within 0.03 AUC) in
        9,500 events at 3000 and 13,000 at 5000, at no cost on the stable real-data suite
        (bench/README.md, "Drifting streams" and "POISE's all-negatives term").
    scaling : {"none", "unit_norm", "standard", "scale"}
        Online feature scaling applied before learning (:mod:`core.preprocessing`).
    max_iter : int, default 5
        Passes over the data made by :meth:`fit`.
    shuffle : bool, default True
        Reshuffle the data before each pass of :meth:`fit` (the notes' suggestion).
    random_state : int or None
        Seed of the initial weights and the reservoirs (None: 0).

    Notes
    -----
    [CHOICE] Initial weights ``U(-1, 1) / sqrt(d)`` (the paper's uniform start, scaled so the
    initial scores do not grow with ``d``): with ``w = 0`` every score ties the threshold and
    the strict comparison would never fire.  The served model is the averaged iterate
    (``average``); ``w_avg`` starts at the same point.
    """

    name = "poise"
    optimises_pauc = True
    draws_random = True  # its reservoirs, and the positives an AUC step draws

    alpha: float = 0.0
    beta: float = 0.1
    lam: float = 0.3
    project: bool = True
    sd_ratio: float = 0.1
    max_negatives: int = 10000
    positive_capacity: int = 1000
    auc_weight: float = 30.0
    auc_positives: int = 8
    average: bool = True
    max_iter = 5

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        **FPR_RANGE,
        "lam": [Interval(float, 0, None, closed="neither")],
        "project": [BOOLEAN],
        "sd_ratio": [Interval(float, 0, 1, closed="right")],
        "max_negatives": [Interval(int, 2, None)],
        "positive_capacity": [Interval(int, 1, None)],
        "auc_weight": [Interval(float, 0, None, closed="left")],
        "auc_positives": [Interval(int, 1, None)],
        "average": [BOOLEAN],
        "half_life": HALF_LIFE,
    }

    def _check_params(self) -> None:
        check_fpr_range(self.alpha, self.beta)

    @property
    def n_negatives(self) -> int:
        """The size of the reservoir of negatives (poise.4)."""
        return reservoir_size(self.alpha, self.beta, self.sd_ratio, self.max_negatives)

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        size = self.n_negatives
        check_buffer_size("poise", size + self.positive_capacity, n_features)
        seed = 0 if self.random_state is None else int(self.random_state)
        start = np.random.default_rng(seed).uniform(-1.0, 1.0, n_features) / np.sqrt(n_features)
        return {
            "w": start,
            "w_avg": start.copy() if self.average else np.empty(0),
            **row_reservoir("pos", self.positive_capacity, n_features),
            **row_reservoir("adversary", size, n_features),
            "adversary_scores": np.zeros(size),
            "n_updates": np.zeros(1, dtype=np.int64),
            "auc_steps": np.zeros(1, dtype=np.int64),
        }

    def _state_invariants(self, n_features: int) -> dict:
        return {
            "w": Grown(),
            "w_avg": Grown(),
            **row_reservoir_invariants("pos", self.positive_capacity, self.half_life),
            **row_reservoir_invariants("adversary", self.n_negatives, self.half_life),
            "adversary_scores": Grown(),
            "n_updates": Count(0, "adversary_seen"),  # at most one step per negative
            "auc_steps": Count(0, "n_updates"),  # those on the all-negatives term alone
        }

    def _learn(self, X, y, scores) -> None:
        s = self.state_
        state = kernels.PoiseState(*(s[key] for key in kernels.PoiseState._fields))
        radius = 1.0 / np.sqrt(self.lam) if self.project else 0.0
        options = kernels.PoiseOptions(
            float(self.lam),
            float(radius),
            float(self.alpha),
            float(self.beta),
            half_life_arg(self.half_life),
            bool(self.average),
            float(self.auc_weight),
            int(self.auc_positives),
        )
        kernels.poise_learn(*event_arrays(X), y, scores, state, options)

    @property
    def _served_key(self) -> str:
        return "w_avg" if self.average else "w"

    def _decision(self, X) -> np.ndarray:
        return decision(*event_arrays(X), self.state_[self._served_key])
