"""An online linear learner on the leaves of boosted trees (docs/algorithms/boosted_embedded.md,
after He et al., ADKDD 2014): the trees are fitted now and then on a bounded buffer of recent
labelled events, the linear learner learns every event; the ensemble's arrays are state.

The trees split the rows as posted; only the inner learner's ``x`` is scaled (_fit_scaling).

A fit is due by a schedule (``first_fit`` buffered events, then each time the events have grown
by ``refit_growth``, at most every ``refit_every`` events, and again ``first_fit`` events after
:meth:`BoostedEmbedded.restart_tree`).  A fit taken from the buffer as of event ``N`` is
installed after event ``N + L(N)`` exactly (its *fit points*; ``L(N)`` grows with ``N`` up to
``fit_delay``), in a library as in the service: meanwhile the events are learned with the old
ensemble and held aside in the state, so the state and the events after it determine every fit.
Who computes it (the learner, or a background fitter: :mod:`core.boosted_fits`) changes only
the time it costs.
"""

from __future__ import annotations

import numpy as np

from core._arrays import LABELS
from core._kernels import boosted_embedding as kernels
from core.boosted_fits import FitJob, HandsOverFits, background_fits
from core.boosted_trees import (
    ENSEMBLE_KEYS,
    EnsembleParams,
    children_problem,
    ensemble_rows_problem,
    node_capacity,
    node_index_problem,
    trimmed_trees,
    unfitted_ensemble,
)
from core.csr import CSRMatrix
from core.errors import InvalidParameter, InvalidState
from core.learners import _fit_scaling as fit_scaling
from core.learners import _leaf_columns as columns
from core.learners import register
from core.learners._base import OnlineLearner
from core.learners._boosted_fused import BoostedParams
from core.learners._boosted_learning import learn
from core.learners._composed import ComposedState
from core.learners._event_rows import check_buffer_size, event_arrays
from core.learners._fit_buffer import (
    buffer_invariants,
    buffer_state,
    buffered,
    check_buffer,
    held_rows,
    held_rows_problem,
    oldest_first,
    remember,
)
from core.learners._fit_schedule import FitSchedule, schedule_params
from core.learners._growing import Growth
from core.learners._inner import INNER_CONSTRAINTS, INNER_PREFIX, WrapsInner
from core.learners._kept_params import KeptParams
from core.learners._params import BOOLEAN, Interval
from core.learners._row_pool import RowLink, restart_rows
from core.learners._state import Count, Finite, OneOf, with_prefix
from core.preprocessing import scale_batch
from core.validation import row_range

__all__ = ["BoostedEmbedded", "FitJob", "background_fits"]

#: events embedded and scored at a time by ``decision_function``
SCORE_CHUNK = 4096
_COUNTERS = ("events", "since_fit", "fits", "generation", "fit_from", "fit_at", "ready",
             "pending", "pending_fill")  # fmt: skip

_NONE_F = np.empty(0)


@register
class BoostedEmbedded(
    KeptParams, FitSchedule, HandsOverFits, WrapsInner, ComposedState, OnlineLearner
):
    """A linear learner on ``[x, m(x), e(x)]``: the features, the margin of a boosted ensemble
    and one indicator per tree of the leaf ``x`` reaches (He et al. 2014): a linear scorer
    learning online that ranks with the trees' non-linearity.

    Labelled events go to a ring buffer of at most ``buffer_size`` rows, which keeps every
    positive and, once full, a sample of the negatives (docs/algorithms/boosted_embedded.md
    (boosted_embedded.3)): a negative is kept with probability ``min(1,
    negatives_per_positive * P / N)`` (``P``, ``N``: the positives and negatives seen) and
    weighs the inverse of that in the fits, so a stream of rare positives is fitted on many
    more of them than its last ``buffer_size`` events hold.  Once it holds
    ``first_fit`` events (two of each class), ``n_trees`` trees of at most ``max_leaves`` leaves
    are fitted on it (as scikit-learn's ``HistGradientBoostingClassifier`` fits them), and the
    inner learner starts afresh on the buffer embedded by them (one pass in order); then each
    time the events have grown by ``refit_growth``, at most every ``refit_every`` events (None:
    never again), the same on the buffer of the time, installed ``L(N)`` events later.

    Parameters
    ----------
    learner, params, pauc_range
        The inner learner, its hyper-parameters (its ``scaling`` is "none": this wrapper
        scales ``x``) and the model's FPR range for an inner pAUC learner.
    scaling
        Of the inner learner's ``x`` only: the trees split the rows as posted (auto's scaling).
    n_trees, max_leaves, learning_rate, min_samples_leaf, l2_regularization
        The ensemble's size and the boosting's parameters; ``l2_regularization`` [CHOICE] 1
        (scikit-learn's 0): docs/algorithms/boosted_embedded.md, "The fits".
    buffer_size : int, default 8000
        The most rows the fit buffer holds (dense rows, part of the state); its arrays grow
        as it fills (doubling), so a short stream's model holds only what it has seen.
    negatives_per_positive : float, default 10
        Once the buffer is full, the negatives it keeps per positive seen (a rate:
        ``min(1, negatives_per_positive * P / N)``); a stream with more positives than
        ``1 / (1 + negatives_per_positive)`` keeps its last ``buffer_size`` events.
    first_fit : int, default 250
        Buffered events before the first fit (and the first after a restart).
    refit_every : int or None, default 4000
        The most events between fits (from the event whose buffer the last fit learned).
    refit_growth : float, default 1.5
        The growth of the events between fits, if sooner (2: as they double; the [CHOICE]:
        core.learners._fit_schedule).
    fit_delay : int, default 256
        A fit of the buffer as of event ``N`` is installed ``L(N) = min(fit_delay, max(fit_delay
        // 8, N // 16))`` events later (32 at 250, 256 from 4,096): a fitter's head start, grown
        with its rows; the events between are held in the state, then join the buffer.
    append_features, append_margin : bool, default True
        Give the inner learner ``x`` and the margin ``m(x)`` beside the leaves.
    """

    name = "boosted_embedded"
    #: the leaves are not linear in x: no raw-space weights (``raw_weights()`` is None)
    linear_in_features = False
    #: the trees split the unscaled rows; ``scaling`` applies to the inner learner's ``x``
    scales_itself = True
    pools_rows = True  # its rows may be its composite's pool's (core.learners._row_pool)
    _rows_link: RowLink | None = None

    learner: str = "logistic"
    params: dict | None = None
    pauc_range: list | None = None
    n_trees: int = 50
    max_leaves: int = 31  # scikit-learn's default: docs/algorithms/boosted_embedded.md, "The fits"
    learning_rate: float = 0.1
    min_samples_leaf: int = 20
    l2_regularization: float = 1.0
    buffer_size: int = 8000
    negatives_per_positive: float = 10.0
    first_fit: int = 250
    refit_every: int | None = 4000
    refit_growth: float = 1.5
    fit_delay: int = 256
    append_features: bool = True
    append_margin: bool = True
    max_iter = 5

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        **INNER_CONSTRAINTS,
        "n_trees": [Interval(int, 1, 500)],
        "max_leaves": [Interval(int, 2, 255)],
        "learning_rate": [Interval(float, 0, 1, closed="right")],
        "min_samples_leaf": [Interval(int, 1, None)],
        "l2_regularization": [Interval(float, 0, None)],
        "buffer_size": [Interval(int, 16, 200_000)],
        "negatives_per_positive": [Interval(float, 0, 1e6, closed="right")],
        "first_fit": [Interval(int, 4, None)],
        "refit_every": [None, Interval(int, 1, None)],
        "refit_growth": [Interval(float, 1, 16, closed="right")],
        "fit_delay": [Interval(int, 0, 200_000)],
        "append_features": [BOOLEAN],
        "append_margin": [BOOLEAN],
    }

    def _check_params(self) -> None:
        self._check_inner_params()
        if self.first_fit > self.buffer_size:
            raise InvalidParameter(
                f"first_fit must be at most buffer_size ({self.buffer_size}): the first fit "
                f"learns from the buffer; got {self.first_fit!r}",
                param="first_fit",
            )

    def _build_kernel_params(self) -> BoostedParams:
        schedule = schedule_params(self.first_fit, self.refit_every, self.refit_growth,
                                   self.fit_delay)  # fmt: skip
        return BoostedParams(
            self.scaling == "standard", int(self.fit_delay), int(self.buffer_size),
            int(self.n_trees), bool(self.append_features), bool(self.append_margin),
            float(self.negatives_per_positive), schedule,
        )  # fmt: skip

    def _ensemble_params(self) -> EnsembleParams:
        return EnsembleParams(
            n_trees=int(self.n_trees), max_leaves=int(self.max_leaves),
            learning_rate=float(self.learning_rate), min_samples_leaf=int(self.min_samples_leaf),
            l2_regularization=float(self.l2_regularization),
            random_state=0 if self.random_state is None else int(self.random_state),
        )  # fmt: skip

    # ------------------------------------------------------------------ state
    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        check_buffer_size("boosted_embedded (buffer_size)", self.buffer_size, n_features)
        check_buffer_size("boosted_embedded (fit_delay)", self.fit_delay, n_features)
        inner = self._build_inner().initialize(columns.inner_widths(self, n_features)[0])
        state: dict[str, np.ndarray] = {INNER_PREFIX + k: v for k, v in inner.state_.items()}
        state.update(unfitted_ensemble(self.max_leaves))  # trees grow in at the first fit
        state.update(buffer_state(n_features, self.random_state))
        # the events learned while a fit is pending, held out of the buffer until it is in
        state["pending_X"] = np.zeros((0, n_features))
        state["pending_y"] = np.zeros(0, dtype=LABELS)
        state.update(fit_scaling.initial(n_features))  # x's scaling as of the pending fit
        state.update({key: np.zeros(1, dtype=np.int64) for key in _COUNTERS})
        return state

    def _own_growing_arrays(self) -> dict[str, Growth]:
        return columns.growing_arrays(self)

    def _state_invariants(self, n_features: int) -> dict:
        small, width = columns.inner_widths(self, n_features)
        own: dict = {"n_features": Count(small, width)}  # which one: check_inner_width
        own.update(self._build_inner()._state_invariants(width))
        invariants = with_prefix(own, INNER_PREFIX)
        nodes = node_capacity(self.max_leaves)
        invariants.update(
            {
                "ens_left": Count(-1, nodes - 2),  # the right child is the next node
                # a feature at a split, a leaf's index at a leaf: node_index_problem
                "ens_feature_or_leaf": Count(0, max(n_features, self.max_leaves) - 1),
                "ens_threshold_or_value": Finite(),
                "ens_baseline": Finite(),
                "ens_trees": Count(0, self.n_trees),
                **buffer_invariants(self.buffer_size),
                "ready": OneOf((0, 1)),
                "pending_X": Finite(),
                "pending_y": OneOf((-1, 0, 1)),
                "pending": OneOf((0, 1)),
                "pending_fill": Count(0, max(self.fit_delay - 1, 0)),
                **fit_scaling.invariants(self.scaling),
            }
        )
        for key in ("events", "since_fit", "fits", "generation", "fit_from", "fit_at"):
            invariants[key] = Count(0)
        return invariants

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        columns.check_inner_width(self, state)
        self._check_inner_state(state)
        check_buffer(state, self.buffer_size)
        for field, problem in (("ens_trees", ensemble_rows_problem(state)),
                               ("pending_y", held_rows_problem(state))):  # fmt: skip
            if problem:
                raise InvalidState(f"inconsistent state: {problem}", field=field)
        left, n_features = state["ens_left"], int(state["n_features"][0])
        indices = node_index_problem(left, state["ens_feature_or_leaf"], n_features,
                                     columns.leaves_per_tree(self, state))  # fmt: skip
        for field, problem in (("ens_left", children_problem(left)),
                               ("ens_feature_or_leaf", indices)):  # fmt: skip
            if problem:
                raise InvalidState(f"state arrays {problem}", field=field)
        fit_scaling.check(state)

    # ------------------------------------------------------------------ embedding
    def _ensemble(self) -> kernels.Ensemble:
        return kernels.Ensemble(*(self._own_state[key] for key in ENSEMBLE_KEYS[:-1]))

    def transform(self, X) -> CSRMatrix:
        """``[x, m(x), e(x)]`` of a batch as posted, as CSR (the inner learner's input; ``x``
        scaled): leaf indicators of ``1 / sqrt(n_trees)`` weigh as one unit-norm feature."""
        return self._embed(X, scale_batch(self.scaling, self._scaler_arrays, X, learn=False))

    def _embed(self, X, scaled, ensemble=None, width: int | None = None) -> CSRMatrix:
        """:meth:`transform` of rows ``X`` whose ``x`` is ``scaled``, by ``ensemble``'s trees
        for an inner learner of ``width`` (by default the installed ones, the current width)."""
        ensemble = self._own_state if ensemble is None else ensemble
        width = int(self._inner.state_["n_features"][0]) if width is None else width
        return columns.embed(self, X, scaled, ensemble, width)

    def margin(self, X) -> np.ndarray:
        """The ensemble's margin (log-odds) of a batch, as the booster's ``decision_function``
        would give on the unscaled features (the baseline alone before the first fit)."""
        features = self._coerce(X)[0]
        return kernels.margin(*event_arrays(features), self._ensemble(),
                              int(self._own_state["ens_trees"][0]), features.shape[1])  # fmt: skip

    # ------------------------------------------------------------------ the buffer
    def _remember(self, X, y) -> None:
        own = self._own_state
        remember(own, X, y, self.buffer_size, float(self.negatives_per_positive), self._rows_link)
        own["events"][0] += len(y)
        own["since_fit"][0] += len(y)

    def _due(self, upcoming: np.ndarray) -> np.ndarray:
        """Whether a fit falls due after ``k`` of the ``upcoming`` labels, for ``k = 0 .. n``:
        the schedule's count reached, and the buffer then holds two events of each class."""
        own = self._own_state
        ready, fill = int(own["ready"][0]), int(own["buffer_fill"][0])
        steps = np.arange(len(upcoming) + 1)
        if ready and self.refit_every is None:
            return np.zeros(len(upcoming) + 1, dtype=bool)
        if ready:
            counted = int(own["since_fit"][0]) + steps >= self._interval()
        else:
            counted = fill + steps >= self.first_fit
        if not counted[-1]:  # most calls: the count is not reached, the labels need no look
            return counted
        held = own["buffer_y"][oldest_first(own, self.buffer_size)]
        labels = np.concatenate((held, np.asarray(upcoming, dtype=np.int64)))
        # each class's count in the buffer after k more events: the last buffer_size labels
        ends = fill + steps
        starts = np.maximum(ends - self.buffer_size, 0)
        positives = np.concatenate(([0], np.cumsum(labels > 0)))
        negatives = np.concatenate(([0], np.cumsum(labels <= 0)))
        both = (positives[ends] - positives[starts] >= 2) & (
            negatives[ends] - negatives[starts] >= 2
        )
        return counted & both

    def fit_due(self) -> bool:
        """Whether a fit is pending: due, taken from the buffer, not installed yet."""
        self._check_initialized()
        return bool(self._own_state["pending"][0])

    # ------------------------------------------------------------------ fitting
    def fit_job(self) -> FitJob:
        """A fit of the buffer as it is now (copies: learning may go on while it runs); while
        a fit is pending, the buffer as of the event it fell due at."""
        self._check_initialized()
        X, y, weights = buffered(self._own_state, self.buffer_size, self._rows_link)
        own = self._own_state
        return FitJob(X, y, self._ensemble_params(), int(own["generation"][0]),
                      int(own["fits"][0]), int(own["events"][0]), weights,
                      fit_scaling.of_job(own))  # fmt: skip

    def prepare(
        self, ensemble: dict[str, np.ndarray], job: FitJob, row_leaves: np.ndarray
    ) -> OnlineLearner:
        """A fresh inner learner that learned the job's buffer embedded by ``ensemble``, one
        pass in order (the buffer's leaves: ``row_leaves``, as the fit gave them,
        :meth:`FitJob.run`): the slow part of :meth:`install`, which reads nothing of the
        learner's state, so a background fitter runs it without the model's lock."""
        width = columns.fitted_width(self, job.X.shape[1], ensemble["ens_left"])
        inner = self._build_inner().initialize(width)
        for start in range(0, len(job.y), SCORE_CHUNK):
            part = slice(start, start + SCORE_CHUNK)
            scaled = fit_scaling.scaled(self.scaling, job.x_scaling, job.X[part])
            embedded = columns.embed_fitted(self, scaled, row_leaves[part], ensemble, width)
            inner._learn(embedded, job.y[part], _NONE_F)
        return inner

    def _fall_due(self, in_call: int) -> None:
        """The fit falls due now, ``in_call`` events before the end of this call: the buffer
        stays as it is until the fit is installed, the next ``fit_delay`` events are held
        aside; a background fitter gets the job at once (when it can be in time)."""
        own = self._own_state
        own["pending"][0], own["pending_fill"][0] = 1, 0
        fit_scaling.keep(self.scaling, self._own_state, self.state_)
        self._mark_due()
        if self._delay() == 0:
            self._install_pending()
        else:
            self._hand_over(self._delay(), in_call)

    def install(
        self,
        ensemble: dict[str, np.ndarray],
        job: FitJob,
        prepared: OnlineLearner,
    ) -> bool:
        """Install the pending fit's ``ensemble`` (False, nothing changed, when ``job`` is not
        the pending fit's).  The inner learner is replaced by one that learned the job's buffer
        embedded by it (``prepared``: :meth:`prepare`), then learns the events held
        since (embedded by it too), which then join the buffer."""
        self._check_initialized()
        own = self._own_state
        key = (int(own["generation"][0]), int(own["fits"][0]), int(own["events"][0]))
        if not own["pending"][0] or key != (job.generation, job.fits, job.fit_from):
            return False
        # the trees' rows grow in at the first fit, with the nodes the largest tree has
        for name, value in trimmed_trees(ensemble).items():
            own[name] = np.array(value, dtype=own[name].dtype)
        self._inner = prepared
        own["pending_fill"][0] *= self._delay() > 0
        held_X, held_y = held_rows(own, self._rows_link)
        held, own["pending"][0], own["pending_fill"][0] = len(held_y), 0, 0
        if held:
            scaled = fit_scaling.scaled(self.scaling, own, held_X)
            self._inner._learn(self._embed(held_X, scaled), held_y, _NONE_F)
            self._remember(held_X, held_y)
        events = int(own["events"][0])
        own["fits"][0] += 1
        own["ready"][0] = 1
        own["fit_from"][0], own["fit_at"][0] = job.fit_from, events
        own["since_fit"][0] = events - job.fit_from
        self._refresh_view()
        return True

    def refit(self) -> bool:
        """Fit now, synchronously, on the buffer and the events held for a pending fit (False
        when they lack two events of a class): the fit points ``(now, now)``."""
        self._check_initialized()
        own = self._own_state
        if own["pending"][0]:
            held_X, held_y = held_rows(own, self._rows_link)
            own["pending"][0], own["pending_fill"][0] = 0, 0
            self._remember(held_X, held_y)
            self._drop_handle()
        labels = own["buffer_y"][oldest_first(own, self.buffer_size)]
        if min(int((labels > 0).sum()), int((labels <= 0).sum())) < 2:
            return False
        own["pending"][0] = 1
        fit_scaling.keep(self.scaling, self._own_state, self.state_)
        job = self.fit_job()
        ensemble, row_leaves = job.run()
        return self.install(ensemble, job, self.prepare(ensemble, job, row_leaves))

    def restart_tree(self) -> None:
        """Fit again on the events from now on (``auto`` with ``track_drift`` calls it after a
        change in the stream): the buffer empties, a pending fit is dropped with the events
        held for it, the next fit is due ``first_fit`` events from now, and the current
        ensemble embeds until then."""
        self._check_initialized()
        own = self._own_state
        restart_rows(self._rows_link, own)  # a pooled buffer starts at the next event
        own["events"][0] += own["pending_fill"][0]  # learned, and dropped with the buffer
        for key in ("buffer_fill", "buffer_next", "since_fit", "ready", "pending",
                    "pending_fill"):  # fmt: skip
            own[key][0] = 0
        own["buffer_seen"][:] = 0
        own["generation"][0] += 1
        self._drop_handle()

    @property
    def events_seen_(self) -> int:
        """Labelled events learned (those held for a pending fit included)."""
        self._check_initialized()
        own = self._own_state
        return int(own["events"][0]) + int(own["pending_fill"][0])

    # ------------------------------------------------------------------ learning, scoring
    def _learn(self, X, y, scores) -> None:
        """Learn the batch as posted, scaled segment by segment (a fit due keeps its scaling:
        core.learners._boosted_learning)."""
        learn(self, X, y, scores)

    def _learn_cut(self, X, y, scores, cuts, want_coef: bool) -> list:
        """:meth:`_learn`, the inner learner's call cut at ``cuts`` (increasing positions),
        and ``coef_`` before each (None without ``want_coef``): ``auto``'s rounds."""
        return learn(self, X, y, scores, cuts, want_coef)

    def _decision(self, X) -> np.ndarray:
        n_events = X.shape[0]
        out = np.empty(n_events)
        for start in range(0, n_events, SCORE_CHUNK):
            stop = min(n_events, start + SCORE_CHUNK)
            out[start:stop] = self._inner._decision(self.transform(row_range(X, start, stop)))
        return out

    def _contributions(self, X) -> tuple[np.ndarray, np.ndarray]:
        """``x``'s own terms per feature; the margin's and the leaves' terms (not linear in any
        one feature) go to the remainder with the intercept, so the two sum to the score."""
        n_features = X.shape[1]
        inner, remainder = self._inner._contributions(self.transform(X))
        inner = columns.at_whole_width(self, n_features, inner)  # the same sums' bits
        if not self.append_features:
            return np.zeros((X.shape[0], n_features)), remainder + inner.sum(axis=1)
        return inner[:, :n_features].copy(), remainder + inner[:, n_features:].sum(axis=1)

    @property
    def coef_(self) -> np.ndarray:
        """The inner learner's weights on ``x`` itself (zeros without ``append_features``)."""
        self._check_initialized()
        if not self.append_features:
            return np.zeros(self.n_features_in_)
        return self._inner.leading_coef(self.n_features_in_)

    @property
    def intercept_(self) -> float:
        self._check_initialized()
        return float(self._inner.intercept_)

    @property
    def fits_(self) -> int:
        """Ensembles installed so far."""
        self._check_initialized()
        return int(self._own_state["fits"][0])

    @property
    def fit_points_(self) -> tuple[int, int]:
        """The last fit's ``(fit_from, fit_at)`` event counts ((0, 0) before any)."""
        self._check_initialized()
        own = self._own_state
        return int(own["fit_from"][0]), int(own["fit_at"][0])
