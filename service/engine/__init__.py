"""The learning path of the service, shared by the HTTP routes and the queue workers: a thin
facade (:class:`Engine`) over its parts, one module each (docs/architecture.md, "Layout").
Nothing here touches HTTP.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable
from typing import Unpack

import numpy as np

from core.learners._base import OnlineLearner
from core.learners._growing import Growth, growth_bounds
from service.engine.coalesce import Coalescer
from service.engine.delayed import DelayedLabels
from service.engine.entries import Entry
from service.engine.history import behind, catch_up_due
from service.engine.learning import Learning, apply
from service.engine.model import (
    STATE_FORMAT_VERSION,
    Loaded,
    OtherStateFormat,
    ServedWeights,
    fresh,
    from_arrays,
)
from service.engine.refit import fit_status
from service.engine.reporting import Reporting
from service.engine.repository import ModelRepository, RepositoryOptions
from service.engine.undo import copy_of
from service.errors import (
    CorruptState,
    InsufficientStorage,
    InvalidInput,
    ModelNotFound,
    ServiceError,
)
from service.ingest import FeatureSpec
from service.schemas import ModelConfig, ModelInfo
from service.snapshot import probe_learner
from service.stores.base import Store

logger = logging.getLogger("aucstream")


def full_size(loaded: Loaded) -> int:
    """Bytes of a model's committed state once its windows and growing arrays are full: the
    metrics window holds a score and a label per event and two score reservoirs, the regret
    window features, round weights, label, score and round end per event."""
    config = loaded.config
    growing = loaded.learner._growing_arrays()
    learner = sum(
        at_capacity(array, growing[name]) if name in growing else array.nbytes
        for name, array in loaded.learner.state_.items()
    )
    window = config.window * 16 + 2 * config.reservoir * 8
    regret = int(config.regret_window or 0) * (2 * config.n_features + 3) * 8
    history = sum(array.nbytes for array in loaded.history.values())
    return learner + window + regret + history


def at_capacity(array: np.ndarray, growth: Growth) -> int:
    """Bytes of a growing array (core.learners._growing) at its capacity on each axis it grows
    on."""
    bounds = growth_bounds(*growth)
    cells = math.prod(bounds.get(axis, length) for axis, length in enumerate(array.shape))
    return array.itemsize * cells


class Engine:
    """Sync learning, scoring and delayed labels over a :class:`~service.stores.base.Store`;
    thread-safe. ``clock`` is injectable (and assignable) so tests expire ids without sleeping;
    ``repository``: the cache's :class:`~service.engine.repository.RepositoryOptions`."""

    def __init__(
        self,
        store: Store,
        *,
        label_ttl_seconds: float = 86_400.0,
        max_models: int | None = None,
        max_model_bytes: int | None = None,
        max_pending_records: int | None = None,
        **repository: Unpack[RepositoryOptions],
    ) -> None:
        #: bounds on what the service keeps (None: unbounded); see service.settings
        self.max_models = max_models
        self.max_model_bytes = max_model_bytes
        self.repository = ModelRepository(store, **repository)
        self.learning = Learning(self.repository)
        self.delayed = DelayedLabels(
            self.repository,
            label_ttl_seconds=label_ttl_seconds,
            max_pending_records=max_pending_records,
        )
        self.reporting = Reporting(self.repository)
        #: the per-event operations, merged per model across concurrent requests (async)
        self.coalesce = Coalescer(self)
        # the operations, as the routes and workers call them
        self.learn = self.learning.learn
        self.score = self.delayed.score
        self.labels = self.delayed.labels
        self.sweep = self.delayed.sweep
        self.sweep_all = self.delayed.sweep_all
        self.metrics = self.reporting.metrics
        self.regret_pending = self.reporting.regret_pending
        self.roc = self.reporting.roc
        self.history = self.reporting.history
        self.model = self.repository.read
        self.delete_model = self.repository.delete

    def close(self) -> None:
        """Shutdown: the coalescer's drains end, and every model whose state is ahead of its
        checkpoint is checkpointed (a restart then replays nothing)."""
        self.coalesce.close()
        self.repository.close()

    # ------------------------------------------------------------------ shared settings
    @property
    def store(self) -> Store:
        return self.repository.store

    @property
    def clock(self) -> Callable[[], float]:
        return self.repository.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.repository.clock = clock

    @property
    def writes_retried(self) -> int:
        return self.repository.writes_retried

    # ------------------------------------------------------------------ models
    def create_model(
        self,
        config: ModelConfig,
        learner: OnlineLearner,
        *,
        replace: bool = False,
        replaces: str | None = None,
    ) -> ModelInfo:
        """Store a new model of ``config`` whose initialised ``learner`` learned nothing
        (``replace``, ``replaces``: ``Store.create_model``)."""
        return self._create(fresh(config, learner), replace=replace, replaces=replaces)

    def restore_model(
        self, config: ModelConfig, arrays: dict[str, np.ndarray], *, replace: bool
    ) -> ModelInfo:
        """Create ``config.id`` from exported arrays (snapshot import); checks the layout."""
        config = config.model_copy(update={"incarnation": uuid.uuid4().hex})
        try:
            loaded = from_arrays(config, config.incarnation, 1, arrays)
        except OtherStateFormat as error:
            raise InvalidInput(
                f"the snapshot holds state format {error.found}, this server reads "
                f"{STATE_FORMAT_VERSION}: import it with the version of aucstream that exported "
                "it (a state is not converted across format versions)",
                field=error.field,
            ) from None
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidInput(
                f"snapshot state does not fit its manifest: {error}",
                field=getattr(error, "field", None),
            ) from None
        probe_learner(loaded.learner)
        return self._create(loaded, replace=replace)

    def _check_bounds(self, loaded: Loaded, *, replace: bool) -> None:
        """507 before a model is stored beyond ``max_models`` (read without a lock: concurrent
        creations may pass it by one each) or ``max_model_bytes``."""
        model_id = loaded.config.id
        if self.max_model_bytes is not None:
            size = full_size(loaded)
            if size > self.max_model_bytes:
                raise InsufficientStorage(
                    f"model {model_id!r} would keep {size:,} bytes of state once its windows "
                    "are full, more than the "
                    f"limit of {self.max_model_bytes:,} (AUCSTREAM_MAX_MODEL_BYTES); use fewer "
                    "(hashed) features, smaller buffers or a smaller regret window",
                    field="n_features",
                )
        if self.max_models is not None:
            models = self.store.list_models()
            if len(models) >= self.max_models and not (replace and model_id in models):
                raise InsufficientStorage(
                    f"the store holds {len(models):,} models, the limit "
                    f"(AUCSTREAM_MAX_MODELS); delete one first",
                    field="id",
                )

    def _create(self, loaded: Loaded, *, replace: bool, replaces: str | None = None) -> ModelInfo:
        self._check_bounds(loaded, replace=replace)
        version = self.repository.create(loaded, replace=replace, replaces=replaces)
        return ModelInfo(config=loaded.config, version=version, counts=loaded.counts())

    def current_config(self, model_id: str) -> ModelConfig:
        """The model's configuration, also when its stored state cannot be loaded (corrupt):
        what a reset starts afresh from (``service.models.reset_model``)."""
        try:
            return self.model(model_id).config
        except CorruptState:
            return self.repository.stored_config(model_id)

    def list_models(self) -> list[str]:
        return self.store.list_models()

    def checkpoint(self, model_id: str) -> dict[str, str]:
        """The checkpoint fields committed with the current state (see :meth:`learn`)."""
        meta = dict(self.model(model_id).meta)
        meta.pop("incarnation", None)
        return meta

    def weights(self, model_id: str) -> ServedWeights:
        """The served linear score, internal and in the raw feature space (copies)."""
        with self.repository.lock(model_id):
            loaded = self.repository.load(model_id)
            learner = loaded.learner
            return ServedWeights(
                config=loaded.config,
                version=loaded.version,
                coef=np.array(learner.coef_, dtype=np.float64),  # type: ignore[attr-defined]
                intercept=learner.intercept_,
                raw=learner.raw_weights(),
            )

    def state_arrays(self, model_id: str) -> tuple[ModelConfig, int, dict[str, np.ndarray]]:
        """``(config, version, copies of every committed array)`` (snapshot export)."""
        with self.repository.lock(model_id):
            loaded = self.repository.load(model_id)
            version, _, arrays = copy_of(loaded)
            return loaded.config, version, arrays

    def info(self, model_id: str) -> ModelInfo:
        with self.repository.lock(model_id):
            loaded = self.repository.load(model_id)
            return ModelInfo(config=loaded.config, version=loaded.version,
                             counts=loaded.counts(), fits=fit_status(loaded.learner))  # fmt: skip

    # ------------------------------------------------------------------ metrics history
    def catch_up_history(self) -> int:
        """Write the history point each model behind asks for (:mod:`service.engine.history`);
        returns how many. A model that cannot be written is logged and tried at the next tick."""
        written = 0
        for model_id in self.repository.history_behind():
            cached = self.repository.cached(model_id)
            if cached is not None and not catch_up_due(
                cached.history, int(cached.stats["events_learned"][0]), self.clock()
            ):
                continue  # still in the minute of its last point (or another process wrote it)
            try:
                written += self.repository.write(model_id, self._catch_up_history)
            except ModelNotFound:
                self.repository.history_caught_up(model_id)
            except ServiceError as error:
                logger.warning("history point of model %r not written: %s", model_id, error.detail)
        return written

    def _catch_up_history(self, model_id: str, loaded: Loaded) -> int:
        now = self.clock()
        if not catch_up_due(loaded.history, int(loaded.stats["events_learned"][0]), now):
            # not yet (still the minute of the last point), or another process wrote it
            if not behind(loaded.history, int(loaded.stats["events_learned"][0])):
                self.repository.history_caught_up(model_id)
            return 0
        entry = Entry(now, history=True)
        apply(loaded, entry)
        self.repository.commit(model_id, loaded, entry)
        return 1

    # ------------------------------------------------------------------ this process's cache
    def cached_spec(self, model_id: str) -> FeatureSpec | None:
        """The feature layout from this process's cache, or None (never blocks)."""
        cached = self.repository.cached(model_id)
        return None if cached is None else cached.spec

    def cached_incarnation(self, model_id: str) -> str | None:
        """The model's incarnation in this process's cache, or None (never blocks); queue mode
        appends a batch only to the incarnation it was parsed for."""
        cached = self.repository.cached(model_id)
        return None if cached is None else cached.incarnation

    def spec(self, model_id: str) -> FeatureSpec:
        """The feature layout to parse a body with; from the cache without a store round trip
        (the layout only changes with the incarnation, which :meth:`learn` checks)."""
        cached = self.cached_spec(model_id)
        return cached if cached is not None else self.model(model_id).spec


__all__ = ["Engine", "ServedWeights"]
