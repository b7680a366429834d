"""The log is the durable record (service.engine.entries, service.engine.checkpoints): a model
rebuilt from its checkpoint and the log entries after it equals, array for array, the model of
a process that never stopped -- events, duplicates, kept scores and their labels, the label
sweep and history points included, with or without a checkpoint between them, with the
learner calls of consecutive entries merged on replay or not."""

from __future__ import annotations

import numpy as np
import pytest

from core.csr import CSRMatrix
from service.engine import Engine
from service.engine.entries import Entry, decode, encode
from service.errors import Contention, StoreUnavailable
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores import keys
from service.stores.memory import MemoryStore
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.conftest import EMPTY_REDIS
from tests.service.clock_helpers import TickingClock
from tests.service.log_helpers import (
    assert_same_arrays,
    engine_without_checkpoints,
    labelled_stream,
    state_of,
)


def _traffic(
    engine: Engine, clock: TickingClock, model_id: str, *, checkpoint_at: int | None, zero_one=False
) -> None:
    """Events (with duplicates), kept scores and labels (``zero_one``: sent as {0, 1}), a
    sweep, history points."""
    X, y = labelled_stream(240, n_features=5, seed=3)
    if zero_one:
        y = (y > 0).astype(np.int64)
    for step, start in enumerate(range(0, 200, 10)):
        ids = [f"e{k}" for k in range(start, start + 10)]
        if step % 3 == 1:
            ids[0] = f"e{start - 10}"  # a duplicate of the previous batch
        engine.learn(model_id, Batch(X[start : start + 10], y[start : start + 10], ids))
        if step == checkpoint_at:
            assert engine.repository.checkpoints.write(model_id)
        if step % 5 == 4:
            clock.now += 61.0  # a new minute: the history catches up
            engine.catch_up_history()
    kept = [f"s{k}" for k in range(40)]
    engine.score(model_id, Batch(X[200:240], None, kept))
    engine.labels(model_id, kept[:20], y[200:220])
    clock.now += 10**6  # the other kept scores expire: the sweep learns the default label
    engine.sweep(model_id)


@pytest.mark.parametrize("checkpoint_at", [None, 7])
@pytest.mark.parametrize("learner", ["auto", "spdam"])
def test_a_rebuilt_model_equals_the_one_that_never_stopped(logging_store, learner, checkpoint_at):
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(
        live,
        ModelCreate(id="m", n_features=5, learner=learner, default_label=0, regret_window=0),
    )
    _traffic(live, clock, "m", checkpoint_at=checkpoint_at)
    expected = state_of(live, "m")
    stored = logging_store.load("m")
    assert len(stored.entries) > 20 - (checkpoint_at or 0)  # learned from the log, not a state
    rebuilt = engine_without_checkpoints(
        logging_store, clock
    )  # another process, or this one restarted
    actual = state_of(rebuilt, "m")
    assert_same_arrays(actual, expected)
    assert rebuilt.info("m").version == live.info("m").version


def test_labels_sent_as_zero_one_replay_beside_the_default_label(logging_store):
    """A {0, 1} labels entry and the sweep's default-label entry (-1) merged into one replayed
    learner call give the live model, bit for bit (not a refused mix of 0 and -1)."""
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(live, ModelCreate(id="m", n_features=5, default_label=0, regret_window=0))
    _traffic(live, clock, "m", checkpoint_at=None, zero_one=True)
    expected = state_of(live, "m")
    assert_same_arrays(state_of(engine_without_checkpoints(logging_store, clock), "m"), expected)


def test_a_replay_merges_learner_calls_and_stays_exact(logging_store):
    """100 one-event entries, replayed: consecutive entries share one learner call."""
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(live, ModelCreate(id="m", n_features=4, regret_window=0))
    X, y = labelled_stream(100, n_features=4, seed=8)
    for k in range(100):
        live.learn("m", Batch(X[k : k + 1], y[k : k + 1], [f"e{k}"]))
    expected = state_of(live, "m")
    actual = state_of(engine_without_checkpoints(logging_store, clock), "m")
    assert_same_arrays(actual, expected)


def test_a_cache_behind_catches_up_and_a_checkpoint_truncates_the_log(logging_store):
    clock = TickingClock()
    first, second = (
        engine_without_checkpoints(logging_store, clock),
        engine_without_checkpoints(logging_store, clock),
    )
    create_model(first, ModelCreate(id="m", n_features=3, regret_window=0))
    second.info("m")
    X, y = labelled_stream(60, n_features=3, seed=1)
    for k in range(6):
        engine = first if k % 2 == 0 else second
        engine.learn("m", Batch(X[10 * k : 10 * k + 10], y[10 * k : 10 * k + 10], None))
    assert first.repository.caught_up + second.repository.caught_up == 5
    assert first.writes_retried == second.writes_retried == 0
    assert len(logging_store.load("m").entries) == 6
    assert second.repository.checkpoints.write("m")
    stored = logging_store.load("m")
    assert (stored.saved, stored.entries) == (7, [])
    for name, value in state_of(first, "m").items():
        np.testing.assert_array_equal(stored.arrays[name], value, err_msg=name)
    # the checkpoint truncated the entry the first engine's cache lacked: reading the model
    # above read it whole, and says so
    assert (first.repository.reread, second.repository.reread) == (1, 0)
    first.learn("m", Batch(X[:5], y[:5], None))
    second.learn("m", Batch(X[5:10], y[5:10], None))
    assert (first.repository.reread, second.repository.reread) == (1, 0)
    assert_same_arrays(state_of(first, "m"), state_of(second, "m"))


def test_a_log_entry_that_does_not_apply_stops_the_model_naming_it(logging_store):
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(live, ModelCreate(id="m", n_features=3, regret_window=0))
    X, y = labelled_stream(10, n_features=3, seed=1)
    live.learn("m", Batch(X, y, None))
    # an entry of 4 features in a model of 3 (a bug of the writer), appended behind its back
    bad = Entry(clock(), np.ones((1, 4)), np.array([1]))
    logging_store.commit("m", _commit(logging_store, bad))
    with pytest.raises(StoreUnavailable, match="log entry 3 does not apply"):
        engine_without_checkpoints(logging_store, clock).info("m")


def _commit(store, entry: Entry):
    from service.stores.base import Commit

    stored = store.load("m")
    version = stored.entries[-1][0] if stored.entries else stored.version
    return Commit(version, stored.incarnation, entry=entry)


def test_entries_round_trip_through_bytes():
    sparse = CSRMatrix(
        np.array([0, 2, 3], dtype=np.int64),
        np.array([0, 4, 1], dtype=np.int32),
        np.array([1.5, -2.0, 3.0]),
        6,
    )
    for entry in (
        Entry(12.5, np.arange(6.0).reshape(2, 3), np.array([1, -1]), np.array([0.1, 0.2])),
        Entry(13.0, sparse, np.array([-1, 1]), rounds=(1, 1), counts=(("duplicates", 2),)),
        Entry(14.0, history=True, counts=(("labels_expired", 3),)),
    ):
        back = decode(encode(entry))
        assert encode(back) == encode(entry)
        assert (back.now, back.rounds, back.counts, back.history) == (
            entry.now,
            entry.rounds,
            entry.counts,
            entry.history,
        )
    with pytest.raises(ValueError, match="format"):
        decode(b"\x07" + encode(entry)[1:])


def test_entries_of_one_layout_decode_whatever_their_time_and_refuse_stray_bytes():
    """A replay decodes entries of one layout (header after ``now``) from a cache of it: the
    header's length moves with ``now``'s digits, and every entry's bytes are still checked."""
    rng = np.random.default_rng(3)
    entries = [
        Entry(now, rng.normal(size=(1, 4)), np.array([1 if k % 2 else -1]))
        for k, now in enumerate([1.0, 1.8e9 + 0.123456789, 5e-324, 12.5, 1.8e9, 1e300])
    ]
    for entry in entries * 2:  # the second time from the cached layout
        raw = encode(entry)
        back = decode(raw)
        assert back.now == entry.now and encode(back) == raw
        np.testing.assert_array_equal(back.X, entry.X)
        np.testing.assert_array_equal(back.y, entry.y)
        with pytest.raises(ValueError, match="bytes"):
            decode(raw + b"\x00")
        with pytest.raises(ValueError, match="bytes"):
            decode(raw[:-1])


def test_concurrent_appends_share_a_transaction_and_a_stale_one_fails_alone(tmp_path):
    """SQLite's group commit: writes queued while another process holds the write lock are
    committed by one transaction; the stale one among them is refused, the others written."""
    import contextlib
    import sqlite3
    import threading

    from service.errors import StaleVersion
    from service.stores.base import Commit

    store = SQLiteStore.open(tmp_path)
    for name in "abcd":
        store.create_model(name, {}, {"w": np.ones(2)}, "inc")
    entry = Entry(1.0, np.ones((1, 2)), np.array([1]))
    outcomes: dict[str, object] = {}

    def append(name: str, expected: int) -> None:
        try:
            outcomes[name] = store.commit(name, Commit(expected, "inc", entry=entry))
        except StaleVersion as error:
            outcomes[name] = error

    database = store.database
    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process writes: the first append waits
        leader = threading.Thread(target=append, args=("a", 1))
        leader.start()
        # The order is waited for, not slept on (0.2 s sleeps let a loaded machine start a
        # follower first): a leads its group of one, blocked on the lock ...
        assert _wait_for(lambda: database.groups == 1, 120)
        followers = [
            threading.Thread(target=append, args=(name, expected))
            for name, expected in (("b", 1), ("c", 5), ("d", 1))
        ]
        for thread in followers:
            thread.start()
        # ... and the three others queue behind it for the next group
        assert _wait_for(lambda: len(database._group._queues.get("", ())) == 3, 120)
        other.execute("COMMIT")
    for thread in [leader, *followers]:
        thread.join(120)
        assert not thread.is_alive()
    assert outcomes["a"] == outcomes["b"] == outcomes["d"] == 2
    assert isinstance(outcomes["c"], StaleVersion)
    assert (store.database.groups, store.database.grouped_writes) == (2, 4)
    assert [store.load(name).version for name in "abcd"] == [2, 2, 1, 2]
    assert [len(store.load(name).entries) for name in "abcd"] == [1, 1, 0, 1]


def _wait_for(condition, seconds: float = 60.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_checkpoints_follow_events_eviction_and_shutdown(logging_store):
    """Written in the background after ``checkpoint_events`` events, when a model leaves the
    cache, and for every model behind at shutdown; each truncates the model's log."""
    clock = TickingClock()
    engine = Engine(
        logging_store, clock=clock, checkpoint_events=5, checkpoint_seconds=1e9, max_cached_models=1
    )
    for name in ("a", "b"):
        create_model(engine, ModelCreate(id=name, n_features=3, regret_window=0))
    X, y = labelled_stream(12, n_features=3, seed=2)
    for k in range(6):  # one event each: the fifth makes the checkpoint due
        engine.learn("b", Batch(X[k : k + 1], y[k : k + 1], None))
    assert _wait_for(lambda: logging_store.load("b").saved >= 6)
    engine.learn("a", Batch(X[:2], y[:2], None))  # b leaves the cache, one entry behind
    assert _wait_for(lambda: logging_store.load("b").entries == [])
    assert logging_store.load("b").saved == 7
    assert len(logging_store.load("a").entries) == 1
    engine.close()  # shutdown: a is checkpointed
    stored = logging_store.load("a")
    assert (stored.saved, stored.entries) == (2, [])
    rebuilt = engine_without_checkpoints(logging_store, clock)
    for name in ("a", "b"):
        assert rebuilt.info(name).counts == engine.info(name).counts


def test_the_checkpoint_settings_are_checked_and_reach_the_engine():
    from pydantic import ValidationError

    from service.settings import Settings
    from tests.service.conftest import started_apps

    for bad in ({"checkpoint_events": 0}, {"checkpoint_seconds": 0}):
        with pytest.raises(ValidationError):
            Settings(**bad)
    with started_apps(store="memory") as build:
        client = build(checkpoint_events=7, checkpoint_seconds=3.5)
        checkpoints = client.app.state.engine.repository.checkpoints
        assert (checkpoints.every_events, checkpoints.every_seconds) == (7, 3.5)


@pytest.mark.parametrize("kind", ["redis", "redis_cluster"])
def test_processes_appending_at_once_lose_and_double_nothing(kind, request):
    """Two processes (engines with clients of their own) append to one model from four
    threads while checkpoints are written: each append is conditional on the version its
    process applied, and a process behind catches up on the other's entries first.  Every
    event is learned once, and the model rebuilt from the checkpoint and log equals both."""
    import threading

    url = request.getfixturevalue(EMPTY_REDIS[kind])
    clock = TickingClock()
    engines = [
        Engine(RedisStore.from_url(url), clock=clock, checkpoint_events=40, checkpoint_seconds=1e9)
        for _ in range(2)
    ]
    create_model(engines[0], ModelCreate(id="m", n_features=3, regret_window=0))
    X, y = labelled_stream(400, n_features=3, seed=5)

    def learn(engine: Engine, batch: Batch) -> None:
        # a write that lost every race (a 503 Contention answer) acknowledged nothing: the
        # client sends it again, as a client of the API does
        while True:
            try:
                engine.learn("m", batch)
                return
            except Contention:
                continue

    def send(thread: int) -> None:
        engine = engines[thread % 2]
        for k in range(thread, 400, 4):
            learn(engine, Batch(X[k : k + 1], y[k : k + 1], [f"e{k}"]))
        learn(engine, Batch(X[:4], y[:4], ["e0", "e1", "e2", "e3"]))  # all duplicates

    threads = [threading.Thread(target=send, args=(thread,)) for thread in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # the processes interleaved: one caught up on the other's entries, or its append was
    # stale (it went back to its undo point, caught up and learned again); a rebuild from the
    # checkpoint and log only for a process's first stale append, before it knew the model
    # contended
    repositories = [engine.repository for engine in engines]
    assert sum(each.caught_up + each.writes_retried for each in repositories) > 0
    assert all(each.writes_reloaded <= 1 for each in repositories)
    assert sum(each.writes_undone + each.writes_reloaded for each in repositories) == sum(
        each.writes_retried for each in repositories
    )
    assert sum(engine.repository.checkpoints.written for engine in engines) > 0
    rebuilt = Engine(RedisStore.from_url(url), clock=clock)
    assert rebuilt.info("m").counts.events_learned == 400
    expected = state_of(rebuilt, "m")
    for engine in engines:
        assert engine.info("m").version == rebuilt.info("m").version
        actual = state_of(engine, "m")
        assert_same_arrays(actual, expected)
    for engine in (*engines, rebuilt):
        engine.close()


def test_a_checkpoint_that_raises_leaves_the_checkpoint_thread_running():
    """Any error of a checkpoint (a Redis reply it did not expect ...) is logged and the model
    stays behind, tried again after the period or ``checkpoint_events`` more events (not at
    once, again and again): the thread goes on and writes the next checkpoint."""
    import time

    store = MemoryStore()
    real, calls = store.checkpoint, []

    def failing_once(*args):
        calls.append(args[0])
        if len(calls) == 1:
            raise RuntimeError("injected")
        return real(*args)

    store.checkpoint = failing_once  # type: ignore[method-assign]
    engine = Engine(store, clock=TickingClock(), checkpoint_events=2, checkpoint_seconds=1e9)
    create_model(engine, ModelCreate(id="m", n_features=3, regret_window=0))
    X, y = labelled_stream(4, n_features=3, seed=4)
    engine.learn("m", Batch(X[:2], y[:2], None))
    assert _wait_for(lambda: len(calls) == 1)
    time.sleep(0.3)
    assert len(calls) == 1
    engine.learn("m", Batch(X[2:], y[2:], None))
    assert _wait_for(lambda: store.load("m").saved == 3)
    engine.close()


def test_a_current_cache_costs_one_statement_and_an_append_one_file_check(tmp_path, monkeypatch):
    """The request path's store work: a load from a cache that is current is one statement
    (no read transaction around it); an append checks that the file is still the store once,
    under the write lock, not again before taking it."""
    from service.stores.base import Commit

    store = SQLiteStore.open(tmp_path)
    store.create_model("m", {}, {"w": np.ones(2)}, "inc")
    assert store.load("m", 1, "inc").arrays is None  # the epoch check is not due again soon
    statements: list[str] = []
    store.database.connection().set_trace_callback(statements.append)
    assert store.load("m", 1, "inc").arrays is None
    assert len(statements) == 1 and statements[0].startswith("SELECT version, incarnation")
    checks: list[int] = []
    verify = store.database.verify_file
    monkeypatch.setattr(store.database, "verify_file", lambda: (checks.append(1), verify())[1])
    entry = Entry(1.0, np.ones((1, 2)), np.array([1]))
    assert store.commit("m", Commit(1, "inc", entry=entry)) == 2
    assert checks == [1]
    stored = store.load("m", 1, "inc")  # behind by one: the entry is read back
    assert [version for version, _ in stored.entries] == [2]


def test_a_model_just_created_without_a_saved_marker_is_read_at_its_head(logging_store):
    """On Redis a model just created has no ``log:saved`` marker (its first append sets it):
    a reader takes a missing marker as the head, so the created state is the checkpoint, with
    no entry to replay, read whole or caught up from on every store."""
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(live, ModelCreate(id="m", n_features=5))
    if isinstance(logging_store, RedisStore):
        assert logging_store.client.hget(keys.meta("m"), "log:saved") is None
    stored = logging_store.load("m")
    assert (stored.version, stored.saved, stored.entries) == (1, 1, [])
    behind = engine_without_checkpoints(logging_store, clock)  # another process, cached at 1
    assert_same_arrays(state_of(behind, "m"), state_of(live, "m"))
    X, y = labelled_stream(10, n_features=5, seed=4)
    live.learn("m", Batch(X, y, [f"e{k}" for k in range(10)]))
    if isinstance(logging_store, RedisStore):
        assert int(logging_store.client.hget(keys.meta("m"), "log:saved")) == 1
    stored = logging_store.load("m")
    assert (stored.version, stored.saved, [v for v, _ in stored.entries]) == (2, 1, [2])
    for reader in (behind, engine_without_checkpoints(logging_store, clock)):
        assert_same_arrays(state_of(reader, "m"), state_of(live, "m"))
        assert reader.info("m").version == 2
