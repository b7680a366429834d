"""The stream and batch rows of :mod:`loadtest.vw_peer` for several checkouts in one run: the
WebSocket stream (binary, one event per message) and NPZ batches of 1,000 events, on the
defaults (SQLite + ``auto``) and on the memory store with ``spam``, beside the VW daemon.

Not a test: prints markdown tables.  Usage::

    python -m loadtest.stream_cost --peer before=/path/to/checkout --peer after=.
    python -m loadtest.stream_cost --peer this=. --rounds 3 --seconds 5 --warm-events 12000

Each checkout (``--peer NAME=DIR``) serves two servers (``aucstream serve`` on a temporary
SQLite directory with a model given only its width, so ``auto``; ``--store memory`` with a
``spam`` model); the default models are first fed ``--warm-events`` events in NPZ batches
(``auto``'s boosted candidates fit as their events double until 8,000, then every 4,000 and
2,000 events: the runs measure the steady schedule, not the first fits).  Then, round after
round, each scenario runs VW's line stream first and then every peer's servers, the peers'
order turned by one each round so that they share the machine's load alike.  The events are
:mod:`loadtest.vw_peer`'s (50 dense features, 10 % positives), each run going on where the last
run of its kind stopped.  Figures: events/s over the run's wall time, the ratio to VW's of the
same round, the server's CPU per event (user + system of its process tree, the fit process
included, from ``/proc``), the load average at the start of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from pathlib import Path

import httpx
import numpy as np

from loadtest.local import create_model
from loadtest.peer_processes import aucstream, vw_daemon
from loadtest.pipelined import Run, closed_loop, measured, websocket_loop
from loadtest.vw_peer import CONNECTIONS, N_FEATURES, encode, for_model, make_stream

CONFIGS = {
    "default": ("sqlite", {"id": "plain", "n_features": N_FEATURES}),
    "memory": ("memory", {"id": "fast", "n_features": N_FEATURES, "learner": "spam"}),
}
SCENARIOS = {"ws": "WebSocket binary, one event per message", "npz": "NPZ batches of 1,000"}


def warm(url: str, pid: int, model: str, bodies: list[bytes]) -> None:
    """Feed ``bodies`` (NPZ requests) to ``model``, one connection at a time in order."""
    port = int(url.rsplit(":", 1)[1])
    measured(pid, closed_loop(port, for_model(bodies, model), 1, 1, "http", 3600.0))


def one_run(kind: str, url: str, pid: int, model: str, stream, args) -> Run:
    if kind == "ws":
        frames = stream.take("ws-binary", max(1, int(400_000 * args.seconds) // args.frame))
        return measured(pid, websocket_loop(url, model, frames, True, args.frame, args.seconds))
    bodies = for_model(stream.take("npz", max(1, int(600 * args.seconds))), model)
    run = measured(pid, closed_loop(int(url.rsplit(":", 1)[1]), bodies, 4, 1, "http", args.seconds))
    run.events *= 1000
    return run


def vw_run(port: int, pid: int, stream, seconds: float) -> Run:
    lines = stream.take("vw", int(400_000 * seconds))
    return measured(
        pid, closed_loop(port, lines, CONNECTIONS, 256, "lines", seconds, one_at_a_time=True)
    )


def report(rows: list[tuple[str, str, str, int, Run, Run]], names: list[str]) -> str:
    lines = [
        "| scenario | store | peer | round | events/s | ratio vs VW | server ms/event | load |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind, config, name, round_, run, vw in rows:
        got = run.row()
        ratio = got["events/s"] / vw.row()["events/s"]
        lines.append(
            f"| {kind} | {config} | {name} | {round_} | {got['events/s']:,.0f} | "
            f"{ratio:.2f} | {got['server ms/event']:.4f} | {got['load']:.1f} |"
        )
    lines += [
        "",
        "| scenario | store | peer | median ratio vs VW | median server ms/event "
        f"| CPU / {names[0]}'s |",
        "|---|---|---|---:|---:|---:|",
    ]
    for kind in SCENARIOS:
        for config in CONFIGS:
            medians = {}
            for name in names:
                mine = [
                    (r.row(), v.row())
                    for k, c, n, _, r, v in rows
                    if (k, c, n) == (kind, config, name)
                ]
                if not mine:
                    continue
                ratio = float(np.median([g["events/s"] / b["events/s"] for g, b in mine]))
                medians[name] = (ratio, float(np.median([g["server ms/event"] for g, _ in mine])))
            for name, (ratio, cpu) in medians.items():
                base = medians.get(names[0], (0.0, np.nan))[1]
                lines.append(
                    f"| {kind} | {config} | {name} | {ratio:.2f} | {cpu:.4f} | {cpu / base:.2f} |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", default=[], help="NAME=CHECKOUT (repeat)")
    parser.add_argument("--events", type=int, default=120_000, help="distinct events")
    parser.add_argument("--seconds", type=float, default=5.0, help="about how long a run lasts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-events", type=int, default=12_000)
    parser.add_argument("--frame", type=int, default=512, help="messages per WebSocket frame")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    args = parser.parse_args(argv)
    peers = [
        (name, str(Path(path or ".").resolve()))
        for name, _, path in (spec.partition("=") for spec in args.peer or ["this=."])
    ]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; load average "
        f"{' '.join(open('/proc/loadavg').read().split()[:3])}"
    )
    stream = make_stream(args.events)
    encode(stream, {"vw", "ws-binary", "npz"}, args.frame)
    warming = stream.encoded["npz"][: args.warm_events // 1000]
    started = time.perf_counter()
    rows: list[tuple[str, str, str, int, Run, Run]] = []
    with contextlib.ExitStack() as stack:
        vw_port, vw_pid = stack.enter_context(vw_daemon())
        servers = {}
        for name, path in peers:
            for config in args.configs:
                store, body = CONFIGS[config]
                url, pid = stack.enter_context(aucstream(store, path))
                with httpx.Client(base_url=url, timeout=60) as http:
                    create_model(http, body)
                if config == "default" and warming:
                    warm(url, pid, body["id"], warming)
                servers[name, config] = (url, pid, body["id"])
        print(f"servers ready and warmed in {time.perf_counter() - started:.0f} s")
        names = [name for name, _ in peers]
        for round_ in range(1, args.rounds + 1):
            order = names[round_ - 1 :] + names[: round_ - 1]
            for kind in args.scenarios:
                vw = vw_run(vw_port, vw_pid, stream, args.seconds)
                rows.append((kind, "VW", "VW", round_, vw, vw))
                for name in order:
                    for config in args.configs:
                        url, pid, model = servers[name, config]
                        run = one_run(kind, url, pid, model, stream, args)
                        rows.append((kind, config, name, round_, run, vw))
                        print(report(rows[-1:], names).split("\n")[2], flush=True)
    print()
    print(report(rows, names))
    print(
        f"\nload average after: {' '.join(open('/proc/loadavg').read().split()[:3])}; "
        f"{time.perf_counter() - started:.0f} s in all"
    )


if __name__ == "__main__":
    main()
