"""regSOLAM / SOLAM: stochastic online AUC maximisation as a saddle-point problem
(Ying, Wen, Lyu, NIPS 2016; Natole thesis ch. 3, Algorithm 18).

Equations, errata and the authors' code: docs/algorithms/solam.md.
"""

from __future__ import annotations

import math

import numpy as np

from core._kernels import solam as kernels
from core.csr import CSRMatrix
from core.errors import InvalidParameter
from core.learners import register
from core.learners._base import OnlineLearner
from core.learners._forgetting import (
    HALF_LIFE,
    forget_arrays,
    half_life_arg,
    weighted_invariants,
    weighted_state,
)
from core.learners._params import BOOLEAN, Interval
from core.learners._state import VALUE_BOUND, Count, Finite, Grown
from core.learners.spam import ScaledIterateLearner, feature_table

__all__ = ["SOLAM"]

_EMPTY = np.empty(0)


@register
class SOLAM(ScaledIterateLearner):
    """Online AUC maximisation by primal-dual SGD on the saddle-point form of the square loss.

    regSOLAM (thesis Alg. 18) keeps, besides ``w``, three scalars ``a`` (mean positive score),
    ``b`` (mean negative score) and the dual ``alpha``, and needs no class means: O(n_features)
    memory, O(n_features) per dense event and O(nnz) per CSR event.

    Parameters
    ----------
    l2 : float, default 0.01
        The L2 strength lambda of (3.3), on the weights of the normalised features (Notes).
        It also sets the radius of the ball ``||w|| <= R = sqrt(2 / lambda)`` (thesis §3.3;
        docs/algorithms/solam.md (solam.7)).  ``l2=0`` is plain SOLAM, which then needs ``radius``.
    eta0 : float, default 2.0
        zeta in the step size ``gamma_t = zeta / sqrt(t)`` (Cor. 3.4.1), in the scale-free units
        described in Notes.
    radius : float or None, default None
        R, the bound on ``||w||``; None means ``sqrt(2 / l2)``.
    kappa : float or None, default None
        kappa, the bound on ``||x||`` that sizes ``|a|, |b| <= R kappa`` and
        ``|alpha| <= 2 R kappa``.  None estimates it as the largest ``||x||`` seen so far (in
        the normalised units of Notes, so about 1 to 3 on standardised data whatever the number of
        features); a number is taken as given, in the same units (1 on unit-norm data).
    average : bool, default True
        Serve the average of the pre-update iterates instead of the last iterate.
        [CHOICE] The uniform average, not Alg. 18's average weighted by ``gamma_t``: weights
        decreasing as ``1 / sqrt(t)`` put half of the weight on the first quarter of the stream,
        whose iterates depend on the first few events, so the served model swung with the
        order of the events.  Held-out AUC over 5 shuffles (``bench/tune_defaults.py``):
        flare-F 0.842 ± 0.065 -> 0.867 ± 0.037, car_good 0.633 ± 0.046 -> 0.649 ± 0.031,
        german 0.772 -> 0.783, page_blocks0 0.896 -> 0.908; no set lost.
    half_life : float or None, default None
        Forget with this half-life in events (see Notes); None: the whole history.
    scaling, max_iter (default 5), shuffle, random_state
        As for every learner (:class:`~core.learners._base.OnlineLearner`).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        The served weight vector: the average of the pre-update iterates when ``average=True``,
        else the last iterate.

    Notes
    -----
    Per event t (t counts events): ``p_t`` = fraction of positives among events 1..t, the
    current label included (thesis §3.4); the gradients of ``F_t`` (docs/algorithms/solam.md
    (solam.4)); a descent step on ``(w, a, b)`` and an ascent step on ``alpha`` (solam.6, and
    the page's Errata); projections onto Omega_1,
    Omega_2 (eq. (3.18)); the averages weight each pre-update iterate equally (``average``).

    * [CHOICE] Scale-free steps: the algorithm runs on ``x / sqrt(nu)``, ``nu`` the running mean
      of ``||x||^2`` (this event included); scores are unchanged because the weights are stored
      for the raw features.  Concretely ``w <- P(( 1 - gamma lambda) w - (gamma / nu) c x)`` with
      the ball ``||w|| <= R / sqrt(nu)``.  The thesis normalises every sample to unit norm,
      where ``nu = 1`` and this is exactly Alg. 18; without it one ``zeta`` cannot serve both 10
      and 1000 standardised features (the w-step grows with ``||x||^2``, the steps on a, b,
      alpha do not).
    * [CHOICE] Initial point ``w = 0, a = b = alpha = 0`` (in Omega; the thesis leaves it open);
      [EXTERNAL] the original code starts at ``w = (R / sqrt(d)) 1``, which is an arbitrary
      ranking.  The model therefore scores 0 until its second event.
    * Defaults were chosen with ``bench/quality.py`` (grid eta0 in 0.25..2, l2 in 1e-4..0.1,
      3 seeds) over breast_cancer, digits (odd vs even), a 1 %-positive stream, a 300-feature
      dense set and a 2**20-feature sparse set, standardised dense features.  ``eta0 = 1``:
      ``eta0 = 2`` learns digits slightly faster but loses 0.02 prequential AUC on
      breast_cancer (too large first steps); ``l2 = 0.01`` (R = 14.1) gains 0.015 prequential
      AUC on the rare-positive stream over 1e-4, and 0.1 costs 0.02 held-out AUC on digits.
      ``kappa`` made no difference on these sets (the bounds on a, b, alpha stay inactive), so
      the estimate keeps it meaningful without a parameter to tune.
    * [CHOICE] ``eta0 = 2`` since the w-step is capped so that the event's score moves at most
      to the minimiser of its own loss (``core._kernels.spam.capped_rate``) and the average is
      uniform (``average``).  One-pass held-out AUC over 29 real sets
      (``bench/tune_defaults.py``, 3 seeds, raw / standardised features, ``l2 = 0.01``):
      0.858 / 0.858 (``eta0 = 1``), 0.862 / 0.861 (2), 0.862 / 0.861 (4), 0.828 / 0.836 (8);
      2 keeps a factor 4 from the collapse.  On ``bench/quality.py`` 1 -> 2 raised prequential
      AUC on every set but the hashed sparse one (equal).  ``l2``: 1e-3 0.859, 0.01 0.862,
      0.03 0.863 (kept 0.01).

    Forgetting (``half_life``, docs/algorithms/solam.md (solam.12)-(solam.13)): with
    ``half_life=H`` events, ``p_t`` is the exponentially weighted share of positives, the step
    ``gamma_t`` stops shrinking at ``t = H`` and the served average weighs an iterate ``H``
    events old half as much as the newest, so the model follows a stream that changes.

    Examples
    --------
    Sparse input (CSR) learns as its dense copy; here a stream of 10 % positives whose
    third feature carries the signal:

    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from core.learners import make_learner
    >>> from core.metrics import auc
    >>> generator = np.random.default_rng(3)
    >>> labels = (generator.random(2500) < 0.1).astype(int)
    >>> dense = generator.normal(size=(2500, 4)) + 1.8 * labels[:, None] * np.array([0, 0, 1, 0])
    >>> learner = make_learner("solam")
    >>> held_back = learner.prequential_step(sp.csr_matrix(dense), labels)
    >>> bool(auc(labels[1250:], held_back[1250:]) > 0.85)
    True
    >>> int(np.argmax(learner.coef_))
    2
    """

    name = "solam"

    l2: float = 0.01
    eta0: float = 2.0
    radius: float | None = None
    kappa: float | None = None
    average: bool = True
    max_iter = 5

    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "l2": [Interval(float, 0, None, closed="left")],
        "eta0": [Interval(float, 0, None, closed="neither")],
        "radius": [None, Interval(float, 0, None, closed="neither")],
        "kappa": [None, Interval(float, 0, None, closed="neither")],
        "average": [BOOLEAN],
        "half_life": HALF_LIFE,
    }

    def _check_params(self) -> None:
        if self.radius is None and self.l2 == 0:
            raise InvalidParameter(
                "l2=0 (plain SOLAM) needs a radius R bounding ||w||; got radius=None",
                param="radius",
            )

    def _radius(self) -> float:
        return float(self.radius) if self.radius is not None else math.sqrt(2.0 / self.l2)

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        """w = w_scale * w_unscaled; sum_t w_t = avg_offset + avg_coef * w_unscaled."""

        def zeros(size=1):
            return np.zeros(size, dtype=np.float64)

        state = {
            "w_unscaled": zeros(n_features),
            "w_scale": np.ones(1),
            "w_sq_norm": zeros(),
            "a": zeros(),
            "b": zeros(),
            "alpha": zeros(),
            "n_seen": np.zeros(1, dtype=np.int64),
            "n_pos": np.zeros(1, dtype=np.int64),
            "sq_norm_sum": zeros(),
            "max_norm": zeros(),
        }
        if self.average:
            state.update(
                avg_offset=zeros(n_features), avg_coef=zeros(), avg_a=zeros(), avg_b=zeros(),
                avg_alpha=zeros(), gamma_sum=zeros(),
            )  # fmt: skip
        state.update(weighted_state(self.half_life, averaged=False))
        return state

    def _state_invariants(self, n_features: int) -> dict:
        return {
            "w_unscaled": Grown(),
            # the shrink 1 - gamma l2 may be <= 0 on the first events: any finite scale
            "w_scale": Grown(),
            # may dip below 0 by rounding; the kernel clamps it
            "w_sq_norm": Grown(bound=VALUE_BOUND),
            "a": Grown(),
            "b": Grown(),
            "alpha": Grown(),
            "n_seen": Count(),
            "n_pos": Count(0, "n_seen"),
            "sq_norm_sum": Finite(0.0),
            "max_norm": Finite(0.0),
            "avg_offset": Grown(),
            "avg_coef": Grown(),
            "avg_a": Grown(),
            "avg_b": Grown(),
            "avg_alpha": Grown(),
            "gamma_sum": Finite(0.0),
            **weighted_invariants(self.half_life, "n_seen"),
        }

    def _averages(self):
        s = self.state_
        if self.average:
            keys = ("avg_offset", "avg_coef", "avg_a", "avg_b", "avg_alpha", "gamma_sum")
            return tuple(s[key] for key in keys)
        return (_EMPTY,) + tuple(np.zeros(1) for _ in range(5))

    def _run_kernel(self, X, y: np.ndarray, scores: np.ndarray, check_rows: bool) -> int:
        s = self.state_
        table = feature_table(self, ("w_unscaled", "avg_offset"))
        _, *averages = self._averages()
        scalars = (s["w_scale"], s["w_sq_norm"], s["a"], s["b"], s["alpha"])
        rest = (
            s["n_seen"], s["n_pos"], s["sq_norm_sum"], s["max_norm"],
            float(self.eta0), float(self.l2), self._radius(),
            0.0 if self.kappa is None else float(self.kappa), bool(self.average),
            (half_life_arg(self.half_life), *forget_arrays(s)[:3]),
        )  # fmt: skip
        rows = (
            (None, X.indptr, X.indices, X.data)
            if isinstance(X, CSRMatrix)
            else (X, None, None, None)
        )
        return kernels.solam_rows(*rows, y, scores, table, *scalars, *averages, *rest, check_rows)

    def _averaged_weight(self) -> float:
        """The total weight of the averaged iterates (kept only when averaging)."""
        return float(self.state_["gamma_sum"][0]) if self.average else 0.0
