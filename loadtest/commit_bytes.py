"""What a commit writes per event on the SQLite store, by group size.

    python -m loadtest.commit_bytes [--features 20] [--groups 1,8,64]

In-process, through the engine's group calls (``service.engine.coalesce`` makes these groups
of concurrent one-event requests): a default model (learner ``auto``, regret window on) learns
groups of one-event requests with fresh ids, and ``/score`` keeps groups of one-event records.
Per event it prints the state bytes the commit sends (the chunks that changed, see
``service.stores.fields``) and the bytes the WAL grew by (every page the transaction wrote,
what is synced to the disk), with the WAL's automatic checkpoint off during the measurement.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from service.engine import Engine
from service.engine.delayed import ScoreRequest
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.sqlite import SQLiteStore


def measure(features: int, group: int, rounds: int) -> dict[str, float]:
    store = SQLiteStore.open(tempfile.mkdtemp(prefix="aucstream-bytes-"))
    engine = Engine(store)
    create_model(engine, ModelCreate(id="m", n_features=features))
    rng = np.random.default_rng(0)
    sent = 0
    written = store._write_fields

    def counting(db, model_id, fields, layouts):
        nonlocal sent
        sent += sum(len(data) for data in fields.values())
        written(db, model_id, fields, layouts)

    store._write_fields = counting  # type: ignore[method-assign]
    store.database.connection().execute("PRAGMA wal_autocheckpoint=0")
    wal = f"{store.path}-wal"
    serial = 0

    def batches(labelled: bool) -> list[Batch]:
        nonlocal serial
        out = []
        for _ in range(group):
            serial += 1
            y = np.array([1 if serial % 7 == 0 else -1]) if labelled else None
            out.append(Batch(rng.normal(size=(1, features)), y, [f"e{serial}"]))
        return out

    for _ in range(20):  # the first commits write the windows' first chunks
        engine.learning.learn_group("m", batches(True), [False] * group)
    figures = {}
    for kind in ("events", "score"):
        store.database.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sent, before = 0, os.path.getsize(wal)
        for _ in range(rounds):
            if kind == "events":
                engine.learning.learn_group("m", batches(True), [False] * group)
            else:
                requests = [ScoreRequest(b) for b in batches(False)]
                engine.delayed.score_group("m", requests)
        events = rounds * group
        figures[f"{kind}_state"] = sent / events
        figures[f"{kind}_wal"] = (os.path.getsize(wal) - before) / events
    store.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--groups", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    print("group  /events: state B/event  WAL B/event   /score: state B/event  WAL B/event")
    for group in (int(part) for part in args.groups.split(",")):
        f = measure(args.features, group, args.rounds)
        print(
            f"{group:5d}  {f['events_state']:22,.0f}  {f['events_wal']:11,.0f}"
            f"  {f['score_state']:22,.0f}  {f['score_wal']:11,.0f}"
        )


if __name__ == "__main__":
    main()
