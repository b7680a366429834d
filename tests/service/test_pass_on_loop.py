"""A pass the event loop applies itself (service.engine.coalesce, ``Coalescer._inline``): when
every model of the pass is cached and uncontended and the SQLite store lets a commit run on
the loop (no lost-data check due), the pass -- its learner calls, transaction and fsync -- runs
on the loop's thread with no hop; otherwise in a coalescer thread, as before.  Either way each
request gets what it gets alone, and what was answered is in the file."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from service.engine import Engine
from tests.service.passes_helpers import MODELS, assert_same_models, batch, make_engine


def loop_engine(path, models=MODELS) -> Engine:
    """:func:`make_engine` with each model cached (one event learned) and the lost-data check
    not due during the test (on a slow machine it would fall due and send a pass to a
    thread; the test that wants it due makes it so)."""
    engine = make_engine(path, models)
    for k, model_id in enumerate(models):
        engine.learn(model_id, batch([f"warm{k}"], seed=1000 + k))
    engine.store.loss.watch.next_check = time.monotonic() + 3600
    return engine


def passing_threads(engine: Engine) -> list[int]:
    """The threads that apply ``engine``'s passes, recorded as they do."""
    threads: list[int] = []
    original = engine.coalesce.learn_in_pass

    def recording(items):
        threads.append(threading.get_ident())
        return original(items)

    engine.coalesce.learn_in_pass = recording  # type: ignore[method-assign]
    return threads


async def send(engine: Engine, requests) -> list:
    return await asyncio.gather(
        *(engine.coalesce.learn(m, b, want_scores=True) for m, b in requests)
    )


def check_alone(engine: Engine, requests, results, path) -> None:
    """Each result is the request's alone on a second engine (but its version: the requests
    to one model in one pass are one entry), and the file holds the same models (a fresh
    process reads them)."""
    sequential = loop_engine(path / "sequential", MODELS[:3])
    for (model_id, b), result in zip(requests, results, strict=True):
        alone = sequential.learn(model_id, b, want_scores=True)
        assert (result.received, result.learned) == (alone.received, alone.learned)
        np.testing.assert_array_equal(result.scores, alone.scores)
    assert_same_models(engine, sequential, MODELS[:3])
    assert_same_models(make_engine(engine.store.path.parent, MODELS[:3]), sequential, MODELS[:3])


def test_a_pass_of_cached_models_runs_on_the_loop(tmp_path):
    engine = loop_engine(tmp_path / "a", MODELS[:3])
    threads = passing_threads(engine)
    one = [("m0", batch(["a"], seed=1))]
    several = [(MODELS[k % 3], batch([f"e{k}"], seed=k)) for k in range(9)]
    results = asyncio.run(send(engine, one))
    results += asyncio.run(send(engine, several))
    assert threads == [threading.get_ident()] * 2  # the loop's (this) thread, one pass each
    check_alone(engine, one + several, results, tmp_path)
    engine.close()


def test_a_pass_goes_to_a_thread_when_the_loop_must_not_wait(tmp_path):
    """Not on the loop: a model not cached (its load may replay its log), a contended model
    (its turn may be asked for or waited for), the lost-data check due (it writes and syncs
    the epoch marker's copy)."""
    engine = loop_engine(tmp_path / "a", MODELS[:3])
    threads = passing_threads(engine)
    requests = []

    def learn(model_id: str, seed: int) -> None:
        requests.append((model_id, batch([f"s{seed}"], seed=seed)))
        results.extend(asyncio.run(send(engine, requests[-1:])))

    results: list = []
    engine.repository.drop("m0")
    learn("m0", 1)
    engine.repository.turns.refused.add("m1")  # its stale append in a pass found a turn taken
    learn("m1", 2)
    engine.store.loss.watch.next_check = 0.0
    learn("m2", 3)
    assert not engine.store.loss.watch.due()  # the thread's pass ran it
    assert len(threads) == 3 and threading.get_ident() not in threads
    learn("m0", 4)  # cached again, nothing due: on the loop
    assert threads[3] == threading.get_ident()
    check_alone(engine, requests, results, tmp_path)
    engine.close()


def test_requests_arriving_during_a_pass_on_the_loop_are_the_next_pass(tmp_path):
    """The loop is busy while it applies a pass: requests sent meanwhile are read once it is
    done and share the next pass."""
    engine = loop_engine(tmp_path / "a", MODELS[:3])
    first = [("m0", batch(["a"], seed=1))]
    later = [(MODELS[k % 3], batch([f"l{k}"], seed=10 + k)) for k in range(6)]
    threads: list[int] = []
    arriving: list[asyncio.Future] = []
    original = engine.coalesce.learn_in_pass

    def sending_meanwhile(items):
        threads.append(threading.get_ident())
        if not arriving:
            arriving.append(asyncio.ensure_future(send(engine, later)))
        return original(items)

    engine.coalesce.learn_in_pass = sending_meanwhile  # type: ignore[method-assign]

    async def run():
        results = await send(engine, first)
        return results + await arriving[0]

    results = asyncio.run(run())
    assert threads == [threading.get_ident()] * 2
    assert (engine.coalesce.passes, engine.coalesce.passed_groups) == (2, 4)
    check_alone(engine, first + later, results, tmp_path)
    engine.close()
