"""The coalescer (service.engine.coalesce): concurrent requests to one model merged into one
engine call and one commit, each answered with its own result, as if one after another."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from service.engine import Engine
from service.errors import InvalidInput, ModelChanged, QueueFull, ServiceError
from service.groups import ThreadCombiner, each_alone
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.settings import Settings
from service.stores.memory import MemoryStore
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.service.conftest import CLOCK_ARRAYS

N_FEATURES = 4


def make_engine(kind: str, tmp_path, **params) -> Engine:
    store = MemoryStore() if kind == "memory" else SQLiteStore.open(tmp_path / "data")
    engine = Engine(store, clock=lambda: 1_000_000.0)
    create_model(engine, ModelCreate(id="m", n_features=N_FEATURES, **params))
    return engine


def batch(ids: list[str | None], seed: int, width: int = N_FEATURES, labelled=True) -> Batch:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(len(ids)) < 0.3, 1, -1).astype(np.int64) if labelled else None
    return Batch(
        rng.normal(size=(len(ids), width)), y, None if all(i is None for i in ids) else ids
    )


def learned_arrays(engine: Engine) -> dict[str, np.ndarray]:
    _, _, arrays = engine.state_arrays("m")
    return {name: value for name, value in arrays.items() if name not in CLOCK_ARRAYS}


def assert_same_state(one: Engine, other: Engine) -> None:
    left, right = learned_arrays(one), learned_arrays(other)
    assert left.keys() == right.keys()
    for name in left:
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)


async def learn_all(engine: Engine, batches: list[Batch], want_scores: bool = False):
    return await asyncio.gather(
        *(engine.coalesce.learn("m", b, want_scores=want_scores) for b in batches),
        return_exceptions=True,
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    "params", [{"regret_window": 1000}, {"learner": "spdam", "regret_window": 0}]
)
def test_a_group_equals_its_requests_one_after_another(kind, params, tmp_path):
    batches = [batch([f"e{k}", None, f"e{k}b"][: 1 + k % 3], seed=k) for k in range(40)]
    batches.append(batch(["e3", "e39", "fresh"], seed=99))  # ids of earlier requests
    merged = make_engine(kind, tmp_path / "a", **params)
    results = asyncio.run(learn_all(merged, batches, want_scores=True))
    assert merged.coalesce.groups < merged.coalesce.requests  # requests were merged
    sequential = make_engine(kind, tmp_path / "b", **params)
    for b, result in zip(batches, results, strict=True):
        alone = sequential.learn("m", b, want_scores=True)
        assert (result.received, result.learned) == (alone.received, alone.learned)
        assert result.duplicate_ids == alone.duplicate_ids
        np.testing.assert_array_equal(result.scores, alone.scores)
    assert results[-1].duplicate_ids == ["e3", "e39"]
    assert_same_state(merged, sequential)
    assert merged.info("m").counts == sequential.info("m").counts


@pytest.mark.parametrize(
    "params", [{"regret_window": 0}, {"learner": "ftrl_pauc", "regret_window": 0}]
)
def test_a_group_learned_in_one_learner_call_equals_its_requests_one_after_another(
    params, tmp_path
):
    """Without the regret window, a learner that learns a batch as its events one at a time
    learns a whole group in one call (service.engine.learning.one_call_is_exact): the same
    scores and state as one request after another."""
    batches = [batch([f"e{k}", None, f"e{k}b"][: 1 + k % 3], seed=k) for k in range(40)]
    merged = make_engine("memory", tmp_path / "a", **params)
    calls = []
    learner_class = type(merged.repository.read("m").learner)
    original = learner_class.prequential_step

    def counted(self, X, y):
        calls.append(X.shape[0])
        return original(self, X, y)

    learner_class.prequential_step = counted  # type: ignore[method-assign]
    try:
        results = asyncio.run(learn_all(merged, batches, want_scores=True))
    finally:
        learner_class.prequential_step = original  # type: ignore[method-assign]
    assert len(calls) == merged.coalesce.groups < merged.coalesce.requests
    sequential = make_engine("memory", tmp_path / "b", **params)
    for b, result in zip(batches, results, strict=True):
        alone = sequential.learn("m", b, want_scores=True)
        np.testing.assert_array_equal(result.scores, alone.scores)
    assert_same_state(merged, sequential)


def test_duplicate_ids_across_requests_of_one_group(tmp_path):
    engine = make_engine("memory", tmp_path)
    batches = [batch(["a"], 1), batch(["a"], 2), batch(["b", "a"], 3), batch(["a"], 4)]
    results = asyncio.run(learn_all(engine, batches))
    assert engine.coalesce.groups == 1
    assert [r.learned for r in results] == [1, 0, 1, 0]
    assert [r.duplicate_ids for r in results] == [[], ["a"], ["a"], ["a"]]
    counts = engine.info("m").counts
    # a request of nothing but duplicates (a retry) is not counted, as alone
    assert counts.events_learned == 2 and counts.duplicates == 1


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_bad_request_fails_alone(kind, tmp_path):
    engine = make_engine(kind, tmp_path)
    good = [batch([f"g{k}"], k) for k in range(6)]
    wrong_width = batch(["bad"], 7, width=N_FEATURES + 1)
    unlabelled = batch(["bad2"], 8, labelled=False)
    requests = [*good[:2], wrong_width, *good[2:4], unlabelled, *good[4:]]
    results = asyncio.run(learn_all(engine, requests))
    assert isinstance(results[2], ModelChanged)
    assert isinstance(results[5], InvalidInput)
    learned = [r for r in results if not isinstance(r, BaseException)]
    assert len(learned) == 6 and all(r.learned == 1 for r in learned)
    assert engine.info("m").counts.events_learned == 6
    reference = make_engine(kind, tmp_path / "ref")
    for b in good:
        reference.learn("m", b)
    assert_same_state(engine, reference)


def test_a_server_error_is_every_request_answer_and_never_reapplied(tmp_path):
    engine = make_engine("memory", tmp_path)
    calls = []
    original = engine.store.commit

    def failing(model_id, commit):
        calls.append(len(commit.learned_ids))
        raise ServiceError("the store went away")

    engine.store.commit = failing  # type: ignore[method-assign]
    results = asyncio.run(learn_all(engine, [batch([f"e{k}"], k) for k in range(5)]))
    assert all(isinstance(r, ServiceError) and r.status == 500 for r in results)
    assert calls == [5]  # one merged commit, not re-run request by request
    engine.store.commit = original  # type: ignore[method-assign]
    assert engine.info("m").counts.events_learned == 0


def test_a_request_alone_is_applied_at_once(tmp_path):
    engine = make_engine("sqlite", tmp_path)

    async def alone():
        await engine.coalesce.learn("m", batch(["warm"], 0))
        started = time.perf_counter()
        result = await engine.coalesce.learn("m", batch(["x"], 1))
        return result, time.perf_counter() - started

    direct_started = time.perf_counter()
    engine.learn("m", batch(["y"], 2))
    direct = time.perf_counter() - direct_started
    # every timer the loop is asked for (asyncio.sleep and call_later both come to call_at)
    loop = asyncio.new_event_loop()
    timers: list[float] = []
    real_call_at = loop.call_at

    def call_at(when, callback, *args, **kwargs):
        timers.append(when - loop.time())
        return real_call_at(when, callback, *args, **kwargs)

    loop.call_at = call_at  # type: ignore[method-assign]
    try:
        result, elapsed = loop.run_until_complete(alone())
    finally:
        loop.close()
    assert result.learned == 1
    assert engine.coalesce.groups == engine.coalesce.requests == 2  # each in its own group
    # no timer: the request costs its commit and a thread hop, not a batching delay.  Judged
    # by the timers asked for, not by a clock (50 ms over the direct call was a busy machine's
    # scheduling delay away); the wall-clock bound only catches a delay of a second
    assert timers == [], timers
    assert elapsed < direct + 1.0


def test_many_tasks_and_threads_on_one_model(tmp_path):
    """Tasks through the coalescer (merged) while threads call the engine directly: every
    event is learned once, every request answered with its own counts."""
    engine = make_engine("sqlite", tmp_path)
    direct: list = []

    def thread_work(number: int) -> None:
        for k in range(10):
            direct.append(engine.learn("m", batch([f"t{number}-{k}"], 1000 * number + k)))

    async def tasks():
        return await learn_all(engine, [batch([f"c{k}", f"c{k}x"], k) for k in range(150)])

    threads = [threading.Thread(target=thread_work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    results = asyncio.run(tasks())
    for thread in threads:
        thread.join()
    assert all(r.learned == 2 and r.duplicate_ids == [] for r in results)
    assert len(direct) == 40 and all(r.learned == 1 for r in direct)
    assert engine.info("m").counts.events_learned == 340
    assert engine.coalesce.groups < engine.coalesce.requests


def test_scores_of_a_group(tmp_path):
    engine = make_engine("sqlite", tmp_path)
    engine.learn("m", batch([f"l{k}" for k in range(50)], 5))
    requests = [batch([f"s{k}"], k, labelled=False) for k in range(10)]
    requests.append(batch(["s3", "s3"], 77, labelled=False))  # kept again: the later record
    requests.insert(4, batch(["bad"], 8, width=N_FEATURES + 1, labelled=False))

    async def run():
        return await asyncio.gather(
            *(engine.coalesce.score("m", b, probabilities=True) for b in requests),
            return_exceptions=True,
        )

    results = asyncio.run(run())
    assert isinstance(results[4], ModelChanged)
    for b, result in zip(requests, results, strict=True):
        if isinstance(result, BaseException):
            continue
        alone = engine.score("m", b, keep=False, probabilities=True)
        np.testing.assert_array_equal(result.scores, alone.scores)
        np.testing.assert_array_equal(result.probabilities, alone.probabilities)
        assert result.kept == len(set(b.ids))
    kept = engine.store.get_pending("m", ["s3", "s0", "bad"])
    assert set(kept) == {"s3", "s0"}
    later = engine.score("m", requests[-1], keep=False).scores[-1]
    from service.codec import decode_pending

    _, recorded = decode_pending([kept["s3"][0]], N_FEATURES, True)
    assert recorded[0] == later


def test_labels_of_a_group(tmp_path):
    engine = make_engine("sqlite", tmp_path)
    engine.score("m", batch([f"p{k}" for k in range(8)], 3, labelled=False))
    requests = [
        (["p0", "p1"], np.array([1, -1])),
        (["p1"], np.array([1])),  # labelled by the request before
        (["nope", "p2"], np.array([-1, -1])),
        (["p3", "p3"], np.array([1, 1])),
    ]

    async def run():
        return await asyncio.gather(*(engine.coalesce.labels("m", i, y) for i, y in requests))

    results = asyncio.run(run())
    assert engine.coalesce.groups == 1
    assert [r.learned for r in results] == [2, 0, 1, 1]
    assert results[1].statuses == [("p1", "duplicate")]
    assert results[2].statuses == [("nope", "unknown"), ("p2", "learned")]
    assert results[3].statuses == [("p3", "learned"), ("p3", "duplicate")]
    assert engine.info("m").counts.labels_joined == 4


def test_thread_combiner_many_threads():
    """Callers on threads: each gets its own result, groups form while one is applied, a
    payload refused alone fails alone, and every payload is applied once, in order per key."""
    applied: dict[str, list[int]] = {"a": [], "b": []}
    gate = threading.Event()

    def apply(key: str, payloads: list[int]) -> list:
        gate.wait(5)  # the first group holds until everyone queued behind it

        def merged(group: list[int]) -> list[int]:
            if any(p % 10 == 7 for p in group):
                raise InvalidInput("one of them is bad")  # refused whole: nothing applied
            applied[key].extend(group)
            return [p * 2 for p in group]

        return each_alone(merged, lambda p: merged([p])[0], payloads)

    combiner = ThreadCombiner(apply)
    results: dict[int, object] = {}

    def call(p: int) -> None:
        try:
            results[p] = combiner("a" if p % 2 else "b", p)
        except InvalidInput as error:
            results[p] = error

    threads = [threading.Thread(target=call, args=(p,)) for p in range(60)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    gate.set()
    for thread in threads:
        thread.join(120)
    assert sorted(results) == list(range(60))
    for p, result in results.items():
        if p % 10 == 7:
            assert isinstance(result, InvalidInput)
        else:
            assert result == p * 2
    # each good payload applied once, the bad ones never
    assert sorted(applied["a"] + applied["b"]) == [p for p in range(60) if p % 10 != 7]
    assert combiner.groups < combiner.calls == 60


def test_queue_appends_of_one_moment_share_one_script(empty_redis):
    import redis

    from service.queue import StreamQueue

    engine = Engine(RedisStore.open(Settings(store="redis", redis_url=empty_redis)))
    create_model(engine, ModelCreate(id="m", n_features=N_FEATURES))
    incarnation = engine.model("m").incarnation
    queue = StreamQueue(redis.Redis.from_url(empty_redis), max_backlog_events=12)
    requests = [queue.event_entries(batch([f"q{k}"] * 1, k)) for k in range(5)]
    requests.insert(2, queue.event_entries(batch([f"big{k}" for k in range(20)], 9)))
    appended = queue._append_requests("m", [(incarnation, r) for r in requests])
    assert isinstance(appended[2], QueueFull)  # 20 events: over the bound alone
    good = [a for a in appended if not isinstance(a, BaseException)]
    assert [a.events for a in good] == [1] * 5
    assert [a.backlog_events for a in good] == [1, 2, 3, 4, 5]
    assert len({i for a in good for i in a.stream_ids}) == 5
    merged = queue.append_group("m", incarnation, requests[:2])
    assert [a.backlog_events for a in merged] == [6, 7]
    assert merged[0].stream_ids < merged[1].stream_ids


def test_a_call_from_another_event_loop_while_a_drain_runs_is_refused(tmp_path):
    """A request from a second event loop joined the queue of the first loop's drain, which
    settled its future from the wrong thread: it was never woken.  It is now refused at once;
    the drain's own requests are answered, and once it has ended another loop may take over."""
    engine = make_engine("sqlite", tmp_path)  # a blocking store: the pass runs in a thread
    applying, release = threading.Event(), threading.Event()
    apply = engine.coalesce.learn_in_pass

    def held(items):
        applying.set()
        release.wait(timeout=60)
        return apply(items)

    engine.coalesce.learn_in_pass = held  # type: ignore[method-assign]
    first: list = []
    thread = threading.Thread(target=lambda: first.extend(asyncio.run(learn_all(engine, [
        batch(["a"], 1), batch(["b"], 2)]))))  # fmt: skip
    thread.start()
    assert applying.wait(timeout=60)
    with pytest.raises(RuntimeError, match="another event loop"):  # not a wait for ever
        asyncio.run(asyncio.wait_for(engine.coalesce.learn("m", batch(["c"], 3)), 30))
    release.set()
    thread.join(timeout=60)
    assert [result.learned for result in first] == [1, 1]
    engine.coalesce.learn_in_pass = apply  # type: ignore[method-assign]
    assert asyncio.run(engine.coalesce.learn("m", batch(["c"], 3))).learned == 1
    assert engine.info("m").counts.events_learned == 3


def test_a_pass_its_threads_refuse_is_every_waiting_request_answer(tmp_path):
    """A pass handed to threads that were closed meanwhile (the app stopping) answers each of
    its requests with the refusal, and a later pass runs on fresh threads."""
    engine = make_engine("sqlite", tmp_path)
    engine.coalesce._pool().close()  # noqa: SLF001 - the threads closed under the coalescer
    outcomes = asyncio.run(learn_all(engine, [batch(["a"], 1), batch(["b"], 2)]))
    assert [type(outcome) for outcome in outcomes] == [RuntimeError, RuntimeError]
    assert all("closed" in str(outcome) for outcome in outcomes)
    assert engine.info("m").counts.events_learned == 0
    engine.coalesce.close()
    assert asyncio.run(engine.coalesce.learn("m", batch(["a"], 1))).learned == 1


def test_a_group_with_an_unlabelled_batch_is_refused_whole_and_changes_nothing(tmp_path):
    engine = make_engine("memory", tmp_path)
    before = engine.info("m").version, learned_arrays(engine)
    group = [batch(["a"], 1), batch(["b"], 2, labelled=False)]
    with pytest.raises(InvalidInput, match="events need labels 'y' to be learned"):
        engine.learning.learn_group("m", group, [False, False])
    assert engine.info("m").version == before[0]
    after = learned_arrays(engine)
    assert after.keys() == before[1].keys()
    for name in after:
        np.testing.assert_array_equal(after[name], before[1][name], err_msg=name)
