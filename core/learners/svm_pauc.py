"""SVM_pAUC: the structural-SVM batch solver for the partial AUC (Narasimhan & Agarwal).

Equations, errata and settings: docs/algorithms/svm_pauc.md ([J] = the journal version,
arXiv 1605.04337).  Three problems, all over a linear scorer ``f(x) = w.x``:

``tight`` on [0, beta]    ``min 1/2 ||w||^2 + C R_tight(0,beta)(w)``; R_tight(0,beta) equals the
                          hinge over the top ``j_beta = ceil(n beta)`` negatives ([J] Thm 5).
``tight`` on [alpha,beta] the same with the tight convex surrogate of [J] eq. (18), most violated
                          constraint by [J] Algorithm 3 in O(n log n + m log j_beta + (m+j_beta) d).
``dc`` on [alpha, beta]   ``min 1/2 ||w||^2 + C R_hinge(alpha,beta)(w)`` (non-convex, [J] eq. (9))
                          by CCCP ([J] Algorithm 4 corrected:
                          docs/algorithms/svm_pauc.md (svm_pauc.10)-(svm_pauc.13)).

All surrogates are normalised by ``N = m (j_beta - j_alpha)`` ([J] eq. (16);
docs/algorithms/svm_pauc.md (svm_pauc.1) and its Errata for the shared normalisation of loss and
feature map).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from core._kernels import simplex_qp
from core._kernels.pauc_surrogate import count_above, count_below, tight_pauc_coefficients
from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners import register
from core.learners._base import OnlineLearner, WeightVectorLearner
from core.learners._event_rows import check_buffer_size
from core.learners._params import FPR_RANGE, Interval, Options
from core.learners._state import VALUE_BOUND, Count, Finite, Grown, Index, OneOf
from core.preprocessing import scale_batch
from core.validation import check_batch, check_fpr_range

__all__ = [
    "BatchSolution",
    "SVMpAUC",
    "SolverResult",
    "solve_svm_pauc",
    "tight_surrogate",
    "hinge_surrogate",
]


def _split(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(X[y > 0]), np.ascontiguousarray(X[y <= 0])


def range_counts(alpha: float, beta: float, n_negative: int) -> tuple[int, int]:
    """``(j_alpha, j_beta) = (floor(n alpha), ceil(n beta))`` ([J] §2.1 rounding), with
    ``j_beta >= j_alpha + 1`` so that the range always holds a negative."""
    j_alpha = int(count_below(alpha, n_negative))
    j_beta = min(max(int(count_above(beta, n_negative)), j_alpha + 1), n_negative)
    return j_alpha, j_beta


def most_violated_constraint(positives, negatives, w, j_alpha, j_beta, normaliser):
    """[J] Algorithm 2 (j_alpha = 0) / Algorithm 3: ``(Delta, g, value)`` with
    ``value = Delta - w.g = R_tight(w)``, all divided by ``normaliser``."""
    pos_coef = np.empty(len(positives))
    neg_coef = np.empty(len(negatives))
    value, delta = tight_pauc_coefficients(
        positives @ w, negatives @ w, j_alpha, j_beta, pos_coef, neg_coef
    )
    # g = (1/N) [sum_i r_i x_i - sum_j q_j z_j]   (docs/algorithms/svm_pauc.md (svm_pauc.6));
    # pos_coef = -r, neg_coef = q
    g = -(pos_coef @ positives + neg_coef @ negatives) / normaliser
    return delta / normaliser, g, value / normaliser


def tight_surrogate(X, y, w, alpha: float = 0.0, beta: float = 0.1) -> float:
    """R_tight(alpha, beta)(w; S) of [J] eq. (18) (= the top-j_beta hinge when alpha = 0).

    >>> X = np.array([[2.0], [0.0], [1.5], [-1.0]]); y = np.array([1, 1, -1, -1])
    >>> tight_surrogate(X, y, np.array([1.0]), alpha=0.0, beta=0.5)  # (0.5 + 2.5) / (2 * 1)
    1.5
    """
    positives, negatives = _split(np.asarray(X, dtype=float), np.asarray(y))
    j_alpha, j_beta = range_counts(alpha, beta, len(negatives))
    normaliser = len(positives) * (j_beta - j_alpha)
    return most_violated_constraint(positives, negatives, w, j_alpha, j_beta, normaliser)[2]


def hinge_surrogate(X, y, w, alpha: float = 0.0, beta: float = 0.1) -> float:
    """R_hinge(alpha, beta)(w; S) of [J] eq. (9): the hinge between every positive and the
    negatives ranked ``j_alpha+1 .. j_beta`` by ``w`` (non-convex when ``j_alpha > 0``)."""
    positives, negatives = _split(np.asarray(X, dtype=float), np.asarray(y))
    j_alpha, j_beta = range_counts(alpha, beta, len(negatives))
    normaliser = len(positives) * (j_beta - j_alpha)
    upper = most_violated_constraint(positives, negatives, w, 0, j_beta, normaliser)[2]
    lower = (
        most_violated_constraint(positives, negatives, w, 0, j_alpha, normaliser)[2]
        if j_alpha > 0
        else 0.0
    )
    return upper - lower  # [J] §6: j_beta R_tight(0,beta) - j_alpha R_tight(0,alpha), over N


@dataclass
class SolverResult:
    w: np.ndarray
    objective: float  # 1/2 ||w||^2 + C * surrogate(w) (the problem being solved)
    n_iter: int  # cutting-plane iterations (summed over CCCP rounds for "dc")
    converged: bool
    n_outer: int = 1  # CCCP rounds ("dc")
    # w = 0 is optimal within tol: J(0) = C (every pair at margin 0 costs 1) and J(w) >= C (1 - tol)
    degenerate: bool = False


def _cutting_plane(positives, negatives, j_alpha, j_beta, normaliser, C, tol, max_iter,
                   linear=None):  # fmt: skip
    """1-slack cutting plane ([J] Algorithm 1) for
    ``min 1/2 ||w||^2 + C (xi + linear.w)``, ``xi >= Delta_k - w.g_k`` for all constraints.

    ``linear`` is the CCCP linearisation term (``v_t`` of docs/algorithms/svm_pauc.md
    (svm_pauc.11)), else 0.
    Dual: ``max_{lam >= 0, sum lam <= C} sum_k lam_k (Delta_k + C g_k.v) - 1/2 ||G lam||``
    with ``w = sum_k lam_k g_k - C v``.
    """
    n_features = positives.shape[1]
    shift = np.zeros(n_features) if linear is None else C * linear
    deltas: list[float] = []
    vectors: list[np.ndarray] = []
    gram = np.zeros((0, 0))
    lam = np.array([C], dtype=float)
    w = -shift
    converged = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007
        delta, g, value = most_violated_constraint(
            positives, negatives, w, j_alpha, j_beta, normaliser
        )
        xi = max(0.0, max((d - w @ v for d, v in zip(deltas, vectors, strict=True)), default=0.0))
        if value <= xi + tol:
            converged = True
            break
        # grow the Gram matrix by one row / column (O(k d))
        new_row = np.array([v @ g for v in vectors] + [g @ g])
        size = len(vectors) + 1
        grown = np.empty((size, size))
        grown[:-1, :-1] = gram
        grown[-1, :] = new_row
        grown[:, -1] = new_row
        gram = grown
        deltas.append(delta)
        vectors.append(g)
        lam = np.append(lam, 0.0)  # warm start: old multipliers stay feasible
        G = np.asarray(vectors)
        linear_term = np.asarray(deltas) + G @ shift
        simplex_qp.solve_simplex_qp(gram, linear_term, C, lam, 1e-12 * max(1.0, C), 200_000)
        w = lam[1:] @ G - shift
    value = most_violated_constraint(positives, negatives, w, j_alpha, j_beta, normaliser)[2]
    objective = 0.5 * w @ w + C * (value + (0.0 if linear is None else linear @ w))
    return w, objective, n_iter, converged


def solve_svm_pauc(X, y, *, alpha=0.0, beta=0.1, C=1.0, tol=1e-3, max_iter=1000,
                   method="tight", dc_tol=1e-3, dc_max_iter=20) -> SolverResult:  # fmt: skip
    """Solve SVM_pAUC on (X, y) (dense float64, labels +-1); see :class:`SVMpAUC`.

    >>> rng = np.random.default_rng(0)
    >>> y = np.where(rng.random(300) < 0.2, 1, -1)
    >>> X = rng.normal(size=(300, 3)) + (y[:, None] > 0) * np.array([2.0, 0.0, 0.0])
    >>> result = solve_svm_pauc(X, y, beta=0.1, C=10.0)
    >>> result.converged, bool(result.w[0] > 5 * abs(result.w[1]))
    (True, True)
    """
    positives, negatives = _split(X, y)
    if len(positives) == 0 or len(negatives) == 0:
        raise ValueError(
            f"svm_pauc needs both classes; got {len(positives)} positive(s) and "
            f"{len(negatives)} negative(s)"
        )
    j_alpha, j_beta = range_counts(alpha, beta, len(negatives))
    normaliser = len(positives) * (j_beta - j_alpha)
    w, objective, n_iter, converged = _cutting_plane(
        positives, negatives, j_alpha, j_beta, normaliser, C, tol, max_iter
    )
    if method == "tight" or j_alpha == 0:
        return SolverResult(w, objective, n_iter, converged, 1, objective >= C * (1.0 - tol))

    # CCCP on J(w) = 1/2||w||^2 + C (f(w) - g(w)), f = top-j_beta hinge / N, g = top-j_alpha
    # hinge / N ([J] §6, Algorithm 4 corrected:
    # docs/algorithms/svm_pauc.md (svm_pauc.10)-(svm_pauc.12)).  w_0 = the tight solution.
    def dc_objective(weights):
        f = most_violated_constraint(positives, negatives, weights, 0, j_beta, normaliser)[2]
        g = most_violated_constraint(positives, negatives, weights, 0, j_alpha, normaliser)[2]
        return 0.5 * weights @ weights + C * (f - g)

    current = dc_objective(w)
    total_iter, n_outer, converged_outer = n_iter, 0, False
    for n_outer in range(1, dc_max_iter + 1):  # noqa: B007
        # supergradient of -g at w_t (docs/algorithms/svm_pauc.md (svm_pauc.11)):
        # v_t = (1/N) sum_{i, j <= j_alpha, active} (x_i - z_j)
        _, g_vector, _ = most_violated_constraint(positives, negatives, w, 0, j_alpha, normaliser)
        linear = g_vector  # = -subgradient of g; the convex step minimises f(w) + v_t.w
        candidate, _, n_iter, _ = _cutting_plane(
            positives, negatives, 0, j_beta, normaliser, C, tol, max_iter, linear=linear
        )
        total_iter += n_iter
        value = dc_objective(candidate)
        if value > current:  # an inexact convex step must not undo progress
            converged_outer = True
            break
        w, previous, current = candidate, current, value
        # corrected stopping test (docs/algorithms/svm_pauc.md (svm_pauc.13))
        if previous - current <= dc_tol:
            converged_outer = True
            break
    return SolverResult(
        w, current, total_iter, converged and converged_outer, n_outer, current >= C * (1.0 - tol)
    )


class BatchSolution(WeightVectorLearner):
    """The served weights ``w`` and the ``converged`` flag of a batch solver's state (svm_pauc,
    spdam)."""

    @property
    def converged_(self) -> bool:
        """Whether the last solve met its tolerance."""
        self._check_initialized()
        return bool(self.state_["converged"][0])


@register
class SVMpAUC(BatchSolution):
    """SVM_pAUC (Narasimhan & Agarwal): structural SVM for pAUC over FPR [alpha, beta], batch.

    ``fit(X, y)`` solves ``min_w 1/2 ||w||^2 + C * R(w)`` with the 1-slack cutting-plane method
    ([J] Algorithm 1): each iteration adds the most violated constraint ([J] Algorithm 2 for
    alpha = 0, Algorithm 3 for alpha > 0, both exact in O(n log n + (m + j_beta) d)) and
    re-solves the small dual QP over the working set with an exact SMO solver of our own
    (``core/_kernels/simplex_qp.py``), until no constraint is violated by more than ``tol``.

    Parameters
    ----------
    alpha, beta : float
        FPR range, ``0 <= alpha < beta <= 1``; ``j_alpha = floor(n_- alpha)``,
        ``j_beta = ceil(n_- beta)`` ([J] eq. (2) rounding).
    C : float
        Weight of the surrogate.  [CHOICE] Default 1.0 (the paper tunes C in 1e-5 .. 1e4 on a
        validation set; 1.0 sits in the flat part of that grid on standardised features, see
        ``bench/quality.py``).
    tol : float
        ``epsilon`` of the stopping rule ``H(w) <= xi + tol`` (the surrogate is within ``tol``
        of optimal).  [J] used 1e-4 and 1e-3; default 1e-3.
    method : {"tight", "dc"}
        ``"tight"``: the convex tight surrogate.  ``"dc"``: the non-convex hinge surrogate
        ([J] eq. (9)) by CCCP from the tight solution, stopping when the objective improves by
        less than ``dc_tol`` (docs/algorithms/svm_pauc.md (svm_pauc.13), Algorithm 4 corrected);
        equal to ``"tight"`` when ``alpha = 0``.
    max_iter : int
        Cap on cutting-plane iterations (per CCCP round).
    dc_tol, dc_max_iter
        CCCP stopping rule (paper: tau = 1e-3) and round cap.
    window : int
        [CHOICE] ``partial_fit``: a batch solver has no online update, so each batch is
        appended to a ring buffer of the latest ``window`` events (part of the state) and the
        model is refit from scratch on it (skipped while the window holds one class only).
        Prequential scores of a batch come from the model before the batch.  ``fit`` ignores
        the window.
    scaling, shuffle, random_state
        As for every learner (the solver is deterministic; shuffle and random_state are unused).

    Notes
    -----
    At ``w = 0`` every pair sits at margin 0, so the objective is ``C``; near 0 the surrogate is
    ``1 - (mean positive score - mean top-negative score)``.  When no direction puts the
    positives' mean above the mean of the top ``j_beta`` negatives (weakly separated data and a
    narrow range), ``w = 0`` is the minimiser: the solver then sets ``degenerate_`` and warns.
    For two Gaussian classes whose means differ by ``delta`` standard deviations this is the
    case when ``delta < pdf(z) / beta`` with ``z`` the ``1 - beta`` normal quantile: 1.75 for
    beta = 0.1 (an AUC below about 0.89), 0.80 for beta = 0.5.
    Training on a wider range is the remedy [J] itself recommends
    (docs/algorithms/svm_pauc.md, Choices): on
    ``bench/quality.py``'s ``rare_1pct`` beta = 0.1 is degenerate (held-out pAUC(0, 0.1) 0.07)
    while beta = 0.3 gives 0.34, as good as logistic regression.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> y = (rng.random(2000) < 0.05).astype(int)
    >>> X = rng.normal(size=(2000, 4)) + y[:, None] * np.array([1.5, 1.0, 0.0, 0.0])
    >>> model = SVMpAUC(beta=0.1).fit(X, y)
    >>> bool(model.converged_), bool(model.coef_[0] > model.coef_[1] > abs(model.coef_[2]))
    (True, True)
    """

    name = "svm_pauc"
    optimises_pauc = True
    online = False
    supports_sparse = True  # densified (up to 2**27 values): the solver works on dense matrices

    alpha: float = 0.0
    beta: float = 0.1
    C: float = 1.0
    tol: float = 1e-3
    method: str = "tight"
    max_iter: int = 1000
    dc_tol: float = 1e-3
    dc_max_iter: int = 20
    window: int = 2000

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        **FPR_RANGE,
        "C": [Interval(float, 0, None, closed="neither")],
        "tol": [Interval(float, 0, None, closed="neither")],
        "method": [Options(("tight", "dc"))],
        "dc_tol": [Interval(float, 0, None, closed="neither")],
        "dc_max_iter": [Interval(int, 1, None)],
        "window": [Interval(int, 2, None)],
    }

    def _check_params(self) -> None:
        check_fpr_range(self.alpha, self.beta)

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        check_buffer_size("svm_pauc (window)", self.window, n_features)
        return {
            "w": np.zeros(n_features),
            "objective": np.zeros(1),
            "n_iter": np.zeros(1, dtype=np.int64),
            "converged": np.zeros(1, dtype=np.int64),
            "degenerate": np.zeros(1, dtype=np.int64),
            "window_X": np.zeros((self.window, n_features)),
            "window_y": np.zeros(self.window, dtype=np.int64),
            "window_fill": np.zeros(1, dtype=np.int64),
            "window_next": np.zeros(1, dtype=np.int64),
        }

    def _state_invariants(self, n_features: int) -> dict:
        return {
            "w": Grown(),
            "objective": Grown(bound=VALUE_BOUND),
            "n_iter": Count(),
            "converged": OneOf((0, 1)),
            "degenerate": OneOf((0, 1)),
            "window_X": Finite(),
            "window_y": OneOf((-1, 0, 1)),  # 0: a slot never filled
            "window_fill": Count(0, self.window),
            "window_next": Index(self.window),
        }

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        # a ring buffer: until it is full the next slot is the first free one
        fill, slot = int(state["window_fill"][0]), int(state["window_next"][0])
        if fill < self.window and slot != fill:
            raise InvalidState(
                f"state array 'window_next' holds {slot}; a window holding {fill} of "
                f"{self.window} events writes slot {fill} next",
                field="window_next",
            )

    def _solve(self, X: np.ndarray, y: np.ndarray) -> None:
        result = solve_svm_pauc(
            X, y, alpha=self.alpha, beta=self.beta, C=self.C, tol=self.tol,
            max_iter=self.max_iter, method=self.method, dc_tol=self.dc_tol,
            dc_max_iter=self.dc_max_iter,
        )  # fmt: skip
        state = self.state_
        state["w"][:] = result.w
        state["objective"][0] = result.objective
        state["n_iter"][0] = result.n_iter
        state["converged"][0] = int(result.converged)
        state["degenerate"][0] = int(result.degenerate)
        if result.degenerate:
            warnings.warn(
                f"svm_pauc: the pAUC surrogate on FPR [{self.alpha}, {self.beta}] is minimised at "
                "w = 0 on this data (no direction ranks the positives' mean above the mean of the "
                "top negatives), so the weights carry no ranking; train on a wider range, e.g. "
                "beta=0.3, and evaluate on the narrow one",
                UserWarning,
                stacklevel=3,
            )

    def fit(self, X, y) -> SVMpAUC:
        """Solve the batch problem on ``(X, y)`` from scratch."""
        self.validate_params()
        features, labels = check_batch(X, y, accept_sparse=True)
        self.initialize(features.shape[1])

        features = scale_batch(self.scaling, self.state_, features, learn=True)
        if isinstance(features, CSRMatrix):
            check_buffer_size("svm_pauc", features.shape[0], features.shape[1])
            features = features.toarray()
        self._solve(features, labels)
        return self

    def _learn(self, X, y, scores) -> None:
        state = self.state_
        dense = X.toarray() if isinstance(X, CSRMatrix) else X
        if len(scores):
            scores[:] = dense @ state["w"]
        size = self.window
        for row, label in zip(dense, y, strict=True):  # ring buffer of the latest events
            slot = int(state["window_next"][0])
            state["window_X"][slot] = row
            state["window_y"][slot] = label
            state["window_next"][0] = (slot + 1) % size
            state["window_fill"][0] = min(size, int(state["window_fill"][0]) + 1)
        fill = int(state["window_fill"][0])
        labels = state["window_y"][:fill]
        if (labels > 0).any() and (labels < 0).any():
            self._solve(state["window_X"][:fill], labels)

    def _decision(self, X) -> np.ndarray:
        dense = X.toarray() if isinstance(X, CSRMatrix) else X
        return dense @ self.state_["w"]

    @property
    def degenerate_(self) -> bool:
        """True when ``w = 0`` solved the problem (within ``tol``): see Notes."""
        self._check_initialized()
        return bool(self.state_["degenerate"][0])
