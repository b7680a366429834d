"""What a model costs in memory beside the model cache: the stores keep nothing per model beside
the stored keys (a commit is a log entry, not a delta against a base), and an empty model
stores only the chunks that hold something."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
import redis

from service.engine import Engine
from service.engine.entries import Entry
from service.ingest import Batch
from service.models import create_model as create_engine_model
from service.schemas import ModelConfig, ModelCreate
from service.stores import keys
from service.stores.base import Commit
from service.stores.fields import CHUNK_BYTES, decode_fields, encode_fields
from service.stores.memory import MemoryStore
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.service.conftest import events_json, make_stream

#: an empty default model (auto, 10 features) holds 1.18 MB of arrays, nearly all of them
#: buffers its learners fill later (zeros until then); what is stored must be far less
EMPTY_MODEL_STORED_BYTES = 64 * 1024


def _store(store_kind: str, redis_url: str | None, data_dir):
    if store_kind == "memory":
        return MemoryStore()
    if store_kind == "sqlite":
        return SQLiteStore.open(data_dir)
    return RedisStore.from_url(redis_url)


def test_an_evicted_model_learns_as_a_cached_one(store_kind, redis_url, data_dir):
    """A model evicted from the cache at every batch (rebuilt from its checkpoint and log)
    continues bit for bit."""
    store = _store(store_kind, redis_url, data_dir)
    small = Engine(store, max_cached_models=1, clock=lambda: 1e9)
    large = Engine(MemoryStore(), max_cached_models=10, clock=lambda: 1e9)
    X, y = make_stream(60, n_features=4)
    try:
        for engine in (small, large):
            for name in ("a", "b", "c"):
                create_engine_model(engine, ModelCreate(id=name, n_features=4, learner="auto"))
            for start in range(0, 60, 20):
                for name in ("a", "b", "c"):  # alternate: the small cache evicts every time
                    part = slice(start, start + 20)
                    engine.learn(name, Batch(X[part], y[part], None))
        for name in ("a", "b", "c"):
            assert small.info(name).counts == large.info(name).counts
            mine, reference = (e.repository.read(name).arrays() for e in (small, large))
            assert mine.keys() == reference.keys()
            for key in mine:
                np.testing.assert_array_equal(mine[key], reference[key], err_msg=key)
    finally:
        # the engines first, as the app's shutdown does: their checkpoint threads write the
        # evicted models, and a store closed under a writing thread is a crash, not an error
        small.close()
        large.close()
        store.close()


def _stored_state_bytes(client, store_kind: str, model_id: str) -> int:
    store = client.app.state.store
    if store_kind == "memory":
        return sum(len(data) for data in store._models[model_id].fields[0].values())
    if store_kind == "sqlite":
        with sqlite3.connect(store.path) as db:
            (total,) = db.execute(
                "SELECT SUM(LENGTH(data)) FROM state WHERE model_id = ?", (model_id,)
            ).fetchone()
        return int(total)
    state = keys.state(model_id)
    return sum(int(store.client.hstrlen(state, field)) for field in store.client.hkeys(state))


def test_an_empty_default_model_stores_a_fraction_of_its_buffers(store_kind, client):
    response = client.post("/v1/models", json={"id": "m", "n_features": 10})
    assert response.status_code == 201, response.text
    live = sum(a.nbytes for a in client.app.state.engine.repository.read("m").arrays().values())
    # the learners' buffers grow as they fill (an empty model no longer holds ~1.3 MB)
    assert live < 4 * EMPTY_MODEL_STORED_BYTES
    assert _stored_state_bytes(client, store_kind, "m") < EMPTY_MODEL_STORED_BYTES
    X, y = make_stream(30, n_features=10)
    response = client.post("/v1/models/m/events", json=events_json(X, y))
    assert response.status_code == 200, response.text
    assert client.get("/v1/models/m/metrics").json()["window"]["events"] == 30


def test_a_default_model_holds_no_unfitted_trees():
    """Before its boosted candidates' first fit is installed (due at event 250, installed at
    282), a default model holds no padded trees and only the rows held for the pending fit
    (~200 KB of arrays for 10 features, ~370 KB when the trees and held rows were allocated
    whole)."""
    engine = Engine(MemoryStore())
    create_engine_model(engine, ModelCreate(id="m", n_features=10))
    X, y = make_stream(270, n_features=10)
    engine.learn("m", Batch(X, np.where(y > 0, 1, -1), None))
    arrays = engine.repository.read("m").arrays()
    assert arrays["learner:c2:pending"][0] == 1  # the fit from event 250 not installed yet
    for name in ("learner:c2:ens_left", "learner:c4:ens_threshold_or_value"):
        assert arrays[name].shape[0] == 0, name
    assert arrays["learner:c2:pending_X"].shape[0] < 256  # 20 held of at most 256
    assert sum(array.nbytes for array in arrays.values()) < 220_000


def test_a_default_model_keeps_no_regret_window_unless_asked():
    """The default auto scores by trees too, so it has no regret: it keeps no regret window
    (rows, scores and one weight vector per request, the largest part of a default model's
    arrays after one-event requests) unless one is given, and learns the same either way."""
    X, y = make_stream(300, n_features=10)
    labels = np.where(y > 0, 1, -1)
    arrays = {}
    for name, extra in (("default", {}), ("asked", {"regret_window": 1000})):
        engine = Engine(MemoryStore(), clock=lambda: 1e9)
        create_engine_model(engine, ModelCreate(id="m", n_features=10, **extra))
        for k in range(len(labels)):
            engine.learn("m", Batch(X[k : k + 1], labels[k : k + 1], None))
        arrays[name] = engine.repository.read("m").arrays()
    default, asked = arrays["default"], arrays["asked"]
    assert not any(name.startswith("regret:") for name in default)
    assert asked["regret:features"].shape == (300, 10)
    for name, value in default.items():
        np.testing.assert_array_equal(value, asked[name], err_msg=name)
    kept = sum(value.nbytes for value in default.values())
    assert kept < 0.75 * sum(value.nbytes for value in asked.values())


def test_zero_chunks_are_left_out_and_every_array_reads_back_bit_for_bit():
    per_chunk = CHUNK_BYTES // 8
    zeros_then_values = np.zeros(3 * per_chunk + 5)
    zeros_then_values[2 * per_chunk + 1] = 1.5
    negative_zero = np.zeros(2 * per_chunk)
    negative_zero[per_chunk + 3] = -0.0  # a zero whose bytes are not: stored
    arrays = {
        "empty_buffer": np.zeros((per_chunk, 3)),
        "partly_filled": zeros_then_values,
        "negative_zero": negative_zero,
        "counts": np.arange(2 * per_chunk, dtype=np.int64) % 3,
        "rng": np.array([0, 2**64 - 1], dtype=np.uint64),
        # labels (int8): numpy spells a one-byte dtype "|i1", and "|" separates a layout's parts
        "labels": np.array([-1, 1, 0, 1], dtype=np.int8),
        "many_labels": np.resize(np.array([-1, 1], dtype=np.int8), 3 * CHUNK_BYTES + 1),
        "small_zeros": np.zeros(4),
        "nothing": np.zeros((0, 5)),
    }
    fields, layouts = encode_fields(arrays)
    assert not any(name.startswith("empty_buffer@") for name in fields)
    assert layouts["empty_buffer"] == f"<f8|{per_chunk},3|3"
    assert layouts["labels"] == "i1|4"
    assert layouts["many_labels"] == f"i1|{3 * CHUNK_BYTES + 1}|4"
    assert [name for name in fields if name.startswith("partly_filled@")] == ["partly_filled@2"]
    assert [name for name in fields if name.startswith("negative_zero@")] == ["negative_zero@1"]
    assert "small_zeros" in fields and "nothing" in fields
    decoded = decode_fields(fields, layouts)
    assert decoded.keys() == arrays.keys()
    for name, array in arrays.items():
        assert decoded[name].dtype == array.dtype and decoded[name].shape == array.shape
        assert decoded[name].tobytes() == array.tobytes(), name
    with pytest.raises(ValueError, match="chunk 2 holds"):
        decode_fields({**fields, "partly_filled@2": b"\x01" * 8}, layouts)
    with pytest.raises(ValueError, match="chunks do not hold"):
        decode_fields(fields, {**layouts, "partly_filled": f"<f8|{3 * per_chunk + 5}|7"})
    with pytest.raises(ValueError, match="refusing"):
        decode_fields(fields, {**layouts, "partly_filled": f"O|{3 * per_chunk + 5}|4"})


def test_a_chunk_that_becomes_zero_is_deleted_by_a_delta_commit(store_kind, redis_url, data_dir):
    store = _store(store_kind, redis_url, data_dir)
    try:
        filled = np.arange(3 * (CHUNK_BYTES // 8), dtype=np.float64) + 1.0
        store.create_model("m", {"id": "m"}, {"window:scores": filled}, "inc")
        emptied = filled.copy()
        emptied[CHUNK_BYTES // 8 :] = 0.0
        assert store.commit("m", Commit(1, "inc", Entry(1.0))) == 2
        assert store.checkpoint("m", "inc", 2, {"window:scores": emptied})
        fresh = _store(store_kind, redis_url, data_dir) if store_kind != "memory" else store
        np.testing.assert_array_equal(fresh.load("m").arrays["window:scores"], emptied)
        fresh.close()
        if isinstance(store, RedisStore):
            assert store.client.hkeys(keys.state("m")) == [b"window:scores@0"]
    finally:
        store.close()


def test_redis_used_memory_of_an_empty_model_is_small(empty_redis):
    """Redis's own memory for one more empty default model (its hashes, ids, config)."""
    client = redis.Redis.from_url(empty_redis)
    store = RedisStore.from_url(empty_redis)
    engine = Engine(store)
    create_engine_model(engine, ModelCreate(id="warm", n_features=10))
    before = int(client.info("memory")["used_memory"])
    for index in range(5):
        create_engine_model(engine, ModelCreate(id=f"m{index}", n_features=10))
    per_model = (int(client.info("memory")["used_memory"]) - before) / 5
    assert per_model < 2 * EMPTY_MODEL_STORED_BYTES
    client.close()
    store.close()


def test_models_of_equal_params_hold_one_copy_of_them():
    """The cached models whose learner parameters are equal hold one dict of them (a default
    auto model's candidates' parameters: ~4 KB each), loaded or created, and learning leaves it
    as created; their configurations' sets of given fields are one set."""
    from service.engine.model import share_constants

    engine = Engine(MemoryStore(), max_cached_models=2, clock=lambda: 1e9)
    X, y = make_stream(40, n_features=4)
    try:
        for name in ("a", "b", "c"):
            create_engine_model(engine, ModelCreate(id=name, n_features=4, learner="auto"))
            engine.learn(name, Batch(X, y, None))
        create_engine_model(engine, ModelCreate(id="d", n_features=4, learner="spam"))
        created = engine.info("c").config.model_dump()["params"]
        loaded = [engine.repository.read(name).config for name in ("a", "b", "c", "d")]
        assert loaded[0].params is loaded[1].params is loaded[2].params  # "a" was reloaded
        assert loaded[0].params == created
        assert loaded[3].params is not loaded[0].params
        fields = [config.model_fields_set for config in loaded]
        assert all(given is fields[0] for given in fields)
        assert fields[0] == set(ModelConfig.model_fields)
        renamed = loaded[0].model_copy(update={"id": "e"})
        renamed.id = "f"
        assert renamed.model_fields_set is not fields[0]
        assert fields[0] == set(ModelConfig.model_fields)
    finally:
        engine.close()
    one, float_one, true = (
        ModelCreate(id=str(k), n_features=2, learner="spam", params={"eta": value})
        for k, value in enumerate((1, 1.0, True))
    )
    for config in (one, float_one, true):
        share_constants(config)  # type: ignore[arg-type]
    assert one.params is not float_one.params and float_one.params is not true.params
