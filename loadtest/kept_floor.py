"""What a kept ``/score`` costs beyond an unkept one, taken apart in process (issue 36's
≤ 0.2 ms target): the coalescer's ``score`` of one event on the defaults (SQLite, ``auto``, 20
features, a model warmed by ``--warm`` events), process CPU per request, on uvloop.

    PYTHONPATH=. python -m loadtest.kept_floor --requests 1000 --rounds 2

Phases, each ``--requests`` one-event requests back to back, alternated in each round:

``kept``           an event with an id, as served (``synchronous=full``: its record synced)
``kept normal``    the same on a second store with ``synchronous=normal`` (no sync)
``unkept``         an event without an id (scored on the loop, nothing written)
``unkept+idle``    the same, then the loop idles as long as a kept request waits for its
                   sync (``asyncio.sleep`` of the last ``kept`` round's wall time a request):
                   what a request costs after the process slept, on this host at this load
``unkept+hop``     the same idle spent in the coalescer's thread (the hop and back)
``unkept+sync``    the thread appends 4 KB to a file beside the database and ``fdatasync``\\ s it
                   (one WAL commit's bytes and sync, without SQLite)

and, in a thread of its own, ``fdatasync`` alone: thread CPU of one 4 KB append and its sync
(the kernel's share of a durable answer, which no code of the service can take away).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time

import numpy as np
import uvloop

from service.engine import Engine
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.sqlite import SQLiteStore

FEATURES = 20
#: the bytes of one kept record's commit: four WAL frames of a 1 KB page and their headers
COMMIT_BYTES = 4 * (1024 + 24)
#: slots of the probe file cycled through (preallocated and synced first: overwritten, as a
#: WAL is once it wrapped)
SLOTS = 1000


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _warmed_engine(directory: str, synchronous: str, warm: int) -> Engine:
    engine = Engine(SQLiteStore.open(directory, synchronous))  # type: ignore[arg-type]
    create_model(engine, ModelCreate(id="m", n_features=FEATURES))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(warm, FEATURES))
    y = np.where(X[:, 0] > 1.0, 1, -1)
    for start in range(0, warm, 500):
        ids: list[str | None] = [f"w{j}" for j in range(start, min(start + 500, warm))]
        engine.learn("m", Batch(X[start : start + 500], y[start : start + 500], ids))
    return engine


class Probe:
    """A preallocated file beside the database: one commit's bytes written and synced."""

    def __init__(self, directory: str) -> None:
        self.descriptor = os.open(os.path.join(directory, "probe.bin"), os.O_RDWR | os.O_CREAT)
        os.pwrite(self.descriptor, bytes(COMMIT_BYTES * SLOTS), 0)
        os.fsync(self.descriptor)
        self.payload = os.urandom(COMMIT_BYTES)
        self.writes = 0

    def append(self) -> None:
        self.writes += 1
        os.pwrite(self.descriptor, self.payload, (self.writes % SLOTS) * COMMIT_BYTES)
        os.fdatasync(self.descriptor)

    def thread_cpu_per_sync(self, count: int) -> float:
        """Thread CPU (s) of one :meth:`append`, over ``count`` of them."""
        start = time.thread_time()
        for _ in range(count):
            self.append()
        return (time.thread_time() - start) / count


async def _phase(name: str, engines: dict[str, Engine], probe: Probe, idle: float, n: int):
    """(process CPU, wall) per request of ``n`` requests of phase ``name``."""
    engine = engines["normal" if name == "kept normal" else "full"]
    coalesce = engine.coalesce
    x = np.round(np.random.default_rng(1).normal(size=(1, FEATURES)), 4)
    kept = name.startswith("kept")
    pool = coalesce._pool()
    cpu, wall = _process_cpu(), time.perf_counter()
    for k in range(n):
        ids: list[str | None] | None = [f"{name}-{k}-{wall}"] if kept else None
        await coalesce.score("m", Batch(x, None, ids))
        if name == "unkept+idle":
            await asyncio.sleep(idle)
        elif name == "unkept+hop":
            await pool.submit(time.sleep, idle)
        elif name == "unkept+sync":
            await pool.submit(probe.append)
    return (_process_cpu() - cpu) / n, (time.perf_counter() - wall) / n


PHASES = ("kept", "kept normal", "unkept", "unkept+idle", "unkept+hop", "unkept+sync")


async def _rounds(args: argparse.Namespace, engines: dict[str, Engine], probe: Probe):
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in PHASES}
    for name in PHASES:  # first use of each path (threads, statements) out of the figures
        await _phase(name, engines, probe, 0.001, 50)
    idle = 0.004
    for round_number in range(args.rounds):
        for name in PHASES if round_number % 2 == 0 else PHASES[::-1]:
            cpu, wall = await _phase(name, engines, probe, idle, args.requests)
            if name == "kept":
                idle = wall
            figures[name].append((cpu, wall))
            print(f"  {name:>12}: cpu {cpu * 1e3:.3f} ms, wall {wall * 1e3:.3f} ms", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm", type=int, default=4000, help="events learned first")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="aucstream-kept-floor-")
    engines = {
        synchronous: _warmed_engine(os.path.join(directory, synchronous), synchronous, args.warm)
        for synchronous in ("full", "normal")
    }
    probe = Probe(directory)
    print("load average at start:", open("/proc/loadavg").read().strip(), flush=True)
    try:
        figures = uvloop.run(_rounds(args, engines, probe))
        alone = [probe.thread_cpu_per_sync(args.requests) for _ in range(args.rounds)]
    finally:
        for engine in engines.values():
            engine.close()
    print("load average at end:", open("/proc/loadavg").read().strip())
    print("\n| phase | process CPU per request (median) | wall per request |\n|---|---:|---:|")
    for name, values in figures.items():
        cpu = statistics.median(value[0] for value in values)
        wall = statistics.median(value[1] for value in values)
        print(f"| {name} | {cpu * 1e3:.3f} ms | {wall * 1e3:.3f} ms |")
    alone_ms = statistics.median(alone) * 1e3
    print(f"| 4 KB append + `fdatasync` alone (thread CPU) | {alone_ms:.3f} ms | |")


if __name__ == "__main__":
    main()
