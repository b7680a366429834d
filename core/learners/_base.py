"""The contract every online learner follows (docs/architecture.md §3), implemented once.

A learner is a thin Python class over numba kernels:

* Hyper-parameters are declared once, as annotated class attributes with their defaults
  (``l2: float = 0.01``); the class gets a keyword-only ``__init__`` that stores them verbatim,
  whose signature lists them (:func:`declared_parameters`), so :meth:`get_params` /
  :meth:`set_params` and ``sklearn.base.clone`` work without importing scikit-learn here.
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
    ``n_features``, which this class adds).
``_state_invariants(n_features) -> dict``
    what each array of ``_initial_state`` may hold once learned (:mod:`core.learners._state`:
    finite floats, counts within their capacities, reservoir fills ...), checked by
    :meth:`validate_state` on every state :meth:`from_state` reads; an invariant that relates
    several arrays in ways the declarations cannot say goes in ``_check_state(state)``,
    raising :class:`~core.errors.InvalidState`.
``_learn(X, y, scores)``
    learn the batch in order with ONE kernel call; ``X`` is a dense float64 array or a
    :class:`~core.validation.CSRMatrix` (already scaled), ``y`` int64 in {-1, +1}; when
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

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Self

import numpy as np

from core._kernels._linalg import csr_decision
from core.errors import InvalidParameter, InvalidState
from core.learners._params import (
    BOOLEAN,
    RANDOM_STATE,
    Constraint,
    Interval,
    Options,
    validate_parameters,
)
from core.learners._state import Count, Finite, StateInvariant, validate_state
from core.preprocessing import SCALINGS, fold_scaling, initial_scaler_state, scale_batch
from core.validation import CSRMatrix, as_features, check_batch, check_finite_rows, check_rows

STATE_DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64))
NO_SCORES = np.empty(0, dtype=np.float64)

#: A dense batch of more than ``4 * BLOCK_BYTES`` is checked for NaN / infinity and learned in
#: blocks of about ``BLOCK_BYTES``, each learned right after its check, while it is in the
#: cache: checking the whole batch first reads it from memory twice, which cost a third of the
#: rate of ``partial_fit`` on 10**6 x 50 events (bench/versus_c.py).  2 MB keeps a block in
#: the last-level cache and the per-call overhead (~10 us) under 3 % of a block's learning.
BLOCK_BYTES = 2 * 2**20

#: A batch of at least this size, for a learner whose kernel checks its rows
#: (:meth:`OnlineLearner._learn_rows`), is not checked before it is learned: the kernel stops
#: at the first row it cannot prove sound, and the state saved before is put back if the row is
#: at fault.  Below it, saving the state (~10 us for a small one) costs more than the check it
#: spares (measured on 50 dense features: 117 KB +1 %, 391 KB -5 %).
KERNEL_CHECK_BYTES = 256 * 2**10


#: the scaler arrays :func:`core.preprocessing.initial_scaler_state` adds (only those of the
#: learner's ``scaling`` are present): running counts, means and sums finite, squares >= 0
_SCALER_INVARIANTS: dict[str, StateInvariant] = {
    "scaler_count": Count(),
    "scaler_mean": Finite(),
    "scaler_m2": Finite(0.0),
    "scaler_sum": Finite(),
    "scaler_sum_sq": Finite(0.0),
}


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


def _is_parameter(name: str, annotation: Any) -> bool:
    """Whether a class annotation declares a hyper-parameter: a public name that is not a
    learned attribute (``coef_``) nor a ``ClassVar`` (the annotations are strings under
    ``from __future__ import annotations``)."""
    if name.startswith("_") or name.endswith("_"):
        return False
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return not text.startswith(("ClassVar", "typing.ClassVar"))


def declared_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The hyper-parameters of ``cls`` as keyword-only parameters, in their listed order: the
    class's own declarations first, then its bases' (nearest first), so the shared ones close
    the list; each default is the class attribute as ``cls`` resolves it (a subclass that
    assigns ``max_iter = 5`` changes the default, not the position)."""
    parameters: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if name in parameters or not _is_parameter(name, annotation):
                continue
            if not hasattr(cls, name):
                raise TypeError(f"{cls.__name__}: hyper-parameter {name!r} has no default")
            default = getattr(cls, name)
            # one default object would be shared by every instance (as in dataclasses)
            if isinstance(default, list | dict | set):
                raise TypeError(
                    f"{cls.__name__}: hyper-parameter {name!r} has a mutable default; use None"
                )
            parameters[name] = inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
    return parameters


def _keyword_init(cls: type, parameters: dict[str, inspect.Parameter]) -> Any:
    """The ``__init__`` of ``cls``: keyword-only, storing each declared hyper-parameter
    verbatim (its default when not given).  Its ``__signature__`` lists the parameters, which
    is what ``inspect.signature(cls.__init__)`` (and so ``sklearn.base.clone``) reads."""

    def __init__(self: Any, **params: Any) -> None:
        unknown = [name for name in params if name not in parameters]
        if unknown:
            raise TypeError(
                f"{cls.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}"
            )
        for name, parameter in parameters.items():
            setattr(self, name, params.get(name, parameter.default))

    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_parameter, *parameters.values()], return_annotation=None
    )
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__.__doc__ = f"Store the hyper-parameters of {cls.__name__} (see the class docstring)."
    return __init__


class NotFittedError(ValueError, AttributeError):
    """Raised when scoring with a learner that has no state yet (as scikit-learn does)."""


class OnlineLearner(ABC):
    """Base class of every aucstream learner; see the module docstring for the contract."""

    #: the registry name (``make_learner(name)``)
    name: ClassVar[str] = ""
    #: the hyper-parameters every learner takes (last in its list; a learner may assign other
    #: defaults).  Online feature scaling applied before learning (core.preprocessing), the
    #: passes of :meth:`fit`, whether :meth:`fit` reshuffles before each pass, and its seed.
    scaling: str = "none"
    max_iter: int = 1
    shuffle: bool = True
    random_state: int | None = None
    #: the names of the declared hyper-parameters, in order (set for each class)
    _parameters: ClassVar[tuple[str, ...]] = ()
    #: accepted values of every hyper-parameter; subclasses extend this dict
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
    #: True for the pAUC learners, whose ``alpha`` / ``beta`` are the FPR range they optimise
    #: (a model's ``pauc_range`` sets them: :func:`core.learners.pauc_params_for`); other
    #: learners may use those names for something else (``logistic``: FTRL-Proximal's steps)
    optimises_pauc: ClassVar[bool] = False
    #: where :meth:`recording_inputs` collects the scaled batches (None: not recording)
    _inputs_sink: list | None = None

    # ------------------------------------------------------------------ parameters
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            raise TypeError(
                f"{cls.__name__} defines __init__: declare its hyper-parameters as annotated "
                "class attributes instead (the __init__ is generated)"
            )
        parameters = declared_parameters(cls)
        cls._parameters = tuple(parameters)
        cls.__init__ = _keyword_init(cls, parameters)  # type: ignore[method-assign]

    def __init__(self, **params: Any) -> None:
        # replaced in every subclass by the generated keyword-only __init__ (the same logic,
        # with the subclass's signature); this one is what type checkers see
        _keyword_init(type(self), declared_parameters(type(self)))(self, **params)

    @classmethod
    def _param_names(cls) -> list[str]:
        return list(cls._parameters)

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        """``{name: default}`` of every declared hyper-parameter, in order."""
        return {name: getattr(cls, name) for name in cls._parameters}

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyper-parameters as passed to ``__init__`` (JSON-able)."""
        return {name: getattr(self, name) for name in self._param_names()}

    @classmethod
    def check_param_names(cls, names) -> None:
        """Raise :class:`~core.errors.InvalidParameter` naming the first unknown name."""
        accepted = cls._param_names()
        unknown = sorted(set(names) - set(accepted))
        if unknown:
            raise InvalidParameter(
                f"unknown parameter(s) {', '.join(map(repr, unknown))} for learner "
                f"{cls.name!r}; accepted: {', '.join(accepted)}",
                param=unknown[0],
            )

    def set_params(self, **params) -> Self:
        self.check_param_names(params)
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = self.param_defaults()
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if defaults.get(k) != v]
        return f"{type(self).__name__}({', '.join(changed)})"

    def validate_params(self) -> None:
        """Check every hyper-parameter now against ``_parameter_constraints``, then the
        learner's cross-parameter checks; raises :class:`~core.errors.InvalidParameter`
        (a ValueError) naming the first bad one."""
        validate_parameters(
            self._parameter_constraints,
            {name: getattr(self, name) for name in self._parameter_constraints},
        )
        self._check_params()

    # ------------------------------------------------------------------ subclass hooks
    def _check_params(self) -> None:
        """Checks that involve more than one parameter (none by default)."""
        return None

    @abstractmethod
    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        """The state of a learner that has seen nothing (see the module docstring)."""

    def _state_invariants(self, n_features: int) -> dict[str, StateInvariant]:
        """What each array of :meth:`_initial_state` may hold (see the module docstring).

        Not abstract so that a learner without declarations still builds, but
        :meth:`validate_state` refuses (TypeError) any state with an undeclared array: states
        are never loaded unchecked."""
        return {}

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """Invariants relating several arrays beyond the declarations (none by default)."""
        return None

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

    # ------------------------------------------------------------------ state
    @property
    def is_initialized(self) -> bool:
        return hasattr(self, "state_")

    @property
    def n_features_in_(self) -> int:
        self._check_initialized()
        return int(self.state_["n_features"][0])

    def initialize(self, n_features: int) -> Self:
        """Start from scratch for ``n_features`` features (a model that has seen nothing)."""
        self.validate_params()
        if isinstance(n_features, bool) or not isinstance(n_features, int | np.integer):
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        if n_features < 1:
            raise ValueError(f"n_features must be a positive integer, got {n_features}")
        state = {"n_features": np.array([n_features], dtype=np.int64)}
        state.update(self._initial_state(int(n_features)))
        state.update(initial_scaler_state(self.scaling, int(n_features)))
        self.state_ = state
        return self

    def get_state(self) -> dict[str, np.ndarray]:
        """A copy of the learned state: flat dict of C-contiguous float64/int64/uint64 arrays."""
        self._check_initialized()
        return {key: value.copy() for key, value in self.state_.items()}

    def validate_state(self, state: dict[str, np.ndarray]) -> None:
        """Check a state of this learner's layout by value (every declared invariant, then
        :meth:`_check_state`); raises :class:`~core.errors.InvalidState` naming the array."""
        n_features = int(state["n_features"][0])
        invariants: dict[str, StateInvariant] = {"n_features": Count(1, n_features)}
        invariants.update(self._state_invariants(n_features))
        invariants.update(_SCALER_INVARIANTS)
        validate_state(invariants, state)
        self._check_state(state)

    @classmethod
    def from_state(
        cls,
        params: dict[str, Any],
        state: dict[str, np.ndarray],
        *,
        n_features: int | None = None,
    ) -> Self:
        """Rebuild a learner from ``get_params()`` and ``get_state()``; continues bit for bit.

        The arrays are checked against the state layout the parameters imply (same keys,
        dtypes and shapes), then by value (:meth:`validate_state`: fills within capacity,
        counts consistent, finite floats), so no kernel ever sees a truncated, foreign or
        corrupt state; :class:`~core.errors.InvalidState` (a ValueError) names the array at
        fault.  ``n_features``, when given, is the width the state must have (a model's
        configuration): checked before any array is allocated for the layout.
        """
        learner = cls(**params)
        try:
            stored_width = np.asarray(state["n_features"])
            width = int(stored_width.reshape(-1)[0])
        except (KeyError, IndexError, TypeError, ValueError, OverflowError):
            raise InvalidState(
                "state has no valid 'n_features' entry", field="n_features"
            ) from None
        if stored_width.shape != (1,) or stored_width.dtype != np.int64:
            raise InvalidState(
                f"state array 'n_features' has dtype {stored_width.dtype} and shape "
                f"{stored_width.shape}; expected int64 and (1,)",
                field="n_features",
            )
        if n_features is not None and width != n_features:
            raise InvalidState(
                f"state array 'n_features' holds {width}; expected {n_features} (the model's "
                "n_features)",
                field="n_features",
            )
        if width < 1:
            raise InvalidState(
                f"state array 'n_features' holds {width}; expected a positive integer",
                field="n_features",
            )
        template = learner.initialize(width).state_
        state = learner._upgrade_state(state)
        missing = sorted(set(template) - set(state))
        extra = sorted(set(state) - set(template))
        if missing or extra:
            raise InvalidState(
                f"state does not match learner {cls.name!r} with these parameters: "
                f"missing {missing}, unexpected {extra}",
                field=(missing or extra)[0],
            )
        restored = {}
        for key, expected in template.items():
            value = np.asarray(state[key])
            if value.dtype != expected.dtype or value.shape != expected.shape:
                raise InvalidState(
                    f"state array {key!r} has dtype {value.dtype} and shape {value.shape}; "
                    f"expected {expected.dtype} and {expected.shape}",
                    field=key,
                )
            restored[key] = np.array(value, dtype=expected.dtype, order="C", copy=True)
        learner.validate_state(restored)
        learner.state_ = restored
        return learner

    def _upgrade_state(self, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``state`` with the arrays that states saved by an earlier version lack, rebuilt from
        the others (before the layout check of :meth:`from_state`); a learner that added an
        array to its state overrides this, so stored models keep loading.  Nothing to add by
        default."""
        return state

    def _check_initialized(self) -> None:
        if not hasattr(self, "state_"):
            raise NotFittedError(
                f"this {type(self).__name__} has learned nothing yet; "
                "call partial_fit, fit or initialize first"
            )

    # ------------------------------------------------------------------ learning
    def _coerce(self, X, y=None, check_finite: bool = True):
        n_features = self.n_features_in_ if self.is_initialized else None
        if y is None:
            return as_features(X, n_features, accept_sparse=self.supports_sparse), None
        return check_batch(
            X, y, n_features, accept_sparse=self.supports_sparse, check_finite=check_finite
        )

    def _learn_batch(self, X, y, want_scores: bool) -> np.ndarray:
        if not self.is_initialized:
            self.validate_params()
        features, labels = self._coerce(X, y, check_finite=False)
        if not self.is_initialized:
            self.initialize(features.shape[1])
        scores = np.empty(len(labels)) if want_scores else NO_SCORES
        kernel_checks = self._kernel_may_check(features)
        blocks = self._blocks(features)
        if not kernel_checks and blocks is None:
            check_rows(features)
            self._learn_checked(features, labels, scores)
            return scores
        with self._unchanged_on_error():
            if kernel_checks and self._learn_checking_rows(features, labels, scores):
                return scores
            if blocks is None:
                check_rows(features)
                self._learn_checked(features, labels, scores)
                return scores
            for start, stop in blocks:
                check_finite_rows(features[start:stop], first_row=start)
                block_scores = scores[start:stop] if want_scores else NO_SCORES
                self._learn_checked(features[start:stop], labels[start:stop], block_scores)
        return scores

    @contextmanager
    def _unchanged_on_error(self) -> Iterator[None]:
        """A rejected batch changes nothing: the state is saved, and put back if a row or a
        block is refused after others were learned."""
        saved = self.get_state()
        try:
            yield
        except BaseException:
            for key, value in saved.items():
                np.copyto(self.state_[key], value)  # in place: kernels' cached views stay valid
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
            scale_batch(self.scaling, self.state_, features, learn=False)
        features = scale_batch(self.scaling, self.state_, features, learn=True)
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
        features = scale_batch(self.scaling, self.state_, features, learn=False)
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
