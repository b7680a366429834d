"""The SQLite store's log (schema 6): a model's entries are found by their chain (each entry
names the one before it, the head names the last), not by an index by model, and a
transaction of a pass (``commit_many``) writes every model's entry or, for a model it refuses,
nothing of that model."""

from __future__ import annotations

import contextlib
import sqlite3

import numpy as np
import pytest

from service.engine.entries import encode
from service.errors import ModelNotFound, StaleVersion
from service.stores.base import Commit
from service.stores.sqlite import SQLiteStore
from tests.service.log_helpers import distinct_entry


def _encoded(entries) -> list[tuple[int, bytes]]:
    return [(version, encode(entry)) for version, entry in entries]


def test_a_models_entries_are_its_chain_through_checkpoints_reused_seqs_and_deletes(tmp_path):
    """Entries of three models interleaved: each model's load behind its head reads its own
    entries after the version asked, in order; a checkpoint drops only the entries it covers
    (the log's highest ``seq`` among them, which SQLite then gives to the next entry); a
    deleted model's entries go and a model created again under its id starts a chain of its
    own."""
    store = SQLiteStore.open(tmp_path)
    models = ["a", "b", "c"]
    for model_id in models:
        store.create_model(model_id, {}, {"w": np.zeros(2)}, "inc")
    written: dict[str, list[tuple[int, bytes]]] = {model_id: [] for model_id in models}
    serial = 0

    def append(model_id: str) -> None:
        nonlocal serial
        version = store.heads([model_id])[model_id][0]
        entry = distinct_entry(serial)
        serial += 1
        assert store.commit(model_id, Commit(version, "inc", entry=entry)) == version + 1
        written[model_id].append((version + 1, encode(entry)))

    def check(model_id: str) -> None:
        stored = store.load(model_id)
        assert _encoded(stored.entries) == [e for e in written[model_id] if e[0] > stored.saved]
        for after in range(stored.saved, stored.version + 1):  # a cache behind by any number
            behind = store.load(model_id, after, "inc")
            expected = [e for e in written[model_id] if e[0] > after]
            assert _encoded(behind.entries or []) == expected

    for k in range(12):
        append(models[k % 3] if k % 4 else "b")
    for model_id in models:
        check(model_id)

    head = store.heads(["a"])["a"][0]
    assert store.checkpoint("a", "inc", head - 2, {"w": np.ones(2)})  # two entries left
    check("a")
    for model_id in ("b", "c"):
        check(model_id)

    # the last entry written is c's, the one before a's: a checkpoint of c at its head drops
    # the highest seq, which the next entry (b's) is given; c's chain and b's stay apart
    append("a")
    append("c")
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        highest = db.execute("SELECT MAX(seq) FROM log").fetchone()[0]
    assert store.checkpoint("c", "inc", store.heads(["c"])["c"][0], {"w": np.ones(2)})
    append("b")
    append("c")
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        assert db.execute("SELECT model_id FROM log WHERE seq = ?", (highest,)).fetchone() == ("b",)
    for model_id in models:
        check(model_id)

    store.delete_model("b")
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        assert db.execute("SELECT COUNT(*) FROM log WHERE model_id = 'b'").fetchone() == (0,)
    store.create_model("b", {}, {"w": np.zeros(2)}, "inc")
    written["b"] = []
    append("b")
    for model_id in models:
        check(model_id)
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        counts = dict(db.execute("SELECT model_id, COUNT(*) FROM log GROUP BY model_id"))
    saved = {model_id: store.load(model_id).saved for model_id in models}
    assert counts == {
        model_id: len([e for e in written[model_id] if e[0] > saved[model_id]])
        for model_id in models
        if any(e[0] > saved[model_id] for e in written[model_id])
    }


def test_a_pass_commits_every_model_and_a_refused_model_changes_nothing(tmp_path):
    """``commit_many`` of five models, one stale and one gone: the three others are written
    (their heads, entries and ids), the refused ones answer their error and keep their head,
    their chain and their ids as they were."""
    store = SQLiteStore.open(tmp_path)
    models = ["m0", "m1", "m2", "stale", "gone"]
    for model_id in models:
        store.create_model(model_id, {}, {"w": np.zeros(2)}, "inc")
    first = distinct_entry(0)
    remembered = {"id_expiry": 100.0, "now": 1.0}
    assert store.commit("stale", Commit(1, "inc", entry=first, learned_ids=["s0"], **remembered))

    store.delete_model("gone")
    commits = [
        (
            model_id,
            Commit(
                1, "inc", entry=distinct_entry(k + 1), learned_ids=[f"{model_id}-e"], **remembered
            ),
        )
        for k, model_id in enumerate(models)
    ]
    outcomes = store.commit_many(commits)
    assert outcomes[:3] == [2, 2, 2]
    assert isinstance(outcomes[3], StaleVersion) and isinstance(outcomes[4], ModelNotFound)
    for k, model_id in enumerate(models[:3]):
        stored = store.load(model_id)
        assert stored.version == 2
        assert _encoded(stored.entries) == [(2, encode(distinct_entry(k + 1)))]
        assert store.seen(model_id, [f"{model_id}-e"], 2.0).tolist() == [True]
    stale = store.load("stale")
    assert stale.version == 2 and _encoded(stale.entries) == [(2, encode(first))]
    assert store.seen("stale", ["s0", "stale-e"], 2.0).tolist() == [True, False]
    with pytest.raises(ModelNotFound):
        store.load("gone")
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        assert db.execute("SELECT COUNT(*) FROM log").fetchone() == (4,)
