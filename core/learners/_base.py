"""The contract every online learner follows (docs/architecture.md §3), implemented once.

A learner is a thin Python class over numba kernels:

* Hyper-parameters are declared once, as annotated class attributes with their defaults
  (``l2: float = 0.01``); the class gets a keyword-only ``__init__`` that stores them verbatim,
  whose signature lists them, so ``get_params`` / ``set_params`` and ``sklearn.base.clone``
  work without importing scikit-learn here (:mod:`core.learners._declared`).
* All learned state is ``self.state_``: a flat ``dict[str, np.ndarray]`` (float64 / int64 /
  uint64, C-contiguous).  Scalars are arrays of shape ``(1,)`` so kernels can update them in
  place.  Everything that influences future updates lives there — weights, averages, counters,
  class statistics, buffers, RNG state, scaler statistics — so
  ``Learner.from_state(params, learner.get_state())`` continues bit for bit.
* Validation and coercion happen once per batch here; kernels do none, except the checks a
  kernel may make of each row as it reads it (:meth:`_learn_rows`).

A subclass provides (the abstract methods below; instantiating a class that lacks one fails):

``name``
    the registry name (a class attribute).
its hyper-parameters
    annotated class attributes with defaults, in the order they are listed (``get_params``,
    ``repr`` and the service's schemas follow it); the shared ``scaling``, ``max_iter``,
    ``shuffle`` and ``random_state`` are declared here, after the learner's own, and a learner
    changes a default by assigning it (``max_iter = 5``), or redeclares the annotation to list
    the parameter among its own.  A learner defines no ``__init__`` (it is generated).
``_parameter_constraints``
    its parent's dict extended with one entry per own hyper-parameter
    (:mod:`core.learners._params`); a check that involves two parameters goes in
    ``_check_params()``, raising :class:`~core.errors.InvalidParameter`.
``_initial_state(n_features) -> dict``
    the state of a learner that has seen nothing (without the scaler arrays and
    ``n_features``, which this class adds, nor the generator of a learner that draws random
    numbers as it learns: it says ``draws_random = True``, and this class adds ``rng_state``
    and its declaration, :mod:`core.learners._random_draws`).
``_state_invariants(n_features) -> dict``
    what each array of ``_initial_state`` may hold once learned (:mod:`core.learners._state`:
    finite floats, counts within their capacities, reservoir fills ...), checked by
    :meth:`validate_state` on every state :meth:`from_state` reads; an invariant that relates
    several arrays in ways the declarations cannot say goes in ``_check_state(state)``,
    raising :class:`~core.errors.InvalidState`.  The arrays that learning can grow without bound
    from legal inputs (weights, averaged iterates) are declared
    :class:`~core.learners._state.Grown`: they are also checked after every batch, which is
    refused (:class:`~core.errors.StateOverflow`) if it would grow them past their bound.
``_learn(X, y, scores)``
    learn the batch in order with ONE kernel call; ``X`` is a dense float64 array or a
    :class:`~core.csr.CSRMatrix` (already scaled), ``y`` int64 in {-1, +1}; when
    ``scores`` has length ``n_samples`` the kernel writes each event's pre-update score into it
    (an empty ``scores`` means "not wanted", which spares the work).
``_learn_rows(X, y, scores) -> int | None`` (optional)
    the same, stopping before the first row the kernel cannot prove sound (see the method);
    large unscaled batches are then not checked beforehand.
``_decision(X) -> np.ndarray``
    scores of the served model (the averaged iterate where the learner averages).
``coef_``
    the served weight vector.

A learner whose served model is its state array ``w`` subclasses :class:`WeightVectorLearner`,
which provides ``coef_`` and ``_decision`` (``X @ w``); :func:`kernel_scores` runs a learner's
pair of dense / CSR scoring kernels.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Self

import numpy as np

from core._kernels._linalg import csr_decision
from core.csr import CSRMatrix
from core.learners._declared import DeclaredParameters
from core.learners._grown import GrownStateChecks
from core.learners._params import (
    BOOLEAN,
    RANDOM_STATE,
    Constraint,
    Interval,
    Options,
)
from core.learners._random_draws import RandomDraws
from core.learners._rounds import (
    LearnedRounds,
    check_stops,
    learn_rounds_at_once,
    learn_rounds_one_by_one,
)
from core.learners._stateful import StateContract
from core.preprocessing import SCALINGS, fold_scaling, scale_batch
from core.validation import as_features, check_batch, check_finite_rows, check_rows

#: the dtypes a learner's state arrays may have (int16 and int32: the boosted trees' child
#: and feature-or-leaf indices, held at the narrowest width their declared bounds allow; int8:
#: the labels it holds, core._arrays.LABELS)
STATE_DTYPES = tuple(
    np.dtype(t) for t in (np.float64, np.int64, np.uint64, np.int32, np.int16, np.int8)
)
NO_SCORES = np.empty(0, dtype=np.float64)

#: A dense batch of more than ``4 * BLOCK_BYTES`` is checked for NaN / infinity and learned in
#: blocks of about ``BLOCK_BYTES``, each learned right after its check, while it is in the
#: cache: checking the whole batch first reads it from memory twice (bench/README.md,
#: "versus_c.py").  2 MB keeps a block in the last-level cache and the per-call overhead
#: (~10 us) small next to a block's learning.
BLOCK_BYTES = 2 * 2**20

#: A batch of at least this size, for a learner whose kernel checks its rows
#: (:meth:`OnlineLearner._learn_rows`), is not checked before it is learned: the kernel stops
#: at the first row it cannot prove sound, and the state saved before is put back if the row is
#: at fault.  Below it, saving the state (~10 us for a small one) costs more than the check it
#: spares (bench/README.md, "versus_c.py").
KERNEL_CHECK_BYTES = 256 * 2**10


def linear_decision(X, w: np.ndarray) -> np.ndarray:
    """``X @ w`` for a dense or CSR batch (the scores of a linear learner's weights ``w``)."""
    if isinstance(X, CSRMatrix):
        out = np.empty(X.shape[0])
        csr_decision(X.indptr, X.indices, X.data, w, out)
        return out
    return X @ w


def kernel_scores(X, dense_kernel, csr_kernel, *args) -> np.ndarray:
    """Scores of a scaled batch from a learner's pair of scoring kernels that take the same
    ``args`` and write into ``out``: ``dense_kernel(X, *args, out)`` for a dense batch,
    ``csr_kernel(indptr, indices, data, *args, out)`` for a CSR one."""
    out = np.empty(X.shape[0])
    if isinstance(X, CSRMatrix):
        csr_kernel(X.indptr, X.indices, X.data, *args, out)
    else:
        dense_kernel(X, *args, out)
    return out


class OnlineLearner(DeclaredParameters, StateContract, GrownStateChecks, RandomDraws):
    """Base class of every aucstream learner; see the module docstring for the contract."""

    #: the hyper-parameters every learner takes (last in its list; a learner may assign other
    #: defaults).  Online feature scaling applied before learning (core.preprocessing), the
    #: passes of :meth:`fit`, whether :meth:`fit` reshuffles before each pass, and its seed.
    scaling: str = "none"
    max_iter: int = 1
    shuffle: bool = True
    random_state: int | None = None
    #: accepted values of the shared hyper-parameters; subclasses extend this dict
    _parameter_constraints: ClassVar[dict[str, list[Constraint]]] = {
        "scaling": [Options(SCALINGS)],
        "max_iter": [Interval(int, 1, None)],
        "shuffle": [BOOLEAN],
        "random_state": [None, RANDOM_STATE],
    }
    #: whether the algorithm accepts CSR input
    supports_sparse: ClassVar[bool] = True
    #: False for batch solvers (``svm_pauc``) whose ``partial_fit`` is not an online update
    online: ClassVar[bool] = True
    #: False for a learner whose score is not linear in the (scaled) features (a tree path
    #: embedding): it has no weights in the raw feature space (:meth:`raw_weights` is None)
    linear_in_features: ClassVar[bool] = True
    #: True for a batch solver whose ``partial_fit`` learns each batch on a bounded window of
    #: recent events at a bounded cost (``spdam``): the service runs it as a model's learner
    streams_on_window: ClassVar[bool] = False
    #: True for a learner given its rows unscaled (``_learn``, ``_decision``, ``_contributions``)
    #: that applies its ``scaling`` itself where it wants it: ``boosted_embedded``, whose trees
    #: split the rows as posted, and ``auto``, which hands them on to such candidates; it
    #: records its scaled rows itself (:meth:`recording_inputs`)
    scales_itself: ClassVar[bool] = False
    #: True for the pAUC learners, whose ``alpha`` / ``beta`` are the FPR range they optimise
    #: (a model's ``pauc_range`` sets them: :func:`core.learners.pauc_params_for`); other
    #: learners may use those names for something else (``logistic``: FTRL-Proximal's steps)
    optimises_pauc: ClassVar[bool] = False
    #: where :meth:`recording_inputs` collects the scaled batches (None: not recording)
    _inputs_sink: list | None = None

    # ------------------------------------------------------------------ subclass hooks
    def _check_params(self) -> None:
        """Checks that involve more than one parameter (none by default)."""
        return None

    def width_params(self, n_features: int) -> dict[str, Any]:
        """The parameters whose ``None`` this learner resolves from the model's width, resolved
        for ``n_features`` (none by default; ``logistic``'s solver).  A stored model keeps
        them explicit, so a later change of such a default cannot change its state layout."""
        return {}

    @abstractmethod
    def _learn(self, X, y: np.ndarray, scores: np.ndarray) -> None:
        """Learn the scaled batch in order with one kernel call (see the module docstring)."""

    def _learn_rows(self, X, y: np.ndarray, scores: np.ndarray) -> int | None:
        """Optional: learn the batch as :meth:`_learn` does, but on rows that were not checked
        (``as_features(check_finite=False)``): stop before the first row the kernel cannot
        prove sound and return the number of rows learned (``len(y)`` when all); nothing of
        that row is learned.  A row is sound when its ``||x||^2`` is finite (no NaN, no
        infinity, no squares that overflow) and, for CSR, when its column indices increase
        and lie in ``[0, n_features)``, checked before any is used.  None when the learner
        (with these parameters) has no such kernel: then nothing is learned, and the caller
        checks the batch first.

        A kernel that reads each row and computes ``||x||^2`` anyway checks it almost for free
        this way, which spares :meth:`partial_fit` a pass over the batch (bench/versus_c.py)."""
        return None

    @abstractmethod
    def _decision(self, X) -> np.ndarray:
        """Scores of the served model for a scaled batch."""

    @property
    @abstractmethod
    def coef_(self) -> np.ndarray:
        """The served weight vector."""

    def leading_coef(self, count: int) -> np.ndarray:
        """``coef_[:count]``: the weights of the first ``count`` columns (an embedding's inner
        learner serves those of ``x``; a learner whose weights are coordinate-wise computes
        only them)."""
        return self.coef_[:count]

    @property
    def intercept_(self) -> float:
        """The constant term of the served linear score: the score of an event that is all
        zeros after scaling (0.0 for learners without one), so that for a scaled batch
        ``_decision(X) == X @ coef_ + intercept_`` up to rounding."""
        self._check_initialized()
        n_features = self.n_features_in_
        zero: np.ndarray | CSRMatrix
        if self.supports_sparse:
            empty = np.zeros(0, dtype=np.int64)
            zero = CSRMatrix(np.zeros(2, dtype=np.int64), empty, np.zeros(0), n_features)
        else:
            zero = np.zeros((1, n_features))
        return float(self._decision(zero)[0])

    def raw_weights(self) -> tuple[np.ndarray, float] | None:
        """``(coef, intercept)`` of the raw (unscaled) feature space, the online scaler's
        current statistics folded in (``core.preprocessing.fold_scaling``): ``decision_function(x)
        == x @ coef + intercept`` up to rounding.  None for ``scaling="unit_norm"``, which is
        not linear in ``x``, and for learners whose score is not linear in the features
        (``linear_in_features = False``: a tree path embedding)."""
        if not self.linear_in_features:
            return None
        coef = np.array(self.coef_, dtype=np.float64)  # type: ignore[attr-defined]
        return fold_scaling(self.scaling, self.state_, coef, self.intercept_)

    def contributions(self, X, *, check_input: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Each feature's contribution to each event's served score, and the remainder:
        ``(C, r)``, ``C`` dense ``(n, n_features)``, with ``C.sum(axis=1) + r`` equal to
        ``decision_function(X)`` up to rounding (docs/algorithms/reasons.md).

        A linear learner's ``C[i, j]`` is ``coef_j * scaled(x_i)_j``: in the raw space
        ``raw_coef_j * (x_ij - reference_j)``, the reference being the running mean that the
        ``standard`` scaler centres on (0 for the other scalings); ``r`` is ``intercept_``.
        ``tree_embedded`` and ``auto`` attribute their non-linear parts to features too.
        ``check_input`` as for :meth:`decision_function`."""
        self._check_initialized()
        features = self._coerce(X)[0] if check_input else X
        if not self.scales_itself:
            features = scale_batch(self.scaling, self.state_, features, learn=False)
        return self._contributions(features)

    def _contributions(self, X) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`contributions` of a scaled batch: ``coef_ * x`` and the intercept (a learner
        whose score is not linear in the features overrides it)."""
        rows = X.toarray() if isinstance(X, CSRMatrix) else np.asarray(X)
        return rows * self.coef_, np.full(rows.shape[0], self.intercept_)

    # ------------------------------------------------------------------ learning
    def _coerce(self, X, y=None, check_finite: bool = True):
        n_features = self.n_features_in_ if self.is_initialized else None
        if y is None:
            return as_features(X, n_features, accept_sparse=self.supports_sparse), None
        return check_batch(
            X, y, n_features, accept_sparse=self.supports_sparse, check_finite=check_finite
        )

    def _learn_batch(self, X, y, want_scores: bool) -> np.ndarray:
        initialized = self.is_initialized  # a composite's is a property: read once
        if not initialized:
            self.validate_params()
        features, labels = self._coerce(X, y, check_finite=False)
        if not initialized:
            self.initialize(features.shape[1])
        scores = np.empty(len(labels)) if want_scores else NO_SCORES
        kernel_checks = self._kernel_may_check(features)
        blocks = self._blocks(features)
        if not kernel_checks and blocks is None:
            check_rows(features)
            self._learn_checked(features, labels, scores)
            # nothing was saved (a copy of the state costs more than learning one event):
            # a batch that overflowed leaves the learner refusing until its state is put back
            self._check_grown_state(restored=False)
            return scores
        with self._unchanged_on_error():
            if kernel_checks and self._learn_checking_rows(features, labels, scores):
                self._check_grown_state(restored=True)
                return scores
            if blocks is None:
                check_rows(features)
                self._learn_checked(features, labels, scores)
                self._check_grown_state(restored=True)
                return scores
            for start, stop in blocks:
                check_finite_rows(features[start:stop], first_row=start)
                block_scores = scores[start:stop] if want_scores else NO_SCORES
                self._learn_checked(features[start:stop], labels[start:stop], block_scores)
            self._check_grown_state(restored=True)
        return scores

    @contextmanager
    def _unchanged_on_error(self) -> Iterator[None]:
        """A rejected batch changes nothing: the state is saved, and put back if a row or a
        block is refused after others were learned."""
        saved = self.get_state()
        try:
            yield
        except BaseException:
            state = self.state_
            if any(state[key].shape != value.shape for key, value in saved.items()):
                # an array grew as it filled (core.learners._growing): the state is put back
                # whole (a composite's parts take theirs back too)
                self.state_ = saved
                raise
            for key, value in saved.items():
                np.copyto(state[key], value)  # in place: kernels' cached views stay valid
            raise

    def _kernel_may_check(self, features) -> bool:
        """Whether to leave the checks of a batch's rows to the learner's kernel
        (:meth:`_learn_rows`, if it has one): the kernel must see the rows as given (no
        scaling, no recording), the batch must be large enough (:data:`KERNEL_CHECK_BYTES`)
        and saving the state cheap next to it (at most an eighth of the batch)."""
        if self._inputs_sink is not None or self.scaling != "none":
            return False
        if features.nbytes < KERNEL_CHECK_BYTES:
            return False
        return 8 * sum(value.nbytes for value in self.state_.values()) <= features.nbytes

    def _learn_checking_rows(self, X, labels: np.ndarray, scores: np.ndarray) -> bool:
        """Learn the unscaled batch with the kernel's own row checks; False (nothing learned)
        when the learner has no such kernel.  Raises InvalidFeatures naming the first row at
        fault, as the checks before learning would (the caller restores the state)."""
        learned = self._learn_rows(X, labels, scores)
        if learned is None:
            return False
        if learned < len(labels):
            # the rows before were proved sound; the kernel stopped at a row it could not
            # prove: one at fault, or columns out of order, or finite values whose squares
            # overflow.  The rest is checked as it would have been before learning, and
            # learned without the kernel's checks if nothing is wrong in it.
            rest = X.rows_from(learned) if isinstance(X, CSRMatrix) else X[learned:]
            check_rows(rest, first_row=learned)
            rest_scores = scores[learned:] if scores.shape[0] > 0 else NO_SCORES
            self._learn(rest, labels[learned:], rest_scores)
        return True

    def _blocks(self, features) -> list[tuple[int, int]] | None:
        """The row ranges of a large dense batch (see :data:`BLOCK_BYTES`), or None to check
        and learn the batch whole: sparse batches, batches of at most 4 blocks, states larger
        than an eighth of the batch (saving them would cost more than the blocks save), and
        calls whose inputs are being recorded (one recorded array per call)."""
        if isinstance(features, CSRMatrix) or self._inputs_sink is not None:
            return None
        if features.nbytes <= 4 * BLOCK_BYTES:
            return None
        if 8 * sum(value.nbytes for value in self.state_.values()) > features.nbytes:
            return None
        rows = max(1, BLOCK_BYTES // max(1, features.shape[1] * features.itemsize))
        n = features.shape[0]
        return [(start, min(start + rows, n)) for start in range(0, n, rows)]

    def _learn_checked(self, features, labels: np.ndarray, scores: np.ndarray) -> None:
        """Scale (online) and learn a validated batch."""
        if self.scaling == "standard" and isinstance(features, CSRMatrix):
            # raise before any statistics move: a rejected batch changes nothing
            scale_batch(self.scaling, self._scaler_arrays, features, learn=False)
        if not self.scales_itself:
            features = scale_batch(self.scaling, self._scaler_arrays, features, learn=True)
            if self._inputs_sink is not None:
                self._inputs_sink.append(features)
        self._learn(features, labels, scores)

    @contextmanager
    def recording_inputs(self) -> Iterator[list]:
        """Within the block, every ``partial_fit`` / ``prequential_step`` appends to the yielded
        list the rows its kernel learned from: after the online scaling, as a dense array or a
        CSRMatrix — the learner's own arrays (``X`` itself with ``scaling="none"``), to read
        and not modify.  They equal ``core.regret.learner_inputs(learner, X)`` taken before the
        call, so a caller that records them (the service's regret window) need not scale the
        batch a second time on a copy of the statistics."""
        sink: list = []
        self._inputs_sink = sink
        try:
            yield sink
        finally:
            self._inputs_sink = None

    def partial_fit(self, X, y) -> Self:
        """Learn one batch, in order, exactly as if its events arrived one at a time."""
        self._learn_batch(X, y, want_scores=False)
        return self

    def prequential_step(self, X, y) -> np.ndarray:
        """Learn one batch and return each event's pre-update score (test-then-train).

        Event ``i`` is scored by the model that has learned events ``0 .. i-1`` of the stream,
        so these scores are an honest out-of-sample record of the online learner.
        """
        return self._learn_batch(X, y, want_scores=True)

    def learn_rounds(
        self, X, y, stops: Sequence[int], *, want_scores: bool = True
    ) -> LearnedRounds:
        """Learn the batch as consecutive rounds ending at ``stops`` (the last one the batch's
        length; a round may be empty) and give what the regret window takes of each: exactly
        what one ``prequential_step`` (``partial_fit`` without ``want_scores``) per round,
        each recorded (:meth:`recording_inputs`) with ``coef_`` taken before it, gives — the
        same state bit for bit, scores, served weights and rows (:mod:`core.learners._rounds`).
        One call for a learner that learns a batch as its events one at a time; one call per
        round for the others.  A refused row (:class:`~core.errors.InvalidFeatures`) is
        counted in the whole batch; the rounds before it may have been learned."""
        self._check_initialized()
        ends = check_stops(stops, len(y))
        if self.online and not self.streams_on_window:
            return learn_rounds_at_once(self, X, y, ends, want_scores)
        features, labels = self._coerce(X, y, check_finite=False)
        return learn_rounds_one_by_one(self, features, labels, ends, want_scores)

    def fit(self, X, y) -> Self:
        """Learn from scratch: ``max_iter`` passes over ``X``, reshuffled each pass when
        ``shuffle`` is true (with ``random_state``)."""
        self.validate_params()
        features, labels = check_batch(X, y, accept_sparse=self.supports_sparse)
        self.initialize(features.shape[1])
        rng = np.random.default_rng(self.random_state)
        for _ in range(self.max_iter):
            if self.shuffle:
                order = rng.permutation(len(labels))
                batch = (
                    features.take_rows(order)
                    if isinstance(features, CSRMatrix)
                    else features[order]
                )
                self.partial_fit(batch, labels[order])
            else:
                self.partial_fit(features, labels)
        return self

    def decision_function(self, X, *, check_input: bool = True) -> np.ndarray:
        """Scores of the served model (higher = more likely positive); learns nothing.

        ``check_input=False`` skips the validation of ``X`` for a caller that has made it (the
        service's parsed batches; ~3 us of the ~6 us of scoring one event): ``X`` must be
        what :func:`~core.validation.as_features` returns for this learner, a C-contiguous
        float64 array of ``n_features_in_`` columns (or a :class:`CSRMatrix` if the learner
        takes sparse input), every value finite."""
        self._check_initialized()
        features = self._coerce(X)[0] if check_input else X
        if not self.scales_itself:
            features = scale_batch(self.scaling, self._scaler_arrays, features, learn=False)
        return self._decision(features)


class WeightVectorLearner(OnlineLearner):
    """A learner whose served model is one state array, ``w`` unless ``_served_key`` says
    otherwise (an averaged iterate): ``coef_`` is a copy of it and the scores are ``X @ w``
    (a learner with its own scoring kernel overrides ``_decision``)."""

    @property
    def _served_key(self) -> str:
        return "w"

    def _decision(self, X) -> np.ndarray:
        return linear_decision(X, self.state_[self._served_key])

    @property
    def coef_(self) -> np.ndarray:
        """The served weight vector (a copy)."""
        self._check_initialized()
        return self.state_[self._served_key].copy()
