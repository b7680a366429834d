"""Engines on one SQLite file and the checks of passes and turns (service.engine.coalesce,
service.engine.turns, service.engine.undo): shared by test_passes.py, test_turns.py and
test_undo_points.py."""

from __future__ import annotations

import numpy as np

from service.engine import Engine
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.sqlite import SQLiteStore
from tests.service.conftest import CLOCK_ARRAYS

N_FEATURES = 4
MODELS = [f"m{k}" for k in range(12)]


def make_engine(path, models=MODELS) -> Engine:
    """An engine on the SQLite store at ``path`` (its clock stopped) with ``models`` created."""
    engine = Engine(SQLiteStore.open(path), clock=lambda: 1_000_000.0)
    for model_id in models:
        if model_id not in engine.store.list_models():
            create_model(engine, ModelCreate(id=model_id, n_features=N_FEATURES))
    return engine


def batch(ids: list[str], seed: int, width: int = N_FEATURES) -> Batch:
    """Random events with ``ids`` (30 % positives)."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(len(ids)) < 0.3, 1, -1).astype(np.int64)
    return Batch(rng.normal(size=(len(ids), width)), y, ids)


def unclocked_arrays(engine: Engine, model_id: str) -> dict[str, np.ndarray]:
    """The state arrays of ``model_id``, the wall-clock rate counters left out."""
    _, _, state = engine.state_arrays(model_id)
    return {name: value for name, value in state.items() if name not in CLOCK_ARRAYS}


def assert_same_models(one: Engine, other: Engine, models=MODELS) -> None:
    """Every one of ``models`` the same in both engines: arrays and counts."""
    for model_id in models:
        left, right = unclocked_arrays(one, model_id), unclocked_arrays(other, model_id)
        assert left.keys() == right.keys()
        for name in left:
            np.testing.assert_array_equal(left[name], right[name], err_msg=f"{model_id} {name}")
        assert one.info(model_id).counts == other.info(model_id).counts


def request_of(b: Batch):
    """``b`` as the coalescer's request of events (no scores asked)."""
    from service.engine.coalesce import EVENTS, _Request

    return _Request(EVENTS, (b, False), len(b), False, None)  # type: ignore[arg-type]


def racing_once(engine, other, theirs):
    """``engine``'s next append finds the model stale: ``other`` appends ``theirs`` first."""
    commit = engine.store.commit

    def racing(model_id, pending):
        engine.store.commit = commit
        other.learn(model_id, theirs)
        return commit(model_id, pending)

    engine.store.commit = racing
