"""The per-process model cache (:mod:`service.engine.repository`): bounded, least recently used
evicted, dropped on delete, and no lock left behind for ids that do not exist."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from service.engine import Engine
from service.errors import ModelNotFound
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore
from tests.service.conftest import make_stream


def _engine(max_cached_models: int) -> Engine:
    engine = Engine(MemoryStore(), max_cached_models=max_cached_models)
    for name in ("a", "b", "c"):
        create_model(engine, ModelCreate(id=name, n_features=5, params={"random_state": 0}))
    return engine


def test_the_cache_is_bounded_and_evicts_the_least_recently_used():
    engine = _engine(max_cached_models=2)
    assert engine.repository.cached_ids() == ["b", "c"]
    engine.info("b")  # b is now the most recent; loading a evicts c
    engine.info("a")
    assert engine.repository.cached_ids() == ["b", "a"]
    X, y = make_stream(40)
    learned = engine.learn("c", Batch(X, y, None))  # read back from the store
    assert learned.learned == 40 and engine.repository.cached_ids() == ["a", "c"]


def test_an_evicted_model_learns_as_a_cached_one():
    X, y = make_stream(60)
    small, large = _engine(max_cached_models=1), _engine(max_cached_models=3)
    for engine in (small, large):
        for start in range(0, 60, 20):
            for name in ("a", "b"):  # alternate: the bounded engine reloads every time
                engine.learn(name, Batch(X[start : start + 20], y[start : start + 20], None))
    for name in ("a", "b"):
        np.testing.assert_array_equal(small.weights(name).coef, large.weights(name).coef)
        assert small.info(name).counts == large.info(name).counts


def test_delete_drops_the_model_and_what_is_cached_for_it():
    engine = _engine(max_cached_models=3)
    engine.learn("a", Batch(*make_stream(30), None))
    engine.metrics("a")
    engine.delete_model("a")
    assert "a" not in engine.repository.cached_ids()
    assert "a" not in engine.reporting._metrics
    with pytest.raises(ModelNotFound):
        engine.info("a")


def test_unknown_ids_leave_no_lock_behind():
    engine = _engine(max_cached_models=3)
    before = len(engine.repository._locks)
    for number in range(200):
        with pytest.raises(ModelNotFound):
            engine.info(f"nope-{number}")
    gc.collect()
    assert len(engine.repository._locks) == before == 3


def test_a_lock_lives_while_a_thread_holds_it():
    engine = _engine(max_cached_models=1)  # a and b are not cached: their locks can go
    held = engine.repository.lock("a")
    with held:
        entered = threading.Event()

        def other() -> None:
            with engine.repository.lock("a"):
                entered.set()

        thread = threading.Thread(target=other)
        thread.start()
        gc.collect()
        assert not entered.wait(0.05)  # the same lock: the other thread waits
    thread.join(5)
    assert entered.is_set()
