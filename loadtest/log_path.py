"""The acknowledged event's cost on the log path (issue 36): server CPU per one-event request
from 1, 8 and 64 clients, spread round-robin over many models, and a kept ``/score``, for two
checkouts alternated in one run, with the Vowpal Wabbit daemon (one example per round trip) in
the same run.

    python -m loadtest.log_path --peer before=/work/main --peer after=.

Each checkout is served by one uvicorn process on the default SQLite store
(``synchronous=full``, a fresh directory) with default models of ``--features`` features
(``auto``), the measured one warmed by ``--warm-events`` events (8,000) and a second of
traffic, once the server's background warm-up has loaded every kernel group (so that no
phase counts it); phases (closed loops, keep-alive connections):

``events@C``   one labelled event with a fresh id per ``POST /events`` from C clients
``one@C``      the same, C clients (each of ``--spread-clients``, 16), one model: the
               reference of the next phase
``spread@C``   the same, round-robin over ``--models`` fresh models (200)
``spreadM@C``  with ``--models M N ...``: round-robin over the first M of the models, for each M
               (each model first fed ``--spread-warm`` events, 50, in one request: past the
               costs of a model's first learner calls, which one round of 1,000 models is
               mostly made of, and short of the boosted candidates' first fit at 250; fed
               only when a spread phase runs: their checkpoints, a minute later, would
               otherwise land in the phases measured then)
``score@1``    one event with an id (kept for a label) per ``POST /score``, one client
``unkept@1``   one event without an id (nothing kept, nothing written) per ``POST /score``
``healthz@C``  ``GET /healthz`` (the HTTP floor) from C clients

``--checkpoint-seconds S`` sets the servers' ``AUCSTREAM_CHECKPOINT_SECONDS``: with the default
(60) the warmed spread models are all checkpointed about a minute after the warm-up, a burst of
seconds of CPU that lands in whichever phase runs then.  ``--store memory`` serves each
checkout on the memory store and ``--learner spam`` creates every model with that learner (the
default: ``auto``).  ``--workers N`` serves each checkout with N uvicorn workers on one SQLite
file (contention: the workers' appends to one hot model, and to many); ``--redis`` serves each
checkout on its own ``redis-server`` (AOF with ``appendfsync always``) and prints that server's
CPU per request too (``<phase> redis``); ``--phases`` runs only the ones named; ``--split`` prints
each phase's CPU by process and thread and the boosted fits it saw (loadtest/cpu_split.py).
``--rows N`` sends N distinct random rows in turn instead of one repeated ``x``: with one row
the boosted buffer fills with it after the warm-up and its fits get cheap.

VW: ``vw --daemon`` through pylibvw (loadtest/vw_peer.py), one example line per round trip on
one connection.  Server CPU is user + system of the server's process tree (``/proc``), so the
clients' CPU is never counted.  Prints one line per peer, phase and round, the medians, and the
load average at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import httpx
import numpy as np

from loadtest.cpu_split import COUNTERS, FIT_STAGES, fit_counters, split_cpu, tree_threads
from loadtest.local import PrivateRedis, create_model, wait_ready
from loadtest.one_event import MODEL, Peer, _closed_loop, _event_request
from loadtest.peer_processes import tree_cpu_seconds, vw_daemon


async def _vw_round_trips(port: int, seconds: float, line: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answered = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        writer.write(line)
        await reader.readline()
        answered += 1
    writer.close()
    return answered


def _events(peer: Peer, x: list[float], models: list[str], rows: list[list[float]] | None = None):
    """One event per request; with ``rows``, the next of them in turn (the label from the
    row: about 15 % positives), else ``x`` each time (every seventh one positive)."""
    host = f"127.0.0.1:{peer.port}"
    paths = [f"/v1/models/{model}/events" for model in models]

    def make(client: int, n: int) -> bytes:
        peer.sent += 1
        if rows:
            row = rows[peer.sent % len(rows)]
            event = {"id": f"e{peer.sent}", "x": row, "y": 1 if row[0] + row[1] > 1.47 else -1}
        else:
            event = {"id": f"e{peer.sent}", "x": x, "y": 1 if peer.sent % 7 == 0 else -1}
        return _event_request(host, paths[peer.sent % len(paths)], event)

    return make


def _score(peer: Peer, x: list[float], kept: bool = True):
    host, path = f"127.0.0.1:{peer.port}", f"/v1/models/{MODEL}/score"

    def make(client: int, n: int) -> bytes:
        peer.sent += 1
        event = {"id": f"s{peer.sent}", "x": x} if kept else {"x": x}
        return _event_request(host, path, event)

    return make


class WorkersPeer(Peer):
    """A checkout served by ``workers`` uvicorn worker processes on one SQLite file."""

    def __init__(self, name: str, path: Path, features: int, workers: int) -> None:
        settings = {"AUCSTREAM_WORKERS": str(workers)}
        super().__init__(name, path, features, settings=settings, workers=workers)
        self.workers = workers

    def ready(self) -> None:
        # several answers: each worker's, as far as the kernel spreads the connections
        wait_ready(self.url, self.process, timeout=600, answers=4 * self.workers)
        with httpx.Client(base_url=self.url, timeout=60) as http:
            create_model(http, {"id": MODEL, "n_features": self.features})


class RedisPeer(Peer):
    """A checkout served by one uvicorn process on its own redis-server (AOF, every write
    fsync'd before Redis answers: ``appendfsync always``)."""

    def __init__(self, name: str, path: Path, features: int) -> None:
        self.redis = PrivateRedis("aof", "--appendfsync", "always")
        self.redis.start()
        super().__init__(
            name, path, features, "redis", settings={"AUCSTREAM_REDIS_URL": self.redis.url}
        )

    def close(self) -> None:
        super().close()
        self.redis.close()


def post_warm_events(http: httpx.Client, model: str, n_events: int, n_features: int) -> None:
    """``n_events`` labelled events (15 % positives, seeded) to ``model`` in batches of 500."""
    rng = np.random.default_rng(2)
    for start in range(0, n_events, 500):
        X = np.round(rng.normal(size=(500, n_features)), 4)
        y = np.where(rng.random(500) < 0.15, 1, -1)
        events = [{"id": f"w{start + k}", "x": X[k].tolist(), "y": int(y[k])} for k in range(500)]
        response = http.post(f"/v1/models/{model}/events", json={"events": events})
        response.raise_for_status()


def _warm(peer: Peer, args: argparse.Namespace) -> None:
    """``--warm-events`` events to the model in batches (past the boosted trees' early fits,
    which come each time the events double), then a second of one-event traffic."""
    with httpx.Client(base_url=peer.url, timeout=120) as http:
        post_warm_events(http, MODEL, args.warm_events, args.features)
    asyncio.run(_closed_loop(peer.url, 8, 1.0, _events(peer, [0.0] * args.features, [MODEL])))
    _wait_for_all_kernels(peer)


def _wait_for_all_kernels(peer: Peer, timeout: float = 900.0) -> None:
    """Until the server's background warm-up has loaded every kernel group (``/readyz``'s
    ``warmup``): the service answers once the default path is ready, and the rest of the
    groups (tens of seconds of CPU on a busy machine) would otherwise be counted in the first
    phases of the first round."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=peer.url, timeout=10) as http:
        while time.monotonic() < deadline:
            warmup = http.get("/readyz").json().get("warmup", {})
            if warmup.get("groups_done") == warmup.get("groups_total"):
                return
            time.sleep(0.5)
    raise RuntimeError(f"{peer.name}: the kernels' warm-up did not end in {timeout:.0f} s")


def _warm_spread(peer: Peer, args: argparse.Namespace) -> None:
    """``--spread-warm`` labelled events to each spread model, one request per model."""
    rng = np.random.default_rng(3)
    with httpx.Client(base_url=peer.url, timeout=120) as http:
        for k in range(max(args.models) if args.spread_warm else 0):
            X = np.round(rng.normal(size=(args.spread_warm, args.features)), 4)
            y = np.where(rng.random(args.spread_warm) < 0.15, 1, -1)
            events = [
                {"id": f"sw{k}-{j}", "x": X[j].tolist(), "y": int(y[j])}
                for j in range(args.spread_warm)
            ]
            http.post(f"/v1/models/r{k}/events", json={"events": events}).raise_for_status()


def measure(peer: Peer, args: argparse.Namespace) -> dict[str, float]:
    """CPU ms per answered request of each phase."""
    x = np.round(np.random.default_rng(0).normal(size=peer.features), 4).tolist()
    rows = _rows(args.rows, peer.features)
    healthz = f"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1:{peer.port}\r\n\r\n".encode()
    phases = {f"events@{c}": (c, _events(peer, x, [MODEL], rows)) for c in args.clients}
    for clients in args.spread_clients:
        phases[f"one@{clients}"] = (clients, _events(peer, x, [MODEL], rows))
        for count in args.models:
            name = "spread" if len(args.models) == 1 else f"spread{count}"
            spread = [f"r{k}" for k in range(count)]
            phases[f"{name}@{clients}"] = (clients, _events(peer, x, spread, rows))
    phases["score@1"] = (1, _score(peer, x))
    phases["unkept@1"] = (1, _score(peer, x, kept=False))
    for clients in args.clients:  # the HTTP floor, keep-alive
        phases[f"healthz@{clients}"] = (clients, lambda client, n: healthz)
    figures = {}
    for phase, (clients, make) in phases.items():
        if args.phases and phase not in args.phases:
            continue
        redis = peer.redis.process if isinstance(peer, RedisPeer) else None
        redis_cpu = 0.0 if redis is None else tree_cpu_seconds(redis.pid)
        fits = fit_counters(peer.url) if args.split else {}  # its scrape outside the window
        threads = tree_threads(peer.process.pid) if args.split else {}
        cpu = tree_cpu_seconds(peer.process.pid)
        ok, bad = asyncio.run(_closed_loop(peer.url, clients, args.seconds, make))
        cpu = tree_cpu_seconds(peer.process.pid) - cpu
        figures[phase] = cpu / max(ok, 1) * 1e3
        if args.split:
            split = split_cpu(threads, tree_threads(peer.process.pid), ok)
            fits_after = fit_counters(peer.url)
            split.update({_counted(s): fits_after[s] - fits[s] for s in COUNTERS})
            _print_split(peer.name, phase, split)
            figures.update({f"{phase} split {part}": value for part, value in split.items()})
        if redis is not None:
            figures[phase + " redis"] = (tree_cpu_seconds(redis.pid) - redis_cpu) / max(ok, 1) * 1e3
        figures[phase + " per s"] = ok / args.seconds
        if bad:
            print(f"  {peer.name} {phase}: {bad} answers not 2xx")
    return figures


def _rows(count: int, features: int) -> list[list[float]] | None:
    """``--rows``: ``count`` distinct random rows (seeded: the same for every peer), or None."""
    if not count:
        return None
    return np.round(np.random.default_rng(5).normal(size=(count, features)), 4).tolist()


def _counted(counter: str) -> str:
    """The split's key of one of :data:`~loadtest.cpu_split.COUNTERS`."""
    return f"fits {counter}" if counter in FIT_STAGES else f"coalesced {counter}"


def _print_split(peer: str, phase: str, split: dict[str, float]) -> None:
    counts = (" threads", " sleeps")
    parts = sorted((p for p in split if not p.endswith(counts) and "/" in p),
                   key=lambda part: -split[part])  # fmt: skip
    text = ", ".join(f"{part} {split[part]:.3f}" for part in parts if split[part] >= 0.0005)
    sleeps = ", ".join(f"{part.removesuffix(' sleeps')} {split[part]:.2f}" for part in split
                       if part.endswith(" sleeps") and split[part] >= 0.01)  # fmt: skip
    fits = ", ".join(f"{stage} {split[_counted(stage)]:.{2 if stage.endswith('seconds') else 0}f}"
                     for stage in COUNTERS)  # fmt: skip
    print(f"{peer:>8} {phase:>10}: ms per request by process/thread: {text}; sleeps per "
          f"request: {sleeps}; fits, coalesced groups and requests: {fits}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="NAME=CHECKOUT (repeat)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--models", type=int, nargs="+", default=[200])
    parser.add_argument("--spread-clients", type=int, nargs="+", default=[16])
    parser.add_argument("--spread-warm", type=int, default=50, help="events per spread model")
    parser.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=None,
        help="AUCSTREAM_CHECKPOINT_SECONDS of the servers (a long one keeps the checkpoints "
        "of the models fed by the warm-up out of the phases)",
    )
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--learner", default=None, help="the models' learner (default: auto)")
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--warm-events", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers on one file")
    parser.add_argument(
        "--rows",
        type=int,
        default=0,
        help="the event phases cycle through this many distinct random rows (seeded), so that "
        "the boosted fits see real data (default: one row repeated, whose fits get cheap)",
    )
    parser.add_argument("--phases", nargs="+", default=None, help="only these phases")
    parser.add_argument("--redis", action="store_true", help="each checkout on its own Redis")
    parser.add_argument(
        "--split",
        action="store_true",
        help="also the CPU by process and thread, and the boosted fits, of each phase "
        "(loadtest/cpu_split.py)",
    )
    args = parser.parse_args()
    settings = {}
    if args.checkpoint_seconds is not None:
        settings["AUCSTREAM_CHECKPOINT_SECONDS"] = str(args.checkpoint_seconds)
    peers = [
        RedisPeer(name, Path(path), args.features)
        if args.redis
        else Peer(name, Path(path), args.features, args.store, settings=settings)
        if args.workers == 1
        else WorkersPeer(name, Path(path), args.features, args.workers)
        for name, _, path in (spec.partition("=") for spec in args.peer or [f"this={Path.cwd()}"])
    ]
    print("load average at start:", open("/proc/loadavg").read().strip(), flush=True)
    results: dict[tuple[str, str], list[float]] = {}
    vw_line = (
        "1 |f " + " ".join(f"{k}:{v:.4f}" for k, v in enumerate(np.ones(args.features))) + "\n"
    ).encode()
    try:
        for peer in peers:
            peer.ready()
            with httpx.Client(base_url=peer.url, timeout=60) as http:
                learner = {"learner": args.learner} if args.learner else {}
                if learner:  # the measured model, made with the learner
                    http.delete(f"/v1/models/{MODEL}").raise_for_status()
                    create_model(http, {"id": MODEL, "n_features": args.features, **learner})
                for k in range(max(args.models)):
                    create_model(http, {"id": f"r{k}", "n_features": args.features, **learner})
            if any(phase.startswith("spread") for phase in args.phases or ["spread"]):
                # else the spread models' checkpoints, a minute after, land in other phases
                _warm_spread(peer, args)
            _warm(peer, args)
        with vw_daemon() as (vw_port, vw_pid):
            for round_number in range(args.rounds):
                order = peers if round_number % 2 == 0 else peers[::-1]
                cpu = tree_cpu_seconds(vw_pid)
                answered = asyncio.run(_vw_round_trips(vw_port, args.seconds, vw_line))
                vw = (tree_cpu_seconds(vw_pid) - cpu) / answered * 1e3
                print(f"      VW lines@1: cpu {vw:.3f} ms ({answered / args.seconds:,.0f}/s)")
                results.setdefault(("VW", "lines@1"), []).append(vw)
                for peer in order:
                    for phase, value in measure(peer, args).items():
                        if not phase.endswith("per s") and " split " not in phase:
                            print(f"{peer.name:>8} {phase:>10}: cpu {value:.3f} ms", flush=True)
                        results.setdefault((peer.name, phase), []).append(value)
    finally:
        for peer in peers:
            peer.close()
    print("load average at end:", open("/proc/loadavg").read().strip())
    print("\n| peer | phase | server CPU per request (median) | requests/s |\n|---|---|---|---|")
    for (name, phase), values in results.items():
        if phase.endswith("per s") or " split " in phase:
            continue
        rate = results.get((name, phase + " per s"))
        rate_text = f"{statistics.median(rate):,.0f}" if rate else ""
        print(f"| {name} | {phase} | {statistics.median(values):.3f} ms | {rate_text} |")
    if args.split:
        print("\n| peer | phase | process/thread (ms per request; fits, threads: counts) "
              "| median | rounds |\n|---|---|---|---:|---|")  # fmt: skip
        for (name, key), values in results.items():
            if " split " in key:
                phase, _, part = key.partition(" split ")
                rounds = " / ".join(f"{value:.3f}" for value in values)
                print(f"| {name} | {phase} | {part} | {statistics.median(values):.3f} | {rounds} |")


if __name__ == "__main__":
    main()
