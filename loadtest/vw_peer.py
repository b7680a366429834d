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
import asyncio
import contextlib
import io
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field

import httpx
import numpy as np
import orjson

from loadtest.local import create_model, free_port, wait_ready

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


# ---------------------------------------------------------------------------- processes
def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (live ones)."""
    total, pending = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while pending:
        current = pending.pop()
        with contextlib.suppress(OSError):
            with open(f"/proc/{current}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    pending.extend(int(child) for child in handle.read().split())
    return total


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process group this script started, SIGKILL after 10 s (VW's daemon
    child does not stop on SIGTERM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


VW_DAEMON = """
import sys
from vowpalwabbit import pyvw
workspace = pyvw.Workspace(sys.argv[1])
workspace.run_parser()
"""


@contextlib.contextmanager
def vw_daemon() -> Iterator[tuple[int, int]]:
    """VW's daemon loop through pylibvw: ``(port, pid)``."""
    port = free_port()
    options = (f"--daemon --foreground --port {port} --num_children 1 --quiet "
               "--loss_function logistic --link logistic")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", VW_DAEMON, options], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket_to(port) as probe:
                    probe.sendall(b"1 |f 0:1\n")  # answered: the daemon loop is running
                    if probe.recv(64):
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the VW daemon did not start") from None
                time.sleep(0.2)
        yield port, process.pid
    finally:
        _stop_group(process)


def socket_to(port: int):
    import socket

    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    connection.settimeout(5)
    return connection


def wait_warm(url: str, timeout: float = 900.0) -> None:
    """Until the server's warm-up has run every kernel group (``/readyz``'s ``warmup``)."""
    deadline = time.monotonic() + timeout
    while True:
        warmup = httpx.get(f"{url}/readyz", timeout=10).json().get("warmup") or {}
        if warmup.get("groups_done", 0) >= warmup.get("groups_total", 0):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}: the warm-up did not end in {timeout:.0f} s: {warmup}")
        time.sleep(0.5)


@contextlib.contextmanager
def aucstream(store: str, server_path: str | None) -> Iterator[tuple[str, int]]:
    """``aucstream serve`` on ``store`` (sqlite: a temporary data directory), once its warm-up
    has ended: ``(url, pid)``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="aucstream-vw-peer-") as data_dir:
        env = {**os.environ}
        if server_path:
            env["PYTHONPATH"] = server_path
        command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port),
                   "--store", store, "--data-dir", data_dir, "--log-level", "warning"]  # fmt: skip
        log = open(os.path.join(data_dir, "server.log"), "wb")  # noqa: SIM115
        process = subprocess.Popen(
            command, env=env, cwd=server_path, start_new_session=True, stdout=log, stderr=log
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process, timeout=600)
            wait_warm(url)
            yield url, process.pid
        finally:
            _stop_group(process)
            log.close()


# ---------------------------------------------------------------------------- the clients
@dataclass
class Run:
    """What one run measured."""

    events: int
    seconds: float
    server_cpu: float
    client_cpu: float
    latencies: np.ndarray
    failures: int = 0
    load: float = 0.0

    def row(self) -> dict[str, float]:
        ms = 1e3 * self.latencies if len(self.latencies) else np.array([np.nan])
        return {
            "events/s": self.events / self.seconds,
            "server ms/event": 1e3 * self.server_cpu / max(self.events, 1),
            "client ms/event": 1e3 * self.client_cpu / max(self.events, 1),
            "p50 ms": float(np.percentile(ms, 50)),
            "p99 ms": float(np.percentile(ms, 99)),
            "failures": self.failures,
            "load": self.load,
        }


def _content_length(head: bytes) -> int:
    at = head.lower().find(b"content-length:")
    if at < 0:
        return 0
    end = head.find(b"\r\n", at)
    return int(head[at + 15 : end if end > 0 else None])


class Exchange(asyncio.Protocol):
    """One keep-alive connection: sends requests (HTTP or VW lines) keeping at most ``window``
    unanswered, times each answer from its send (or ``due`` time)."""

    def __init__(self, framing: str, window: int, on_answer: Callable[[float, bool], None]):
        self.framing, self.window, self.on_answer = framing, window, on_answer
        self.buffer = b""
        self.sent: list[float] = []  # send (or due) times of the unanswered, oldest first
        self.head = 0
        self.pending: list[bytes] = []
        self.deadline = float("inf")  # no request is sent after it
        self.done = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.idle = asyncio.Event()
        self.idle.set()

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport

    def send(self, request: bytes, due: float | None = None) -> None:
        assert self.transport is not None
        self.sent.append(time.perf_counter() if due is None else due)
        self.idle.clear()
        self.transport.write(request)

    def pump(self) -> None:
        if self.pending and time.perf_counter() > self.deadline:
            self.pending.clear()
        while self.pending and len(self.sent) - self.head < self.window:
            self.send(self.pending.pop())
        if not self.pending and self.head == len(self.sent) and not self.done.done():
            self.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        now = time.perf_counter()
        while True:
            if self.framing == "lines":
                end = self.buffer.find(b"\n")
                if end < 0:
                    break
                ok, self.buffer = True, self.buffer[end + 1 :]
            else:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                length = _content_length(self.buffer[:end])
                if len(self.buffer) < end + 4 + length:
                    break
                ok = self.buffer[9:10] == b"2"
                self.buffer = self.buffer[end + 4 + length :]
            self.on_answer(now - self.sent[self.head], ok)
            self.head += 1
        if self.head == len(self.sent):
            self.idle.set()
        self.pump()

    def connection_lost(self, exc) -> None:  # type: ignore[no-untyped-def]
        if self.done.done():
            return
        if self.pending or self.head < len(self.sent):
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))
        else:
            self.done.set_result(None)


class Tally:
    """The latencies of the answers and how many of them failed."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.failures = 0

    def __call__(self, seconds: float, ok: bool) -> None:
        self.latencies.append(seconds)
        self.failures += not ok


async def closed_loop(
    port: int,
    requests: list[bytes],
    connections: int,
    window: int,
    framing: str,
    seconds: float,
    *,
    one_at_a_time: bool = False,
) -> tuple[int, list[float], int]:
    """The requests of ``requests``, spread over ``connections``, until they are all sent or
    ``seconds`` have passed: (answered, latencies, failures).  ``one_at_a_time``: each
    connection opened when the one before has its answers (VW's daemon with one child serves
    its connections one after the other, and its listen backlog is short)."""
    answer = Tally()
    loop = asyncio.get_running_loop()
    deadline = time.perf_counter() + seconds
    peers = []
    for k in range(connections):
        _, peer = await loop.create_connection(
            lambda: Exchange(framing, window, answer), "127.0.0.1", port
        )
        peer.pending = requests[k::connections][::-1]
        peer.deadline = deadline
        peers.append(peer)
        if one_at_a_time:
            peer.pump()
            await peer.done
            assert peer.transport is not None
            peer.transport.close()  # the daemon reads until the end of the connection
            if time.perf_counter() > deadline:
                break
    for peer in peers:
        peer.pump()
    await asyncio.gather(*(peer.done for peer in peers))
    for peer in peers:
        assert peer.transport is not None
        peer.transport.close()
    return len(answer.latencies), answer.latencies, answer.failures


async def fixed_rate(
    port: int, requests: list[bytes], rate: float, pool: int, framing: str
) -> tuple[int, list[float], int]:
    """``requests`` sent at ``rate`` per second, each on an idle connection of ``pool`` (one
    pipelined connection for VW lines), latency from when it was due."""
    answer = Tally()
    loop = asyncio.get_running_loop()
    peers = []
    for _ in range(pool):
        _, peer = await loop.create_connection(
            lambda: Exchange(framing, 1 << 30, answer), "127.0.0.1", port
        )
        peers.append(peer)
    started = time.perf_counter()
    for k, request in enumerate(requests):
        due = started + k / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if framing == "lines":
            peers[0].send(request, due)
            continue
        while True:  # an idle connection: HTTP/1.1 answers one request at a time
            idle = [peer for peer in peers if peer.idle.is_set()]
            if idle:
                break
            await asyncio.wait([asyncio.ensure_future(p.idle.wait()) for p in peers],
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        idle[0].send(request, due)
    while len(answer.latencies) < len(requests):
        await asyncio.sleep(0.01)
    for peer in peers:
        assert peer.transport is not None
        peer.transport.close()
    return len(answer.latencies), answer.latencies, answer.failures


async def websocket_loop(
    url: str, model: str, frames: list[bytes], binary: bool, per_frame: int, seconds: float
) -> tuple[int, list[float], int]:
    """The stream: ``frames`` of ``per_frame`` one-event messages, at most ``window`` messages
    unanswered, until all are sent or ``seconds`` have passed; each message timed from its
    frame's send to its reply."""
    window = 8192
    from websockets.asyncio.client import connect

    from service.client import stream_url

    latencies: list[float] = []
    failures = 0
    sent: list[float] = []
    async with connect(stream_url(url, model), compression=None, max_size=None) as socket:
        answered = 0

        async def receive_one() -> None:
            nonlocal answered, failures
            replies = orjson.loads(await socket.recv(decode=False))
            now = time.perf_counter()
            for reply in replies:
                latencies.append(now - sent[answered // per_frame])
                failures += reply.get("status") != 200
                answered += 1

        deadline = time.perf_counter() + seconds
        for frame in frames:
            if time.perf_counter() > deadline:
                break
            sent.append(time.perf_counter())
            await socket.send(frame, text=not binary)
            while len(sent) * per_frame - answered > window:
                await receive_one()
        while answered < len(sent) * per_frame:
            await receive_one()
    return answered, latencies, failures


def measured(pid: int, work: Coroutine[None, None, tuple[int, list[float], int]]) -> Run:
    """``work`` run to its end, with the server ``pid``'s CPU time and the client's."""
    load = os.getloadavg()[0]
    cpu, client, started = tree_cpu_seconds(pid), time.process_time(), time.perf_counter()
    events, latencies, failures = asyncio.run(work)
    seconds = time.perf_counter() - started
    return Run(
        events, seconds, tree_cpu_seconds(pid) - cpu, time.process_time() - client,
        np.asarray(latencies), failures, load,
    )  # fmt: skip


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
