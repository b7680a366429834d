"""``auto``: K candidate learners learn the same stream side by side; their standardised
scores are served in a mix weighted towards the best recent prequential pAUC (or the best one
alone).  Users do not tune: the service runs this small tournament on their own stream.

The class is the composition: the candidates (core.learners._candidates) learn the stream in
segments, the tournament (core.learners._tournament) serves, records and evaluates each
segment, and the drift tracking (core.learners._auto_drift) wraps it when ``track_drift``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.csr import CSRMatrix
from core.errors import InvalidParameter, InvalidState
from core.learners import learner_class, register
from core.learners._auto_drift import DriftTracking
from core.learners._auto_learning import learn_segments, served_at_rounds
from core.learners._base import OnlineLearner
from core.learners._candidates import (
    DEFAULT_CANDIDATES,
    MAX_CANDIDATES,
    GivenUnscaled,
    candidate_specs,
    default_candidates,
    invalid_field,
    shown_params,
)
from core.learners._composed import ComposedState
from core.learners._growing import Growth
from core.learners._params import BOOLEAN, CANDIDATES, PAUC_RANGE, Interval
from core.learners._row_pool import (
    ROWS,
    PrefixLink,
    RowLink,
    check_pool,
    keeps_rows,
    pool_capacity,
    pool_invariants,
    pool_state,
    prefix_view,
    replays_prefix,
    rows_kept,
    unpooled,
)
from core.learners._state import Count, StateInvariant, with_prefix
from core.learners._stateful import scaler_invariants
from core.learners._tournament import (
    check_tournament_state,
    leaderboard,
    served_coef,
    served_contributions,
    served_decision,
    tournament_invariants,
    tournament_state,
    window_growing_arrays,
)
from core.learners._tree_admission import joins_at_first_fit
from core.preprocessing import scale_batch, scaler_affine

__all__ = ["DEFAULT_CANDIDATES", "Auto"]

_PREFIX = "c{}:"
#: the candidates' prefixes, formatted once (read after every batch)
_PREFIXES = tuple(_PREFIX.format(k) for k in range(MAX_CANDIDATES))


class CandidateRoles:
    """What a list of candidates' learners and parameters decide about their roles in a
    segment (:func:`~core.learners._auto_learning.learn_segments`)."""

    def __init__(self, candidates: list[OnlineLearner]) -> None:
        self.candidates = candidates
        #: whether each scales its own rows (given them as posted)
        self.unscaled = tuple(candidate.scales_itself for candidate in candidates)
        #: those that join the served mix at their first fit (core.learners._tree_admission)
        self.joiners = tuple(k for k, c in enumerate(candidates) if joins_at_first_fit(c))
        #: the row pool's capacity while a candidate is pooled (core.learners._row_pool)
        self.pool_capacity = pool_capacity(candidates)
        #: the candidates' prequential scores of a one-event batch, and each one's row (its
        #: ``scores`` argument), made once: filled and read within each call (the served
        #: scores and the window take copies), where a new array and its K row views cost
        #: ~1 us a call
        self.one_event_scores = np.empty((len(candidates), 1))
        self.one_event_rows = tuple(self.one_event_scores)


@register
class Auto(ComposedState, OnlineLearner):
    """A tournament of candidate learners on the stream; the recent best weigh most in the
    served scores.

    Every labelled batch is learned by every candidate, segment by segment (one kernel call
    per candidate per segment, on rows auto scaled once, or as posted for a candidate that
    scales its own, ``boosted_embedded``; a segment ends where an evaluation,
    or with ``track_drift`` a multiple of the fast period, is due).  Each candidate's
    prequential scores of the last ``window`` events are kept in a ring buffer; every
    ``evaluate_every`` events (and on a doubling schedule before) auto computes each
    candidate's exact pAUC over ``pauc_range`` and AUC on that window.  The served scores
    (``decision_function``, ``coef_``, ``prequential_step``) are the mix
    ``sum_k w_k (s_k - mean_k) / std_k``: each candidate's score standardised by the mean and
    spread of its own prequential scores so far, weighted by a softmax of the windowed pAUCs
    at the last deciding evaluation (before it, equal shares of the candidates that neither
    grow trees nor forget; a boosted candidate joins at its first fit).  A leader is also
    chosen, with hysteresis (a challenger must lead by ``margin`` at ``patience`` evaluations
    in a row; windows with too few positives or negatives decide nothing); ``temperature=0``
    serves it alone, its scores mapped onto the served scale at each change.  Segments end at
    fixed event counts, so batch = one event at a time holds bit for bit.  Equations, choices
    and measurements: docs/algorithms/auto.md (auto.1)-(auto.14).

    The defaults are those of a model created over HTTP (``"learner": "auto"``, dense
    features): ``track_drift=True`` and ``scaling="standard"``.

    Parameters
    ----------
    candidates : list of {"learner": name, "params": {...}} or None
        The tournament (JSON-able); None is the default of the model's width
        (core.learners._candidates.default_candidates): :data:`DEFAULT_CANDIDATES`
        (``logistic`` with the base-rate offset and its prior re-estimated from the evidence
        once, ``ftrl_pauc``, and ``logistic`` on the leaves of boosted trees,
        ``boosted_embedded``; above 250 features ``logistic`` on the tree-path embedding,
        ``tree_embedded``, in its place), or ``logistic``,
        ``pmb`` and ``logistic`` on the 128 columns in use (``max_columns``, numbers at
        the prior variance 3 and categories at 0.3: ``number_prior_variance``) for more than
        1,000 features; with ``track_drift`` the fast-adapting
        ``logistic`` after them and, up to 250 features, the boosted candidate with a
        150-event memory (:data:`~core.learners._candidates.FAST_TREE_CANDIDATE`).
        Candidates may not set ``scaling`` (auto's own ``scaling`` applies to all of them),
        and a pAUC learner (``ftrl_pauc``, ``pmb`` with the pAUC loss) may not set an
        ``alpha`` / ``beta`` that contradicts ``pauc_range`` (it gets the range).  Errors
        name the field: ``candidates[1].learner``, ``candidates[2].params.beta``.
    pauc_range : [alpha, beta], default (0.0, 0.1)
        The FPR range of the model: what the pAUC candidates optimise and what the tournament
        ranks by.
    window : int, default 5000
        Labelled events in the ring buffer on which the candidates are compared.
    evaluate_every : int, default 1000
        Events between two evaluations (at most ``window``).  [CHOICE] 1,000: the tree
        candidate ranks better from its fit at the 2,000th event, and evaluations every 2,000
        events left streams of 2,000-4,000 events without one that saw it (bench/README.md,
        "A tree candidate in auto's default tournament").
    first_evaluation : int, default 50
        Before ``evaluate_every`` events, evaluations also come after ``first_evaluation``,
        twice, four times ... that many events (50, 100, 200, ..., then every 1000).
    temperature : float, default 0.1
        Of the softmax that weighs the candidates' windowed pAUCs in the served mix; 0 serves
        the leader alone.  [CHOICE] 0.1: a candidate 0.1 of pAUC behind weighs e^-1 of the
        best, 0.69 behind nothing; over the real-data suite a soft mix beat serving the leader
        and a sharp one (0.01) (bench/README.md, "auto's served mix", "auto's temperature").
    margin : float, default 0.01
        pAUC by which a challenger must beat the leader.
    patience : int, default 3
        Consecutive evaluations a challenger must win before it takes over.
    min_positives, min_negatives : int, default 10
        An evaluation whose window holds fewer positives, or fewer negatives inside the FPR
        range (``(beta - alpha) * n_negatives``), is shown on the leaderboard but decides
        nothing (the challenger's count is kept).
    track_drift : bool, default True
        Watch the served scores for a drift (docs/algorithms/auto.md (auto.8),
        core.learners._auto_drift): after a detection the candidates are compared on the
        events since it only, every 500 events, a better challenger takes over at once, and
        the tree candidates grow their trees again; the default tournament gains the
        fast-adapting candidate.  [CHOICE] on: what every model created over HTTP runs, so the
        library and the service learn alike.
    scaling : {"none", "unit_norm", "standard", "scale"}, default "standard"
        Online feature scaling, applied once before the candidates learn.  [CHOICE]
        ``standard``, what the service's ``"scaling": "auto"`` picks for dense features (the
        default tournament ranks far worse on raw features: bench/README.md, "auto's
        defaults"); sparse rows want ``scale``, as the service picks for them.
    max_iter : int, default 1
        Passes over the data made by :meth:`fit`.
    shuffle, random_state
        As for every learner; ``random_state`` also seeds every candidate that sets none.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        The served weights (the linear part of the mix, or the leader's mapped).  With a
        candidate that is not linear in the features (``boosted_embedded`` or
        ``tree_embedded``, in the default tournament) the served score is not ``coef_ . x``
        plus a constant, and :meth:`raw_weights` is None.
    state_ : dict of ndarray
        Every candidate's state under the prefix ``c{k}:`` (``c0:z``, ``c1:w_unscaled``, ...)
        and the tournament's arrays: ``n_seen``, ``window_scores`` (K, up to ``window``: it
        grows as it fills), ``window_labels``, ``leader``, ``leader_since``, ``challenger``,
        ``challenger_streak``, ``served_scale``, ``served_offset``, ``window_pauc`` /
        ``window_auc`` (K,: at the last evaluation, NaN before), ``evaluated_at``, the mix's
        ``served_weights``, ``score_mean`` and ``score_m2`` (K,: each candidate's share and
        the running mean and sum of squared deviations of its prequential scores), and with
        ``track_drift`` the detector's ``drift:*`` arrays and ``drift_since``.

    Notes
    -----
    Learning costs the sum of the candidates' costs plus, every ``evaluate_every`` events, K
    exact pAUC and AUC over ``window`` scores; scoring costs the candidates with a share of
    the mix (one, the leader, with ``temperature=0``).  docs/algorithms/auto.md ("Cost") has
    the measurements and the cheaper tournaments.

    Examples
    --------
    >>> import numpy as np
    >>> from core.learners import make_learner
    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random(6000) < 0.1).astype(int)
    >>> X = rng.normal(size=(6000, 5)) + y[:, None] * np.array([1.5, 1.0, 0.0, 0.0, 0.0])
    >>> model = make_learner("auto", evaluate_every=500, window=2000)
    >>> scores = model.prequential_step(X, y)
    >>> board = model.leaderboard()
    >>> [row["learner"] for row in board["candidates"]]
    ['logistic', 'ftrl_pauc', 'boosted_embedded', 'logistic', 'boosted_embedded']
    >>> board["candidates"][board["leader"]]["learner"] == type(model.leader_).name
    True
    >>> round(float(sum(row["weight"] for row in board["candidates"])), 12)  # the mix's shares
    1.0
    """

    name = "auto"
    #: auto scales the rows once for the candidates, and hands the candidates that scale
    #: their own (``boosted_embedded``: its trees split the rows as posted) the rows unscaled
    scales_itself = True
    #: the rows of the segment being learned, for the pooled candidates (core.learners._row_pool)
    _rows_segment: np.ndarray | None = None

    candidates: list | None = None
    pauc_range: tuple | list = (0.0, 0.1)
    window: int = 5000
    evaluate_every: int = 1000
    first_evaluation: int = 50
    margin: float = 0.01
    patience: int = 3
    min_positives: int = 10
    min_negatives: int = 10
    track_drift: bool = True
    temperature: float = 0.1
    scaling: str = "standard"

    # ------------------------------------------------------------------ parameters
    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "candidates": [None, CANDIDATES],
        "pauc_range": [PAUC_RANGE],
        "window": [Interval(int, 2, None)],
        "evaluate_every": [Interval(int, 1, None)],
        "first_evaluation": [Interval(int, 1, None)],
        "margin": [Interval(float, 0, None, closed="left")],
        "patience": [Interval(int, 1, None)],
        "min_positives": [Interval(int, 1, None)],
        "min_negatives": [Interval(int, 1, None)],
        "track_drift": [BOOLEAN],
        "temperature": [Interval(float, 0, None, closed="left")],
    }

    def _check_params(self) -> None:
        if self.evaluate_every > self.window:
            raise InvalidParameter(
                f"Expected evaluate_every <= window ({self.window}): events between two "
                f"evaluations would never be compared; got: {self.evaluate_every!r}",
                param="evaluate_every",
            )
        candidate_specs(self._candidates_asked(), self.pauc_range, self.random_state)

    def candidate_specs(self) -> list[dict[str, Any]]:
        """The effective candidates (see :func:`candidate_specs`): by default those of the
        model's width (known once initialised), which gain the fast-adapting ones with
        ``track_drift``; once the width is known, with the choices the candidates make from
        it explicit (:meth:`OnlineLearner.width_params`: ``logistic``'s solver)."""
        specs = candidate_specs(self._candidates_asked(), self.pauc_range, self.random_state)
        width = getattr(self, "_width", None)
        if width is not None:
            for spec in specs:
                choices = learner_class(spec["learner"])(**spec["params"]).width_params(width)
                spec["params"].update(choices)
        return specs

    def _candidates_asked(self) -> list | tuple | None:
        if self.candidates is None:
            return default_candidates(getattr(self, "_width", None), self.track_drift)
        return self.candidates

    def _build_candidates(self) -> list[OnlineLearner]:
        """The candidates of :meth:`candidate_specs`; those that scale their own rows with
        auto's scaling (the others are given the rows auto scaled)."""
        candidates = []
        for spec in self.candidate_specs():
            cls = learner_class(spec["learner"])
            own = {"scaling": self.scaling} if cls.scales_itself else {}
            candidates.append(cls(**(spec["params"] | own)))
        return candidates

    # ------------------------------------------------------------------ state
    # ``state_`` is the flat view of core.learners._composed: the candidates' arrays under
    # "c{k}:" prefixes plus auto's own
    def _new_parts(self) -> list[tuple[str, OnlineLearner]]:
        return [(_PREFIX.format(k), c) for k, c in enumerate(self._build_candidates())]

    def _set_parts(self, parts: list[tuple[str, OnlineLearner]]) -> None:
        self._candidates = [candidate for _, candidate in parts]
        for k, candidate in enumerate(self._candidates):
            if keeps_rows(candidate):  # its rows are the pool's while it is pooled
                candidate._rows_link = RowLink(self, k)  # type: ignore[attr-defined]
        # those whose reservoirs' rows are the pool's, replayed, while it holds the first event
        self._prefix_readers = [c for c in self._candidates if replays_prefix(c, self.scaling)]
        for candidate in self._prefix_readers:
            candidate._prefix_link = PrefixLink(self)  # type: ignore[attr-defined]

    def _parts(self) -> list[tuple[str, OnlineLearner]]:
        return list(zip(_PREFIXES, self._candidates, strict=False))  # at most MAX_CANDIDATES

    def _part_learners(self) -> tuple:
        """As :meth:`_parts`, without its pairs: one tuple while the candidates are the same
        list (read twice after every batch; the caches keyed on it then match at once)."""
        kept = self.__dict__.get("_learners_kept")
        if kept is None or kept[0] is not self._candidates:
            kept = (self._candidates, tuple(self._candidates[:MAX_CANDIDATES]))
            self.__dict__["_learners_kept"] = kept
        return kept[1]

    def _candidate_roles(self) -> CandidateRoles:
        """What the candidates' learners and parameters decide, read at every segment: kept
        while the candidates are the same list (~2 us of Python a one-event call)."""
        kept = self.__dict__.get("_roles")
        if kept is None or kept.candidates is not self._candidates:
            kept = self.__dict__["_roles"] = CandidateRoles(self._candidates)
        return kept

    def _drift(self) -> DriftTracking | None:
        """The drift wrapper with ``track_drift`` (kept: it holds the detector's view)."""
        if not self.track_drift:
            return None
        tracking = self.__dict__.get("_tracking")
        if tracking is None or tracking.evaluate_every != self.evaluate_every:
            tracking = self.__dict__["_tracking"] = DriftTracking(int(self.evaluate_every))
        return tracking

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        self._width = n_features  # the default tournament depends on it
        candidates = self._build_candidates()
        state: dict[str, np.ndarray] = {}
        for k, candidate in enumerate(candidates):
            try:
                candidate.initialize(n_features)
            except ValueError as error:
                raise invalid_field(f"candidates[{k}]", str(error)) from None
            for key, value in candidate.state_.items():
                state[_PREFIX.format(k) + key] = value
        state.update(tournament_state(candidates))
        if self.track_drift:
            state.update(DriftTracking.state())
        if pool_capacity(candidates):  # one copy of the rows its tree candidates keep
            state.update(pool_state(n_features, [keeps_rows(c) for c in candidates]))
        return state

    def _own_growing_arrays(self) -> dict[str, Growth]:
        growing = window_growing_arrays(int(self.window))
        if capacity := pool_capacity(self._candidates):
            growing[ROWS] = (0, capacity)
        return growing

    def _state_invariants(self, n_features: int) -> dict:
        """Each candidate's own declarations under its prefix, then the tournament's arrays."""
        self._width = n_features
        candidates = self._build_candidates()
        invariants: dict = {}
        for k, candidate in enumerate(candidates):
            own: dict[str, StateInvariant] = {"n_features": Count(n_features, n_features)}
            own.update(candidate._state_invariants(n_features))
            own.update(scaler_invariants(candidate.scaling))
            invariants.update(with_prefix(own, _PREFIX.format(k)))
        invariants.update(tournament_invariants(len(candidates)))
        if self.track_drift:
            invariants.update(DriftTracking.invariants())
        if capacity := pool_capacity(candidates):
            invariants.update(pool_invariants(capacity))
        return invariants

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """The pool's, then each candidate's own cross-array checks, on its unprefixed arrays
        (a pooled candidate's with its rows from the pool)."""
        candidates = self._build_candidates()
        marks = [-1] * len(candidates)
        if pool_capacity(candidates):
            check_pool(state, rows_kept(candidates, _PREFIX))
            marks = state["rows_pooled"].tolist()
        for k, candidate in enumerate(candidates):
            prefix = _PREFIX.format(k)
            try:
                own = unpooled(state, prefix, marks[k])
                own = prefix_view(state, own, candidate, self.scaling)
                candidate._check_state(own)
            except InvalidState as error:  # named as the model stores the array
                if error.field is not None:
                    error.field = prefix + error.field
                raise
        check_tournament_state(state, int(self.window))
        if self.track_drift:
            DriftTracking.check_state(state)

    # ------------------------------------------------------------------ learning
    def _learn(self, X, y: np.ndarray, scores: np.ndarray) -> None:
        """Learn the unscaled batch: scaled once for the candidates that do not scale their
        own rows (core.learners._auto_learning)."""
        learn_segments(self, X, y, scores)

    def _learn_rounds(self, X, y: np.ndarray, scores: np.ndarray, stops) -> list[np.ndarray]:
        """Learn the unscaled batch and give ``coef_`` at the start of each round ending at
        ``stops`` (:meth:`learn_rounds`: one call, not one per round)."""
        return served_at_rounds(self, X, y, scores, stops)

    # ------------------------------------------------------------------ serving
    @property
    def leader_(self) -> OnlineLearner:
        """The best candidate, chosen with hysteresis (served alone with ``temperature=0``)."""
        self._check_initialized()
        return self._candidates[int(self._own_state["leader"][0])]

    def _served_candidates(self, rows) -> list:
        """The candidates as the served mix scores a batch whose unscaled rows are ``rows``."""
        return [
            GivenUnscaled(candidate, rows) if candidate.scales_itself else candidate
            for candidate in self._candidates
        ]

    def _decision(self, X) -> np.ndarray:
        scaled = scale_batch(self.scaling, self._scaler_arrays, X, learn=False)
        candidates = self._served_candidates(X)
        return served_decision(self._own_state, candidates, scaled, self.temperature)

    def _contributions(self, X) -> tuple[np.ndarray, np.ndarray]:
        scaled = scale_batch(self.scaling, self._scaler_arrays, X, learn=False)
        candidates = self._served_candidates(X)
        return served_contributions(self._own_state, candidates, scaled, self.temperature)

    @property
    def intercept_(self) -> float:
        """The served score of an event that is all zeros after scaling (as every learner's);
        the candidates that scale their own rows score the unscaled row that scaling takes to
        zeros (the running means under ``standard``)."""
        self._check_initialized()
        width = self.n_features_in_
        origin = np.zeros((1, width))
        if self.scaling in ("standard", "scale"):
            origin[0] = scaler_affine(self.scaling, self.state_)[1]
        empty = np.zeros(0, dtype=np.int64)
        zero = CSRMatrix(np.zeros(2, dtype=np.int64), empty, np.zeros(0), width)
        candidates = self._served_candidates(origin)
        return float(served_decision(self._own_state, candidates, zero, self.temperature)[0])

    # a property over the base class's class attribute: auto's answer depends on its candidates
    @property
    def linear_in_features(self) -> bool:  # type: ignore[override]
        """Whether the served mix is linear in the (scaled) features: every candidate is (not
        with ``boosted_embedded`` or ``tree_embedded``, the default third candidates).
        Otherwise :meth:`raw_weights` is None and ``coef_`` is only the mix's linear part."""
        if not self.is_initialized:
            specs = self.candidate_specs()
            return all(learner_class(spec["learner"]).linear_in_features for spec in specs)
        return all(candidate.linear_in_features for candidate in self._candidates)

    @property
    def coef_(self) -> np.ndarray:
        """The served weights (:func:`served_coef`): the mix's linear part, or the leader's
        mapped with ``temperature=0``."""
        self._check_initialized()
        # the width from auto's own arrays: reading ``state_`` would build the view at every
        # event of the service's regret window
        width = self._own_state["n_features"].item()
        return served_coef(self._own_state, self._candidates, width, self.temperature)

    def leaderboard(self) -> dict[str, Any]:
        """Each candidate's effective learner and params (those that differ from its learner's
        defaults), its windowed pAUC and AUC at the last evaluation (None while undefined),
        which one leads and since which event count."""
        self._check_initialized()
        # the parameters that differ from the defaults, however the model was built
        specs = [
            {"learner": spec["learner"], "params": shown_params(spec)}
            for spec in self.candidate_specs()
        ]
        return leaderboard(self._own_state, specs, self.pauc_range, self.temperature)
