"""aucstream next to the Vowpal Wabbit daemon, in one run, alternated (VW, then aucstream, then
VW ...), on the same stream of 50 dense features.

Not a test: prints markdown tables.  Usage::

    python -m loadtest.vw_peer                          # 200,000 events, 5 s a run, 2 rounds
    python -m loadtest.vw_peer --events 50000 --seconds 3 --rounds 1     # a quick look
    python -m loadtest.vw_peer --server-path /other/checkout   # serve another checkout's code
    python -m loadtest.vw_peer --peer before=/other/checkout --peer after=.   # both, alternated

The peers, each a real subprocess on loopback:

* **VW**: the ``vowpalwabbit`` wheel's ``pylibvw`` running VW's own daemon loop
  (``Workspace("--daemon --foreground --port P --num_children 1 ...").run_parser()``, what
  ``vw --daemon`` runs: one model, connections served one after the other, a prediction line
  back for every example line).  Its clients stream example lines (``1 |f 0:0.12 1:-0.3 ...``)
  with up to ``--vw-window`` lines unanswered per connection, the way a VW daemon is fed.
* **aucstream**: ``aucstream serve`` with ``--store memory`` and a ``spam`` model ("memory +
  spam"), and with the default SQLite store in a temporary data directory and a model created
  with no parameters but its width, so ``auto`` ("default").

The stream: ``--events`` distinct events (200,000 by default: 80 MB of features, larger than the
caches), labels ~10 % positive with a signal; each run goes on where the previous one of its
peer stopped, cycling through the stream.  A run lasts ``--seconds`` (or until ``--events``).

Each server is measured once its warm-up has ended (``/readyz`` says every kernel group is
compiled or loaded, not only the default path's): the warm-up goes on in the background after
the server is ready, and its CPU would otherwise be counted in the first scenarios.  With
several ``--peer NAME=DIR``, each checkout serves its own pair of servers and every scenario
runs VW first, then each peer's servers, the peers' order turned by one each round, so that
they share the machine's load alike; the ratios are to VW's run of the same scenario and round.

Scenarios (aucstream; VW's figure for the learning ones is its line stream of the same round):

1. ``POST /events`` of one JSON event, 64 keep-alive connections, one request in flight each;
2. ``POST /score`` of one event at a fixed rate (``--rate``, 1,000/s) on a pool of
   connections; VW: unlabelled example lines (predict only) at the same rate on one connection;
3. the WebSocket stream, binary messages of one event each (``--frame-messages`` per frame,
   512 as the package's client; up to 8,192 messages unanswered);
4. the WebSocket stream, JSON messages of one event each;
5. ``POST /events`` of NPZ batches of 1,000 events, 4 connections;
6. the HTTP floor: ``GET /healthz`` with the client of scenario 1.

Figures: events/s (wall time of the run); the server's CPU per event (user + system time of
the server process and its children, from ``/proc/<pid>/stat``); p50 / p99 latency (from the
send of a request, message or line -- for a fixed rate, from when it was due -- to its
answer); the client's own CPU per event (if near the wall time, the client was the bound); the
load average.  The ratio is aucstream's events/s over VW's of the same round (scenario 2:
VW's CPU per request over aucstream's, so above 1 means aucstream is cheaper).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import numpy as np
import orjson

from loadtest.local import create_model
from loadtest.peer_processes import aucstream, vw_daemon
from loadtest.pipelined import Run, closed_loop, fixed_rate, measured, websocket_loop

N_FEATURES = 50
CONNECTIONS = 64


# ---------------------------------------------------------------------------- the data
@dataclass
class Stream:
    """The events and their encodings, each a list cycled through from a running offset."""

    X: np.ndarray
    y: np.ndarray
    encoded: dict[str, list[bytes]] = field(default_factory=dict)
    at: dict[str, int] = field(default_factory=dict)

    def take(self, kind: str, count: int) -> list[bytes]:
        items, start = self.encoded[kind], self.at.get(kind, 0)
        self.at[kind] = (start + count) % len(items)
        return [items[(start + k) % len(items)] for k in range(count)]


def make_stream(n: int, seed: int = 0) -> Stream:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(np.int8)
    X = rng.normal(size=(n, N_FEATURES)) + 0.4 * y[:, None] * np.linspace(1, 0, N_FEATURES)
    return Stream(np.round(X, 5), y)


def encode(stream: Stream, kinds: set[str], frame_messages: int) -> None:
    from service.stream.protocol import encode_binary_rows

    X, y, n = stream.X, stream.y, len(stream.y)
    rows = X.tolist()
    if "vw" in kinds or "vw-predict" in kinds:
        names = [f"{j}:" for j in range(N_FEATURES)]
        text = [" ".join(a + repr(v) for a, v in zip(names, row, strict=True)) for row in rows]
        stream.encoded["vw"] = [
            f"{1 if label else -1} |f {t}\n".encode() for label, t in zip(y, text, strict=True)
        ]
        stream.encoded["vw-predict"] = [f" |f {t}\n".encode() for t in text]
    if "events" in kinds:
        stream.encoded["events"] = [
            _post("/v1/models/{model}/events", orjson.dumps({"events": [{"x": r, "y": int(v)}]}))
            for r, v in zip(rows, y, strict=True)
        ]
    if "score" in kinds:
        stream.encoded["score"] = [
            _post("/v1/models/{model}/score", orjson.dumps({"events": [{"x": r}]})) for r in rows
        ]
    if "ws-binary" in kinds:
        stream.encoded["ws-binary"] = [
            encode_binary_rows("learn", start, X[start : start + frame_messages],
                               y[start : start + frame_messages])
            for start in range(0, n - frame_messages + 1, frame_messages)
        ]  # fmt: skip
    if "ws-json" in kinds:
        stream.encoded["ws-json"] = [
            orjson.dumps([{"seq": start + k, "op": "learn", "x": rows[start + k],
                           "y": int(y[start + k])} for k in range(frame_messages)])
            for start in range(0, n - frame_messages + 1, frame_messages)
        ]  # fmt: skip
    if "npz" in kinds:
        bodies = []
        for start in range(0, n - 999, 1000):
            buffer = io.BytesIO()
            np.savez(buffer, X=X[start : start + 1000], y=y[start : start + 1000])
            bodies.append(buffer.getvalue())
        stream.encoded["npz"] = [
            _post("/v1/models/{model}/events", body, "application/x-npz") for body in bodies
        ]


def _post(path: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def for_model(requests: list[bytes], model: str) -> list[bytes]:
    return [r.replace(b"{model}", model.encode(), 1) for r in requests]


# ---------------------------------------------------------------------------- the scenarios
@dataclass
class Peers:
    vw_port: int
    vw_pid: int
    #: peer name -> "default" / "memory" -> (url, pid)
    servers: dict[str, dict[str, tuple[str, int]]]
    models: dict[str, str]
    #: the peers' names in the order they run this round
    order: list[str] = field(default_factory=list)

    def label(self, name: str, config: str) -> str:
        return f"{'aucstream' if len(self.servers) == 1 else name} {config}"


#: the most requests (frames, bodies, lines) a run is given, per second it lasts: well over
#: what each peer answers, so a run ends at its deadline
CEILINGS = {"vw": 400_000, "vw-predict": 0, "events": 40_000, "score": 0, "ws-binary": 400_000,
            "ws-json": 200_000, "npz": 600, "healthz": 60_000}  # fmt: skip


def run_scenario(name: str, peers: Peers, stream: Stream, args: argparse.Namespace) -> list:
    """``[(peer label, Run)]`` of one scenario, VW first."""
    seconds = args.seconds
    results = []

    def take(kind: str, per: int = 1) -> list[bytes]:
        ceiling = int(CEILINGS[kind] * seconds) // per
        return stream.take(kind, max(1, min(len(stream.encoded[kind]), ceiling)))

    def vw_lines() -> Run:
        lines = take("vw")
        return measured(
            peers.vw_pid,
            closed_loop(
                peers.vw_port,
                lines,
                CONNECTIONS,
                args.vw_window,
                "lines",
                seconds,
                one_at_a_time=True,
            ),
        )

    def each(configs: tuple[str, ...]) -> Iterator[tuple[str, str, str, int, int]]:
        """``(label, config, url, pid, port)`` of each peer's server of each of ``configs``."""
        for config in configs:
            for peer in peers.order:
                url, pid = peers.servers[peer][config]
                yield peers.label(peer, config), config, url, pid, int(url.rsplit(":", 1)[1])

    if name.startswith("1"):
        results.append(("VW lines", vw_lines()))
        for label, config, _url, pid, port in each(("default", "memory")):
            requests = for_model(take("events"), peers.models[config])
            results.append(
                (
                    label,
                    measured(pid, closed_loop(port, requests, CONNECTIONS, 1, "http", seconds)),
                )
            )
    elif name.startswith("2"):
        n = int(args.rate * seconds)
        lines = stream.take("vw-predict", n)
        results.append(
            (
                "VW predict lines",
                measured(peers.vw_pid, fixed_rate(peers.vw_port, lines, args.rate, 1, "lines")),
            )
        )
        for label, config, _url, pid, port in each(("default", "memory")):
            requests = for_model(stream.take("score", n), peers.models[config])
            results.append(
                (label, measured(pid, fixed_rate(port, requests, args.rate, 16, "http")))
            )
    elif name.startswith(("3", "4")):
        binary = name.startswith("3")
        results.append(("VW lines", vw_lines()))
        for label, config, url, pid, _ in each(("default", "memory") if binary else ("memory",)):
            frames = take("ws-binary" if binary else "ws-json", args.frame_messages)
            model = peers.models[config]
            results.append(
                (
                    label,
                    measured(
                        pid,
                        websocket_loop(url, model, frames, binary, args.frame_messages, seconds),
                    ),
                )
            )
    elif name.startswith("5"):
        results.append(("VW lines", vw_lines()))
        for label, config, _url, pid, port in each(("memory", "default")):
            bodies = for_model(take("npz"), peers.models[config])
            run = measured(pid, closed_loop(port, bodies, 4, 1, "http", seconds))
            run.events *= 1000  # a request is 1,000 events
            results.append((label, run))
    elif name.startswith("6"):
        results.append(("VW lines", vw_lines()))
        request = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
        for label, _, _url, pid, port in each(("memory",)):
            requests = [request] * int(CEILINGS["healthz"] * seconds)
            results.append(
                (label, measured(pid, closed_loop(port, requests, CONNECTIONS, 1, "http", seconds)))
            )
    return results


SCENARIOS = (
    "1 POST /events",
    "2 /score 1,000/s",
    "3 WebSocket binary",
    "4 WebSocket JSON",
    "5 NPZ batches of 1,000",
    "6 HTTP floor /healthz",
)


def table(rows: list[tuple[str, str, int, Run, Run]]) -> str:
    lines = [
        "| scenario | peer | round | events/s | server ms/event | client ms/event | p50 ms "
        "| p99 ms | ratio vs VW | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, label, round_, run, vw in rows:
        got, base = run.row(), vw.row()
        if scenario.startswith("2"):
            ratio = base["server ms/event"] / got["server ms/event"] if run is not vw else 1.0
        else:
            ratio = got["events/s"] / base["events/s"]
        failures = f" ({got['failures']} failed)" if got["failures"] else ""
        lines.append(
            f"| {scenario} | {label}{failures} | {round_} | {got['events/s']:,.0f} | "
            f"{got['server ms/event']:.4f} | {got['client ms/event']:.4f} | {got['p50 ms']:.2f} "
            f"| {got['p99 ms']:.2f} | {ratio:.2f} | {got['load']:.1f} |"
        )
    return "\n".join(lines)


def summary(rows: list[tuple[str, str, int, Run, Run]]) -> str:
    """The median ratio of each scenario and aucstream configuration over the rounds."""
    ratios: dict[tuple[str, str], list[float]] = {}
    for scenario, label, _, run, vw in rows:
        if run is vw:
            continue
        got, base = run.row(), vw.row()
        if scenario.startswith("2"):
            ratio = base["server ms/event"] / got["server ms/event"]
        else:
            ratio = got["events/s"] / base["events/s"]
        ratios.setdefault((scenario, label), []).append(ratio)
    lines = ["| scenario | aucstream | median ratio vs VW |", "|---|---|---:|"]
    for (scenario, label), values in ratios.items():
        lines.append(f"| {scenario} | {label.removeprefix('aucstream ')} | "
                     f"{float(np.median(values)):.2f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="distinct events")
    parser.add_argument("--seconds", type=float, default=5.0, help="about how long a run lasts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=1000.0, help="scenario 2's requests/s")
    parser.add_argument("--frame-messages", type=int, default=512)
    parser.add_argument("--vw-window", type=int, default=256,
                        help="VW lines unanswered per connection")  # fmt: skip
    parser.add_argument("--scenarios", nargs="+", default=[s[0] for s in SCENARIOS],
                        choices=[s[0] for s in SCENARIOS])  # fmt: skip
    parser.add_argument("--server-path", default=None, help="serve this checkout's code")
    parser.add_argument("--peer", action="append", default=[],
                        help="NAME=CHECKOUT, a peer (repeat: alternated)")  # fmt: skip
    args = parser.parse_args(argv)
    checkouts = [(name, path or None) for name, _, path in (p.partition("=") for p in args.peer)]
    if not checkouts:
        checkouts = [("aucstream", args.server_path)]
    # SIGTERM ends the run as Ctrl-C does: the servers started here are stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scenarios = [s for s in SCENARIOS if s[0] in args.scenarios]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}; "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")  # fmt: skip
    print(f"command: python -m loadtest.vw_peer {' '.join(argv or sys.argv[1:])}")
    started = time.perf_counter()
    stream = make_stream(args.events)
    kinds = {"vw", "events", "score", "ws-binary", "ws-json", "npz"}
    encode(stream, kinds, args.frame_messages)
    print(f"{args.events:,} distinct events encoded in {time.perf_counter() - started:.0f} s")
    rows: list[tuple[str, str, int, Run, Run]] = []
    with contextlib.ExitStack() as stack:
        vw_port, vw_pid = stack.enter_context(vw_daemon())
        servers = {
            name: {
                config: stack.enter_context(aucstream(store, path))
                for config, store in (("default", "sqlite"), ("memory", "memory"))
            }
            for name, path in checkouts
        }
        models = {"default": "plain", "memory": "fast"}
        bodies = {
            "default": {"id": "plain", "n_features": N_FEATURES},
            "memory": {"id": "fast", "n_features": N_FEATURES, "learner": "spam"},
        }
        for pair in servers.values():
            for config, (url, _) in pair.items():
                with httpx.Client(base_url=url, timeout=60) as http:
                    create_model(http, bodies[config])
        peers = Peers(vw_port, vw_pid, servers, models)
        names = list(servers)
        for round_ in range(1, args.rounds + 1):
            turn = (round_ - 1) % len(names)
            peers.order = names[turn:] + names[:turn]
            for scenario in scenarios:
                results = run_scenario(scenario, peers, stream, args)
                vw = results[0][1]
                for label, run in results:
                    rows.append((scenario, label, round_, run, vw))
                print(table(rows[-len(results) :]).split("\n", 2)[2], flush=True)
    print()
    print(table(rows))
    print()
    print(summary(rows))
    print(f"\nload average after: {' '.join(open('/proc/loadavg').read().split()[:3])}; "
          f"{time.perf_counter() - started:.0f} s in all")  # fmt: skip


if __name__ == "__main__":
    main()
