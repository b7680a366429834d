"""OAM: Online AUC Maximization with per-class reservoir buffers (Zhao, Jin, Yang, Hoi, ICML 2011).

Equations, errata and defaults: docs/algorithms/oam.md (thesis Algorithms 4-7)
and its Errata; kernels in :mod:`core._kernels.oam`.
"""

from __future__ import annotations

import numpy as np

from core._kernels import oam as kernels
from core.csr import CSRMatrix
from core.errors import InvalidFeatures, InvalidParameter
from core.learners import register
from core.learners._base import OnlineLearner, WeightVectorLearner
from core.learners._forgetting import HALF_LIFE, HalfLife, half_life_arg, reservoir_fill
from core.learners._params import Interval, Options
from core.learners._state import Count, Finite, Grown, Index, StateInvariant

__all__ = ["MAX_DENSE_BUFFER_ENTRIES", "OAM"]

VARIANTS = ("seq", "gra")

#: Dense buffers hold ``(buffer_size_pos + buffer_size_neg) × n_features`` floats; above this
#: many (80 MB of state) ``max_nnz`` is required: hashed features at 2^20 columns would
#: otherwise allocate 1.6 GB for two buffers of 100 rows.
MAX_DENSE_BUFFER_ENTRIES = 10_000_000


def _dense_to_csr(X: np.ndarray) -> CSRMatrix:
    """The nonzero entries of a dense batch as CSR (vectorised)."""
    mask = X != 0.0
    indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
    np.cumsum(mask.sum(axis=1), out=indptr[1:])
    indices = np.nonzero(mask)[1].astype(np.int64)
    return CSRMatrix(indptr, indices, np.ascontiguousarray(X[mask]), X.shape[1])


def _row_nnz(X) -> np.ndarray:
    if isinstance(X, CSRMatrix):
        return np.diff(X.indptr)
    return np.count_nonzero(X, axis=1)


@register
class OAM(HalfLife, WeightVectorLearner):
    """Online AUC maximisation with the pairwise hinge loss and per-class reservoir buffers.

    Each event is compared with the buffered events of the *opposite* class (Zhao et al. 2011;
    Natole thesis Alg. 4-7): ``variant="seq"`` takes one passive-aggressive step per buffered
    row (OAMseq), ``variant="gra"`` one gradient step over all rows whose hinge is active at the
    pre-update ``w`` (OAMgra).  The pair weight is ``C_t = C · max(1, N_opp / buffer_size_opp)``:
    each buffered example stands for that many real ones (docs/algorithms/oam.md (oam.3), Errata).

    Each class keeps a reservoir sample (Vitter's Algorithm R, thesis Alg. 5) of at most
    ``buffer_size_pos`` / ``buffer_size_neg`` events; the buffers, their fill counts, the class
    counts and the RNG state are all part of the learner state, so a restored learner continues
    bit for bit.  Cost per event: O(buffer · d) with dense buffers, O(buffer · nnz) with sparse
    buffers (``max_nnz``).

    Parameters
    ----------
    variant : {"seq", "gra"}, default="seq"
        OAMseq (thesis Alg. 6) or OAMgra (Alg. 7).
    C : float, default=1e-4
        Penalty of the pairwise hinge loss: the cap ``C_t / 2`` on each seq step, the step of
        gra.  [CHOICE] 1e-5, from one-pass held-out AUC on standardised data
        (``bench/quality.py``'s dense sets and three synthetic ones): with ``||u||² ≈ 2d`` the
        uncapped passive-aggressive step ``loss/||u||²`` chases each pair, and capping it
        hard helped: seq test AUC 0.754 vs 0.692 (C = 1) on ``rare_1pct``, 0.680 vs 0.648 on
        ``wide_dense``, 0.971 vs 0.955 on ``digits_odd``; it lost 0.004 on ``breast_cancer``
        (400 training events) and 1e-7 is worse again.  gra is nearly insensitive to C
        (AUC depends only on the direction of ``w``; C rescales it).
        [CHOICE] Default 1e-4 since the one-pass comparison over 29 real sets
        (``bench/tune_defaults.py``, 3 seeds, raw features with online standardisation):
        held-out AUC 0.858 (1e-5), 0.864 (3e-5), 0.868 (1e-4), 0.867 (3e-4), 0.863 (1e-3),
        0.847 (1e-2); batch logistic regression 0.875.
    buffer_size_pos, buffer_size_neg : int, default=100
        Reservoir capacity per class; 100 each as the thesis (§3.5) and Zhao et al. suggest.
    max_nnz : int or None, default=None
        None keeps buffered rows dense (O(buffer · d) memory and time; refused above
        :data:`MAX_DENSE_BUFFER_ENTRIES` buffered floats).  An integer keeps them
        as fixed-capacity sparse rows of at most ``max_nnz`` entries (O(buffer · max_nnz)
        memory, O(buffer · nnz) time per event) - the layout for sparse or hashed features.
        A batch with a row of more nonzeros is rejected whole with a ValueError.
        [CHOICE] A fixed capacity keeps the state a set of fixed-shape arrays
        (docs/architecture.md §3, State), which the stores can write field by field; it cannot
        be combined with ``scaling="standard"``, which makes every feature nonzero.
    half_life : float or None, default None
        Forget the stream's past (docs/algorithms/oam.md (oam.6)-(oam.7)), for streams that
        change: each class's reservoir is Aggarwal's biased reservoir, which keeps the events
        of about the last ``half_life`` stream events preferentially, and ``C_t`` counts only
        the opposite class's events of that horizon.  None: uniform reservoirs of the whole
        history.
    scaling, max_iter, shuffle, random_state
        As for every learner; ``random_state`` also seeds the reservoirs' RNG (kept in the
        state as ``rng_state``; None means seed 0: learners are deterministic by default).

    Notes
    -----
    OAMseq step (thesis eq. 2.8 with errata 2; the objective has no ½, hence ``C_t/2``)::

        u = y_t (x_t - x),  tau = min(C_t / 2, max(0, 1 - w·u) / ||u||²),  w <- w + tau u

    (a pair with ``u = 0`` is skipped).  OAMgra (Alg. 7)::

        w_{t+1} = w_t + sum over buffered x with y_t w_t·(x_t - x) <= 1 of C_t y_t (x_t - x) / 2

    The thesis' objective has a ``λ/2 ||w||²`` term but neither algorithm applies it, so there
    is no ``λ`` here.  The served model is ``w`` itself (no averaging), scored as ``w · x``.

    Examples
    --------
    Sparse buffers (``max_nnz``) keep only the non-zeros of each buffered event, whether the
    events come as CSR or, as here, dense rows: a stream of 10 % positives, each event with
    about 6 of its 50 features set, the first one carrying the signal:

    >>> import numpy as np
    >>> from core.learners import make_learner
    >>> from core.metrics import auc
    >>> learner = make_learner("oam", max_nnz=20, buffer_size_pos=50, buffer_size_neg=50)
    >>> generator = np.random.default_rng(4)
    >>> labels = (generator.random(3000) < 0.1).astype(int)
    >>> events = generator.normal(size=(3000, 50)) * (generator.random((3000, 50)) < 0.1)
    >>> events[:, 0] = generator.normal(size=3000) + 2.0 * labels
    >>> held_back = learner.prequential_step(events, labels)
    >>> learner.state_["buffer_pos_indices"].shape, int(learner.state_["fill_pos"][0])
    ((50, 20), 50)
    >>> bool(auc(labels[1500:], held_back[1500:]) > 0.85)
    True
    """

    name = "oam"
    supports_sparse = True
    draws_random = True  # its reservoirs

    variant: str = "seq"
    C: float = 1e-4
    buffer_size_pos: int = 100
    buffer_size_neg: int = 100
    max_nnz: int | None = None

    # ------------------------------------------------------------------ contract
    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "variant": [Options(VARIANTS)],
        "C": [Interval(float, 0, None, closed="neither")],
        "buffer_size_pos": [Interval(int, 1, None)],
        "buffer_size_neg": [Interval(int, 1, None)],
        "max_nnz": [None, Interval(int, 1, None)],
        "half_life": HALF_LIFE,
    }

    def _check_params(self) -> None:
        if self.max_nnz is not None and self.scaling == "standard":
            raise InvalidParameter(
                "max_nnz (sparse buffers) cannot be combined with scaling='standard', "
                "which centres features and makes every one nonzero; use scaling='scale' "
                "or max_nnz=None",
                param="max_nnz",
            )

    def _classes(self) -> tuple[tuple[str, int], ...]:
        """Each class's suffix in the state's names and the capacity of its buffer."""
        return (("pos", self.buffer_size_pos), ("neg", self.buffer_size_neg))

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        entries = (self.buffer_size_pos + self.buffer_size_neg) * n_features
        if self.max_nnz is None and entries > MAX_DENSE_BUFFER_ENTRIES:
            raise InvalidParameter(
                f"oam with dense buffers needs {entries:,} floats ({entries * 8 / 1e6:.0f} MB) "
                f"for n_features={n_features}, above the limit of "
                f"{MAX_DENSE_BUFFER_ENTRIES:,}; pass max_nnz=k (the most nonzero features of "
                "an event) to keep buffered rows sparse",
                param="max_nnz",
            )
        state = {"w": np.zeros(n_features)}
        for label, size in self._classes():
            state[f"count_{label}"] = np.zeros(1, dtype=np.int64)
            state[f"fill_{label}"] = np.zeros(1, dtype=np.int64)
            if self.max_nnz is None:
                state[f"buffer_{label}"] = np.zeros((size, n_features))
            else:
                width = min(self.max_nnz, n_features)
                state[f"buffer_{label}_indices"] = np.zeros((size, width), dtype=np.int64)
                state[f"buffer_{label}_values"] = np.zeros((size, width))
                state[f"buffer_{label}_nnz"] = np.zeros(size, dtype=np.int64)
        return state

    def _state_invariants(self, n_features: int) -> dict:
        invariants: dict[str, StateInvariant] = {"w": Grown()}
        width = n_features if self.max_nnz is None else min(self.max_nnz, n_features)
        for label, size in self._classes():
            invariants[f"count_{label}"] = Count()
            # the kernels read the first `fill` rows: a larger fill reads outside the buffer
            invariants[f"fill_{label}"] = reservoir_fill(self.half_life, size, f"count_{label}")
            if self.max_nnz is None:
                invariants[f"buffer_{label}"] = Finite()
            else:
                # buffered sparse rows: positions into w and a length within the row's capacity
                invariants[f"buffer_{label}_indices"] = Index(n_features)
                invariants[f"buffer_{label}_values"] = Finite()
                invariants[f"buffer_{label}_nnz"] = Count(0, width)
        return invariants

    def _coerce(self, X, y=None, check_finite: bool = True):
        features, labels = super()._coerce(X, y, check_finite)
        if y is not None and self.max_nnz is not None:
            # Checked before anything is learned or scaled: a rejected batch changes nothing.
            row_nnz = _row_nnz(features)
            if row_nnz.size and row_nnz.max() > self.max_nnz:
                row = int(np.argmax(row_nnz > self.max_nnz))
                raise InvalidFeatures(
                    f"row {row} has {int(row_nnz[row])} nonzero features, more than "
                    f"max_nnz={self.max_nnz} (the capacity of a buffered sparse row); "
                    "raise max_nnz or use max_nnz=None for dense buffers",
                    row=row,
                )
        return features, labels

    def _learn(self, X, y: np.ndarray, scores: np.ndarray) -> None:
        state = self.state_
        options = kernels.OAMOptions(
            float(self.C), self.variant == "gra", half_life_arg(self.half_life)
        )
        counters = (
            state["fill_pos"], state["fill_neg"], state["count_pos"], state["count_neg"],
            state["rng_state"],
        )  # fmt: skip
        if self.max_nnz is None:
            bundle = kernels.OAMState(
                state["w"], state["buffer_pos"], state["buffer_neg"], *counters
            )
            if isinstance(X, CSRMatrix):
                kernels.oam_learn_csr_dense_buffers(
                    X.indptr, X.indices, X.data, y, scores, bundle, options
                )
            else:
                kernels.oam_learn_dense(X, y, scores, bundle, options)
            return
        if not isinstance(X, CSRMatrix):
            X = _dense_to_csr(X)
        sparse_bundle = kernels.OAMSparseState(
            state["w"],
            state["buffer_pos_indices"], state["buffer_pos_values"], state["buffer_pos_nnz"],
            state["buffer_neg_indices"], state["buffer_neg_values"], state["buffer_neg_nnz"],
            *counters,
        )  # fmt: skip
        kernels.oam_learn_csr(X.indptr, X.indices, X.data, y, scores, sparse_bundle, options)
