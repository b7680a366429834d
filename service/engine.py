"""The learning path of DESIGN §2, shared by the HTTP routes and (issue 6) queue workers.

One labelled batch goes through :meth:`Engine.learn`:

1. **load** the model: a per-process cache of ``(learner, metrics window, counters)`` keyed by
   ``(incarnation, version)``; the store is asked for the current version and sends the arrays
   only when they changed (one round trip either way);
2. drop events whose id was already learned (idempotent ingest);
3. **one learner call** over the whole batch (``prequential_step``): each event's pre-update
   score while the batch is learned in order;
4. append the ``(score, label)`` pairs to the metrics window and update the counters;
5. **commit** the learner state, window and counters atomically with ``expected_version``, the
   learned ids and any checkpoint fields.  A stale version (another process wrote first) drops
   the cache and retries from step 1, so no update is ever lost or applied twice.

The cache is mutated in place (no copy per request) and dropped on any failure, so it is
rebuilt from the last committed state.  A per-model lock serialises requests inside a process;
the version check serialises processes.  Nothing here touches HTTP: a worker calls
``engine.learn(model_id, batch, checkpoint={...})`` with a parsed batch.
"""

from __future__ import annotations

import math
import struct
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.learners import available_learners, learner_class, make_learner
from core.learners._base import OnlineLearner
from core.metrics import PrequentialWindow
from core.regret import RegretWindow
from core.validation import CSRMatrix
from service.errors import (
    Contention,
    InvalidInput,
    ModelChanged,
    ModelNotFound,
    StaleVersion,
)
from service.ingest import Batch, FeatureSpec
from service.schemas import (
    REGRET_DEFAULT_MAX_FEATURES,
    Counts,
    ModelConfig,
    ModelCreate,
    ModelInfo,
    resolve_scaling,
)
from service.stores.base import Commit, Store

LEARNER_PREFIX = "learner:"
WINDOW_PREFIX = "window:"
STATS_PREFIX = "stats:"
REGRET_PREFIX = "regret:"
#: [CHOICE] the hindsight comparator: svm_pauc with this C and tolerance on the regret window
#: (``core.regret`` module docstring: the best fixed model over the ball of its own radius)
REGRET_C = 10.0
REGRET_TOL = 1e-3
COUNT_NAMES = (
    "events_learned",
    "positives",
    "negatives",
    "duplicates",
    "labels_joined",
    "labels_defaulted",
    "labels_expired",
)
#: time constant of the exponentially weighted throughput, seconds
RATE_TIME_CONSTANT = 10.0


def initial_stats() -> dict[str, np.ndarray]:
    stats = {name: np.zeros(1, dtype=np.int64) for name in COUNT_NAMES}
    # first_learned_at, last_learned_at (unix s) and the decayed event count behind the rate
    stats["times"] = np.zeros(2, dtype=np.float64)
    stats["rate"] = np.zeros(1, dtype=np.float64)
    return stats


@dataclass
class Loaded:
    """A model as cached in this process."""

    config: ModelConfig
    incarnation: str
    version: int
    learner: OnlineLearner
    window: PrequentialWindow
    stats: dict[str, np.ndarray]
    #: checkpoint fields committed with the state (e.g. a queue worker's last stream id)
    meta: dict[str, str] = field(default_factory=dict)
    #: the regret window (None when ``config.regret_window`` is 0)
    regret: RegretWindow | None = None

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec(
            self.config.n_features,
            self.config.feature_mode,
            accept_sparse=type(self.learner).supports_sparse,
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array that is committed: learner state, window state, counters."""
        arrays = {LEARNER_PREFIX + k: v for k, v in self.learner.state_.items()}
        arrays.update({WINDOW_PREFIX + k: v for k, v in self.window.get_state().items()})
        arrays.update({STATS_PREFIX + k: v for k, v in self.stats.items()})
        if self.regret is not None:  # views: every caller copies or encodes them at once
            arrays.update(
                {REGRET_PREFIX + k: v for k, v in self.regret.get_state(copy=False).items()}
            )
        return arrays

    def learn_round(
        self, X: np.ndarray | CSRMatrix, y: np.ndarray, recorded: np.ndarray | None
    ) -> np.ndarray:
        """Learn one round with one learner call and record it in the regret window (when on):
        the rows as the learner saw them (the kernel's own scaled batch, densified: the same
        bits as ``core.regret.learner_inputs`` before the call, without scaling twice) and the
        weights served before the call.  Returns the prequential scores, or ``recorded``."""
        learner = self.learner
        if self.regret is None:
            scores = self._learn_call(X, y, recorded)
        else:
            served = np.array(learner.coef_, dtype=np.float64)  # type: ignore[attr-defined]
            with learner.recording_inputs() as inputs:
                scores = self._learn_call(X, y, recorded)
            rows = inputs[0].toarray() if isinstance(inputs[0], CSRMatrix) else inputs[0]
            self.regret.update(rows, y, scores, served)  # copies the rows into its ring
        return scores

    def _learn_call(
        self, X: np.ndarray | CSRMatrix, y: np.ndarray, recorded: np.ndarray | None
    ) -> np.ndarray:
        if recorded is not None:
            self.learner.partial_fit(X, y)
            return recorded
        scores = self.learner.prequential_step(X, y)
        if not np.isfinite(scores).all():  # nothing is committed: the cache is dropped
            raise InvalidInput(
                "the model produced non-finite scores on this batch (diverged?); "
                "nothing was learned: lower the step size or use scaling"
            )
        return scores

    def counts(self) -> Counts:
        return Counts(**{name: int(self.stats[name][0]) for name in COUNT_NAMES})


@dataclass
class LearnResult:
    version: int
    received: int
    learned: int
    duplicate_ids: list[str]
    #: pre-update score per received event (NaN for a skipped duplicate), when asked for
    scores: np.ndarray | None


@dataclass
class LabelResult:
    version: int
    learned: int
    statuses: list[tuple[str, str]]


def split_arrays(arrays: dict[str, np.ndarray]) -> tuple[dict, dict, dict]:
    """``(learner, window, stats)`` states; see :func:`regret_arrays` for the regret window."""
    learner: dict[str, np.ndarray] = {}
    window: dict[str, np.ndarray] = {}
    stats: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        if name.startswith(LEARNER_PREFIX):
            learner[name[len(LEARNER_PREFIX) :]] = value
        elif name.startswith(WINDOW_PREFIX):
            window[name[len(WINDOW_PREFIX) :]] = value
        elif name.startswith(STATS_PREFIX):
            stats[name[len(STATS_PREFIX) :]] = value
    return learner, window, stats


def regret_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        name[len(REGRET_PREFIX) :]: value
        for name, value in arrays.items()
        if name.startswith(REGRET_PREFIX)
    }


def build_regret(config: ModelConfig, arrays: dict[str, np.ndarray]) -> RegretWindow | None:
    """The model's regret window: restored from ``regret:*`` arrays, or empty when there are none
    (a model stored before regret tracking existed); None when ``regret_window`` is 0.  Raises
    ValueError when stored arrays do not fit the configuration."""
    capacity = int(config.regret_window or 0)
    if capacity == 0:
        return None
    state = regret_arrays(arrays)
    if not state:
        return RegretWindow(capacity, config.n_features)
    window = RegretWindow.from_state(state)
    if (window.capacity, window.n_features) != (capacity, config.n_features):
        raise ValueError(
            f"regret window of {window.capacity} events x {window.n_features} features does not "
            f"match regret_window {capacity} and n_features {config.n_features}"
        )
    return window


def _field_of_learner_error(message: str, params: dict[str, Any]) -> str:
    for name in params:
        if repr(name) in message or f"{name} " in message or message.startswith(name):
            return f"params.{name}"
    return "params"


def _online_learners() -> list[str]:
    return [n for n in available_learners() if getattr(learner_class(n), "online", True)]


def build_learner(request: ModelCreate) -> OnlineLearner:
    """The learner a creation request asks for, validated; errors name the field."""
    try:
        cls = learner_class(request.learner)
    except ValueError as error:
        raise InvalidInput(str(error), field="learner") from None
    if not getattr(cls, "online", True):
        raise InvalidInput(
            f"learner {request.learner!r} is a batch solver, not an online learner; "
            f"online learners: {', '.join(_online_learners())}",
            field="learner",
        )
    scaling = resolve_scaling(request.scaling, request.feature_mode)
    try:
        learner = make_learner(request.learner, **request.params, scaling=scaling)
        learner.initialize(request.n_features)
    except (ValueError, TypeError) as error:
        raise InvalidInput(
            f"learner {request.learner!r}: {error}",
            field=_field_of_learner_error(str(error), request.params),
        ) from None
    if request.feature_mode != "dense" and not cls.supports_sparse:
        raise InvalidInput(
            f"learner {request.learner!r} needs dense features; use feature_mode 'dense'",
            field="feature_mode",
        )
    return learner


# ---------------------------------------------------------------------------- pending records
_RECORD_HEADER = struct.Struct("<dq")  # pre-update score, nnz (-1 for a dense row)


def encode_pending(X: np.ndarray | CSRMatrix, scores: np.ndarray) -> list[bytes]:
    """One record per event: its score and its (unscaled) features."""
    records = []
    if isinstance(X, CSRMatrix):
        for row in range(X.shape[0]):
            start, stop = int(X.indptr[row]), int(X.indptr[row + 1])
            records.append(
                _RECORD_HEADER.pack(float(scores[row]), stop - start)
                + X.indices[start:stop].astype("<i8").tobytes()
                + X.data[start:stop].astype("<f8").tobytes()
            )
    else:
        rows = np.ascontiguousarray(X, dtype="<f8")
        for row in range(rows.shape[0]):
            records.append(_RECORD_HEADER.pack(float(scores[row]), -1) + rows[row].tobytes())
    return records


def decode_pending(
    records: Sequence[bytes], n_features: int, dense: bool
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """Records -> (features in the model's layout, recorded scores)."""
    scores = np.empty(len(records))
    dense_rows = []
    indptr = [0]
    indices: list[np.ndarray] = []
    values: list[np.ndarray] = []
    size = _RECORD_HEADER.size
    for position, record in enumerate(records):
        score, nnz = _RECORD_HEADER.unpack_from(record)
        scores[position] = score
        if nnz < 0:
            dense_rows.append(np.frombuffer(record, dtype="<f8", offset=size))
        else:
            indices.append(np.frombuffer(record, dtype="<i8", count=nnz, offset=size))
            values.append(np.frombuffer(record, dtype="<f8", count=nnz, offset=size + 8 * nnz))
            indptr.append(indptr[-1] + nnz)
    if dense:
        return np.array(dense_rows, dtype=np.float64).reshape(-1, n_features), scores
    return (
        CSRMatrix(
            np.asarray(indptr, dtype=np.int64),
            np.concatenate(indices).astype(np.int64) if indices else np.zeros(0, np.int64),
            np.concatenate(values).astype(np.float64) if values else np.zeros(0),
            n_features,
        ),
        scores,
    )


def _rows(X: np.ndarray | CSRMatrix, start: int, stop: int) -> np.ndarray | CSRMatrix:
    if isinstance(X, CSRMatrix):
        return X.take_rows(np.arange(start, stop, dtype=np.int64))
    return X[start:stop]


def round_bounds(round_ids: np.ndarray | None, n_events: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the runs of equal ``round_ids`` (one run when None)."""
    if round_ids is None or n_events == 0:
        return [(0, n_events)]
    edges = [0, *(np.flatnonzero(np.diff(round_ids)) + 1).tolist(), n_events]
    return list(zip(edges[:-1], edges[1:], strict=True))


def round_ids_of(rounds: Sequence[int] | None, n_received: int) -> np.ndarray | None:
    """Round number of each received event, from the sizes of the requests (queue entries)
    a worker merged into one call; None when the call is one round."""
    if rounds is None or len(rounds) <= 1:
        return None
    if sum(rounds) != n_received or min(rounds) < 0:
        raise ValueError(f"rounds {list(rounds)} do not add up to the {n_received} events")
    return np.repeat(np.arange(len(rounds)), rounds)


@dataclass
class _SolvedRegret:
    key: tuple[str, int]  # (incarnation, version) solved
    section: dict[str, Any] | None
    reason: str | None
    finished: float  # time.monotonic() at the end of the solve
    seconds: float  # how long it took

    def serves(self, key: tuple[str, int], throttle: float) -> bool:
        """Current for ``key``, or recent enough that solving again would be too soon."""
        if self.key == key:
            return True
        return self.key[0] == key[0] and time.monotonic() < self.finished + throttle * self.seconds


# ---------------------------------------------------------------------------- engine
class Engine:
    """Sync learning, scoring and delayed labels over a :class:`~service.stores.base.Store`.

    Thread-safe.  ``clock`` is injectable so tests can expire ids without sleeping.
    """

    def __init__(
        self,
        store: Store,
        *,
        event_id_ttl_seconds: float = 86_400.0,
        label_ttl_seconds: float = 86_400.0,
        max_write_retries: int = 50,
        clock: Callable[[], float] = time.time,
        regret_throttle: float = 10.0,
    ) -> None:
        self.store = store
        #: a model's regret is solved again only ``regret_throttle`` x its last solve time after
        #: that solve ended (<= 1/throttle of a core per model); in between, metrics serve the
        #: last solution, whose ``version`` says which model version it describes
        self.regret_throttle = regret_throttle
        self.event_id_ttl_seconds = event_id_ttl_seconds
        self.label_ttl_seconds = label_ttl_seconds
        self.max_write_retries = max_write_retries
        self.clock = clock
        self._cache: dict[str, Loaded] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.writes_retried = 0
        self._metrics_cache: dict[str, tuple[tuple[str, int], dict[str, Any]]] = {}
        self._regret_cache: dict[str, _SolvedRegret] = {}
        self._regret_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------------ cache
    def _lock(self, model_id: str) -> threading.Lock:
        lock = self._locks.get(model_id)
        if lock is None:
            with self._locks_guard:
                lock = self._locks.setdefault(model_id, threading.Lock())
        return lock

    def _load(self, model_id: str) -> Loaded:
        """The current model, from the cache when its (incarnation, version) is current."""
        cached = self._cache.get(model_id)
        try:
            stored = self.store.load(
                model_id,
                None if cached is None else cached.version,
                None if cached is None else cached.incarnation,
            )
        except ModelNotFound:
            self._cache.pop(model_id, None)
            raise
        if cached is not None and stored.arrays is None:
            return cached
        assert stored.arrays is not None and stored.config is not None
        config = ModelConfig.model_validate(stored.config)
        learner_state, window_state, stats = split_arrays(stored.arrays)
        learner = learner_class(config.learner).from_state(
            {**config.params, "scaling": config.scaling}, learner_state
        )
        window = PrequentialWindow.from_state(window_state)
        full_stats = initial_stats()
        full_stats.update(stats)
        loaded = Loaded(
            config,
            stored.incarnation,
            stored.version,
            learner,
            window,
            full_stats,
            stored.meta,
            regret=build_regret(config, stored.arrays),
        )
        self._cache[model_id] = loaded
        return loaded

    def _drop(self, model_id: str) -> None:
        self._cache.pop(model_id, None)

    def _commit(self, model_id: str, loaded: Loaded, **fields: Any) -> int:
        commit = Commit(
            expected_version=loaded.version,
            incarnation=loaded.incarnation,
            arrays=loaded.arrays(),
            now=self.clock(),
            **fields,
        )
        version = self.store.commit(model_id, commit)
        loaded.version = version
        loaded.meta.update(commit.meta)
        return version

    def checkpoint(self, model_id: str) -> dict[str, str]:
        """The checkpoint fields committed with the current state (see :meth:`learn`)."""
        with self._lock(model_id):
            meta = dict(self._load(model_id).meta)
        meta.pop("incarnation", None)
        return meta

    def _transaction(self, model_id: str, work: Callable[[Loaded], Any]) -> Any:
        """Run ``work(loaded)`` (which mutates ``loaded`` and commits) with retries on stale
        versions; the cache is dropped on any failure so it never holds uncommitted state.

        The first attempt trusts the cache without asking the store (optimistic: the commit's
        version check catches a stale cache, which is then reloaded and the work redone), so a
        model with one writer pays one store round trip per batch, not two.
        """
        with self._lock(model_id):
            for attempt in range(self.max_write_retries):
                cached = self._cache.get(model_id) if attempt == 0 else None
                loaded = cached if cached is not None else self._load(model_id)
                try:
                    return work(loaded)
                except StaleVersion:
                    self.writes_retried += 1
                    self._drop(model_id)
                except BaseException:
                    self._drop(model_id)
                    raise
        raise Contention(
            f"model {model_id!r}: gave up after {self.max_write_retries} stale writes; retry"
        )

    # ------------------------------------------------------------------ models
    def create_model(self, request: ModelCreate, *, replace: bool = False) -> ModelInfo:
        learner = build_learner(request)
        config = ModelConfig(
            **{
                **request.model_dump(),
                "params": {k: v for k, v in learner.get_params().items() if k != "scaling"},
                "scaling": learner.get_params()["scaling"],
            },
            incarnation=uuid.uuid4().hex,
            created_at=self.clock(),
        )
        window = PrequentialWindow(config.window, config.reservoir)
        loaded = Loaded(
            config,
            config.incarnation,
            1,
            learner,
            window,
            initial_stats(),
            regret=build_regret(config, {}),
        )
        with self._lock(request.id):
            version = self.store.create_model(
                request.id,
                config.model_dump(mode="json"),
                loaded.arrays(),
                config.incarnation,
                replace=replace,
            )
            loaded.version = version
            self._cache[request.id] = loaded
        return ModelInfo(config=config, version=version, counts=loaded.counts())

    def restore_model(
        self, config: ModelConfig, arrays: dict[str, np.ndarray], *, replace: bool
    ) -> ModelInfo:
        """Create ``config.id`` from exported arrays (snapshot import); checks the layout."""
        learner_state, window_state, stats = split_arrays(arrays)
        try:
            learner = learner_class(config.learner).from_state(
                {**config.params, "scaling": config.scaling}, learner_state
            )
            window = PrequentialWindow.from_state(window_state)
            regret = build_regret(config, arrays)
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidInput(f"snapshot state does not fit its manifest: {error}") from None
        full_stats = initial_stats()
        for name, value in stats.items():
            if name not in full_stats or full_stats[name].shape != value.shape:
                raise InvalidInput(f"snapshot has an unexpected counter {name!r}")
            full_stats[name] = np.array(value, dtype=full_stats[name].dtype)
        config = config.model_copy(update={"incarnation": uuid.uuid4().hex})
        loaded = Loaded(config, config.incarnation, 1, learner, window, full_stats, regret=regret)
        with self._lock(config.id):
            version = self.store.create_model(
                config.id,
                config.model_dump(mode="json"),
                loaded.arrays(),
                config.incarnation,
                replace=replace,
            )
            loaded.version = version
            self._cache[config.id] = loaded
        return ModelInfo(config=config, version=version, counts=loaded.counts())

    def reset_model(self, model_id: str) -> ModelInfo:
        """Forget everything learned (state, window, counters, ids); keep the configuration."""
        config = self.model(model_id).config
        request = ModelCreate(**config.model_dump(include=set(ModelCreate.model_fields)))
        return self.create_model(request, replace=True)

    def delete_model(self, model_id: str) -> None:
        with self._lock(model_id):
            self.store.delete_model(model_id)
            self._drop(model_id)

    def list_models(self) -> list[str]:
        return self.store.list_models()

    def model(self, model_id: str) -> Loaded:
        """The current cached model (read-only use)."""
        with self._lock(model_id):
            return self._load(model_id)

    def weights(self, model_id: str) -> tuple[int, np.ndarray]:
        """``(version, a copy of the served weight vector)``."""
        with self._lock(model_id):
            loaded = self._load(model_id)
            return loaded.version, np.array(loaded.learner.coef_, dtype=np.float64)  # type: ignore[attr-defined]

    def state_arrays(self, model_id: str) -> tuple[ModelConfig, int, dict[str, np.ndarray]]:
        """``(config, version, copies of every committed array)`` (snapshot export)."""
        with self._lock(model_id):
            loaded = self._load(model_id)
            arrays = {name: value.copy() for name, value in loaded.arrays().items()}
            return loaded.config, loaded.version, arrays

    def info(self, model_id: str) -> ModelInfo:
        with self._lock(model_id):
            loaded = self._load(model_id)
            return ModelInfo(config=loaded.config, version=loaded.version, counts=loaded.counts())

    def cached_spec(self, model_id: str) -> FeatureSpec | None:
        """The feature layout from this process's cache, or None (never blocks)."""
        cached = self._cache.get(model_id)
        return None if cached is None else cached.spec

    def cached_incarnation(self, model_id: str) -> str | None:
        """The model's incarnation in this process's cache, or None (never blocks); queue mode
        appends a batch only to the incarnation it was parsed for."""
        cached = self._cache.get(model_id)
        return None if cached is None else cached.incarnation

    def spec(self, model_id: str) -> FeatureSpec:
        """The feature layout to parse a body with; from the cache without a store round trip
        (the layout only changes with the incarnation, which :meth:`learn` checks)."""
        cached = self._cache.get(model_id)
        if cached is not None:
            return cached.spec
        return self.model(model_id).spec

    # ------------------------------------------------------------------ learning
    def _check_batch_fits(self, loaded: Loaded, batch: Batch) -> None:
        # The batch was parsed against a cached configuration; the model may have been
        # re-created with another one since (by this or another process).
        dense = loaded.config.feature_mode == "dense"
        if int(batch.X.shape[1]) != loaded.config.n_features or dense != isinstance(
            batch.X, np.ndarray
        ):
            raise ModelChanged(
                f"model {loaded.config.id!r} was re-created with another feature layout while "
                "the request was parsed; resend it"
            )

    def _duplicates(self, model_id: str, ids: list[str | None] | None) -> np.ndarray | None:
        """Mask of events to skip: ids already learned, or repeated inside the batch."""
        if ids is None:
            return None
        present = [i for i in ids if i is not None]
        known = dict(zip(present, self.store.seen(model_id, present, self.clock()), strict=True))
        mask = np.zeros(len(ids), dtype=bool)
        first: set[str] = set()
        for position, event_id in enumerate(ids):
            if event_id is None:
                continue
            if known[event_id] or event_id in first:
                mask[position] = True
            first.add(event_id)
        return mask

    def _note_learned(self, loaded: Loaded, labels: np.ndarray) -> None:
        stats = loaded.stats
        n_events = len(labels)
        n_positive = int(np.count_nonzero(labels > 0))
        stats["events_learned"][0] += n_events
        stats["positives"][0] += n_positive
        stats["negatives"][0] += n_events - n_positive
        now = self.clock()
        times, rate = stats["times"], stats["rate"]
        if times[0] == 0.0:
            times[0] = now
        elapsed = max(now - times[1], 0.0) if times[1] else 0.0
        rate[0] = rate[0] * math.exp(-elapsed / RATE_TIME_CONSTANT) + n_events
        times[1] = now

    def _learn_rounds(
        self,
        loaded: Loaded,
        X: np.ndarray | CSRMatrix,
        y: np.ndarray,
        recorded: np.ndarray | None,
        bounds: list[tuple[int, int]],
    ) -> np.ndarray:
        """Learn ``(X, y)`` in order, one learner call per ``(start, stop)`` round, recording
        each round in the regret window (when on).  Returns the scores the metrics use: the
        prequential ones, or ``recorded`` (delayed labels: the scores given at scoring time)."""
        parts = []
        for start, stop in bounds:
            rows = X if (start, stop) == (0, X.shape[0]) else _rows(X, start, stop)
            labels = y[start:stop]
            part = None if recorded is None else recorded[start:stop]
            parts.append(loaded.learn_round(rows, labels, part))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def learn(
        self,
        model_id: str,
        batch: Batch,
        *,
        want_scores: bool = False,
        checkpoint: dict[str, str] | None = None,
        rounds: Sequence[int] | None = None,
    ) -> LearnResult:
        """Learn a validated labelled batch (skipping known ids); see the module docstring.

        ``checkpoint`` fields are committed atomically with the state (a queue worker's last
        applied stream id).  ``rounds``: sizes of the requests a queue worker merged into
        ``batch``; with regret tracking on, each is learned by its own learner call and is its
        own regret round, exactly as in sync mode (the learner state does not depend on the
        split: a batch is learned in order, as if event by event).
        """
        round_ids = round_ids_of(rounds, len(batch))
        if batch.y is None:
            raise InvalidInput("events need labels 'y' to be learned", field="y")

        def work(loaded: Loaded) -> LearnResult:
            self._check_batch_fits(loaded, batch)
            skip = self._duplicates(model_id, batch.ids)
            todo = batch if skip is None or not skip.any() else batch.take(np.flatnonzero(~skip))
            duplicate_ids = (
                [] if skip is None else [str(batch.ids[i]) for i in np.flatnonzero(skip)]  # type: ignore[index]
            )
            scores = None
            if len(todo):
                assert todo.y is not None
                kept_ids = None
                if round_ids is not None and loaded.regret is not None:
                    kept_ids = round_ids if skip is None else round_ids[~skip]
                try:
                    scores = self._learn_rounds(
                        loaded, todo.X, todo.y, None, round_bounds(kept_ids, len(todo))
                    )
                except ValueError as error:
                    raise InvalidInput(str(error)) from None
                loaded.window.update(scores, todo.y)
                self._note_learned(loaded, todo.y)
            loaded.stats["duplicates"][0] += len(duplicate_ids)
            learned_ids = [] if todo.ids is None else [i for i in todo.ids if i is not None]
            if len(todo) or duplicate_ids or checkpoint:
                version = self._commit(
                    model_id,
                    loaded,
                    learned_ids=learned_ids,
                    id_expiry=self.clock() + self.event_id_ttl_seconds,
                    meta=checkpoint or {},
                )
            else:
                version = loaded.version
            all_scores = None
            if want_scores:
                all_scores = np.full(len(batch), np.nan)
                if scores is not None:
                    all_scores[np.flatnonzero(~skip) if skip is not None else slice(None)] = scores
            return LearnResult(version, len(batch), len(todo), duplicate_ids, all_scores)

        return self._transaction(model_id, work)

    def score(
        self, model_id: str, batch: Batch, *, keep: bool = True
    ) -> tuple[int, np.ndarray, int]:
        """Scores of the served model; with ids (and ``keep``) the features and scores are kept
        so that a later label is learned and measured with the score given now.

        Returns ``(version, scores, kept)``.
        """
        with self._lock(model_id):
            loaded = self._load(model_id)
            self._check_batch_fits(loaded, batch)
            try:
                scores = loaded.learner.decision_function(batch.X)
            except ValueError as error:
                raise InvalidInput(str(error)) from None
            version = loaded.version
            ttl = loaded.config.label_ttl_seconds or self.label_ttl_seconds
        kept = 0
        if keep and batch.ids is not None:
            rows = [position for position, i in enumerate(batch.ids) if i is not None]
            if rows:
                index = np.asarray(rows, dtype=np.int64)
                subset = batch.take(index)
                records = encode_pending(subset.X, scores[index])
                ids = [str(i) for i in subset.ids or []]
                self.store.put_pending(
                    model_id, dict(zip(ids, records, strict=True)), self.clock() + ttl
                )
                kept = len(set(ids))
        return version, scores, kept

    def labels(
        self,
        model_id: str,
        ids: list[str],
        labels: np.ndarray,
        *,
        checkpoint: dict[str, str] | None = None,
        rounds: Sequence[int] | None = None,
    ) -> LabelResult:
        """Join delayed labels to kept features; learn them with the scores recorded at scoring.

        Per id: ``learned``; ``duplicate`` (already learned, or repeated in this request);
        ``expired`` (its features were dropped after the TTL, or it is past its deadline);
        ``unknown`` (never scored with this id, or forgotten).  ``checkpoint`` and ``rounds``
        (sizes of merged label requests) as in :meth:`learn`.
        """
        round_ids = round_ids_of(rounds, len(ids))
        self.sweep(model_id)

        def work(loaded: Loaded) -> LabelResult:
            now = self.clock()
            seen = self.store.seen(model_id, ids, now)
            expired = self.store.expired(model_id, ids, now)
            records = self.store.get_pending(model_id, ids)
            statuses: list[tuple[str, str]] = []
            chosen: list[int] = []
            taken: set[str] = set()
            for position, event_id in enumerate(ids):
                record = records.get(event_id)
                if event_id in taken:
                    status = "duplicate"
                elif expired[position] or (
                    record is not None and record[1] <= now and not seen[position]
                ):
                    status = "expired"  # checked first: a default label may have been learned
                elif seen[position]:
                    status = "duplicate"
                elif record is None:
                    status = "unknown"
                else:
                    status = "learned"
                    chosen.append(position)
                taken.add(event_id)
                statuses.append((event_id, status))
            if not chosen:
                version = loaded.version
                if checkpoint:
                    version = self._commit(model_id, loaded, meta=checkpoint)
                return LabelResult(version, 0, statuses)
            chosen_ids = [ids[p] for p in chosen]
            X, scores = decode_pending(
                [records[i][0] for i in chosen_ids],
                loaded.config.n_features,
                loaded.config.feature_mode == "dense",
            )
            positions = np.asarray(chosen, dtype=np.int64)
            y = labels[positions]
            chosen_rounds = None if round_ids is None else round_ids[positions]
            self._learn_rounds(loaded, X, y, scores, round_bounds(chosen_rounds, len(y)))
            loaded.window.update(scores, y)
            self._note_learned(loaded, y)
            loaded.stats["labels_joined"][0] += len(chosen)
            version = self._commit(
                model_id,
                loaded,
                learned_ids=chosen_ids,
                id_expiry=now + self.event_id_ttl_seconds,
                remove_pending=chosen_ids,
                meta=checkpoint or {},
            )
            return LabelResult(version, len(chosen), statuses)

        return self._transaction(model_id, work)

    def sweep(self, model_id: str, limit: int = 10_000) -> int:
        """Handle scored events whose label never came before their deadline: learn them with
        the model's ``default_label`` (with the score recorded at scoring time), or forget
        them; either way their ids are remembered as ``expired``.  Returns how many."""
        due = list(dict.fromkeys(self.store.due_pending(model_id, self.clock(), limit)))
        if not due:
            return 0

        def work(loaded: Loaded) -> int:
            now = self.clock()
            records = self.store.get_pending(model_id, due)
            ready = [i for i in due if i in records and records[i][1] <= now]
            if not ready:
                return 0
            default = loaded.config.default_label
            learned: list[str] = []
            if default is not None:
                seen = self.store.seen(model_id, ready, now)
                learned = [i for i, known in zip(ready, seen, strict=True) if not known]
            if learned:
                X, scores = decode_pending(
                    [records[i][0] for i in learned],
                    loaded.config.n_features,
                    loaded.config.feature_mode == "dense",
                )
                y = np.full(len(learned), 1 if default == 1 else -1, dtype=np.int64)
                self._learn_rounds(loaded, X, y, scores, [(0, len(y))])
                loaded.window.update(scores, y)
                self._note_learned(loaded, y)
                loaded.stats["labels_defaulted"][0] += len(learned)
            loaded.stats["labels_expired"][0] += len(ready)
            self._commit(
                model_id,
                loaded,
                learned_ids=learned,
                id_expiry=now + self.event_id_ttl_seconds,
                remove_pending=ready,
                expired_ids=ready,
            )
            return len(ready)

        return self._transaction(model_id, work)

    def sweep_all(self) -> int:
        total = 0
        for model_id in self.list_models():
            try:
                total += self.sweep(model_id)
            except ModelNotFound:
                continue
        return total

    # ------------------------------------------------------------------ reading
    def throughput(self, loaded: Loaded) -> dict[str, float | None]:
        times, rate = loaded.stats["times"], loaded.stats["rate"]
        learned = int(loaded.stats["events_learned"][0])
        if not times[1]:
            return {"events_per_second_recent": 0.0, "events_per_second_mean": None}
        decay = math.exp(-max(self.clock() - times[1], 0.0) / RATE_TIME_CONSTANT)
        span = times[1] - times[0]
        return {
            "events_per_second_recent": float(rate[0] * decay / RATE_TIME_CONSTANT),
            "events_per_second_mean": float(learned / span) if span > 0 else None,
        }

    def metrics(self, model_id: str) -> dict[str, Any]:
        """Windowed and since-start AUC / pAUC over the model's range, counts, throughput.

        Cached per (incarnation, version): a server-sent stream polling it costs nothing
        while the model does not change.
        """
        with self._lock(model_id):
            loaded = self._load(model_id)
            key = (loaded.incarnation, loaded.version)
            cached = self._metrics_cache.get(model_id)
            if cached is not None and cached[0] == key:
                summary = cached[1]
            else:
                alpha, beta = loaded.config.pauc_range
                summary = loaded.window.summary(alpha=alpha, beta=beta)
                self._metrics_cache[model_id] = (key, summary)
            counts = loaded.counts()
            throughput = self.throughput(loaded)
            regret, regret_reason, snapshot = self._cached_regret(model_id, loaded)
        if snapshot is not None:  # solved outside the model lock: learning goes on meanwhile
            regret, regret_reason = self._solve_regret(model_id, key, snapshot, loaded.config)
        return {
            "model": model_id,
            "version": key[1],  # the version read under the lock (a solve may outlast it)
            "learner": loaded.config.learner,
            "pauc_range": list(loaded.config.pauc_range),
            **summary,
            "counts": counts.model_dump(),
            "throughput": throughput,
            "regret": regret,
            "regret_reason": regret_reason,
        }

    # ------------------------------------------------------------------ regret
    def _cached_regret(
        self, model_id: str, loaded: Loaded
    ) -> tuple[dict[str, Any] | None, str | None, RegretWindow | None]:
        """``(section, reason, None)`` when known for the loaded version (or throttled: see
        ``regret_throttle``), else ``(None, None, a copy of the regret window to solve)``.
        Call under the model lock."""
        if loaded.regret is None:
            more = loaded.config.n_features > REGRET_DEFAULT_MAX_FEATURES
            return (
                None,
                "regret tracking is off for this model (regret_window = 0"
                + (f"; the default above {REGRET_DEFAULT_MAX_FEATURES:,} features" if more else "")
                + ")",
                None,
            )
        cached = self._regret_cache.get(model_id)
        key = (loaded.incarnation, loaded.version)
        if cached is not None and cached.serves(key, self.regret_throttle):
            return cached.section, cached.reason, None
        return None, None, RegretWindow.from_state(loaded.regret.get_state(copy=False))

    def _solve_regret(
        self, model_id: str, key: tuple[str, int], window: RegretWindow, config: ModelConfig
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Regret of ``window`` (the model at ``key``), solved once per version: concurrent
        requests for the same version wait for the first one's result."""
        lock = self._regret_locks.get(model_id)
        if lock is None:
            with self._locks_guard:
                lock = self._regret_locks.setdefault(model_id, threading.Lock())
        with lock:
            cached = self._regret_cache.get(model_id)
            if cached is not None and cached.serves(key, self.regret_throttle):
                return cached.section, cached.reason
            started = time.monotonic()
            alpha, beta = config.pauc_range
            section, reason = window.summary(alpha, beta, C=REGRET_C, tol=REGRET_TOL)
            if section is not None:
                section["version"] = key[1]
            finished = time.monotonic()
            self._regret_cache[model_id] = _SolvedRegret(
                key, section, reason, finished, finished - started
            )
            return section, reason

    def regret_pending(self, model_id: str) -> bool:
        """Whether :meth:`metrics` may have to solve the regret (never blocks): the HTTP layer
        then calls it from the thread pool even on the memory store."""
        cached = self._cache.get(model_id)
        if cached is None:
            return True
        if cached.regret is None:
            return False
        known = self._regret_cache.get(model_id)
        key = (cached.incarnation, cached.version)
        return known is None or not known.serves(key, self.regret_throttle)

    def roc(self, model_id: str) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
        """(version, n_events, fpr, tpr, thresholds) of the metrics window."""
        import warnings

        with self._lock(model_id):
            loaded = self._load(model_id)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fpr, tpr, thresholds = loaded.window.roc_curve()
            return loaded.version, len(loaded.window), fpr, tpr, thresholds
