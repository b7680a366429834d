"""OPAUC (one-pass AUC optimisation, Gao et al. ICML 2013) and its AdaOAM and low-rank variants.

Equations, errata and defaults: docs/algorithms/opauc.md (thesis
Algorithms 8-9) and its Errata; kernels in :mod:`core._kernels.opauc`.
"""

from __future__ import annotations

import numpy as np

from core._kernels import opauc as kernels
from core._kernels._bundles import EventBatch
from core._kernels.opauc_sketch import SketchOptions, SketchState, opauc_sketch_learn
from core.csr import CSRMatrix
from core.errors import InvalidParameter, InvalidState
from core.learners import register
from core.learners._base import OnlineLearner, WeightVectorLearner
from core.learners._forgetting import HALF_LIFE, HalfLife, half_life_arg
from core.learners._params import BOOLEAN, Interval
from core.learners._state import VALUE_BOUND, Count, Finite, Grown, Index, StateInvariant

__all__ = ["MAX_FULL_RANK_FEATURES", "MAX_SKETCH_ENTRIES", "OPAUC"]

#: Full-rank OPAUC keeps two d×d covariances: at d = 1000 that is 16 MB of state per model and
#: 2·10⁶ multiply-adds per event.  Above this, ``rank=k`` is required.
MAX_FULL_RANK_FEATURES = 1000

#: A ``rank=k`` sketch holds ``2k × d`` floats per class and costs O(k·d) per event; above
#: this many (64 MB per class, e.g. k = 8 with d > 524,288) it is refused: at d = 2^20 an event
#: would cost ~30 M multiply-adds.
MAX_SKETCH_ENTRIES = 2**23

#: Plain OPAUC with ``rank=k`` buffers up to this many times ``k`` raw events per class between
#: the rebuilds of its factored sketch (:mod:`core._kernels.opauc`); it rebuilds at the shrink
#: once ``(this - 1) · k`` rows are buffered, so every third shrink.
SKETCH_BUFFER_ROWS_PER_RANK = 4

#: [CHOICE] AdaOAM's default step: Adagrad normalises each coordinate's step by its gradient
#: history, so one constant works across feature scales (chosen with ``bench/quality.py``).
DEFAULT_ADAPTIVE_ETA = 0.03

#: [CHOICE] OPAUC's default step is ``DEFAULT_ETA_SCALE / ν_t`` (see ``eta``).
DEFAULT_ETA_SCALE = 0.1


@register
class OPAUC(HalfLife, WeightVectorLearner):
    """One-pass AUC optimisation with the pairwise square loss (Gao et al. 2013; thesis Alg. 8).

    The per-event loss (thesis eq. 2.10) averages ``(1 - y_t wᵀ(x_t - x_i))²/2`` over all past
    events of the opposite class; its gradient needs only that class's running mean and
    covariance (eq. 2.11/2.12)::

        g = λ w - y z + z (zᵀ w) + S_opp w,    z = x_t - c_opp

    so one pass suffices.  Statistics of the event's own class are updated first (mean by
    eq. 2.13, covariance by the corrected recursion of
    docs/algorithms/opauc.md (opauc.4)); no step is taken until both classes were seen.

    Parameters
    ----------
    lam : float, default=1e-4
        L2 penalty ``λ/2 ||w||²``; with ``adaptive=True`` also the radius ``1/sqrt(λ)`` of the
        ball ``w`` is projected onto (``lam=0``: no penalty, no projection).
        [CHOICE] small: the square loss already bounds ``w``; ``1/sqrt(1e-4) = 100`` leaves the
        AdaOAM ball inactive on standardised data.
    eta : float or None, default=None
        Step size.  A number is used as a constant ``η`` (Gao et al. use constant steps).
        None means: ``η_t = 0.1 / ν_t`` for OPAUC, with ``ν_t`` the running mean of ``||x||²``
        over the events seen so far (kept in the state as ``sq_norm_mean``), and ``0.03`` for
        AdaOAM.
        [CHOICE] The per-event Hessian of the square loss is ``z zᵀ + S_opp + λI`` with
        ``||z||² ≈ ν``, so a fixed ``η ν`` keeps plain SGD stable for any feature scale or
        dimension without tuning (a fixed η diverges for large d or crawls for unit-norm rows).
        Mean one-pass held-out AUC over six standardised sets: 0.893 (0.02/ν), 0.891 (0.1/ν),
        0.881 (0.5/ν); 0.1 sits in the flat part, away from the unstable side.  Adagrad
        normalises each coordinate's step by its own gradient history, so a constant suits
        it: 0.03 sits between the best values seen (0.01 on the six sets, 0.03 on a strongly
        correlated one).
    adaptive : bool, default=False
        AdaOAM (Ding et al. 2015; thesis Alg. 9): diagonal Adagrad steps
        ``w - η g / (δ + sqrt(Σ g²))`` then the projection onto ``||w|| <= 1/sqrt(λ)`` in the
        metric ``H = diag(δ + sqrt(Σ g²))``.  [CHOICE] the exact H-weighted projection
        (bisection on its one multiplier, docs/algorithms/opauc.md (opauc.8)), not the Euclidean
        substitute.
    delta : float, default=1e-8
        AdaOAM's smoothing ``δ`` in ``H = δ I + diag(sqrt(Σ g²))``.
    rank : int or None, default=None
        None keeps the full d×d covariances (O(d²) memory and time per event; refused above
        :data:`MAX_FULL_RANK_FEATURES` features).  ``rank=k`` keeps, per class, a
        frequent-directions sketch ``B`` (``2k × d``) with ``BᵀB ≈ T·S`` instead: O(k·d) memory
        and amortised O(k·d) time per event (OPAUCr-style, Gao et al. §4).
        [CHOICE] frequent directions (Liberty 2013; Ghashami et al. 2016), not random
        projections: it is deterministic, never overestimates the covariance
        (``0 ≼ T·S - BᵀB``), is exact when a class's centred data span at most ``k``
        dimensions, and its spectral error is at most ``||A - A_j||²_F / (k + 1 - j)`` for any
        ``j <= k`` (``A`` the centred data), so it approaches the full gradient as ``k``
        grows.  Refused when ``2·k·d`` exceeds :data:`MAX_SKETCH_ENTRIES`.
    half_life : float or None, default=None
        Forget the stream's past (docs/algorithms/opauc.md (opauc.12)-(opauc.13)), for
        streams that change: each class's mean and covariance become exponentially weighted
        over the class's share of ``half_life`` events (rate ``max(1/T, 1 - 2^(-1/H_y))``)
        and AdaOAM's squared-gradient sums decay by ``2^(-1/half_life)`` per event, so its
        steps stop shrinking (plain OPAUC's step is already constant).  Full rank only
        (``rank=None``).  None: the whole history.
    scaling, max_iter, shuffle, random_state
        As for every learner (the algorithm itself draws no random numbers).

    Notes
    -----
    Sparse input is accepted (each row is scattered into a dense work row): the class means
    and covariances are dense anyway, so the cost per event does not drop below O(d²) at full
    rank, or O(k·d) for AdaOAM with ``rank=k``; plain OPAUC with ``rank=k`` keeps its vectors
    factored for CSR rows (below), O(nnz·k + k²) per event plus an amortised O(k·d) rebuild.

    Throughput (``bench/kernels.py``; the figures in bench/README.md, "OPAUC's low-rank
    sketch"): full rank at d = 50 about 820,000-850,000 events/s (AdaOAM about
    750,000-790,000); ``rank=8`` at d = 10,000 about 89,000 events/s for CSR rows with 50
    non-zeros and 16,500-17,000 for dense rows, which are bounded by reading both sketches from
    L3 for every event (:mod:`core._kernels.opauc_sketch` says why blocking does not pay).

    [CHOICE] Plain OPAUC with ``rank=k`` keeps every vector it uses as a combination of a
    small basis ``R`` (:mod:`core._kernels.opauc_factored`): each class's sketch rows
    materialised at its last rebuild (``sketch_pos``/``sketch_neg``, ``sketch_base_rows`` of
    them), ``w_direct``, the class means at their last rebuild (``mean_pos``/``mean_neg``, over
    ``mean_base_count`` events: with CSR input they are *not* the current means until the
    next rebuild) and the raw CSR events since (``buffer_*``, at most ``4k`` rows and
    ``n_features`` non-zeros per class).  ``w = Σ basis_coef_r R_r``, each sketch is
    ``sketch_map[s] · R`` and the Gram ``R Rᵀ`` is ``basis_gram``; so a CSR event costs
    O(nnz · |R|) plus small-matrix work, and the d-long rows are rebuilt every third shrink.
    Dense input materialises first (empty buffers) and keeps that form: its steps move ``w``
    along a dense ``z`` anyway.  ``w`` is written from the parts after each call.  Sketch rows
    at or beyond ``sketch_base_rows`` and buffer entries beyond ``buffer_rows`` are scratch.
    The kept products are uncentred, so features far from zero lose digits (``w`` within
    5e-11 of the explicit computation at offsets of 1,000 times the spread, 5e-7 at
    100,000): use ``scaling="standard"`` for such data.
    AdaOAM's per-coordinate steps leave the span of the sketches, so ``rank=k`` with
    ``adaptive=True`` keeps the explicit ``w`` and does ``B w`` and ``Bᵀ(B w)`` per event.
    The sketch path calls BLAS: run with ``OPENBLAS_NUM_THREADS=1`` (OpenBLAS would otherwise
    thread these products and wait for a second core).

    Examples
    --------
    >>> import numpy as np
    >>> from core.learners import make_learner
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 500)
    >>> X = rng.normal(size=(500, 5)) + 0.8 * y[:, None]
    >>> learner = make_learner("opauc")
    >>> scores = learner.prequential_step(X, y)
    >>> from sklearn.metrics import roc_auc_score
    >>> bool(roc_auc_score(y, learner.decision_function(X)) > 0.9)
    True
    >>> cov = learner.state_["cov_pos"]  # the positives' population covariance
    >>> bool(np.allclose(cov, np.cov(X[y == 1].T, bias=True)))
    True
    >>> make_learner("opauc").partial_fit(np.zeros((1, 5000)), [1])
    Traceback (most recent call last):
    ...
    core.errors.InvalidParameter: opauc with full-rank covariances ...
    """

    name = "opauc"
    supports_sparse = True

    lam: float = 1e-4
    eta: float | None = None
    adaptive: bool = False
    delta: float = 1e-8
    rank: int | None = None

    # ------------------------------------------------------------------ contract
    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "lam": [Interval(float, 0, None, closed="left")],
        "eta": [None, Interval(float, 0, None, closed="neither")],
        "adaptive": [BOOLEAN],
        "delta": [Interval(float, 0, None, closed="left")],
        "rank": [None, Interval(int, 1, None)],
        "half_life": HALF_LIFE,
    }

    def _check_params(self) -> None:
        if self.half_life is not None and self.rank is not None:
            raise InvalidParameter(
                "half_life (exponentially weighted class covariances) needs the full-rank "
                f"covariances; got rank={self.rank} (a frequent-directions sketch cannot "
                "forget its old directions): use rank=None or half_life=None",
                param="half_life",
            )

    @property
    def _auto_eta(self) -> bool:
        return self.eta is None and not self.adaptive

    @property
    def _split_weights(self) -> bool:
        """Plain OPAUC with a sketch keeps ``w = w_direct + B_posᵀ a_pos + B_negᵀ a_neg``."""
        return self.rank is not None and not self.adaptive

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        if self.rank is None and n_features > MAX_FULL_RANK_FEATURES:
            gigabytes = 2 * 8 * n_features**2 / 1e9
            largest_rank = MAX_SKETCH_ENTRIES // (2 * n_features)
            advice = (
                f"Pass rank=k (e.g. rank={min(8, largest_rank)}; at most {largest_rank} for "
                "this width) for the O(k·d) frequent-directions sketch"
                if largest_rank >= 1
                else "Even a rank-1 sketch is too wide here: use fewer (hashed) features"
            )
            raise InvalidParameter(
                f"opauc with full-rank covariances needs two {n_features}×{n_features} "
                f"matrices ({gigabytes:,.3g} GB) and O(d²) time per event; n_features="
                f"{n_features} exceeds the limit of {MAX_FULL_RANK_FEATURES}. {advice}",
                param="rank",
            )
        if self.rank is not None and 2 * self.rank * n_features > MAX_SKETCH_ENTRIES:
            raise InvalidParameter(
                f"opauc with rank={self.rank} keeps two {2 * self.rank}×{n_features} sketches "
                f"and costs O(rank·d) per event; 2·rank·n_features = "
                f"{2 * self.rank * n_features:,} exceeds the limit of {MAX_SKETCH_ENTRIES:,}. "
                "Use a smaller rank or fewer (hashed) features",
                param="rank",
            )
        state = {
            "w": np.zeros(n_features),
            "count_pos": np.zeros(1, dtype=np.int64),
            "count_neg": np.zeros(1, dtype=np.int64),
            "mean_pos": np.zeros(n_features),
            "mean_neg": np.zeros(n_features),
        }
        if self.rank is None:
            state["cov_pos"] = np.zeros((n_features, n_features))
            state["cov_neg"] = np.zeros((n_features, n_features))
        else:
            state["sketch_pos"] = np.zeros((2 * self.rank, n_features))
            state["sketch_neg"] = np.zeros((2 * self.rank, n_features))
            state["sketch_rows_pos"] = np.zeros(1, dtype=np.int64)
            state["sketch_rows_neg"] = np.zeros(1, dtype=np.int64)
        if self._split_weights:
            assert self.rank is not None  # for mypy: _split_weights implies a rank
            state.update(_factored_state(self.rank, n_features))
        if self.adaptive:
            state["grad_sq_sum"] = np.zeros(n_features)
        if self._auto_eta:
            state["sq_norm_mean"] = np.zeros(1)
        return state

    def _state_invariants(self, n_features: int) -> dict:
        invariants = {
            "w": Grown(),
            "count_pos": Count(),
            "count_neg": Count(),
            "mean_pos": Finite(),
            "mean_neg": Finite(),
            "cov_pos": Finite(),
            "cov_neg": Finite(),
            "grad_sq_sum": Grown(0.0, bound=VALUE_BOUND),  # Adagrad's sum of squared gradients
            "sq_norm_mean": Finite(0.0),  # running mean of ||x||²
        }
        if self.rank is not None:
            size = 2 * self.rank
            invariants.update(
                sketch_pos=Finite(),
                sketch_neg=Finite(),
                # the kernels write row `rows` and shrink when all 2k are used: at most 2k - 1
                sketch_rows_pos=Count(0, size - 1),
                sketch_rows_neg=Count(0, size - 1),
                **_factored_invariants(self.rank, n_features),
            )
        return invariants

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        if self._split_weights:
            _check_factored_state(state)

    def _learn(self, X, y: np.ndarray, scores: np.ndarray) -> None:
        state = self.state_
        empty = np.zeros(0)
        if isinstance(X, CSRMatrix):
            arrays = (np.zeros((0, 0)), X.indptr, X.indices, X.data, True)
        else:
            arrays = (X, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), empty, False)
        if self.eta is not None:
            eta = float(self.eta)
        else:
            eta = DEFAULT_ADAPTIVE_ETA if self.adaptive else DEFAULT_ETA_SCALE
        lam = float(self.lam)
        radius = 1.0 / np.sqrt(lam) if (self.adaptive and lam > 0) else np.inf
        grad_sq = state.get("grad_sq_sum", empty)
        sq_norm_mean = state.get("sq_norm_mean", np.zeros(1))
        if self._split_weights:
            keys = (
                "w", "w_direct", "basis_coef", "basis_gram", "sketch_map", "sketch_base_rows",
                "mean_base_count", "buffer_rows", "buffer_indptr", "buffer_indices",
                "buffer_data", "mean_pos", "mean_neg", "sketch_pos", "sketch_neg",
                "sketch_rows_pos", "sketch_rows_neg", "count_pos", "count_neg",
            )  # fmt: skip
            sketch_state = SketchState._make([*(state[key] for key in keys), sq_norm_mean])
            sketch_options = SketchOptions(lam, eta, self._auto_eta, int(self.rank or 0))
            opauc_sketch_learn(EventBatch(*arrays), y, scores, sketch_state, sketch_options)
            return
        options = kernels.OPAUCOptions(
            lam, eta, self._auto_eta, bool(self.adaptive), float(self.delta), radius,
            int(self.rank or 0), half_life_arg(self.half_life),
        )  # fmt: skip
        matrices: tuple[np.ndarray, ...]
        if self.rank is None:
            matrices = (state["cov_pos"], state["cov_neg"], np.zeros(1, dtype=np.int64))
            matrices += (matrices[2],)
        else:
            matrices = (state["sketch_pos"], state["sketch_neg"])
            matrices += (state["sketch_rows_pos"], state["sketch_rows_neg"])
        bundle = kernels.OPAUCState._make([
            state["w"], state["mean_pos"], state["mean_neg"], *matrices,
            state["count_pos"], state["count_neg"], grad_sq, sq_norm_mean,
        ])  # fmt: skip
        kernels.opauc_learn(EventBatch(*arrays), y, scores, bundle, options)


# ---------------------------------------------------------------------- the factored sketch
# Plain OPAUC with ``rank=k`` keeps ``w = w_direct + B_posᵀ a_pos + B_negᵀ a_neg`` with the
# sketches factored over a basis R of materialised rows, the means and buffered raw events
# (the layout: core/_kernels/opauc_factored.py).
def _factored_state(rank: int, n_features: int) -> dict[str, np.ndarray]:
    size = 2 * rank
    length = SKETCH_BUFFER_ROWS_PER_RANK * rank
    n_slots = 2 * size + 3 + 2 * length  # the basis R
    basis_coef = np.zeros(n_slots)
    basis_coef[2 * size] = 1.0  # w = 1 · w_direct + ...
    return {
        "w_direct": np.zeros(n_features),
        "basis_coef": basis_coef,
        "basis_gram": np.zeros((n_slots, n_slots)),
        "sketch_map": np.zeros((2, size, n_slots)),
        "sketch_base_rows": np.zeros(2, dtype=np.int64),
        "mean_base_count": np.zeros(2, dtype=np.int64),
        "buffer_rows": np.zeros(2, dtype=np.int64),
        "buffer_indptr": np.zeros((2, length + 1), dtype=np.int64),
        "buffer_indices": np.zeros((2, n_features), dtype=np.int64),
        "buffer_data": np.zeros((2, n_features)),
    }


def _factored_invariants(rank: int, n_features: int) -> dict[str, StateInvariant]:
    size = 2 * rank
    return {
        "w_direct": Grown(),
        "basis_coef": Grown(),
        "basis_gram": Finite(),
        "sketch_map": Finite(),
        "sketch_base_rows": Count(0, size),  # slots 0 .. 2k-1 of each class
        "mean_base_count": Count(),  # at most the class's count (_check_factored_state)
        "buffer_rows": Count(0, SKETCH_BUFFER_ROWS_PER_RANK * rank),
        # CSR rows of the buffer; checked further in _check_factored_state
        "buffer_indptr": Count(0, n_features),
        "buffer_indices": Index(n_features),
        "buffer_data": Finite(),
    }


def _check_factored_state(state: dict[str, np.ndarray]) -> None:
    counts = (int(state["count_pos"][0]), int(state["count_neg"][0]))
    for s, count in enumerate(counts):
        base = int(state["mean_base_count"][s])
        if base > count:
            raise InvalidState(
                f"state array 'mean_base_count' holds {base} at index {s}, more than the "
                f"class's {count} events",
                field="mean_base_count",
            )
        # the buffered rows of a class are CSR: they start at 0 and never go back
        indptr = state["buffer_indptr"][s, : int(state["buffer_rows"][s]) + 1]
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise InvalidState(
                f"state array 'buffer_indptr' row {s} is not a CSR row pointer (starting "
                f"at 0, non-decreasing) over its {indptr.size - 1} buffered rows",
                field="buffer_indptr",
            )
