"""The label sweep visits the models with a kept record past its deadline, and no other
(service/engine/deadlines.py): an idle server with many models does no per-model work."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import Engine
from service.engine.deadlines import RETRY_SECONDS
from service.errors import StoreUnavailable
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from tests.service.clock_helpers import FixedClock


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def engine(store, clock):
    engine = Engine(store, clock=clock)
    yield engine
    engine.close()


def make_models(engine: Engine, count: int) -> list[str]:
    ids = [f"m{k}" for k in range(count)]
    for model_id in ids:
        create_model(
            engine,
            ModelCreate(
                id=model_id, n_features=3, learner="spam", default_label=0, label_ttl_seconds=10
            ),
        )
    return ids


def keep(engine: Engine, model_id: str, ids: list[str]) -> None:
    X = np.arange(3.0 * len(ids)).reshape(len(ids), 3) / 10
    assert engine.score(model_id, Batch(X, None, list(ids))).kept == len(ids)


def counted_due_pending(store, monkeypatch) -> list[str]:
    """The models whose pending records the store is asked about (calls go through)."""
    asked: list[str] = []
    original = store.due_pending

    def due_pending(model_id, now, limit):
        asked.append(model_id)
        return original(model_id, now, limit)

    monkeypatch.setattr(store, "due_pending", due_pending)
    return asked


def test_an_idle_sweep_asks_about_no_model(store, engine, clock, monkeypatch):
    make_models(engine, 20)
    keep(engine, "m7", ["a", "b"])
    # the first sweep takes the schedule of the records the store keeps: one query where the
    # store lists them (SQLite), else a look at each model (memory, Redis), once
    assert engine.sweep_all() == 0
    asked = counted_due_pending(store, monkeypatch)
    clock.now += 5
    assert engine.sweep_all() == 0
    assert asked == []
    clock.now += 6
    assert engine.sweep_all() == 2
    assert set(asked) == {"m7"}
    assert engine.model("m7").stats["labels_defaulted"][0] == 2
    asked.clear()
    clock.now += 100  # m7 holds nothing more: it is not visited again
    assert engine.sweep_all() == 0
    assert asked == []


def test_records_kept_before_the_process_started_are_swept(store, clock):
    first = Engine(store, clock=clock)
    make_models(first, 5)
    keep(first, "m1", ["x"])
    keep(first, "m3", ["y", "z"])
    first.close()
    second = Engine(store, clock=clock)  # a restart: its schedule starts from the store's
    clock.now += 11
    assert second.sweep_all() == 3
    assert second.model("m3").stats["labels_defaulted"][0] == 2
    assert second.sweep_all() == 0
    second.close()


def test_a_model_is_swept_again_at_its_next_deadline(engine, clock):
    make_models(engine, 2)
    keep(engine, "m0", ["early"])
    clock.now += 6
    keep(engine, "m0", ["late"])
    clock.now += 5  # "early" is due, "late" in 5 s
    assert engine.sweep_all() == 1
    assert engine.sweep_all() == 0
    clock.now += 5
    assert engine.sweep_all() == 1
    assert engine.model("m0").stats["labels_defaulted"][0] == 2


def test_a_failed_sweep_is_tried_again_and_a_deleted_model_dropped(engine, clock, monkeypatch):
    make_models(engine, 2)
    keep(engine, "m0", ["a"])
    keep(engine, "m1", ["b"])
    engine.delete_model("m1")
    original = engine.delayed.sweep
    failures = [StoreUnavailable("the store is down")]

    def sweep(model_id, limit=10_000):
        if failures:
            raise failures.pop()
        return original(model_id, limit)

    monkeypatch.setattr(engine.delayed, "sweep", sweep)
    clock.now += 11
    assert engine.sweep_all() == 0  # m0 failed, m1 is gone
    assert len(engine.delayed.deadlines) == 1
    clock.now += RETRY_SECONDS
    assert engine.sweep_all() == 1
    assert len(engine.delayed.deadlines) == 0
