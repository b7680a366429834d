"""1PMB and 2PMB: mini-batch subgradient descent on pAUC / Prec@k surrogates (Kar et al. §4).

Equations, errata and experiment settings: docs/algorithms/pmb.md.
"""

from __future__ import annotations

import numpy as np

from core._kernels import pmb as kernels
from core._kernels.pauc_buffers import doubling_interval
from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners import register
from core.learners._base import OnlineLearner
from core.learners._event_rows import event_arrays
from core.learners._forgetting import HALF_LIFE, HalfLife, half_life_arg, reservoir_fill
from core.learners._growing import Growth
from core.learners._params import FPR_HIGH, FPR_LOW, Interval, Options
from core.learners._row_store import (
    check_store,
    grow_stores,
    growing_store,
    store_invariants,
    store_state,
)
from core.learners._state import Count, Grown, OneOf
from core.preprocessing import scale_batch
from core.validation import check_batch, check_fpr_range

LOSSES = {"pauc": 0, "prec_at_k": 1, "prbep": 2}


#: the grown arrays, which change only when a step is taken
_WEIGHTS = frozenset(("w", "w_avg"))

#: the row stores (core.learners._row_store) in the order of the kernel's ``room``
_STORES = ("buffer", "positive")


@register
class PMB(HalfLife, OnlineLearner):
    """Mini-batch stochastic subgradient descent on a non-decomposable surrogate (1PMB / 2PMB).

    Kar, Narasimhan & Jain, "Online and Stochastic Gradient Methods for Non-decomposable Loss
    Functions", NIPS 2014, §4, Algorithms 1 and 2.  Events are collected in a buffer of
    ``buffer_size`` events; each full buffer ("epoch") takes one projected subgradient step on
    the surrogate computed on the buffer, and the served model is the average of the iterates
    (weighted by epoch length, which only matters for the short first epochs).

    Parameters
    ----------
    loss : {"pauc", "prec_at_k", "prbep"}
        ``"pauc"``: the pAUC hinge surrogate over FPR [alpha, beta] (Kar et al. eq. (5) with the
        hinge for alpha = 0; Narasimhan & Agarwal's tight surrogate for alpha > 0 — an extension
        [CHOICE], Kar et al. only treat [0, beta]).  ``"prec_at_k"``: the structural Prec@k
        surrogate (eq. (3)) with ``ceil(k s)`` top slots.  ``"prbep"``: the same with as many top
        slots as the buffer has positives (the paper's experiments).
    passes : {1, 2}
        1 = 1PMB (Algorithm 1).  2 = 2PMB (Algorithm 2), whose first pass collects a random
        sample of the positives (the rare class).  [CHOICE] Streaming interpretation: in
        ``partial_fit`` both passes run interleaved — each positive is offered to a reservoir
        ``B+`` of ``buffer_size`` positives (Vitter's Algorithm R, so ``B+`` is always a uniform
        sample of the positives seen so far, or all of them), each negative goes to the buffer
        ``B-``, and a full ``B-`` takes one step against the current ``B+`` (no step while
        ``B+`` is empty).  ``fit`` runs the paper's version: one pass that only fills ``B+``,
        then ``max_iter`` passes over the negatives with ``B+`` frozen.
    buffer_size : int
        ``s``, the epoch length and buffer size (500 in all of the paper's experiments).
        [CHOICE] Default 50: one pass takes one step per epoch, so ``s = 500`` takes a handful
        of steps on streams of a few thousand events.  Held-out AUC / pAUC(0, 0.1) after one
        pass over 29 real sets (``bench/tune_defaults.py``, 3 seeds, raw features with online
        standardisation): 0.807 / 0.445 with 500, 0.831 / 0.479 with 200, 0.841 / 0.495 with
        100, 0.852 / 0.498 with 50, 0.856 / 0.500 with 25 (standardised features: 0.855 / 0.496
        with 50, 0.855 / 0.493 with 25); 50 keeps five top negatives per buffer at
        ``beta = 0.1``.  With ``passes=2`` it is also the size of ``B+``: pass a larger one
        when positives are rare (at 2 % positives, 50 rows hold about one: held-out
        pAUC(0, 0.1) 0.392-0.443 over six seeds against 0.442-0.450 with 200 rows).
    beta, alpha : float
        FPR range of the pAUC surrogate, ``0 <= alpha < beta <= 1``; on a buffer with ``n_-``
        negatives the top ``ceil(beta n_-)`` negatives are used, the first ``floor(alpha n_-)``
        of them without margin (docs/algorithms/svm_pauc.md (svm_pauc.5)).
    k : float
        Fraction for ``"prec_at_k"``, in (0, 1].
    eta : float
        Step scale: step ``e = 1, 2, ...`` has length ``eta (s_e / s) / sqrt(e)`` with ``s_e`` the
        epoch's length (docs/algorithms/pmb.md (pmb.3), Errata: descent sign, 1-indexed epochs; the
        ``s_e / s`` factor only matters for the short first epochs).  [CHOICE] Default 0.5: on
        standardised synthetic streams every eta from 0.05 to 20 was within 0.01 pAUC(0, 0.1) of the
        others; the surrogate is normalised per pair (``1 / (s_+ (j_beta - j_alpha))``, resp. ``1 /
        K``) so that the step does not depend on the class balance of a buffer.
    radius : float
        ``W`` is the L2 ball of this radius (the paper leaves W open; its theory needs it
        bounded).  0 means unconstrained.  [CHOICE] Default 100.
    first_buffer_size : int
        [CHOICE] The first epoch collects only this many events and each step taken doubles
        the epoch length, up to ``buffer_size`` (16, 32, 50 by default), so a short
        stream (a few hundred events) already learns in one pass; equal to ``buffer_size``
        it gives the paper's constant epochs.
    auc_weight : float
        ``mu``, ``loss="pauc"`` only: [CHOICE] the step's subgradient is the pAUC surrogate's
        plus ``mu`` times that of the same normalised hinge over every negative of the buffer
        (FPR range [0, 1], the pairwise AUC hinge); 0 is Kar et al.'s objective.  With
        buffers of 50 events the [0, beta] term sees five negatives per step and nothing of
        the rest of the ranking.  Grid on ``bench/quality.py`` (32 sets, 3 seeds, held-out AUC
        / pAUC(0, 0.1), raw / standardised): mu = 0: 0.860 / 0.554, 0.859 / 0.549; 1:
        0.872 / 0.551, 0.870 / 0.555; 3: 0.869 / 0.545, 0.871 / 0.546; 10: 0.867 / 0.529,
        0.865 / 0.527 (eta 0.15 or 2 with mu = 1 or 3: no better).  Default 1.
    half_life : float or None, default None
        Forget the stream's past (docs/algorithms/pmb.md (pmb.7)-(pmb.9)), for streams that
        change: the step stops shrinking after ``half_life / buffer_size`` epochs, the served
        average weighs an iterate ``half_life`` events old half as much as the newest, and the
        positive reservoir of 2PMB is Aggarwal's biased reservoir.  None: the whole history.
    scaling, max_iter, shuffle, random_state
        As for every learner; ``max_iter`` passes in ``fit`` (the paper runs "multiple passes",
        the epoch counter keeps increasing across passes), ``random_state`` seeds the shuffles
        and the reservoir.

    Notes
    -----
    On weakly separated data the pAUC hinge surrogate over a narrow range is minimised at
    ``w = 0`` (see :class:`~core.learners.svm_pauc.SVMpAUC`, Notes); 1PMB/2PMB still return a
    useful direction there because the averaged iterates stop far from that minimiser (held-out
    pAUC(0, 0.1) 0.34 on ``bench/quality.py``'s ``rare_1pct``, like logistic regression, where
    the converged ``svm_pauc`` gets 0.07), but more passes drift towards it.

    Cost: O(d) per dense event to score and buffer it, O(its non-zeros) per sparse event
    (sorted into its row); per epoch O(s nnz + s log s) for the exact surrogate and
    subgradient (sort + prefix sums, docs/algorithms/pmb.md (pmb.1)) over the rows' entries,
    then O(d) for the step, the projection and the average, i.e. O(nnz + d / s + log s)
    amortised per event (2PMB's reservoir: O(nnz + its entries after the replaced row) per
    accepted positive).  Memory: the buffer and the positive reservoir keep each row's
    non-zeros only (CSR arrays, core.learners._row_store, grown as they fill): a hashed
    model's state is its two weight vectors and ~16 bytes per buffered non-zero, not
    ``buffer_size x n_features`` floats (104 MiB for 50 rows of 2**18); a dense row takes
    16 bytes per non-zero value, twice a dense array's 8.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random(4000) < 0.1).astype(int)
    >>> X = rng.normal(size=(4000, 5)) + y[:, None] * np.array([1.0, 0.5, 0.0, 0.0, 0.0])
    >>> model = PMB(loss="pauc", beta=0.1, buffer_size=200).partial_fit(X, y)
    >>> int(model.state_["n_steps"][0])  # epochs of 16, 32, 64, 128, then 200 events
    22
    >>> bool(model.coef_[0] > model.coef_[1] > abs(model.coef_[2]))
    True
    """

    name = "pmb"
    optimises_pauc = True
    draws_random = True  # 2PMB's reservoir of positives
    settles_grown_arrays = True

    loss: str = "pauc"
    passes: int = 1
    buffer_size: int = 50
    beta: float = 0.1
    alpha: float = 0.0
    k: float = 0.05
    eta: float = 0.5
    radius: float = 100.0
    first_buffer_size: int = 16
    auc_weight: float = 1.0
    max_iter = 10

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "loss": [Options(LOSSES)],
        "passes": [Options((1, 2))],
        "buffer_size": [Interval(int, 2, None)],
        "beta": [FPR_HIGH],
        "alpha": [FPR_LOW],
        "k": [Interval(float, 0, 1, closed="right")],
        "eta": [Interval(float, 0, None, closed="neither")],
        "radius": [Interval(float, 0, None, closed="left")],
        "first_buffer_size": [Interval(int, 2, None)],
        "auc_weight": [Interval(float, 0, None, closed="left")],
        "half_life": HALF_LIFE,
    }

    def _check_params(self) -> None:
        check_fpr_range(self.alpha, self.beta)

    def _positive_rows(self) -> int:
        return self.buffer_size if self.passes == 2 else 0

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        return {
            "w": np.zeros(n_features),
            "w_avg": np.zeros(n_features),
            "n_steps": np.zeros(1, dtype=np.int64),
            "averaged_events": np.zeros(1, dtype=np.int64),
            **store_state("buffer", self.buffer_size),
            "buffer_y": np.zeros(self.buffer_size, dtype=np.int64),
            "buffer_fill": np.zeros(1, dtype=np.int64),
            **store_state("positive", self._positive_rows()),
            "positive_fill": np.zeros(1, dtype=np.int64),
            "positive_seen": np.zeros(1, dtype=np.int64),
        }

    def _state_invariants(self, n_features: int) -> dict:
        return {
            "w": Grown(),
            "w_avg": Grown(),
            "n_steps": Count(),
            # each step adds its epoch's length (>= 1 event) to the average's weight
            "averaged_events": Count(low="n_steps"),
            # the rows' offsets, columns and values (_check_state relates them)
            **store_invariants("buffer", n_features),
            "buffer_y": OneOf((-1, 0, 1)),  # 0: a slot never filled
            # below the current epoch's length (_check_state), itself at most the capacity
            "buffer_fill": Count(0, self.buffer_size - 1),
            **store_invariants("positive", n_features),
            "positive_fill": reservoir_fill(self.half_life, self._positive_rows(), "positive_seen"),
            "positive_seen": Count(),
        }

    def _growing_arrays(self) -> dict[str, Growth]:
        width = self.n_features_in_
        return {
            **growing_store("buffer", self.buffer_size, width),
            **growing_store("positive", self._positive_rows(), width),
        }

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        check_store(state, "buffer", int(state["buffer_fill"][0]))
        check_store(state, "positive", int(state["positive_fill"][0]))
        # the buffer is flushed as soon as it holds an epoch: its fill is always below that
        length = doubling_interval(
            self.first_buffer_size, self.buffer_size, int(state["n_steps"][0])
        )
        fill = int(state["buffer_fill"][0])
        if fill >= length:
            raise InvalidState(
                f"state array 'buffer_fill' holds {fill}; after {int(state['n_steps'][0])} "
                f"steps an epoch is {length} events and the buffer is flushed when it has one",
                field="buffer_fill",
            )

    def _unchanged_grown_keys(self) -> frozenset[str]:
        """The weights, when no step was taken since they were last checked
        (core.learners._grown): they change only at the end of an epoch."""
        checked = self.__dict__.get("_checked_weights")
        state = self.state_
        if checked is not None and checked[0] is state["w"] and checked[1] is state["w_avg"]:
            return _WEIGHTS
        return frozenset()

    def _grown_state_checked(self) -> None:
        self.__dict__["_checked_weights"] = (self.state_["w"], self.state_["w_avg"])

    def _run(self, X, y, scores, *, offer_positives: bool, take_steps: bool) -> None:
        state = self.state_
        steps = int(state["n_steps"][0])
        try:
            self._run_kernel(X, y, scores, offer_positives, take_steps)
        finally:
            if int(state["n_steps"][0]) != steps:
                self.__dict__.pop("_checked_weights", None)

    def _run_kernel(self, X, y, scores, offer_positives: bool, take_steps: bool) -> None:
        state = self.state_
        room = np.zeros(len(_STORES), dtype=np.int64)
        arrays = event_arrays(X)
        learned = 0
        while learned < len(y):
            learned = kernels.pmb_learn(
                learned, *arrays, y, scores,
                state["w"], state["w_avg"], state["n_steps"], state["averaged_events"],
                state["buffer_indptr"], state["buffer_indices"], state["buffer_values"],
                state["buffer_y"], state["buffer_fill"],
                state["positive_indptr"], state["positive_indices"], state["positive_values"],
                state["positive_fill"], state["positive_seen"], state["rng_state"], room,
                int(self.passes), LOSSES[self.loss], float(self.alpha), float(self.beta),
                float(self.k), float(self.eta), float(self.radius),
                int(min(self.first_buffer_size, self.buffer_size)), offer_positives,
                take_steps, float(self.auc_weight), half_life_arg(self.half_life),
            )  # fmt: skip
            # a store had no room for the event it stopped at: grown, learned again from it
            grow_stores(state, _STORES, room, int(state["n_features"][0]))

    def _learn(self, X, y, scores) -> None:
        self._run(X, y, scores, offer_positives=True, take_steps=True)

    def fit(self, X, y) -> PMB:
        """Learn from scratch: ``max_iter`` passes (reshuffled when ``shuffle``).

        For ``passes=2`` a first pass only fills the positive reservoir (Algorithm 2, pass 1);
        the ``max_iter`` following passes stream the negatives against the frozen reservoir.
        """
        if self.passes == 1:
            return super().fit(X, y)
        self.validate_params()
        features, labels = check_batch(X, y, accept_sparse=self.supports_sparse)
        self.initialize(features.shape[1])

        rng = np.random.default_rng(self.random_state)
        for epoch in range(self.max_iter + 1):
            order = rng.permutation(len(labels)) if self.shuffle else np.arange(len(labels))
            batch = (
                features.take_rows(order) if isinstance(features, CSRMatrix) else features[order]
            )
            scaled = scale_batch(self.scaling, self.state_, batch, learn=epoch == 0)
            self._run(
                scaled, labels[order], np.empty(0),
                offer_positives=epoch == 0, take_steps=epoch > 0,
            )  # fmt: skip
        return self

    def _decision(self, X) -> np.ndarray:
        return kernels.decision(*event_arrays(X), self.state_["w_avg"])

    @property
    def coef_(self) -> np.ndarray:
        """The served weights: the average of the iterates (Kar et al. Alg. 1 line 9)."""
        self._check_initialized()
        return self.state_["w_avg"].copy()
