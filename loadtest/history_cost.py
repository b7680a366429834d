"""What the metrics history costs a commit: one-event batches learned through the engine
(memory and SQLite stores), a commit every 10 ms of a fake clock (a history point every 6,000
commits), and the two parts in isolation (the clock check of a commit within a minute; the
encoding of the history's arrays that a SQLite or Redis commit adds).

Run from the repository root: ``python -m loadtest.history_cost`` (a few seconds).
"""

from __future__ import annotations

import tempfile
import timeit

import numpy as np

from service.engine import Engine
from service.engine.history import initial_history, record
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.fields import encode_fields
from service.stores.memory import MemoryStore
from service.stores.sqlite import SQLiteStore


def microseconds_per_commit(store, n_commits: int = 3000, repeats: int = 5) -> float:
    now = [1e9]
    engine = Engine(store, clock=lambda: now[0])
    create_model(engine, ModelCreate(id="m", n_features=5, learner="spam"))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_commits + 200, 5))
    y = np.where(rng.random(n_commits + 200) < 0.3, 1, -1)
    for i in range(200):  # warm: kernels, caches
        engine.learn("m", Batch(X[i : i + 1], y[i : i + 1], None))
    per_repeat = n_commits // repeats
    best = []
    for repeat in range(repeats):
        start = 200 + repeat * per_repeat
        began = timeit.default_timer()
        for i in range(start, start + per_repeat):
            now[0] += 0.01
            engine.learn("m", Batch(X[i : i + 1], y[i : i + 1], None))
        best.append((timeit.default_timer() - began) / per_repeat)
    return 1e6 * min(best)


def main() -> None:
    print(f"memory store: {microseconds_per_commit(MemoryStore()):.0f} us per commit")
    with tempfile.TemporaryDirectory() as directory:
        sqlite = SQLiteStore.open(directory)
        print(f"SQLite store: {microseconds_per_commit(sqlite):.0f} us per commit")
    history = initial_history()
    history["minute"][:720] = np.random.default_rng(1).random((720, 7))
    history["hour"][:372] = np.random.default_rng(2).random((372, 7))
    history["points"][:] = [720, 372]
    history["minute"][719, 0] = 1e9
    n = 100_000
    seconds = timeit.timeit(lambda: record(history, None, 1e9 + 10), number=n) / n
    print(f"the clock check of a commit within a minute: {1e6 * seconds:.2f} us")
    arrays = {"history:" + name: array for name, array in history.items()}
    n = 2000
    seconds = timeit.timeit(lambda: encode_fields(arrays), number=n) / n
    print(f"encoding the half-full history (SQLite and Redis commits): {1e6 * seconds:.1f} us")


if __name__ == "__main__":
    main()
