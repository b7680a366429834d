"""Where one cached default model's memory goes: its committed arrays by size, the Python
allocations that outlive a model's creation by source line, and the rows that two arrays hold
bit for bit (what could be shared without changing a score).

::

    python -m loadtest.model_arrays                        # 400 events, 10 features
    python -m loadtest.model_arrays --events 3000 --top 20

One model is created, learns ``--events`` labelled events in one request and scores as many
with ids, in-process through :class:`service.engine.Engine` on a SQLite store in a temporary
directory (as ``loadtest.memory_per_model``, whose RSS per model this breaks down).  Then:

1. every array :meth:`service.engine.model.Loaded.arrays` commits, largest first (bytes, dtype,
   shape), and their total;
2. ``tracemalloc`` over ``--models`` more models (a warm-up one first, so imports and compiled
   kernels are not counted), by source line, per model: arrays and Python objects alike.  The
   engine's undo points (service/engine/undo.py: copies of the arrays of at most 16 models of
   a process) are counted here for every model, so with few models they weigh more than in the
   RSS per model of 1,000;
3. for each pair of 2-D float arrays of the learner (rows of events: buffers, reservoirs, the
   row pool), how many of the first one's non-zero rows the second holds bit for bit.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import tracemalloc

import numpy as np

from loadtest.run import machine


def _engine(data_dir: str, cache: int):
    from service.engine import Engine
    from service.stores.sqlite import SQLiteStore

    return Engine(SQLiteStore.open(data_dir, "normal"), max_cached_models=cache)


def _learner(engine, model_id: str, X: np.ndarray, y: np.ndarray, events: int) -> None:
    from service.ingest import Batch
    from service.models import create_model
    from service.schemas import ModelCreate

    create_model(engine, ModelCreate(id=model_id, n_features=X.shape[1]))
    ids = [f"{model_id}-{i}" for i in range(2 * events)]
    engine.learn(model_id, Batch(X[:events], y[:events], ids[:events]))
    engine.score(model_id, Batch(X[events:], None, ids[events:]))


def shared_rows(arrays: dict[str, np.ndarray]) -> list[tuple[str, str, int, int]]:
    """``(a, b, rows of a held bit for bit by b, non-zero rows of a)`` for each ordered pair of
    2-D float arrays with the same width (zero rows, the slots not filled yet, left out)."""
    rows = {
        name: {bytes(row.tobytes()) for row in value if row.any()}
        for name, value in arrays.items()
        if value.ndim == 2 and value.dtype.kind == "f" and value.shape[0]
    }
    widths = {name: arrays[name].shape[1] for name in rows}
    found = []
    for a, held in rows.items():
        for b, other in rows.items():
            if a != b and widths[a] == widths[b] and held:
                found.append((a, b, len(held & other), len(held)))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400, help="learned and scored")
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--models", type=int, default=10, help="traced by tracemalloc")
    parser.add_argument("--top", type=int, default=30, help="rows of each table")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2 * args.events, args.features))
    y = (X[:, 0] + rng.normal(size=len(X)) > 0).astype(np.int64)
    print(machine())
    with tempfile.TemporaryDirectory(prefix="aucstream-arrays-") as data_dir:
        engine = _engine(data_dir, args.models + 2)
        _learner(engine, "warm-up", X, y, args.events)
        loaded = engine.repository.cached("warm-up")
        arrays = loaded.arrays()
        total = sum(value.nbytes for value in arrays.values())
        print(f"\n{len(arrays)} committed arrays, {total / 1024:.1f} KB; the largest:")
        for name, value in sorted(arrays.items(), key=lambda item: -item[1].nbytes)[: args.top]:
            print(f"{value.nbytes:9,d}  {name}  {value.dtype}  {value.shape}")
        print("\nrows of one array held bit for bit by another (non-zero rows):")
        for a, b, held, of in shared_rows(dict(loaded.learner.state_)):
            print(f"  {held:5d} of {of:5d} rows of {a} in {b}")
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for index in range(args.models):
            _learner(engine, f"m{index}", X, y, args.events)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    lines = after.compare_to(before, "lineno")
    per_model = sum(line.size_diff for line in lines) / args.models
    print(f"\ntraced per model: {per_model / 1024:.1f} KB; by line (bytes, objects per model):")
    for line in lines[: args.top]:
        print(f"{line.size_diff / args.models:9,.0f} {line.count_diff / args.models:7.1f}  "
              f"{line.traceback}")  # fmt: skip


if __name__ == "__main__":
    main()
