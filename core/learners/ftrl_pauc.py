"""FTRL-pAUC: follow-the-regularised-leader on the pAUC hinge surrogate (Kar et al. §3), for a
stream: the prefix is kept as per-class reservoir samples.

Equations and errata: docs/algorithms/ftrl_pauc.md.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from core._arrays import LABELS, grown
from core._kernels import ftrl_pauc as kernels
from core.errors import InvalidParameter, InvalidState
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
from core.learners._growing import Growth
from core.learners._kept_params import KEPT, KeptParams
from core.learners._params import FPR_HIGH, FPR_LOW, Interval
from core.learners._state import Count, Grown, OneOf
from core.validation import check_fpr_range

#: the state arrays :func:`core._kernels.ftrl_pauc.ftrl_learn` takes, in its order, read in one
#: C call (~1 us less an event than thirteen lookups)
_KERNEL_ARRAYS = operator.itemgetter(
    "w", "n_solver_steps", "n_updates", "since_update", "positive_X", "positive_fill",
    "positive_seen", "negative_X", "negative_fill", "negative_seen", "negative_admitted",
    "admission_quantile", "rng_state",
)  # fmt: skip


class FTRLpAUCParams(NamedTuple):
    """The scalars :func:`core._kernels.ftrl_pauc.ftrl_learn` takes after its arrays, in its
    order, kept (:mod:`core.learners._kept_params`)."""

    alpha: float
    beta: float
    lam: float
    eta0: float
    min_norm: float
    update_every: int
    first_update_every: int  # at most update_every
    inner_steps: int
    admission_level: float
    auc_weight: float
    half_life: float  # 0.0: none
    positive_capacity: int
    negative_capacity: int


@register
class FTRLpAUC(KeptParams, HalfLife, WeightVectorLearner):
    """FTRL for the partial AUC on reservoir samples of the stream (Kar et al. 2014, §3).

    FTRL plays ``w_{t+1} = argmin_w l_pAUC(x_{1:t}, y_{1:t}, w) + eta/2 ||w||^2`` (Kar et al.,
    eq. (FTRL)): an L2-regularised batch problem over the whole prefix, solved again after each
    batch of ``s`` events (batched FTRL, §3.2).  A stream cannot keep its prefix, so this
    learner approximates it ([CHOICE], docs/algorithms/ftrl_pauc.md):

    1. **Prefix sample.**  Positives go to a reservoir of ``positive_capacity`` rows, negatives
       to one of ``negative_capacity`` rows (Vitter's Algorithm R: each is a uniform sample of
       what was offered, and the rare class is kept in full until it exceeds its cap).
    2. **Which negatives matter.**  By default (``admission=None``) every negative is offered
       to its reservoir, which is then a uniform sample of the prefix's negatives, and the
       top ``beta`` of the reservoir under the current ``w`` stands for the prefix's top
       ``beta``.  With a number, only the high-scoring negatives are offered: a quantile
       tracker (stochastic approximation, in the state) follows the score exceeded by a
       fraction ``min(1, admission * beta)`` of the negatives; a negative whose pre-update
       score is below it is not offered.  The reservoir then samples the high-scoring region
       ``1 / (admission beta)`` times more densely, and its top ``beta * seen / admitted``
       fraction stands for the prefix's top ``beta`` (the counts are exact;
       ``admission >= 1 / beta`` admits every negative).  The approximation: a negative
       rejected while ``w`` scored it low is missed if a later ``w`` would rank it high.
    3. **Regularised objective.**  [CHOICE] The prefix loss is normalised per pair (by
       ``n_+ (j_beta - j_alpha)``, as in Kar et al. Thm 7) and the regulariser scaled with it,
       ``F_t(w) = R_tight(alpha,beta)(w; reservoirs) + lam/2 ||w||^2`` — i.e. FTRL with
       ``eta_t = lam n_+ (j_beta - j_alpha)``; its minimiser is SVM_pAUC's with ``C = 1/lam``
       on the sample, which is the comparator of :mod:`core.regret`.  [CHOICE] By default the
       pairwise AUC hinge over all reservoir negatives is added with weight ``auc_weight``
       (see there); ``auc_weight=0`` is the objective just described.
    4. **Warm-started solver.**  Every ``update_every`` events (more often at first, see
       ``first_update_every``), ``inner_steps`` projected
       subgradient steps (step ``eta0 / (1 + eta0 lam k)``, ``k`` counted over the whole
       stream) from the current ``w`` with the exact subgradient of ``F_t`` on the reservoirs
       (sort + prefix sums, O((P + N) d + N log N) per step).  The top-beta negatives are
       re-chosen by the scores of every inner iterate, i.e. the steps are subgradient steps of
       the convex surrogate itself (Danskin; docs/algorithms/ftrl_pauc.md (ftrl_pauc.5)).
    5. **W and the minimum-norm safeguard.**  [CHOICE] Each step is projected onto
       ``W = {min_norm <= ||w|| <= sqrt(2/lam)}`` (Euclidean projection: rescale ``w`` when its
       norm leaves that range).  The outer radius is Pegasos' (it holds the minimiser, since
       ``F_t(0) = 1``).  The inner one exists because of the degenerate case below: when the
       surrogate is minimised at ``w = 0``, FTRL converges to the scorer that ties every event,
       and its iterates hover around 0 with a direction left to subgradient noise.  pAUC does
       not depend on the scale of ``w``, so excluding the ball of radius ``min_norm`` excludes no
       ranking except that all-tie one (ftrl_pauc.6): w = 0 ties every score.
       On the sphere ``||w|| = min_norm``, with ``min_norm`` well inside the hinge's margin on
       standardised features (scores spread by about ``min_norm``), the surrogate is
       ``1 - min_norm (mean positive score - mean top-beta negative score)`` to first order, so
       the iterate turns towards the direction that maximises that gap — a pAUC criterion —
       instead of towards 0.  Where the surrogate's minimiser has a norm above ``min_norm``
       (every other data set of ``bench/quality.py``: their results did not change in the
       fourth decimal) the safeguard stays idle once ``w`` has grown past it, and the learner
       is plain FTRL on the convex ``W`` of Kar et al.  W is not convex: Kar et al.'s regret
       argument (strong convexity of the FTRL objective over a convex W) does not cover the
       steps taken while the safeguard is active.

    Parameters
    ----------
    beta, alpha : float
        FPR range ``0 <= alpha < beta <= 1`` (Kar et al. use [0, beta]; alpha > 0 uses the
        tight surrogate of Narasimhan & Agarwal).
    lam : float
        Regularisation ``lam`` of ``F_t`` (= ``1 / C`` of ``svm_pauc``).  Default 0.1.
    eta0 : float
        First step length of the solver (same scale as ``pmb``'s ``eta``).  Default 0.5.
    min_norm : float
        Inner radius of ``W`` (item 5); 0 turns the safeguard off (W is then Pegasos' ball).
        Must be below ``sqrt(2 / lam)``.  [CHOICE] Default 0.25: on ``bench/quality.py``
        (5 seeds) 0.1, 0.25 and 0.5 gave held-out pAUC(0, 0.1) 0.340, 0.342 and 0.339 on
        ``rare_1pct`` (0.246 without the safeguard; LibAUC's SOPA one epoch 0.328, logistic
        regression 0.338) and left breast_cancer, digits_odd and wide_dense unchanged to four
        decimals; 1 and 2 (tried with one projection per solver round) started to cost pAUC on
        wide_dense (0.332, 0.287 against 0.345).
    update_every : int
        ``s``: solver steps after every ``s`` events.  Default 500.
    first_update_every : int
        [CHOICE] The first update comes after this many events and the interval doubles with
        each update up to ``update_every`` (16, 32, ..., 256, 500 by default), so that a short
        stream is learned at all and the small early reservoirs are revisited often.
    inner_steps : int
        Solver steps per update once the reservoirs are full; while they fill, an update takes
        ``inner_steps * capacity / fill`` steps (at most 10x), i.e. about constant work
        ([CHOICE]: short streams converge much better at no cost in steady state).
        [CHOICE] Default 20: with 5 the iterate stayed far from the FTRL minimiser it stands
        for (held-out pAUC(0, 0.1) 0.490 / 0.500 raw / standardised on the 14 sets of
        ``admission``, 0.501 / 0.502 with 20, 0.507 / 0.506 with 50 at 2.5 times the cost of
        20; satimage alone 0.03 with 5 steps, 0.15 with 50).
    auc_weight : float
        ``mu``: [CHOICE] the solver minimises ``F_t(w) + mu R(0,1)(w; reservoirs)``, the same
        normalised hinge surrogate over every reservoir negative (the pairwise AUC hinge) added
        with weight ``mu`` to the pAUC term; 0 is Kar et al.'s objective.  Why: the [0, beta]
        surrogate alone ranks the bulk of the negatives by chance and, on weakly separated
        data, is minimised near ``w = 0`` (Notes), so one pass lost 0.04 held-out AUC to batch
        logistic regression on ``bench/quality.py`` (32 sets, 3 seeds; haberman 0.41, kc1 0.56
        against 0.71 and 0.80).  The all-pairs term gives the solver a direction everywhere
        and the pAUC term keeps the top of the ranking weighted.  Grid (mean held-out AUC /
        pAUC(0, 0.1), raw / standardised): mu = 0: 0.848 / 0.564, 0.848 / 0.560; 0.5:
        0.869 / 0.563, 0.867 / 0.564; 1: 0.874 / 0.567, 0.872 / 0.566; 3: 0.882 / 0.572,
        0.882 / 0.573; 10: 0.884 / 0.573, 0.885 / 0.576; 30: 0.884 / 0.575, 0.886 / 0.578
        (batch LR 0.888 / 0.585).  Default 10 (30 is not better on AUC; lam 0.03 or 0.3
        with mu = 10 gave 0.883 / 0.883 AUC).  Cost: a second set of coefficients from the
        same sort and a second gradient in the same pass over the reservoirs per solver step
        (learning about 1.3 times slower than with mu = 0 at the defaults).
    half_life : float or None, default None
        Forget the stream's past (docs/algorithms/ftrl_pauc.md (ftrl_pauc.8)-(ftrl_pauc.9)),
        for streams that change: both reservoirs are Aggarwal's biased reservoirs, which keep
        the events of about the last ``half_life`` events preferentially (the prefix the solver
        fits becomes a recent window), and the solver's step stops shrinking after the solver
        steps of one half-life.  None: uniform reservoirs of the whole prefix.
    positive_capacity, negative_capacity : int
        Reservoir sizes (defaults 1000 and 2000: the negative reservoir holds the admitted
        high-scoring negatives, the positive one the whole rare class of most windows).
    admission : float or None
        None (default): every negative is offered to the reservoir.  A number ``>= 1``:
        only negatives above the tracked ``(1 - admission * beta)`` score quantile are
        (item 2).  [CHOICE] None since the real-data comparison of ``bench/tune_defaults.py``
        (14 sets with at most 10 % positives, 3 seeds, ``inner_steps=20``): held-out
        pAUC(0, 0.1) 0.501 / 0.502 (raw / standardised features) against 0.483 / 0.500 with
        ``admission=2``; with online scaling the filter judged negatives by scores of a ``w``
        fitted to other feature scales, and on short streams by an early ``w`` that later
        turned (on synthetic 1 %-positive streams of 100,000 events ``admission=2`` gains
        0.01 to 0.03).
    scaling, max_iter, shuffle, random_state
        As for every learner (``random_state`` seeds the reservoirs).

    Notes
    -----
    Limitation of the surrogate (not of the solver): at small ``||w||`` the hinge surrogate is
    ``1 - (mean positive score - mean top-beta negative score)``, so when no direction puts the
    positives' mean above the top-beta negatives' mean, its minimiser is ``w = 0`` (all scores
    tie; e.g. Gaussian classes whose means differ by less than about 1.75 standard deviations at
    beta = 0.1).  ``svm_pauc`` returns 0 there; ``pmb`` escapes by stopping early (averaged
    iterates), this learner by the minimum-norm safeguard (item 5).  On ``bench/quality.py``'s
    ``rare_1pct`` (5 seeds, held-out pAUC(0, 0.1)): svm_pauc 0.07; ftrl_pauc 0.25 without the
    safeguard, 0.34 with it; pmb 0.34; LibAUC SOPA / SOPAs one epoch 0.33; logistic regression
    0.34.  Rejected alternatives, same benchmark: fixing the top-beta negatives from ``w_t``
    for a whole solver round (a DC-style linearisation: for a fixed set the convex pairwise
    hinge is not minimised at 0, but its minimiser points away from the direction that chose
    the set, so the rounds flip between the two tails) changed nothing on rare_1pct (0.245) and
    cost 0.10 on digits_odd; serving the average of the iterates (Kar et al. Thm 4) reached
    0.33 on rare_1pct but cost 0.01 to 0.10 elsewhere.

    Amortised cost per event: O(d) to score and buffer it plus
    ``inner_steps * ((P + N) d + N log N) / update_every`` for the solver.  Memory:
    ``(P + N) x n_features`` dense rows (sparse input is read row by row into them; more than
    2**27 buffered floats is refused with a ValueError).  Inside ``auto``, while the
    reservoirs are the stream's prefix and auto's pool holds it, one byte per event
    (``prefix_labels``) instead (:meth:`keep_rows`; docs/algorithms/ftrl_pauc.md).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random(20000) < 0.05).astype(int)
    >>> X = rng.normal(size=(20000, 5)) + y[:, None] * np.array([2.0, 1.0, 0.0, 0.0, 0.0])
    >>> model = FTRLpAUC().partial_fit(X, y)
    >>> int(model.state_["n_updates"][0])  # after 16, 32, .., 256 events, then every 500
    44
    >>> bool(model.coef_[0] > model.coef_[1] > abs(model.coef_[2]))
    True
    """

    name = "ftrl_pauc"
    optimises_pauc = True
    draws_random = True  # its reservoirs

    beta: float = 0.1
    alpha: float = 0.0
    lam: float = 0.1
    eta0: float = 0.5
    min_norm: float = 0.25
    update_every: int = 500
    first_update_every: int = 16
    inner_steps: int = 20
    positive_capacity: int = 1000
    negative_capacity: int = 2000
    admission: float | None = None
    auc_weight: float = 10.0

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "beta": [FPR_HIGH],
        "alpha": [FPR_LOW],
        "lam": [Interval(float, 0, None, closed="neither")],
        "eta0": [Interval(float, 0, None, closed="neither")],
        "min_norm": [Interval(float, 0, None, closed="left")],
        "update_every": [Interval(int, 1, None)],
        "first_update_every": [Interval(int, 1, None)],
        "inner_steps": [Interval(int, 1, None)],
        "positive_capacity": [Interval(int, 1, None)],
        "negative_capacity": [Interval(int, 1, None)],
        "admission": [None, Interval(float, 1, None, closed="left")],
        "auc_weight": [Interval(float, 0, None, closed="left")],
        "half_life": HALF_LIFE,
    }

    def _check_params(self) -> None:
        check_fpr_range(self.alpha, self.beta)
        if not self.min_norm < np.sqrt(2.0 / self.lam):
            raise InvalidParameter(
                f"Expected min_norm < sqrt(2 / lam) = {np.sqrt(2.0 / self.lam):.6g} (the radius "
                f"of W), got: min_norm={self.min_norm!r}",
                param="min_norm",
            )

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        check_buffer_size("ftrl_pauc", self.positive_capacity + self.negative_capacity, n_features)

        def counter():
            return np.zeros(1, dtype=np.int64)

        return {
            "w": np.zeros(n_features),
            "n_solver_steps": counter(),
            "n_updates": counter(),
            "since_update": counter(),
            # no rows yet: the reservoirs grow as they fill (_learn); a biased reservoir
            # (half_life) may insert below its fill at any time, so it is allocated whole
            **row_reservoir("positive", self._initial_rows(self.positive_capacity), n_features),
            **row_reservoir("negative", self._initial_rows(self.negative_capacity), n_features),
            "negative_admitted": counter(),
            # [q, scale] of the tracked (1 - admission beta) quantile of negative scores
            "admission_quantile": np.zeros(2),
            # inside auto, while the reservoirs hold the stream's prefix: its events' labels
            # (1: positive, 0: negative; zeros after them), whose rows are auto's pool's,
            # replayed (core.learners._row_pool)
            "prefix_labels": np.zeros(0, dtype=LABELS),
        }

    def _state_invariants(self, n_features: int) -> dict:
        return {
            "w": Grown(),
            "n_solver_steps": Count(),
            "n_updates": Count(),
            # reset to 0 once it reaches the update interval, at most update_every
            "since_update": Count(0, self.update_every - 1),
            **row_reservoir_invariants("positive", self.positive_capacity, self.half_life),
            # only the admitted negatives are offered to the reservoir
            **row_reservoir_invariants(
                "negative", self.negative_capacity, self.half_life, offered="negative_admitted"
            ),
            # admitted negatives are some of those seen (the solver divides by their number)
            "negative_admitted": Count(0, "negative_seen"),
            "admission_quantile": Grown(),
            "prefix_labels": OneOf((0, 1)),
        }

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        # auto gives its candidate's checks its rows' view, without the labels; alone (a state
        # given to validate_state, not from_state's fixed shape) none may be there
        if len(state["prefix_labels"]):
            raise InvalidState(
                "state array 'prefix_labels' holds labels of rows kept elsewhere; only an auto "
                "candidate keeps them (its pool holds the rows)",
                field="prefix_labels",
            )
        for prefix in ("positive", "negative"):
            fill, rows = int(state[f"{prefix}_fill"][0]), state[f"{prefix}_X"].shape[0]
            if fill > rows:
                raise InvalidState(
                    f"state array '{prefix}_fill' holds {fill}; '{prefix}_X' has {rows} rows",
                    field=f"{prefix}_fill",
                )
        scale = float(state["admission_quantile"][1])
        if scale < 0.0:  # a running mean of |score - q|
            raise InvalidState(
                f"state array 'admission_quantile' holds the scale {scale!r}; expected >= 0",
                field="admission_quantile",
            )

    def _initial_rows(self, capacity: int) -> int:
        return 0 if self.half_life is None else int(capacity)

    def _growing_arrays(self) -> dict[str, Growth]:
        if self.half_life is not None:
            return {}
        growing: dict[str, Growth] = {
            "positive_X": (0, int(self.positive_capacity)),
            "negative_X": (0, int(self.negative_capacity)),
        }
        if self.__dict__.get("_prefix_link") is not None:
            # only auto's candidate keeps labels; alone the array stays empty (its length 0 is
            # checked as any fixed shape)
            growing["prefix_labels"] = (0, int(self.positive_capacity + self.negative_capacity))
        return growing

    @property
    def replays_prefix(self) -> bool:
        """Whether the reservoirs are the stream's prefix until one is full: uniform
        reservoirs (no forgetting) offered every event (no admission)."""
        return self.half_life is None and self.admission is None

    def _build_kernel_params(self) -> FTRLpAUCParams:
        return FTRLpAUCParams(
            float(self.alpha), float(self.beta), float(self.lam), float(self.eta0),
            float(self.min_norm), int(self.update_every),
            int(min(self.first_update_every, self.update_every)), int(self.inner_steps),
            self._admission_level(), float(self.auc_weight), half_life_arg(self.half_life),
            int(self.positive_capacity), int(self.negative_capacity),
        )  # fmt: skip

    def _learn(self, X, y, scores) -> None:
        state = self.state_
        if self.__dict__.get("_prefix_link") is not None and self._replaying(state, y):
            self._learn_replayed(X, y, scores, y > 0)
            return
        # the reservoirs grow as they fill: the slots this batch's offers can reach (a slot is
        # at most the fill); reservoirs at their capacity are left unread (~2 us of numpy an
        # event once both are full, most of a stream)
        kept: FTRLpAUCParams = self.__dict__.get(KEPT) or self._kernel_params()
        if self.half_life is None and not self._reservoirs_full(state, kept):
            positives = int(np.count_nonzero(y > 0))
            for rows, fill, offers, capacity in (
                ("positive_X", "positive_fill", positives, kept.positive_capacity),
                ("negative_X", "negative_fill", len(y) - positives, kept.negative_capacity),
            ):
                needed, reservoir = int(state[fill][0]) + offers, state[rows]
                if min(needed, capacity) > reservoir.shape[0]:  # grown's own test, inline
                    state[rows] = grown(reservoir, needed, capacity)
        self._kernel_learn(X, y, scores, _KERNEL_ARRAYS(state), keep_rows=True)

    def _kernel_learn(self, X, y, scores, arrays: tuple, keep_rows: bool) -> None:
        kept = self.__dict__.get(KEPT) or self._kernel_params()
        kernels.ftrl_learn(*event_arrays(X), y, scores, *arrays, *kept, keep_rows)

    # ------------------------------------------------------------------ inside auto
    # While auto's pool holds every event from the first and the reservoirs hold every event
    # (neither full yet), the reservoirs' rows are auto's scaled rows of the events so far, in
    # order, split by label: kept as the labels alone, and the rows rebuilt by replaying
    # auto's scaler over the pool (core.learners._row_pool.PrefixLink) only for a batch in
    # which a solver update is due.  The same rows, so the same bits, at ~33 KB less a cached
    # model of 400 events of 10 features (loadtest/README.md, "RS: ...").
    def _replaying(self, state: dict[str, np.ndarray], y: np.ndarray) -> bool:
        """Whether the batch (its labels: ``y``) is learned with the rows replayed; keeps the
        rows first (:meth:`keep_rows`) if it would fill a reservoir past its capacity."""
        fills = state["positive_fill"].item(), state["negative_fill"].item()
        if not len(state["prefix_labels"]):  # it keeps its rows, or has learned no event yet
            if fills != (0, 0) or not self.__dict__["_prefix_link"].anchored():
                return False
        n = len(y)
        if fills[0] + n > self.positive_capacity or fills[1] + n > self.negative_capacity:
            positives = int(np.count_nonzero(y > 0))
            if (fills[0] + positives > self.positive_capacity
                    or fills[1] + n - positives > self.negative_capacity):  # fmt: skip
                self.keep_rows()
                return False
        return True

    def _learn_replayed(self, X, y, scores, positive: np.ndarray) -> None:
        state = self.state_
        events = state["positive_fill"].item() + state["negative_fill"].item()
        # pauc_buffers.doubling_interval's value (a kernel called from Python costs ~30 us)
        kept: FTRLpAUCParams = self.__dict__.get(KEPT) or self._kernel_params()
        first, every = kept.first_update_every, kept.update_every
        interval = min(every, first << min(state["n_updates"].item(), 63))
        arrays = _KERNEL_ARRAYS(state)
        due = state["since_update"].item() + len(y) >= interval
        if due:  # the solver reads the rows: rebuilt for this call, dropped after it
            rows, labels = self._prefix_rows(events), state["prefix_labels"][:events]
            positives = int(np.count_nonzero(positive))
            arrays = (*arrays[:4], _room_for(rows[labels == 1], positives), *arrays[5:7],
                      _room_for(rows[labels == 0], len(y) - positives), *arrays[8:])  # fmt: skip
        self._kernel_learn(X, y, scores, arrays, keep_rows=due)
        capacity = int(self.positive_capacity + self.negative_capacity)
        labels = grown(state["prefix_labels"], events + len(y), capacity)
        labels[events : events + len(y)] = positive
        state["prefix_labels"] = labels

    def _prefix_rows(self, events: int) -> np.ndarray:
        return self.__dict__["_prefix_link"].scaled(events)

    def keep_rows(self) -> None:
        """Keep the reservoirs' rows from now on (auto's pool is about to drop the first
        events, or a reservoir to replace a row): rebuilt from the pool, the labels dropped."""
        state = self.state_
        labels = state["prefix_labels"]
        if not len(labels):
            return
        events = int(state["positive_fill"][0]) + int(state["negative_fill"][0])
        rows, labels = self._prefix_rows(events), labels[:events]
        for prefix, chosen, capacity in (
            ("positive", labels == 1, self.positive_capacity),
            ("negative", labels == 0, self.negative_capacity),
        ):
            fill = int(state[f"{prefix}_fill"][0])
            kept = grown(state[f"{prefix}_X"][:0], fill, int(capacity))
            kept[:fill] = rows[chosen]
            state[f"{prefix}_X"] = kept
        state["prefix_labels"] = state["prefix_labels"][:0].copy()

    @staticmethod
    def _reservoirs_full(state: dict[str, np.ndarray], kept: FTRLpAUCParams) -> bool:
        """Whether both reservoirs have all their slots (none grows any more)."""
        return (
            state["positive_X"].shape[0] >= kept.positive_capacity
            and state["negative_X"].shape[0] >= kept.negative_capacity
        )

    def _admission_level(self) -> float:
        """The fraction of negatives the quantile tracker admits (1: all, no tracking)."""
        if self.admission is None:
            return 1.0
        return float(min(1.0, self.admission * self.beta))

    def _decision(self, X) -> np.ndarray:
        # the FTRL iterate w_t is served as is (coef_): FTRL's iterates are stable (Kar et al.
        # Lemma 10) and averaging them was no better in bench/quality.py
        return kernels.decision(*event_arrays(X), self.state_["w"])


def _room_for(rows: np.ndarray, more: int) -> np.ndarray:
    """``rows`` followed by ``more`` zero rows (the slots a batch's offers write)."""
    room = np.zeros((len(rows) + more, rows.shape[1]))
    room[: len(rows)] = rows
    return room
