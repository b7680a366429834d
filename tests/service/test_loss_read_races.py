"""The SQLite store's lost-data check against a read that another thread of the process
overtakes: a read of a model's head (a pass's ``head_and_seen`` or ``heads``, taken without
the model's lock; a ``load`` or ``head_now``) finds version V, then, before it checks V
against the versions this process saw, another thread commits V + 1 (a background history
point, a group applied alone) or reads the V + 1 another process wrote.  V is older than what
the process has seen by then, but not older than what it had seen when the read began: no
loss.  It was taken for one, and the model answered 503 "went back in time" until an operator
acknowledged it (two processes on one file, CI).  A version older than one seen before the
read began is still a loss.

The overtaking commit is injected between the read and its check (wrapping the check), the
one place a thread switch makes the race; the commit itself is the store's own."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from service.errors import StoreLostData
from service.stores.base import Commit
from service.stores.sqlite import SQLiteStore
from tests.service.log_helpers import distinct_entry


def _overtaken(store: SQLiteStore, monkeypatch) -> list[int]:
    """Make the next check of a version read wait for another thread's commit of the model's
    next version (recorded as seen by that commit); returns the versions the check was given."""
    check = store.loss.saw
    given: list[int] = []

    def overtaken_check(model_id, incarnation, version, *args, **kwargs):
        if not given:
            given.append(version)
            commit = Commit(version, incarnation, entry=distinct_entry(version))
            writer = threading.Thread(target=store.commit, args=(model_id, commit))
            writer.start()
            writer.join()
        return check(model_id, incarnation, version, *args, **kwargs)

    monkeypatch.setattr(store.loss, "saw", overtaken_check)
    return given


READS = {
    "head_and_seen": lambda store: store.head_and_seen("m", ["e"], time.time())[0],
    "heads": lambda store: store.heads(["m", "other"])["m"],
    "load behind": lambda store: (store.load("m", 0, "inc").version, "inc"),
    "load": lambda store: (store.load("m").version, "inc"),
}


@pytest.mark.parametrize("read", READS)
def test_a_read_overtaken_by_a_commit_of_this_process_is_no_loss(tmp_path, monkeypatch, read):
    store = SQLiteStore.open(tmp_path)
    try:
        for model_id in ("m", "other"):
            store.create_model(model_id, {}, {"w": np.zeros(2)}, "inc")
        given = _overtaken(store, monkeypatch)
        assert READS[read](store) == (1, "inc")  # what the read found, before the commit
        assert given == [1]
        assert store.watch.seen("m") == ("inc", 2)  # the highest seen stays the commit's
        assert store.head_now("m") == (2, "inc")  # the commit is there, and no alarm
        assert store.alarms() == {}
        monkeypatch.undo()
        assert store.load("m").version == 2
    finally:
        store.close()


def test_a_version_older_than_one_seen_before_the_read_is_still_a_loss(tmp_path):
    """The file's model goes back from version 3 to 2 between two reads (as a restored copy
    of the file would show): the second read raises the model's alarm."""
    store = SQLiteStore.open(tmp_path)
    try:
        store.create_model("m", {}, {"w": np.zeros(2)}, "inc")
        for version in (1, 2):
            store.commit("m", Commit(version, "inc", entry=distinct_entry(version)))
        assert store.head_and_seen("m", [], time.time())[0] == (3, "inc")
        with store.database.write() as db:  # the file loses the last version
            db.execute("UPDATE models SET version = 2 WHERE id = 'm'")
        with pytest.raises(StoreLostData, match="went back in time"):
            store.head_and_seen("m", [], time.time())
        assert "model:m" in store.alarms()
        # nor does the model take kept /score records, by either write of them
        record, deadline = {"e": b"record"}, time.time() + 60
        with pytest.raises(StoreLostData):
            store.put_pending("m", record, deadline, incarnation="inc")
        with pytest.raises(StoreLostData):
            store.put_pending_at("m", (2, "inc"), record, deadline)
        with store.database.snapshot() as db:
            assert db.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)
    finally:
        store.close()
