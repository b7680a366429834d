"""The replay of a log whose entries the regret window still holds: CPU per replay, in process.

    PYTHONPATH=. python bench/replay_window.py [--learner auto] [--entries 1000] [--repeats 5]

A default model of ``--learner`` (20 features, regret window 1,000) on the memory store learns
``--entries`` one-event requests; its log (every entry in the window: each round's served
weights and rows recorded) is then replayed on the model as created (``service.engine.replay``,
no store read, no decoding), ``--repeats`` times; prints the thread CPU of the replay, min and
median.  Run it in each checkout to compare (``PYTHONPATH=<checkout>``, from that checkout).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from core.validation import as_labels
from service.engine import Engine
from service.engine.model import from_store
from service.engine.replay import replay
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="auto")
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    engine = Engine(MemoryStore(), checkpoint_events=10**9, checkpoint_seconds=1e9)
    config = ModelCreate(id="m", n_features=20, learner=args.learner, regret_window=1000)
    create_model(engine, config)
    rng = np.random.default_rng(0)
    for _ in range(args.entries):
        engine.learn("m", Batch(rng.normal(size=(1, 20)), as_labels(rng.random(1) < 0.3), None))
    stored = engine.store.load("m")
    seconds = []
    for _ in range(args.repeats):
        loaded = from_store(stored)
        loaded.version = stored.saved or stored.version
        started = time.thread_time()
        replay(loaded, stored.entries)
        seconds.append(time.thread_time() - started)
    print(
        f"{args.learner}, {args.entries} entries: replay CPU min {min(seconds) * 1e3:.1f} ms, "
        f"median {statistics.median(seconds) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
