"""Queue mode's checks and steps (the stored state of a model in Redis, a worker drained, the
queue-mode app beside its sync-mode reference), shared by test_queue.py, test_queue_faults.py,
test_queue_stalls.py and the queue tests of other features."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import redis

from service.engine.repository import ModelRepository
from service.queue.streams import APPLIED_ENTRIES
from service.queue.worker import Worker
from service.stores import keys
from service.stores.redis import RedisStore
from tests.service.conftest import CLOCK_ARRAYS, create_model, events_json, started_apps


def redis_arrays(client: redis.Redis, model: str) -> dict[str, np.ndarray]:
    """The model as Redis holds it: its checkpoint and the log after it, replayed."""
    return ModelRepository(RedisStore(client)).rebuilt(model).arrays()


def assert_same_state(client: redis.Redis, model: str, reference: str) -> None:
    """Every stored array equal byte for byte (the wall-clock rate counters excepted)."""
    ours, theirs = redis_arrays(client, model), redis_arrays(client, reference)
    assert ours.keys() == theirs.keys()
    for name in ours:
        if name not in CLOCK_ARRAYS:
            assert ours[name].dtype == theirs[name].dtype, name
            assert ours[name].tobytes() == theirs[name].tobytes(), name


def drain(worker: Worker, client: redis.Redis, models: list[str], timeout: float = 120) -> None:
    """Step the worker until every model's backlog is learned."""
    deadline = time.monotonic() + timeout
    while True:
        worker.step()
        if all(worker.queue.lag(model)["entries"] == 0 for model in models):
            return
        assert time.monotonic() < deadline, [worker.queue.lag(m) for m in models]


def posts(X, y, size: int, *, ids: bool = True):
    """The request bodies of ``X``, ``y``, ``size`` events each (ids ``e<k>``, or none)."""
    for start in range(0, len(X), size):
        rows = slice(start, start + size)
        yield events_json(
            X[rows], y[rows], [f"e{i}" for i in range(start, start + len(X[rows]))] if ids else None
        )


@contextlib.contextmanager
def queue_and_sync_models(url: str, random_state: int):
    """A queue-mode app and a sync-mode app on ``url``, started, with the model ``q`` (queued)
    and its reference ``ref`` (learned in sync mode).  oam keeps RNG-driven reservoirs: any
    event lost, repeated or reordered shows."""
    with started_apps(redis_url=url) as build:
        queued, sync = build(mode="queue"), build(mode="sync")
        for client, model in ((queued, "q"), (sync, "ref")):
            create_model(client, model, learner="oam", params={"random_state": random_state})
        yield queued, sync


def wait_for(condition, timeout: float, message: str, interval: float = 0.002):
    """Polls ``condition`` until true; AssertionError with ``message`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(interval)


def applied_entries(client: redis.Redis, model: str) -> int:
    """How many of ``model``'s log entries the worker applied (its meta hash)."""
    return int(client.hget(keys.meta(model), APPLIED_ENTRIES) or 0)
