"""A ``/score`` that keeps nothing is applied on the event loop when its model is cached,
current and unlocked (``Coalescer._score_now``); otherwise, and whenever it keeps records,
it goes to a thread as before.  Either way the answer is the one the engine gives alone."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from service.engine import Engine
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.sqlite import SQLiteStore

N_FEATURES = 5
WAIT_SECONDS = 60.0


def engine_on(path) -> Engine:
    return Engine(SQLiteStore.open(path), clock=lambda: 1_000_000.0)


def events(seed: int, n: int, ids: list[str] | None = None, labelled: bool = True) -> Batch:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.3, 1, -1).astype(np.int64) if labelled else None
    return Batch(rng.normal(size=(n, N_FEATURES)), y, ids)


def learned_engine(path) -> Engine:
    engine = engine_on(path)
    create_model(engine, ModelCreate(id="m", n_features=N_FEATURES))
    engine.learn("m", events(1, 300, [f"l{k}" for k in range(300)]))
    return engine


def scoring_threads(engine: Engine) -> list[int]:
    """The threads that score ``engine``'s requests, recorded as they do."""
    threads: list[int] = []
    original = engine.delayed.score_loaded

    def recording(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    engine.delayed.score_loaded = recording  # type: ignore[method-assign]
    return threads


def test_a_score_that_keeps_nothing_is_applied_on_the_loop(tmp_path):
    engine = learned_engine(tmp_path / "data")
    threads = scoring_threads(engine)
    unkept = [events(10 + k, 3, labelled=False) for k in range(4)]
    unkept.append(events(20, 2, ["a", "b"], labelled=False))  # ids, but keep=false

    async def run():
        return [await engine.coalesce.score("m", b, keep=False, probabilities=True) for b in unkept]

    results = asyncio.run(run())
    assert threads == [threading.get_ident()] * len(unkept)  # the loop's (this) thread
    for b, result in zip(unkept, results, strict=True):
        alone = engine.score("m", b, keep=False, probabilities=True)
        np.testing.assert_array_equal(result.scores, alone.scores)
        np.testing.assert_array_equal(result.probabilities, alone.probabilities)
        assert (result.kept, result.version) == (0, alone.version)
    assert engine.store.get_pending("m", ["a", "b"]) == {}
    engine.close()


def test_a_kept_score_goes_to_a_thread_and_is_kept(tmp_path):
    engine = learned_engine(tmp_path / "data")
    threads = scoring_threads(engine)

    async def run():
        return await engine.coalesce.score("m", events(3, 2, ["k1", None], labelled=False))

    result = asyncio.run(run())
    assert result.kept == 1 and threads and threads[0] != threading.get_ident()
    assert set(engine.store.get_pending("m", ["k1"])) == {"k1"}
    engine.close()


def test_a_locked_model_is_scored_by_a_thread_once_the_lock_is_free(tmp_path):
    engine = learned_engine(tmp_path / "data")
    threads = scoring_threads(engine)
    asked = threading.Event()
    group = engine.delayed.score_group

    def asking(*args, **kwargs):  # in the thread, before it waits for the model's lock
        asked.set()
        return group(*args, **kwargs)

    engine.delayed.score_group = asking  # type: ignore[method-assign]
    b = events(4, 2, labelled=False)

    async def run():
        with engine.repository.lock("m"):  # held: the loop must not wait for it
            task = asyncio.ensure_future(engine.coalesce.score("m", b, keep=False))
            for _ in range(int(WAIT_SECONDS / 0.01)):
                if asked.is_set():
                    break
                await asyncio.sleep(0.01)
            assert asked.is_set() and not task.done()
        return await asyncio.wait_for(task, WAIT_SECONDS)

    result = asyncio.run(run())
    assert threads and threads[0] != threading.get_ident()
    np.testing.assert_array_equal(result.scores, engine.score("m", b, keep=False).scores)
    engine.close()


def test_a_cache_behind_the_store_is_not_served_from_the_loop(tmp_path):
    """Another process (here another engine on the file) learned: the loop's head read sees
    the store moved on, and the thread's load catches up before scoring."""
    one = learned_engine(tmp_path / "data")
    other = engine_on(tmp_path / "data")
    b = events(5, 3, labelled=False)
    before = asyncio.run(one.coalesce.score("m", b, keep=False))  # cached by `one`
    other.learn("m", events(6, 200, [f"o{k}" for k in range(200)]))
    threads = scoring_threads(one)
    after = asyncio.run(one.coalesce.score("m", b, keep=False))
    assert threads and threads[0] != threading.get_ident()
    expected = other.score("m", b, keep=False)
    assert after.version == expected.version > before.version
    np.testing.assert_array_equal(after.scores, expected.scores)
    one.close()
    other.close()


def test_a_score_when_the_lost_data_check_is_due_goes_to_a_thread(tmp_path):
    """The periodic check writes the epoch marker and syncs its copy: never on the loop."""
    engine = learned_engine(tmp_path / "data")
    asyncio.run(engine.coalesce.score("m", events(7, 1, labelled=False), keep=False))
    threads = scoring_threads(engine)
    engine.store.loss.watch.next_check = 0.0  # due now
    b = events(8, 2, labelled=False)
    result = asyncio.run(engine.coalesce.score("m", b, keep=False))
    assert threads and threads[0] != threading.get_ident()
    assert not engine.store.loss.watch.due()  # the thread's load ran it
    np.testing.assert_array_equal(result.scores, engine.score("m", b, keep=False).scores)
    engine.close()


def test_scores_queued_behind_a_learn_see_it_and_are_scored_on_the_loop(tmp_path):
    """Scores that arrive while the model's events are being learned wait for them (the
    coalescer's order) and are then scored by the drain on the loop, as one group."""
    engine = learned_engine(tmp_path / "data")
    threads = scoring_threads(engine)
    scored = [events(30 + k, 2, labelled=False) for k in range(3)]

    async def run():
        learning = engine.coalesce.learn("m", events(9, 50, [f"n{k}" for k in range(50)]))
        return await asyncio.gather(
            learning, *(engine.coalesce.score("m", b, keep=False) for b in scored)
        )

    learned, *results = asyncio.run(run())
    assert learned.learned == 50
    assert threads == [threading.get_ident()]  # one group, on the loop
    for b, result in zip(scored, results, strict=True):
        alone = engine.score("m", b, keep=False)
        assert result.version == alone.version == learned.version
        np.testing.assert_array_equal(result.scores, alone.scores)
    engine.close()
