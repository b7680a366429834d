"""``logistic``: online logistic regression by per-coordinate FTRL-Proximal (McMahan et al.,
"Ad click prediction: a view from the trenches", KDD 2013, Algorithm 1), the baseline that
fraud and click-through teams run, or, on narrow models by default, by a Gaussian (Laplace)
posterior updated one event at a time.  Equations: :mod:`core._kernels.logistic` and
:mod:`core._kernels.logistic_laplace`.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from core._kernels import logistic as kernels
from core._kernels import logistic_laplace as laplace
from core.csr import CSRMatrix
from core.errors import InvalidParameter, InvalidState
from core.learners import _in_use, register
from core.learners._base import OnlineLearner, kernel_scores
from core.learners._forgetting import (
    HALF_LIFE,
    HalfLife,
    clock_invariants,
    clock_state,
    half_life_arg,
)
from core.learners._kept_params import KEPT, KeptParams, LogisticParams
from core.learners._params import BOOLEAN, Interval, Options
from core.learners._state import Count, Finite, Grown

__all__ = ["Logistic"]

#: the empty int64 array the kernels take for "no forgetting" (never read then)
_NO_CLOCK = np.empty(0, dtype=np.int64)
#: the empty class counts the kernels take for "no base-rate offset" (never read then)
_NO_COUNTS = np.empty(0)
#: the FTRL accumulators of the weights and the intercept, read in one C call
_FTRL_ARRAYS = operator.itemgetter("z", "n", "intercept_z", "intercept_n")

#: [CHOICE] ``solver=None`` takes the Laplace solver up to this many features: its O(D^2)
#: per event is then at most about 8 us (bench/README.md, "logistic's Laplace solver"), and
#: the wider sets of the suite gain little from it; wider models take FTRL (O(nnz))
LAPLACE_DEFAULT_FEATURES = 128
#: the widest model an explicit ``solver="laplace"`` accepts: its covariance is D x D float64
#: (2049^2 x 8 bytes = 34 MB per model, in memory and in every stored state)
LAPLACE_MAX_FEATURES = 2048


@register
class Logistic(KeptParams, HalfLife, OnlineLearner):
    """Online logistic regression: per-coordinate FTRL-Proximal with L1 + L2, or (``solver``;
    the default on models of at most 128 features) a Gaussian posterior updated one event at a
    time, which comes close to the batch fit in one pass.

    FTRL-Proximal (McMahan et al. 2013, Algorithm 1) keeps per-feature accumulators ``z_i``
    and ``n_i``; the weight (docs/algorithms/logistic.md (logistic.3)), the logit score
    (logistic.8), the log-loss gradient (logistic.2) and the step (logistic.4)-(logistic.6)
    are stated there.

    Each coordinate has its own AdaGrad-like step ``alpha / (beta + sqrt(n_i))``, so rare
    features (one-hot, hashed) move fast and frequent ones settle.  The weights are never
    stored: (logistic.3) is evaluated for the event's non-zero features only (coordinates with
    ``x_i = 0`` have ``g_i = 0`` and do not change), which makes an event O(nnz) for CSR
    input, whatever ``n_features`` is.

    The Laplace solver (docs/algorithms/logistic.md (logistic.11)-(logistic.14);
    :mod:`core._kernels.logistic_laplace`) keeps the weights' mean ``m`` and covariance ``P``
    (intercept included), from ``m = 0``, ``P = prior_variance * I``, and for each event
    ``u = P x~``, ``P -= h / (1 + h u.x~) u u^T``, ``m += (y - p) / (1 + h u.x~) u`` with
    ``h = p (1 - p)``: one Newton step per event on the log posterior, O(D^2) per event; and
    ``process_noise`` added to the variances before each event, so that it keeps learning.

    Parameters
    ----------
    solver : {"ftrl", "laplace"} or None, default None
        None: ``"laplace"`` for models of at most 128 features that set none of ``l1``,
        ``l2``, ``half_life`` (FTRL's own options), ``"ftrl"`` otherwise.  Over the real-data
        suite the Laplace solver's held-out AUC is 0.885 against FTRL's 0.876 (batch logistic
        regression 0.887; bench/README.md, "logistic's Laplace solver").
    prior_variance : float, default 0.3
        The Laplace solver's prior ``N(0, prior_variance * I)``: after one pass the mean
        approximates L2 logistic regression with penalty ``||w||^2 / (2 prior_variance)`` on
        the summed loss.  Not used by FTRL.
    process_noise : float, default 1e-6
        The Laplace solver's random walk of the weights (docs/algorithms/logistic.md
        (logistic.14)): before each event every variance ``P_ii`` gains this much, up to
        ``prior_variance``, so the belief never becomes certain and the model follows a stream
        that changes (without it the steps shrink as 1 / n: after an abrupt change
        ``bench/drift.py`` measured no recovery in 100,000 events; with 1e-6, 7,000).  0 keeps
        the weights fixed (the batch posterior).  Not used by FTRL.
    alpha : float, default 0.2
        Learning-rate scale of (logistic.3) and (logistic.4).  See Notes for how the default was
        chosen.
    beta : float, default 1.0
        Learning-rate smoothing (McMahan et al.: "beta = 1 is usually good enough").
    l1 : float, default 0.0
        L1 strength, in units of the *summed* loss (FTRL penalises the cumulative loss, so
        ``l1 = 1`` is weak after thousands of events): coordinates with ``|z_i| <= l1`` are
        exactly 0.
    l2 : float, default 0.0
        L2 strength, same units.
    fit_intercept : bool, default True
        Learn an intercept ``b``: [CHOICE] a constant feature 1 with its own ``z``, ``n``
        and no penalty ((logistic.3) with ``l1 = l2 = 0``), as a bias feature is handled in click
        prediction practice.  It does not change the ranking of one model's scores, but it
        absorbs the class prior so that ``p`` is calibrated and the gradients (logistic.2) of the
        majority class do not drag every feature weight.
    base_rate_offset : bool, default False
        Add the stream's base rate to the score (docs/algorithms/logistic.md (logistic.10)):
        ``s = w . x + b + log((n_+ + 1/2) / (n_- + 1/2))`` from the class counts of the events
        learned so far (discounted with ``half_life``), and learn on that score, so ``b`` and
        the weights learn the residual.  It does not change the ranking of one model's
        scores, but on a rare-positive stream the scores of early and late events become
        comparable from the start: FTRL's intercept otherwise falls from 0 to the log-odds
        over the first hundreds of events, and the early negatives outrank the later
        positives in every metric pooled over the stream (prequential AUC / pAUC, the
        service's live metrics).  See Notes.
    max_columns : int or None, default None
        The Laplace solver on the columns in use (docs/algorithms/logistic.md (logistic.15),
        :mod:`core.learners._in_use`): its mean and covariance cover the first ``max_columns``
        distinct columns the stream gives a non-zero value, in the order they appear, whatever
        the width (a hashed model's 65,536 columns); a column first seen after they are all
        taken keeps a weight of 0.  Takes the Laplace solver (``solver`` None or
        ``"laplace"``); at most 2,048.  ``auto`` runs it on wide models, where the width alone
        would leave a few numbers and categories to FTRL.
    number_prior_variance : float or None, default None
        With ``max_columns``: the prior variance of a slot whose non-zero values have had more
        than one magnitude (a number), where a slot whose values have had one (an indicator: a
        one-hot or hashed category, +-1 raw and +-4 under ``scale``) keeps ``prior_variance``
        (docs/algorithms/logistic.md (logistic.16)-(logistic.17)).  A slot is an indicator
        until its values vary; then its prior is swapped in the belief.  None: every slot at
        ``prior_variance``.  ``auto``'s wide candidate takes 3: a category is 16 times a
        number's spread under ``scale``, so one prior cannot fit both.
    empirical_prior_per_weight : float or None, default None
        With ``base_rate_offset`` (whose class counts it reads): after the event at which the
        rarer class has this many events per weight of the belief (``D``, the intercept's
        included), the Laplace solver's prior variance is re-estimated by empirical Bayes, the
        one in ``[prior_variance, 10 prior_variance]`` whose Laplace evidence is the largest,
        and the belief is moved to that prior (docs/algorithms/logistic.md
        (logistic.18)-(logistic.19)).  None: ``prior_variance`` throughout.  Not used by FTRL;
        refused with ``max_columns``.
    half_life : float or None, default None
        Forget the stream's past (docs/algorithms/logistic.md (logistic.9)): before an
        accumulator is read, ``z_i`` and ``n_i`` are discounted by ``2 ** (-1 / half_life)``
        per event since they were last read, so an event ``half_life`` events old counts half
        and the per-coordinate step ``alpha / (beta + sqrt(n_i))`` stops shrinking.  For
        streams that change (fraud patterns); None learns from the whole history.
    scaling, max_iter (default 5), shuffle, random_state
        As for every learner (:class:`~core.learners._base.OnlineLearner`).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        The weights (logistic.3) (computed from ``z``, ``n``: O(n_features)).
    intercept_ : float
        The score's constant term: ``b`` (0 without ``fit_intercept``) plus, with
        ``base_rate_offset``, the offset ``log((n_+ + 1/2) / (n_- + 1/2))``.
    state_ : dict of ndarray
        FTRL: ``z``, ``n`` (per feature), ``intercept_z``, ``intercept_n`` (shape (1,)); with
        ``base_rate_offset``, ``class_counts`` (``[n_-, n_+]``); with ``half_life``,
        ``forget_clock`` and ``touched``.  Laplace: ``mean`` (D,) and ``covariance`` (D, D),
        ``D = n_features + 1`` (the intercept last), and ``class_counts`` with the offset;
        with ``max_columns``, ``D = max_columns + 1`` and ``columns`` (the column of each
        slot, -1 while free); with ``number_prior_variance``, ``magnitudes`` (each slot's one
        magnitude so far, 0 before its first non-zero value, -1 once they have varied).

    Notes
    -----
    The served score is the logit ``w . x + b``; ``predict_proba`` gives ``p``.

    Cost: FTRL, O(nnz) per event (two square roots and one division per non-zero); on a
    50-feature dense stream 0.36 times ``spam``'s events/s (``bench/auto_cost.py``).  Laplace,
    O(D^2) per event whatever the sparsity: 0.17 times ``spam`` at 50 features, about 7.5 us
    per event at 128 (bench/README.md, "logistic's Laplace solver").

    [CHOICE] Defaults: ``alpha = 0.2`` had the best held-out AUC of one pass over standardised
    features and was within 0.002 of the best prequential figures; the penalties only cost AUC
    at one pass, so both default to 0 (docs/algorithms/logistic.md, "Hyper-parameters", has the
    table).

    Examples
    --------
    A stream with 5 % positives and one informative feature out of three:

    >>> import numpy as np
    >>> from core.learners import make_learner
    >>> from core.metrics import auc
    >>> rng = np.random.default_rng(7)
    >>> labels = (rng.random(3000) < 0.05).astype(int)
    >>> rows = rng.normal(size=(3000, 3)) + 2.0 * labels[:, None] * np.array([0, 1, 0])
    >>> learner = make_learner("logistic")
    >>> prequential = learner.prequential_step(rows, labels)   # scored, then learned
    >>> bool(auc(labels[1500:], prequential[1500:]) > 0.85)
    True
    >>> int(np.argmax(np.abs(learner.coef_)))                  # the informative feature
    1
    >>> bool(learner.predict_proba(rows[:1])[0, 1] < 0.5)      # rare positives: a low prior
    True
    """

    name = "logistic"

    solver: str | None = None
    alpha: float = 0.2
    beta: float = 1.0
    l1: float = 0.0
    l2: float = 0.0
    prior_variance: float = 0.3
    process_noise: float = 1e-6
    fit_intercept: bool = True
    base_rate_offset: bool = False
    max_columns: int | None = None
    number_prior_variance: float | None = None
    empirical_prior_per_weight: float | None = None
    max_iter = 5

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "solver": [Options(("ftrl", "laplace")), None],
        "prior_variance": [Interval(float, 0, None, closed="neither")],
        "process_noise": [Interval(float, 0, None, closed="left")],
        "alpha": [Interval(float, 0, None, closed="neither")],
        "beta": [Interval(float, 0, None, closed="left")],
        "l1": [Interval(float, 0, None, closed="left")],
        "l2": [Interval(float, 0, None, closed="left")],
        "fit_intercept": [BOOLEAN],
        "base_rate_offset": [BOOLEAN],
        "half_life": HALF_LIFE,
        "max_columns": [Interval(int, 1, LAPLACE_MAX_FEATURES), None],
        "number_prior_variance": [Interval(float, 0, None, closed="neither"), None],
        "empirical_prior_per_weight": [Interval(float, 0, None, closed="neither"), None],
    }

    def _check_params(self) -> None:
        if self.empirical_prior_per_weight is not None and (
            not self.base_rate_offset or self.max_columns is not None
        ):
            raise InvalidParameter(
                "Expected base_rate_offset=True and max_columns=None with "
                "empirical_prior_per_weight "
                "(the re-estimate reads the offset's class counts, and moves the one prior of "
                f"every slot); got: base_rate_offset={self.base_rate_offset!r}, "
                f"max_columns={self.max_columns!r}",
                param="empirical_prior_per_weight",
            )
        if self.number_prior_variance is not None and self.max_columns is None:
            raise InvalidParameter(
                "Expected max_columns with number_prior_variance (a column's kind is kept per "
                "slot of the columns in use); got: max_columns=None",
                param="number_prior_variance",
            )
        if self.max_columns is not None and self.solver == "ftrl":
            raise InvalidParameter(
                "Expected solver None or 'laplace' with max_columns (the columns in use are "
                "the Laplace solver's; FTRL costs O(nnz) at any width); got: solver='ftrl'",
                param="max_columns",
            )
        if self.solver != "laplace" and self.max_columns is None:
            return
        for name in ("l1", "l2", "half_life"):
            if getattr(self, name) not in (0.0, None):
                raise InvalidParameter(
                    f"Expected {name} unset with solver='laplace' (its only penalty is "
                    f"prior_variance, and it forgets through process_noise): use "
                    f"solver='ftrl'; got: {name}={getattr(self, name)!r}",
                    param=name,
                )

    def resolved_solver(self, n_features: int) -> str:
        """The solver of a model of ``n_features``: ``solver``, or when None the Laplace
        solver for narrow models that ask for nothing only FTRL does (``l1``, ``l2``,
        ``half_life``), FTRL otherwise."""
        if self.solver is not None:
            return self.solver
        if self.max_columns is not None:
            return "laplace"
        ftrl_only = self.l1 > 0.0 or self.l2 > 0.0 or self.half_life is not None
        return "ftrl" if ftrl_only or n_features > LAPLACE_DEFAULT_FEATURES else "laplace"

    def width_params(self, n_features: int) -> dict[str, Any]:
        return {"solver": self.resolved_solver(n_features)} if self.solver is None else {}

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        if self.max_columns is not None:
            size = int(self.max_columns) + 1
            return {
                "mean": np.zeros(size),
                "covariance": np.eye(size) * float(self.prior_variance),
                **({"class_counts": np.zeros(2)} if self.base_rate_offset else {}),
                "columns": _in_use.free_columns(size - 1),
                **(
                    {} if self.number_prior_variance is None else {"magnitudes": np.zeros(size - 1)}
                ),
            }
        if self.resolved_solver(n_features) == "laplace":
            if n_features > LAPLACE_MAX_FEATURES:
                raise InvalidParameter(
                    f"Expected at most {LAPLACE_MAX_FEATURES} features with solver='laplace' "
                    f"(its covariance is D x D): use solver='ftrl'; got: {n_features}",
                    param="solver",
                )
            size = n_features + 1
            return {
                "mean": np.zeros(size),
                "covariance": np.eye(size) * float(self.prior_variance),
                **({"class_counts": np.zeros(2)} if self.base_rate_offset else {}),
            }
        return {
            "z": np.zeros(n_features),
            "n": np.zeros(n_features),
            "intercept_z": np.zeros(1),
            "intercept_n": np.zeros(1),
            **({"class_counts": np.zeros(2)} if self.base_rate_offset else {}),
            **self._forget_state(n_features),
        }

    def _forget_state(self, n_features: int) -> dict[str, np.ndarray]:
        # the event at which each accumulator (the intercept's last) was last discounted
        if self.half_life is None:
            return {}
        return {**clock_state(self.half_life), "touched": np.zeros(n_features + 1, np.int64)}

    def _state_invariants(self, n_features: int) -> dict:
        if self.resolved_solver(n_features) == "laplace":
            # the covariance's symmetry and positive semi-definiteness: _check_state
            return {
                "mean": Grown(),
                "covariance": Grown(),
                **({"class_counts": Finite(0.0)} if self.base_rate_offset else {}),
                **({} if self.max_columns is None else {"columns": Count(-1, "n_features")}),
                **({} if self.number_prior_variance is None else {"magnitudes": Finite(-1.0)}),
            }
        # z may take any sign; n sums squared gradients (docs/algorithms/logistic.md (logistic.6))
        return {
            "z": Finite(),
            "n": Finite(0.0),
            "intercept_z": Finite(),
            "intercept_n": Finite(0.0),
            **({"class_counts": Finite(0.0)} if self.base_rate_offset else {}),
            **clock_invariants(self.half_life),
            **({} if self.half_life is None else {"touched": Count(0, "forget_clock")}),
        }

    def _build_kernel_params(self) -> LogisticParams:
        fit, offset = bool(self.fit_intercept), bool(self.base_rate_offset)
        solver = (float(self.prior_variance), float(self.process_noise), offset)
        number, per_weight = self.number_prior_variance, self.empirical_prior_per_weight
        ftrl = (float(self.alpha), float(self.beta), float(self.l1), float(self.l2), fit,
                half_life_arg(self.half_life), offset)  # fmt: skip
        kinds = None if number is None else (solver[0], float(number), *solver[1:])
        at = None if per_weight is None else float(per_weight)
        return LogisticParams(ftrl, solver, kinds, fit, offset, at)

    def _accumulators(self) -> tuple:
        s = self.state_
        clock = s.get("forget_clock", _NO_CLOCK)
        touched = s.get("touched", _NO_CLOCK)
        counts = s.get("class_counts", _NO_COUNTS)
        params = self.__dict__.get(KEPT) or self._kernel_params()
        return (*_FTRL_ARRAYS(s), clock, touched, counts, params.ftrl)

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """The Laplace solver's covariance is symmetric positive semi-definite, with variances
        at most each slot's prior variance: (12), (14) and (17) keep it so (so every entry is
        bounded by the priors), and ``1 + h v`` of (12)-(13) is at least 1 only then."""
        if "covariance" not in state:
            return
        if "columns" in state:
            width = state.get("n_features")
            _in_use.check_columns(state["columns"], None if width is None else int(width[0]))
        priors = np.full(state["mean"].shape[0], float(self.prior_variance))
        names = np.full(priors.shape[0], "prior_variance", dtype=object)
        if 0 < self._evidence_at(priors.shape[0]) <= np.min(state["class_counts"]):
            # (logistic.19) after the re-estimate: variances up to the grid's largest prior
            priors *= laplace.EVIDENCE_RANGE
            names[:] = "EVIDENCE_RANGE prior_variance (the re-estimate's count reached)"
        if "magnitudes" in state:
            _in_use.check_magnitudes(state["magnitudes"], state["columns"])
            varied = np.append(state["magnitudes"] == laplace.VARIED, False)
            priors[varied] = float(self.number_prior_variance)  # type: ignore[arg-type]
            names[varied] = "number_prior_variance"
        covariance = state["covariance"]
        if not np.array_equal(covariance, covariance.T):
            raise InvalidState("state array 'covariance' is not symmetric", field="covariance")
        over = np.diag(covariance) - priors * (1.0 + 1e-9)
        if np.any(over > 0.0):
            at = int(np.argmax(over))
            raise InvalidState(
                f"state array 'covariance' has a variance of {float(covariance[at, at])!r} at "
                f"{at}; expected at most {names[at]} ({float(priors[at])!r})",
                field="covariance",
            )
        # [CHOICE] a Cholesky factorisation of P + 1e-9 scale I (5x cheaper than eigenvalues:
        # 0.2 ms at 128 features, 0.2 s at 2,048) fails only for an eigenvalue below -1e-9 scale
        scale = max(1.0, float(np.max(np.abs(np.diag(covariance)))))
        try:
            np.linalg.cholesky(covariance + 1e-9 * scale * np.eye(covariance.shape[0]))
        except np.linalg.LinAlgError:
            raise InvalidState(
                "state array 'covariance' is not positive semi-definite (it has a negative "
                "eigenvalue); expected the covariance the solver keeps",
                field="covariance",
            ) from None

    def _laplace_args(self) -> tuple:
        s = self.state_
        offset = (self.__dict__.get(KEPT) or self._kernel_params()).base_rate_offset
        return s["mean"], s.get("class_counts", _NO_COUNTS), offset

    def _evidence_at(self, size: int) -> float:
        """The kernels' ``evidence_at`` for a belief of ``size`` weights: the rarer class's
        count of the re-estimate (logistic.18), 0 for none."""
        per_weight = (self.__dict__.get(KEPT) or self._kernel_params()).evidence_per_weight
        return 0.0 if per_weight is None else per_weight * size

    def _learn(self, X, y: np.ndarray, scores: np.ndarray) -> None:
        state = self.state_
        if "covariance" in state:
            kept: LogisticParams = self.__dict__.get(KEPT) or self._kernel_params()
            mean, covariance, columns = state["mean"], state["covariance"], state.get("columns")
            counts = state.get("class_counts", _NO_COUNTS)
            fit, hyper = kept.fit_intercept, kept.laplace
            if columns is not None:
                X = _in_use.on_slots(X, columns, take=True)
            at = self._evidence_at(mean.shape[0])
            if "magnitudes" in state:
                laplace.laplace_kinds_csr(
                    X.indptr, X.indices, X.data, y, scores, mean, covariance, counts,
                    state["magnitudes"], fit, kept.kinds,
                )  # fmt: skip
            elif isinstance(X, CSRMatrix):
                rows = X.indptr, X.indices, X.data
                laplace.laplace_csr(*rows, y, scores, mean, covariance, counts, fit, hyper, at)
            else:
                laplace.laplace_dense(X, y, scores, mean, covariance, counts, fit, hyper, at)
            return
        accumulators = self._accumulators()
        if isinstance(X, CSRMatrix):
            kernels.logistic_csr(X.indptr, X.indices, X.data, y, scores, *accumulators)
        else:
            kernels.logistic_dense(X, y, scores, *accumulators)

    def _decision(self, X) -> np.ndarray:
        if "columns" in self.state_:
            X = _in_use.on_slots(X, self.state_["columns"], take=False)
        if "covariance" in self.state_:
            return kernel_scores(
                X, laplace.laplace_scores_dense, laplace.laplace_scores_csr, *self._laplace_args()
            )
        accumulators = self._accumulators()
        return kernel_scores(X, kernels.decision_dense, kernels.decision_csr, *accumulators)

    def predict_proba(self, X) -> np.ndarray:
        """``[[1 - p, p], ...]`` with ``p = sigmoid(decision_function(X))`` (sklearn's layout)."""
        logits = self.decision_function(X)
        # sigmoid without overflow: exp of a non-positive number only
        e = np.exp(-np.abs(logits))
        positive = np.where(logits >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        return np.column_stack([1.0 - positive, positive])

    @property
    def coef_(self) -> np.ndarray:
        """The weights: FTRL's of (logistic.3), computed from the accumulators; the Laplace
        solver's mean (without the intercept)."""
        self._check_initialized()
        if "columns" in self.state_:
            width = int(self.state_["n_features"][0])
            return _in_use.scatter(self.state_["mean"][:-1], self.state_["columns"], width)
        if "covariance" in self.state_:
            return self.state_["mean"][:-1].copy()
        z, n, _, _, clock, touched, _, hyper = self._accumulators()
        out = np.empty_like(z)
        kernels.all_weights(z, n, clock, touched, hyper, out)
        return out

    def leading_coef(self, count: int) -> np.ndarray:
        """FTRL's weights (logistic.3) of the first ``count`` coordinates only: each weight is
        its own coordinate's, so they are ``coef_[:count]`` bit for bit."""
        self._check_initialized()
        if "covariance" in self.state_:
            return self.coef_[:count]
        z, n, _, _, clock, touched, _, hyper = self._accumulators()
        out = np.empty(count)
        kernels.all_weights(z[:count], n[:count], clock, touched[:count], hyper, out)
        return out

    @property
    def intercept_(self) -> float:
        self._check_initialized()
        if "covariance" in self.state_:
            mean, counts, offset = self._laplace_args()
            return float(mean[-1] + kernels.base_rate(counts, offset))
        _, _, bias_z, bias_n, clock, touched, counts, hyper = self._accumulators()
        # the score's constant term: b, plus the base-rate offset (logistic.10) when it is on
        bias = kernels.served_intercept(bias_z, bias_n, clock, touched, hyper)
        return float(bias + kernels.base_rate(counts, hyper[6]))
