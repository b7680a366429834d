"""Every store honours one protocol: versioned atomic commits, ids, pending labels."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine.entries import Entry, encode
from service.errors import (
    InsufficientStorage,
    ModelChanged,
    ModelExists,
    ModelNotFound,
    StaleVersion,
)
from service.stores import keys
from service.stores.base import Commit
from service.stores.redis import RedisStore


def test_key_names_are_exact():
    assert keys.MODELS == "aucs:models"
    assert keys.config("fraud-1") == "aucs:{fraud-1}:config"
    assert keys.version("fraud-1") == "aucs:{fraud-1}:version"
    assert keys.meta("fraud-1") == "aucs:{fraud-1}:meta"
    assert keys.state("fraud-1") == "aucs:{fraud-1}:state"
    assert keys.layout("fraud-1") == "aucs:{fraud-1}:layout"
    assert keys.seen("fraud-1") == "aucs:{fraud-1}:seen"
    assert keys.expired("fraud-1") == "aucs:{fraud-1}:expired"
    assert keys.pending("fraud-1") == "aucs:{fraud-1}:pending"
    assert keys.deadlines("fraud-1") == "aucs:{fraud-1}:deadlines"
    assert all("::" not in key for key in keys.all_model_keys("m"))
    for impossible in ("a}b", "{a}", ""):  # no created model has such an id: not found
        with pytest.raises(ModelNotFound):
            keys.state(impossible)


ARRAYS = {
    "learner:w": np.arange(4, dtype=np.float64),
    "learner:t": np.array([7], dtype=np.int64),
    "learner:rng": np.array([2**63 + 5], dtype=np.uint64),
    "window:m": np.arange(6, dtype=np.float64).reshape(2, 3),
}
#: a change as the engine commits it: a log entry
ENTRY = Entry(1.0, np.ones((1, 2)), np.array([1]))


def _same(left: dict, right: dict) -> None:
    assert set(left) == set(right)
    for name in left:
        assert left[name].dtype == right[name].dtype and left[name].shape == right[name].shape
        np.testing.assert_array_equal(left[name], right[name])


def test_create_load_commit_round_trip(store):
    assert store.create_model("m", {"id": "m"}, ARRAYS, "inc1") == 1
    with pytest.raises(ModelExists):
        store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    loaded = store.load("m")
    assert (loaded.version, loaded.incarnation, loaded.config) == (1, "inc1", {"id": "m"})
    _same(loaded.arrays, ARRAYS)
    # a current cache gets the version only
    assert store.load("m", 1, "inc1").arrays is None
    assert store.load("m", 1, "other").arrays is not None

    commit = Commit(
        1,
        "inc1",
        ENTRY,
        learned_ids=["a", "b"],
        id_expiry=200.0,
        now=100.0,
        meta={"checkpoint": "5-0"},
    )
    assert store.commit("m", commit) == 2
    with pytest.raises(StaleVersion):  # same expected version again: stale, nothing written
        store.commit("m", Commit(1, "inc1", ENTRY, learned_ids=["c"], id_expiry=200.0))
    with pytest.raises(StaleVersion):
        store.commit("m", Commit(2, "wrong-incarnation", ENTRY))
    loaded = store.load("m")
    assert loaded.version == 2 and loaded.meta["checkpoint"] == "5-0"
    _same(loaded.arrays, ARRAYS)
    assert [(version, encode(entry)) for version, entry in loaded.entries] == [(2, encode(ENTRY))]
    assert store.seen("m", ["a", "b", "c"], now=150.0).tolist() == [True, True, False]
    assert store.seen("m", ["a"], now=250.0).tolist() == [False]  # forgotten after the TTL


def test_a_reset_replaces_only_the_incarnation_it_read(store):
    """``replaces``: a model deleted since the reset read it stays deleted (and unlisted); one
    re-created since is left alone."""
    with pytest.raises(ModelNotFound):
        store.create_model("m", {"id": "m"}, ARRAYS, "inc1", replace=True, replaces="inc0")
    assert store.list_models() == []
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    with pytest.raises(ModelChanged):
        store.create_model("m", {"id": "m", "v": 2}, ARRAYS, "inc2", replace=True, replaces="x")
    assert store.load("m").incarnation == "inc1"
    assert store.create_model("m", {"id": "m"}, ARRAYS, "inc2", replace=True, replaces="inc1")
    assert store.load("m").incarnation == "inc2" and store.list_models() == ["m"]
    store.delete_model("m")
    with pytest.raises(ModelNotFound):
        store.create_model("m", {"id": "m"}, ARRAYS, "inc3", replace=True, replaces="inc2")
    assert store.list_models() == []
    with pytest.raises(ModelNotFound):
        store.load("m")


def test_replace_delete_and_missing(store):
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    store.commit("m", Commit(1, "inc1", ENTRY, learned_ids=["a"], id_expiry=1e12, now=1.0))
    store.put_pending("m", {"p": b"rec"}, deadline=50.0)
    assert store.create_model("m", {"id": "m", "v": 2}, ARRAYS, "inc2", replace=True) == 1
    loaded = store.load("m")
    assert loaded.incarnation == "inc2" and loaded.config == {"id": "m", "v": 2}
    assert store.seen("m", ["a"], now=2.0).tolist() == [False]
    assert store.get_pending("m", ["p"]) == {}
    assert store.list_models() == ["m"]
    store.delete_model("m")
    assert store.list_models() == []
    for call in (
        lambda: store.load("m"),
        lambda: store.delete_model("m"),
        lambda: store.commit("m", Commit(1, "inc2", ENTRY)),
    ):
        with pytest.raises(ModelNotFound):
            call()


def test_pending_records(store):
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    store.put_pending("m", {"a": b"\x00\x01", "b": b"\x02"}, deadline=10.0)
    store.put_pending("m", {"c": b"\x03"}, deadline=30.0)
    assert store.get_pending("m", ["a", "c", "zz"]) == {
        "a": (b"\x00\x01", 10.0),
        "c": (b"\x03", 30.0),
    }
    assert sorted(store.due_pending("m", now=20.0, limit=10)) == ["a", "b"]
    store.commit(
        "m",
        Commit(
            1,
            "inc1",
            ENTRY,
            remove_pending=["a", "b"],
            expired_ids=["a", "b"],
            id_expiry=99.0,
            now=20.0,
        ),
    )
    assert store.get_pending("m", ["a", "b"]) == {}
    assert store.expired("m", ["a", "c"], now=21.0).tolist() == [True, False]
    assert store.due_pending("m", now=20.0, limit=10) == []


def test_pending_records_are_counted_once_and_bounded(store):
    """A record kept again replaces the first (record and deadline) and counts once toward
    ``max_records``; a write past the bound, or to a missing model, keeps nothing."""
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    store.put_pending("m", {"a": b"1", "b": b"2"}, deadline=10.0, max_records=3)
    store.put_pending("m", {"a": b"again", "c": b"3"}, deadline=20.0, max_records=3)
    assert store.get_pending("m", ["a", "b", "c"]) == {
        "a": (b"again", 20.0),
        "b": (b"2", 10.0),
        "c": (b"3", 20.0),
    }
    with pytest.raises(InsufficientStorage):
        store.put_pending("m", {"b": b"new", "d": b"4"}, deadline=30.0, max_records=3)
    assert store.get_pending("m", ["b", "d"]) == {"b": (b"2", 10.0)}  # nothing of it kept
    store.put_pending("m", {"c": b"kept again"}, deadline=40.0, max_records=3)  # no new one
    # labels consume records: room for as many new ones
    store.commit("m", Commit(1, "inc1", ENTRY, remove_pending=["a", "b"], now=1.0))
    store.put_pending("m", {"d": b"4", "e": b"5"}, deadline=50.0, max_records=3)
    with pytest.raises(InsufficientStorage):
        store.put_pending("m", {"f": b"6"}, deadline=50.0, max_records=3)
    assert sorted(store.get_pending("m", list("abcdef"))) == ["c", "d", "e"]
    with pytest.raises(ModelNotFound):
        store.put_pending("gone", {"x": b"1"}, deadline=1.0)
    store.create_model("gone", {"id": "gone"}, ARRAYS, "inc1")
    assert store.get_pending("gone", ["x"]) == {}


def test_a_stale_or_missing_entry_commit_writes_nothing(store):
    """The append's version check: an entry committed at a version that is not the model's
    (or to no model) writes neither the entry, nor its ids, nor the version."""
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    store.put_pending("m", {"p": b"record"}, deadline=5.0)
    entry = Entry(1.0, np.ones((1, 2)), np.array([1]))
    assert store.commit("m", Commit(1, "inc1", entry=entry, learned_ids=["a"],
                                    id_expiry=1e12, now=1.0)) == 2  # fmt: skip
    for version, incarnation in ((1, "inc1"), (2, "other"), (3, "inc1")):
        refused = Commit(version, incarnation, entry=entry, learned_ids=["b"],
                         remove_pending=["p"], id_expiry=1e12, now=1.0)  # fmt: skip
        with pytest.raises(StaleVersion):
            store.commit("m", refused)
    with pytest.raises(ModelNotFound):
        store.commit("x", Commit(1, "inc1", entry=entry, learned_ids=["c"], now=1.0))
    stored = store.load("m")
    assert stored.version == 2 and [version for version, _ in stored.entries] == [2]
    assert store.seen("m", ["a", "b"], now=2.0).tolist() == [True, False]
    assert store.get_pending("m", ["p"]) == {"p": (b"record", 5.0)}
    # the count of records was not moved by the refused commits: the bound still holds one
    store.put_pending("m", {"q": b"1"}, deadline=5.0, max_records=2)
    with pytest.raises(InsufficientStorage):
        store.put_pending("m", {"r": b"1"}, deadline=5.0, max_records=2)


def test_remembered_ids_are_bounded_and_the_oldest_forgotten_first(store):
    """``max_remembered_ids``: beyond it the ids of the oldest commits are forgotten before
    their expiry, on every store alike; learned and expired ids are bounded apart."""
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    version = 1
    for ids, expiry in ((["a", "b", "c"], 200.0), (["d", "e"], 300.0), (["f"], 400.0)):
        expired = [event_id.upper() for event_id in ids]
        commit = Commit(version, "inc1", ENTRY, learned_ids=ids, expired_ids=expired,
                        id_expiry=expiry, now=100.0, max_remembered_ids=4)  # fmt: skip
        version = store.commit("m", commit)
    oldest_two_forgotten = [False, False, True, True, True, True]
    assert store.seen("m", list("abcdef"), now=150.0).tolist() == oldest_two_forgotten
    assert store.expired("m", list("ABCDEF"), now=150.0).tolist() == oldest_two_forgotten
    # an unbounded commit forgets nothing early
    store.commit("m", Commit(version, "inc1", ENTRY, learned_ids=["g"], id_expiry=500.0, now=100.0))
    assert store.seen("m", list("cdefg"), now=150.0).all()


def test_redis_state_arrays_are_visible_as_raw_fields(empty_redis, rclient):
    store = RedisStore.from_url(empty_redis)
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    client = rclient
    assert client.hget(keys.state("m"), "learner:w") == ARRAYS["learner:w"].tobytes()
    assert client.hget(keys.layout("m"), "learner:w") == b"<f8|4"
    assert client.hget(keys.layout("m"), "window:m") == b"<f8|2,3"
    assert client.hget(keys.layout("m"), "learner:rng") == b"<u8|1"
    assert client.get(keys.version("m")) == b"1"
    client.close()
    store.close()


def test_engine_commits_checkpoints_with_the_state(store):
    """What a queue worker relies on: learn(..., checkpoint=) is atomic with state."""
    from core.validation import as_labels
    from service.engine import Engine
    from service.ingest import Batch
    from service.models import create_model
    from service.schemas import ModelCreate

    engine = Engine(store)
    create_model(engine, ModelCreate(id="w", n_features=2, learner="spam"))
    batch = Batch(np.array([[1.0, 2.0], [0.0, 1.0]]), as_labels([1, 0]), ["a", "b"])
    engine.learn("w", batch, checkpoint={"stream_id": "17-0"})
    assert engine.checkpoint("w") == {"stream_id": "17-0"}
    fresh = Engine(store)  # another process: reads it back from the store
    assert fresh.checkpoint("w") == {"stream_id": "17-0"}
    again = fresh.learn("w", batch, checkpoint={"stream_id": "18-0"})
    assert again.learned == 0 and again.duplicate_ids == ["a", "b"]
    assert engine.checkpoint("w") == {"stream_id": "18-0"}


def test_two_engines_on_one_store_never_lose_an_update(store):
    """Two processes' engines (each with its own cache) writing in turn: each write sees the
    other's, through the version check; the result equals one learner fed every batch."""
    from core.learners import make_learner
    from core.validation import as_labels
    from service.engine import Engine
    from service.ingest import Batch
    from service.models import create_model
    from service.schemas import ModelCreate

    first, second = Engine(store), Engine(store)
    create_model(first, ModelCreate(id="m", n_features=3, scaling="none", learner="spam"))
    second.info("m")  # warm second's cache, which the first engine's writes make stale
    rng = np.random.default_rng(5)
    reference = make_learner("spam")
    reference.initialize(3)
    for number in range(6):
        X = rng.normal(size=(10, 3))
        y = as_labels(rng.random(10) < 0.4)
        engine = first if number % 2 == 0 else second
        assert engine.learn("m", Batch(X, y, None)).learned == 10
        reference.partial_fit(X, y)
    # every switch found a stale cache, which caught up on the other's entries
    assert first.repository.caught_up + second.repository.caught_up >= 5
    for engine in (first, second):
        loaded = engine.model("m")
        np.testing.assert_array_equal(loaded.learner.coef_, reference.coef_)
        assert loaded.counts().events_learned == 60 and loaded.version == 7


def test_due_pending_lists_each_id_once(store):
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    store.put_pending("m", {"a": b"1"}, deadline=10.0)
    store.put_pending("m", {"a": b"2", "b": b"3"}, deadline=10.0)  # re-scored: same deadline
    store.put_pending("m", {"c": b"4"}, deadline=40.0)
    assert sorted(store.due_pending("m", now=20.0, limit=10)) == ["a", "b"]
    assert sorted(store.due_pending("m", now=20.0, limit=10)) == ["a", "b"]  # still due
    assert len(store.due_pending("m", now=50.0, limit=2)) == 2


def test_redis_big_arrays_are_chunked_and_a_commit_appends_only_its_entry(empty_redis, rclient):
    """A commit is one log entry (the state's hashes untouched); a checkpoint replaces the
    state whole, trims the log behind it and leaves no staged hash; an older one is refused."""
    from service.engine.entries import Entry
    from service.stores.fields import CHUNK_BYTES

    client = rclient
    store = RedisStore.from_url(empty_redis)
    n_values = (CHUNK_BYTES // 8) * 2 + 100  # three chunks
    big = {"window:scores": np.arange(n_values, dtype=np.float64), "learner:w": np.ones(3)}
    store.create_model("m", {"id": "m"}, big, "inc1")
    state = keys.state("m")
    assert client.hget(keys.layout("m"), "window:scores") == f"<f8|{n_values}|3".encode()
    assert sorted(client.hkeys(state)) == [b"learner:w", b"window:scores@0", b"window:scores@1",
                                          b"window:scores@2"]  # fmt: skip
    before = client.hgetall(state)
    entry = Entry(5.0, np.ones((1, 3)), np.array([1]))
    for version in (1, 2):
        assert store.commit("m", Commit(version, "inc1", entry=entry)) == version + 1
    assert client.hgetall(state) == before
    assert [stream_id for stream_id, _ in client.xrange(keys.log("m"))] == [b"2-0", b"3-0"]
    stored = store.load("m")
    assert (stored.version, stored.saved, [v for v, _ in stored.entries]) == (3, 1, [2, 3])
    small = {**big, "window:scores": np.arange(10, dtype=np.float64)}
    assert store.checkpoint("m", "inc1", 2, small)
    assert sorted(client.hkeys(state)) == [b"learner:w", b"window:scores"]
    assert [stream_id for stream_id, _ in client.xrange(keys.log("m"))] == [b"3-0"]
    assert not store.checkpoint("m", "inc1", 2, big)  # not newer than the stored one
    assert not store.checkpoint("m", "other", 3, big)  # another incarnation's
    assert not store.checkpoint("m", "inc1", 4, big)  # past the head
    stored = RedisStore.from_url(empty_redis).load("m")
    assert (stored.version, stored.saved, [v for v, _ in stored.entries]) == (3, 2, [3])
    _same(stored.arrays, small)
    assert not list(client.scan_iter(match="*checkpoint*"))
    store.close()


def test_redis_commands_are_written_with_one_sendall():
    import redis.connection

    from service.stores.client import _OneWriteConnection

    sent = []

    connection = _OneWriteConnection(host="127.0.0.1", port=1)
    connection._sock = type("Sock", (), {"sendall": staticmethod(sent.append)})()
    connection.send_packed_command(
        [b"*2\r\n$3\r\nGET\r\n$", b"x" * 7000, b"\r\n"], check_health=False
    )
    assert sent == [b"*2\r\n$3\r\nGET\r\n$" + b"x" * 7000 + b"\r\n"]
    tcp = RedisStore.from_url("redis://127.0.0.1:1/0").client.connection_pool
    assert tcp.connection_class is _OneWriteConnection
    unix = RedisStore.from_url("unix:///tmp/nowhere.sock").client.connection_pool
    assert unix.connection_class is redis.connection.UnixDomainSocketConnection


def test_pack_commands_frames_like_redis_py():
    """The store's own RESP framing gives the bytes redis-py's packer gives."""
    from redis.connection import Connection

    from service.stores.client import pack_commands

    commands = [
        ["MULTI"],
        ["HSET", "aucs:{m}:state", "learner:w", np.arange(3.0).tobytes(), "x@0", b"\x00" * 7000],
        ["ZADD", "aucs:{m}:seen", "12.5", "id-é", 7, "-3"],
        ["EXEC"],
    ]
    expected = b"".join(b"".join(Connection().pack_command(*command)) for command in commands)
    assert pack_commands(commands) == expected


def _command_calls(client, name: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{name}")
    return 0 if stats is None else int(stats["calls"])


def test_redis_commit_is_one_script_that_changes_nothing_when_stale(empty_redis, rclient):
    """An append is one EVALSHA (one round trip, no MULTI): at the expected version it writes
    the entry, the ids and the meta fields; at another, or for another incarnation, it
    writes nothing and raises StaleVersion."""
    from service.engine.entries import Entry

    client = rclient
    store = RedisStore.from_url(empty_redis)
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    entry = Entry(5.0, np.ones((1, 3)), np.array([1]))
    before = {name: _command_calls(client, name) for name in ("evalsha", "exec")}
    commit = Commit(1, "inc1", entry, learned_ids=["a"], id_expiry=1e12, meta={"k": "v"})
    assert store.commit("m", commit) == 2
    assert _command_calls(client, "evalsha") == before["evalsha"] + 1
    assert _command_calls(client, "exec") == before["exec"]
    snapshot = {key: client.dump(key) for key in keys.all_model_keys("m")}
    for version, incarnation in ((1, "inc1"), (2, "inc2")):
        stale = Commit(version, incarnation, learned_ids=["b"], id_expiry=1e12, entry=entry)
        with pytest.raises(StaleVersion):
            store.commit("m", stale)
    assert {key: client.dump(key) for key in keys.all_model_keys("m")} == snapshot
    stored = store.load("m")
    assert stored.meta == {"incarnation": "inc1", "k": "v"}
    assert [version for version, _ in stored.entries] == [2]
    assert store.seen("m", ["a", "b"], now=0.0).tolist() == [True, False]
    store.close()


def test_redis_commit_failing_mid_send_drops_the_connection(empty_redis, rclient):
    """A connection error while an append is sent: nothing is applied (Redis never got the
    whole command) and the next commit, on a fresh connection, succeeds."""
    import redis

    from service.engine.entries import Entry
    from service.errors import StoreUnavailable

    client = rclient
    store = RedisStore.from_url(empty_redis)
    store.create_model("m", {"id": "m"}, ARRAYS, "inc1")
    pool = store.client.connection_pool
    real = pool.get_connection

    def failing_connection(*args, **kwargs):
        connection = real(*args, **kwargs)
        send = connection.send_packed_command

        def send_then_fail(command, check_health=True):
            packed = b"".join(command) if isinstance(command, list) else command
            if b"EVALSHA" in packed[:40]:
                connection.send_packed_command = send  # one failure only (pooled object)
                send([packed[: len(packed) // 2]], check_health)  # half the command
                raise redis.exceptions.ConnectionError("injected: connection reset")
            send(command, check_health)

        connection.send_packed_command = send_then_fail
        return connection

    pool.get_connection = failing_connection  # type: ignore[method-assign]
    entry = Entry(5.0, np.ones((1, 3)), np.array([1]))
    with pytest.raises(StoreUnavailable):
        store.commit("m", Commit(1, "inc1", entry=entry))
    pool.get_connection = real  # type: ignore[method-assign]
    assert client.get(keys.version("m")) == b"1" and not client.exists(keys.log("m"))
    assert store.commit("m", Commit(1, "inc1", entry=entry)) == 2
    assert [version for version, _ in store.load("m").entries] == [2]
    store.close()
    client.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_store_speaks_resp2_and_resp3(redis_server, protocol):
    """The store reads some replies off the connection itself (HGETALL is a flat list in
    RESP2, a map in RESP3; redis-py 8 defaults to RESP3): both give the same state."""
    from service.engine.entries import Entry, encode

    store = RedisStore.from_url(f"{redis_server}?protocol={protocol}")
    assert store.client.connection_pool.connection_kwargs["protocol"] == protocol
    store.create_model(f"p{protocol}", {"id": "m"}, ARRAYS, "inc1", replace=True)
    changed = {**ARRAYS, "learner:w": ARRAYS["learner:w"] - 2.0}
    assert store.commit(f"p{protocol}", Commit(1, "inc1", ENTRY, meta={"k": "v"})) == 2
    assert store.checkpoint(f"p{protocol}", "inc1", 2, changed)
    entry = Entry(5.0, np.ones((1, 3)), np.array([1]))
    assert store.commit(f"p{protocol}", Commit(2, "inc1", entry=entry)) == 3
    fresh = RedisStore.from_url(f"{redis_server}?protocol={protocol}")
    loaded = fresh.load(f"p{protocol}")
    _same(loaded.arrays, changed)
    assert loaded.meta == {"incarnation": "inc1", "k": "v"} and loaded.config == {"id": "m"}
    assert [(version, encode(back)) for version, back in loaded.entries] == [(3, encode(entry))]
    assert fresh.load(f"p{protocol}", 3, "inc1").arrays is None  # cache current
    behind = fresh.load(f"p{protocol}", 2, "inc1")  # a cache behind reads only the tail
    assert behind.arrays is None and [version for version, _ in behind.entries] == [3]
    for each in (store, fresh):
        each.close()
