"""Recovery from the log: how much CPU a process needs to rebuild a model whose log holds
``--events`` one-event entries after its checkpoint (what a restart after ``kill -9`` finds when
no checkpoint was written since), on the SQLite store.

    python -m loadtest.recovery --events 100000

The entries are appended to the store as a server appends them: each event learned by the
live model and its entry committed (one ``Commit`` per event, ``synchronous=normal`` to build
the log quickly: the log's content is the same), so the entries carry the boosted fits their
learner calls installed (core/logged_fits.py).  Then a fresh process loads the model:
checkpoint + replay (consecutive learn entries share one learner call when the model's regret
window is off; with it on, only the entries of its last window are their own calls), the
logged fits installed from their arrays, not fitted again.  Prints the replay's CPU seconds
(user + system of that process, JIT compile excluded: the kernels are compiled first on a
model of their own) and the wall time, and apart the CPU of the background fitter's process
(a fit still pending at the end of the log is left to it, as in the server).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from core.boosted_fits import FIT_STATS
from core.validation import as_labels
from service.engine import Engine
from service.engine.entries import Entry
from service.engine.learning import apply
from service.engine.refit import Refitter
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.sqlite import SQLiteStore


def build(data_dir: str, events: int, features: int, regret_window: int | None) -> None:
    store = SQLiteStore.open(data_dir, synchronous="normal")
    engine = Engine(store, checkpoint_events=10**9, checkpoint_seconds=1e9)
    create_model(engine, ModelCreate(id="m", n_features=features, regret_window=regret_window))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(events, features))
    y = as_labels(rng.random(events) < 0.3)
    repository = engine.repository
    loaded, now = repository.load("m"), 1.8e9
    for k in range(events):  # what Learning.learn does with one event (no ids)
        now += 0.001
        entry = Entry(now, X[k : k + 1], y[k : k + 1])
        apply(loaded, entry)
        repository.commit("m", loaded, entry)
    store.close()


def recover(data_dir: str, features: int) -> None:
    warm = Engine(SQLiteStore.open(tempfile.mkdtemp()))
    create_model(warm, ModelCreate(id="w", n_features=features))
    rng = np.random.default_rng(1)
    warm.learn("w", Batch(rng.normal(size=(64, features)), as_labels(rng.random(64) < 0.3), None))
    store = SQLiteStore.open(data_dir)
    before, wall = os.times(), time.perf_counter()
    refitter = Refitter()  # as in the server: due fits are handed to its background fitter
    refitter.start()
    try:
        info = Engine(store).info("m")
    finally:
        refitter.stop()
    after, wall = os.times(), time.perf_counter() - wall
    cpu = (after.user - before.user) + (after.system - before.system)
    # the background fitter's child process, joined by refitter.stop()
    fitter = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    print(
        f"replayed {info.counts.events_learned:,} events: cpu {cpu:.2f} s "
        f"(+ {fitter:.2f} s in the fitter's process), wall {wall:.2f} s; "
        f"{FIT_STATS.installed} boosted fits installed, {FIT_STATS.from_log} from the log, "
        f"{FIT_STATS.in_call} computed by the replay in {FIT_STATS.fit_seconds:.2f} s of wall "
        "time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument(
        "--regret-window",
        type=int,
        default=None,
        help="the model's regret window (default: the model's default; 0: off, so that the "
        "replay merges consecutive entries into one learner call)",
    )
    parser.add_argument("--recover", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.recover:
        recover(args.recover, args.features)
        return
    data_dir = tempfile.mkdtemp(prefix="aucstream-recovery-")
    started = time.perf_counter()
    build(data_dir, args.events, args.features, args.regret_window)
    print(f"log of {args.events:,} entries built in {time.perf_counter() - started:.0f} s")
    print("load average:", os.getloadavg())
    command = [sys.executable, "-m", "loadtest.recovery", "--recover", data_dir]
    subprocess.run([*command, "--features", str(args.features)], check=True)
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
