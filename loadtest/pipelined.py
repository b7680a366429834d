"""The clients of ``loadtest.vw_peer`` (and of the benchmarks built on it): keep-alive
connections that keep a window of requests (HTTP or VW lines) unanswered, a fixed-rate sender, the
WebSocket stream's sender, and :func:`measured`, which times one run and reads the server's CPU."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass

import numpy as np
import orjson

from loadtest.peer_processes import tree_cpu_seconds


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
