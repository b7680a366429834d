"""What the engine costs around the learner for one event: one-event batches (fresh ids)
learned through ``Engine.learn`` on the defaults (SQLite store, learner ``auto``, 20
features, a warmed model), thread CPU per call, checkouts alternated in one run; and the
digest of what a stream learned, to show two checkouts learn the same bits.

    python -m loadtest.engine_one_event --peer before=/work/wt/B --peer after=. --rounds 4
    python -m loadtest.engine_one_event --peer before=/work/wt/B --peer after=. --digest
    python -m loadtest.engine_one_event --peer base=CHECKOUT --peer after=. --via pass
    python -m loadtest.engine_one_event --peer before=/work/wt/B --peer after=. --via pass \
        --part service.engine.learning:after_learning

Each peer runs in a child process importing its checkout (``PYTHONPATH``).  A round warms a
fresh model with ``--warm`` events, then learns ``--events`` one at a time (``--via``: see
:func:`_learner`); CPU is the calling thread's user + system time (``RUSAGE_THREAD``: the
fsync's kernel time is in it, the checkpoint thread's work is not).  ``--part`` times only
the calls of one function or method (``module:attribute``, as above or
``service.engine.passes:Pass.write``) made while learning the ``--events``, per event.
``--digest`` prints the sha256 of the served scores, of the committed state's arrays and of
the metrics document after a stream of ``--events`` on two models (:func:`digest`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

N_FEATURES = 20


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _stream(n_events: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_events, N_FEATURES))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=n_events) > 1.6, 1, -1)
    return X, y


def _engine(directory: str):
    from service.engine import Engine
    from service.models import create_model
    from service.schemas import ModelCreate
    from service.stores.sqlite import SQLiteStore

    now = [1.7e9]

    def clock() -> float:
        now[0] += 0.001
        return now[0]

    engine = Engine(SQLiteStore.open(directory), clock=clock)
    create_model(engine, ModelCreate(id="m", n_features=N_FEATURES))
    return engine


def _learner(engine, via: str):
    """``learn(batch)`` as ``via`` says: ``engine`` (``Engine.learn``, a write alone) or
    ``pass`` (a pass of one group, as the service's coalescer applies an idle model's
    request on SQLite: the head and ids read for the pass, then the write)."""
    if via == "engine":
        return lambda batch: engine.learn("m", batch)
    from service.engine.passes import learn_pass

    def learn(batch):
        outcomes = learn_pass(engine, [("m", [(batch, False)])])[0]
        if outcomes is None:  # left to apply alone (as the coalescer then does)
            outcomes = [engine.learn("m", batch)]
        if isinstance(outcomes[0], Exception):
            raise outcomes[0]

    return learn


def _timed(part: str) -> list[int]:
    """Wrap ``part`` (``module:attribute``, the attribute maybe a class's method) so that its
    calls add their thread CPU (ns) to the returned one-item list."""
    module_name, _, path = part.partition(":")
    owner = importlib.import_module(module_name)
    *outer, name = path.split(".")
    for attribute in outer:
        owner = getattr(owner, attribute)
    original = getattr(owner, name)
    spent = [0]

    def timed(*args, **kwargs):
        begun = time.thread_time_ns()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.thread_time_ns() - begun

    setattr(owner, name, timed)
    return spent


def measure(warm: int, events: int, via: str, part: str | None) -> None:
    """Child: microseconds of thread CPU per one-event learning call after ``warm`` (of the
    calls of ``part`` only, when given)."""
    from service.ingest import Batch

    X, y = _stream(warm + events, seed=1)
    with tempfile.TemporaryDirectory() as directory:
        engine = _engine(directory)
        learn = _learner(engine, via)
        for i in range(warm):
            learn(Batch(X[i : i + 1], y[i : i + 1], [f"w{i}"]))
        spent = _timed(part) if part else None
        cpu, wall = _thread_cpu(), time.perf_counter()
        for i in range(warm, warm + events):
            learn(Batch(X[i : i + 1], y[i : i + 1], [f"e{i}"]))
        cpu = (_thread_cpu() - cpu) / events * 1e6
        wall = (time.perf_counter() - wall) / events * 1e6
        if spent is not None:
            cpu = spent[0] / events / 1e3
        engine.close()
    print(f"{cpu:.2f} {wall:.1f}")


def _digest_stream(engine, model_id: str, X, y, zero_one: bool) -> str:
    """Learn ``(X, y)`` on ``model_id`` in one-event batches (every 97th of seven events with
    duplicate ids; ``zero_one``: every fifth batch's labels given as 0 / 1); the sha256 of
    the served scores, of the committed state's arrays and of the metrics document."""
    from service.ingest import Batch

    scores, state, metrics = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    i = batches = 0
    while i < len(y):
        size = 1 if i % 97 else 7
        ids = [f"e{k}" for k in range(i, i + size)]
        if size > 1 and i:  # an id learned before and one repeated: both skipped
            ids[0], ids[2] = f"e{i - 1}", ids[1]
        labels = y[i : i + size]
        if zero_one and batches % 5 == 0:
            labels = (labels > 0).astype(np.int64)
        result = engine.learn(model_id, Batch(X[i : i + size], labels, ids), want_scores=True)
        scores.update(np.ascontiguousarray(result.scores).tobytes())
        scores.update(repr(result.duplicate_ids).encode())
        i += size
        batches += 1
    _, version, arrays = engine.state_arrays(model_id)
    for name in sorted(arrays):
        state.update(name.encode())
        state.update(np.ascontiguousarray(arrays[name]).tobytes())
    document = engine.metrics(model_id)
    document.pop("fits", None)  # the fits' wall seconds
    if document.get("regret"):
        document["regret"].pop("solve_seconds")  # the hindsight solve's wall seconds
    metrics.update(repr(sorted(document.items())).encode())
    return (
        f"scores {scores.hexdigest()[:16]} state {state.hexdigest()[:16]} "
        f"metrics {metrics.hexdigest()[:16]} version {version}"
    )


def digest(events: int) -> None:
    """Child: :func:`_digest_stream` of a default model, then of a ``spam`` model with a
    small window (50 events, reservoirs of 20: both past their capacity) and
    ``on_drift="reset"`` on a stream whose concept flips after a third (a drift detected, the
    learner and calibrator restarted), some labels 0 / 1; with a fixed clock."""
    from service.models import create_model
    from service.schemas import ModelCreate

    X, y = _stream(events, seed=2)
    flipped = np.where(np.arange(events) < events // 3, y, -y)
    with tempfile.TemporaryDirectory() as directory:
        engine = _engine(directory)
        default = _digest_stream(engine, "m", X, y, zero_one=False)
        small = dict(learner="spam", window=50, reservoir=20, on_drift="reset")
        create_model(engine, ModelCreate(id="d", n_features=N_FEATURES, **small))
        drifting = _digest_stream(engine, "d", X, flipped, zero_one=True)
        drifts = engine.metrics("d")["drift"]["detected"]
        engine.close()
    print(f"{default} | small window, drifts: {drifting} drifts {drifts}")


def _child(path: str, args: list[str]) -> str:
    environment = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, os.path.abspath(__file__), *args]
    done = subprocess.run(command, cwd=path, env=environment, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="name=checkout")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warm", type=int, default=600)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--via", choices=["engine", "pass"], default="engine")
    parser.add_argument("--part", help="module:function whose calls alone are timed")
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--child", choices=["measure", "digest"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "measure":
        return measure(args.warm, args.events, args.via, args.part)
    if args.child == "digest":
        return digest(args.events)
    peers = dict(peer.split("=", 1) for peer in args.peer)
    print("load average at start:", open("/proc/loadavg").read().strip())
    if args.digest:
        for name, path in peers.items():
            print(f"{name:<8} {_child(path, ['--child', 'digest', '--events', str(args.events)])}")
        return
    cpu: dict[str, list[float]] = {name: [] for name in peers}
    for round_number in range(args.rounds):
        for name, path in peers.items():
            part = ["--part", args.part] if args.part else []
            line = _child(
                path,
                ["--child", "measure", "--via", args.via, "--warm", str(args.warm)]
                + ["--events", str(args.events), *part],
            )
            cpu_us, wall_us = (float(value) for value in line.split())
            cpu[name].append(cpu_us)
            print(f"round {round_number}  {name:<8} CPU {cpu_us:7.2f} us  wall {wall_us:7.1f} us")
    for name, values in cpu.items():
        print(f"{name:<8} median CPU {statistics.median(values):7.2f} us per event")
    if len(peers) == 2:
        first, second = (statistics.median(values) for values in cpu.values())
        print(f"ratio {second / first:.3f}")
    print("load average at end:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
