"""A ``/score`` that keeps nothing is applied on the event loop when its model is cached,
current and unlocked (``Coalescer._score_now``); otherwise, and whenever it keeps records,
it goes to a thread, where a cached model scores without a read of the store's head and its
records are written by a write that checks the head (``Coalescer._score_kept``: scored again
the usual way when the head moved or the bound refuses the group).  Either way the answer is
the one the engine gives alone, and what arrives while a kept score is written waits
behind it."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from service.codec import decode_pending
from service.engine import Engine
from service.errors import InsufficientStorage
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
    # the lost-data check (every 2 s) not due during the test: on a slow machine it would
    # fall due and send a score to a thread (the test that wants it due makes it so)
    engine.store.loss.watch.next_check = time.monotonic() + 3600
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


def kept_scores(engine: Engine, model_id: str, ids: list[str]) -> list[float]:
    """The scores the records kept for ``ids`` hold."""
    kept = engine.store.get_pending(model_id, ids)
    records = [kept[event_id][0] for event_id in ids]
    return decode_pending(records, N_FEATURES, dense=True)[1].tolist()


def test_a_kept_score_is_scored_and_kept_by_a_thread_without_reading_the_head(tmp_path):
    engine = learned_engine(tmp_path / "data")
    reference = learned_engine(tmp_path / "reference")
    threads = scoring_threads(engine)
    b = events(3, 2, ["k1", None], labelled=False)
    heads_read = []
    engine.store.load = lambda *args: heads_read.append(args)  # type: ignore[method-assign]

    async def run():
        return await engine.coalesce.score("m", b)

    result = asyncio.run(run())
    assert len(threads) == 1 and threads[0] != threading.get_ident() and heads_read == []
    alone = reference.score("m", b)
    assert (result.kept, result.version) == (alone.kept, alone.version) == (1, 2)
    np.testing.assert_array_equal(result.scores, alone.scores)
    assert kept_scores(engine, "m", ["k1"]) == kept_scores(reference, "m", ["k1"])
    assert kept_scores(engine, "m", ["k1"]) == [result.scores[0]]
    engine.close()
    reference.close()


def test_a_kept_score_of_a_cache_behind_the_store_is_scored_again_by_a_thread(tmp_path):
    """Another process (here another engine on the file) learned after the loop's model was
    cached: the records' write finds the head moved and writes nothing, and the group is
    scored again by the model caught up; the record kept holds that score."""
    one = learned_engine(tmp_path / "data")
    other = engine_on(tmp_path / "data")
    b = events(5, 1, ["late"], labelled=False)
    before = asyncio.run(one.coalesce.score("m", b, keep=False))  # cached by `one`
    other.learn("m", events(6, 200, [f"o{k}" for k in range(200)]))
    threads = scoring_threads(one)
    after = asyncio.run(one.coalesce.score("m", b))
    assert len(threads) == 2 and threading.get_ident() not in threads  # cached, caught up
    expected = other.score("m", b, keep=False)
    assert after.version == expected.version > before.version
    np.testing.assert_array_equal(after.scores, expected.scores)
    assert after.scores[0] != before.scores[0]  # the older model's score is not the one kept
    assert kept_scores(one, "m", ["late"]) == [expected.scores[0]]
    one.close()
    other.close()


def test_kept_scores_refused_by_the_bound_are_kept_or_refused_one_by_one(tmp_path):
    """A group of two kept scores (queued behind events) over the bound of pending records
    (one left): the write of both at the head is refused whole, writing nothing; then the
    first is kept and the second refused, as one after the other would be."""
    engine = Engine(
        SQLiteStore.open(tmp_path / "data"), clock=lambda: 1_000_000.0, max_pending_records=1
    )
    create_model(engine, ModelCreate(id="m", n_features=N_FEATURES))
    engine.learn("m", events(1, 300, [f"l{k}" for k in range(300)]))
    threads = scoring_threads(engine)
    first, second = events(11, 1, ["b1"], labelled=False), events(12, 1, ["b2"], labelled=False)

    async def run():
        return await asyncio.gather(
            engine.coalesce.learn("m", events(13, 5, [f"q{k}" for k in range(5)])),
            engine.coalesce.score("m", first),
            engine.coalesce.score("m", second),
            return_exceptions=True,
        )

    _, kept, refused = asyncio.run(run())
    assert len(threads) == 2 and threading.get_ident() not in threads  # at the head, again
    assert kept.kept == 1 and isinstance(refused, InsufficientStorage)
    assert set(engine.store.get_pending("m", ["b1", "b2"])) == {"b1"}
    assert kept_scores(engine, "m", ["b1"]) == [kept.scores[0]]
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


def test_requests_arriving_while_a_kept_score_is_written_wait_behind_it(tmp_path):
    """A kept score at an idle model goes to its thread at once, without a drain; a label for
    its id, a score and events that arrive meanwhile wait in the model's queue and are applied
    after it, in order: the label finds the record kept, the later score sees the events."""
    engine = learned_engine(tmp_path / "data")
    reference = learned_engine(tmp_path / "reference")
    scoring, release = threading.Event(), threading.Event()
    score_loaded = engine.delayed.score_loaded

    def held(*args, **kwargs):  # the kept score's thread, before its records are written
        if not scoring.is_set():
            scoring.set()
            assert release.wait(WAIT_SECONDS)
        return score_loaded(*args, **kwargs)

    engine.delayed.score_loaded = held  # type: ignore[method-assign]
    kept = events(40, 1, ["k"], labelled=False)
    later_events, later_score = events(41, 20, [f"e{k}" for k in range(20)]), events(42, 2)

    async def run():
        first = asyncio.ensure_future(engine.coalesce.score("m", kept))
        for _ in range(int(WAIT_SECONDS / 0.01)):
            if scoring.is_set():
                break
            await asyncio.sleep(0.01)
        assert scoring.is_set() and not first.done()
        waiting = [
            asyncio.ensure_future(engine.coalesce.labels("m", ["k"], np.array([1]))),
            asyncio.ensure_future(engine.coalesce.learn("m", later_events)),
            asyncio.ensure_future(engine.coalesce.score("m", later_score, keep=False)),
        ]
        await asyncio.sleep(0.05)
        assert not any(request.done() for request in waiting)  # queued behind the kept score
        release.set()
        return await asyncio.wait_for(asyncio.gather(first, *waiting), WAIT_SECONDS)

    scored, labelled, learned, rescored = asyncio.run(run())
    assert (scored.kept, labelled.statuses, learned.learned) == (1, [("k", "learned")], 20)
    expected = [
        reference.score("m", kept),
        reference.labels("m", ["k"], np.array([1])),
        reference.learn("m", later_events),
        reference.score("m", later_score, keep=False),
    ]
    np.testing.assert_array_equal(scored.scores, expected[0].scores)
    assert [labelled.version, learned.version] == [expected[1].version, expected[2].version]
    np.testing.assert_array_equal(rescored.scores, expected[3].scores)
    assert rescored.version == expected[3].version
    assert "m" not in engine.coalesce._queues  # idle again
    engine.close()
    reference.close()
