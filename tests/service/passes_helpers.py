"""Engines on one SQLite file and the checks of passes and turns (service.engine.coalesce,
service.engine.turns, service.engine.undo): shared by test_passes.py, test_turns.py and
test_undo_points.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from service.engine import Engine
from service.engine.coalesce import EVENTS
from service.engine.passes import learn_pass
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


def through_pass(engine: Engine, items: list[tuple[str, list[Batch]]]) -> list[list]:
    """Each group's outcomes, the groups of ``items`` (model id, its batches, no scores asked)
    learned in one pass as the coalescer's passes learn them; a group the pass leaves is then
    applied alone, as the coalescer applies it."""
    payloads = [(model_id, [(b, False) for b in batches]) for model_id, batches in items]
    passed = zip(payloads, learn_pass(engine, payloads), strict=True)
    return [engine.coalesce.apply(EVENTS, *item) if done is None else done for item, done in passed]


def statements_of(engine: Engine, call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``call()``'s result and the SQL statements it ran on ``engine``'s SQLite store."""
    statements: list[str] = []
    engine.store.database.connection().set_trace_callback(statements.append)
    try:
        return call(), statements
    finally:
        engine.store.database.connection().set_trace_callback(None)


def racing_once(engine, other, theirs):
    """``engine``'s next append finds the model stale: ``other`` appends ``theirs`` first."""
    commit = engine.store.commit

    def racing(model_id, pending):
        engine.store.commit = commit
        other.learn(model_id, theirs)
        return commit(model_id, pending)

    engine.store.commit = racing
