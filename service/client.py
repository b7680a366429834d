"""A Python client of the model stream (``/v1/models/{id}/stream``): :class:`AsyncStreamClient`
(asyncio) and :class:`StreamClient` (the same methods, blocking); usage, refusals and why there
is no reconnection in docs/stream.md, "The Python client".
"""

from __future__ import annotations

import asyncio
import functools
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from service.stream.protocol import encode_binary, encode_binary_rows

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
P = ParamSpec("P")
R = TypeVar("R")


class StreamError(Exception):
    """Messages the server refused, ``[(seq, problem)]``; ``totals``: what a pipelined call did."""

    def __init__(self, problems: list[tuple[Any, dict]], totals: Totals | None = None) -> None:
        seq, first = problems[0]
        more = f" (and {len(problems) - 1} more refused)" if len(problems) > 1 else ""
        super().__init__(f"message {seq}: {first.get('status')} {first.get('detail')}{more}")
        self.problems = problems
        self.totals = totals

    @property
    def problem(self) -> dict:
        return self.problems[0][1]


class StreamClosed(ConnectionError):
    """The server closed the connection (``code``, ``reason``)."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"the server closed the stream: {code} {reason}".rstrip())
        self.code, self.reason = code, reason


@dataclass
class Totals:
    """What a pipelined call did: messages answered, events sent, learned ..., the refusals."""

    messages: int = 0
    events: int = 0
    learned: int = 0
    duplicates: int = 0
    queued: int = 0
    version: int | None = None
    problems: list[tuple[Any, dict]] = field(default_factory=list)

    def add(self, reply: dict) -> None:
        self.messages += 1
        if "problem" in reply:
            self.problems.append((reply.get("seq"), reply["problem"]))
            return
        self.learned += reply.get("learned", 0)
        self.duplicates += reply.get("duplicates", 0)
        self.queued += reply.get("queued", 0)
        self.version = reply.get("version", self.version)


def stream_url(url: str, model: str) -> str:
    """``http(s)://host:port[/prefix]`` (or ``ws(s)://``) -> the model's stream address."""
    parts = urllib.parse.urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"expected an http(s):// or ws(s):// address, got {url!r}")
    path = f"{parts.path.rstrip('/')}/v1/models/{urllib.parse.quote(model, safe='')}/stream"
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, "", ""))


def _rows(X: Any) -> np.ndarray:
    return np.ascontiguousarray(X, dtype=np.float64).reshape(len(X), -1)


class AsyncStreamClient:
    """The stream of ``model`` at ``url``; ``binary=True``: the binary form (dense models)."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        binary: bool = False,
        window: int = 8192,
        frame_messages: int = 512,
        open_timeout: float = 10.0,
    ) -> None:
        if window < 1 or frame_messages < 1:
            raise ValueError("window and frame_messages must be at least 1")
        self.url, self.model, self.binary = stream_url(url, model), model, binary
        self.window, self.frame_messages, self.open_timeout = window, frame_messages, open_timeout
        self.headers = {"X-API-Key": api_key} if api_key else {}
        self.seq = 0
        self._socket: ClientConnection | None = None

    async def connect(self) -> AsyncStreamClient:
        # compression off: deflating every frame costs more CPU than loopback bytes
        self._socket = await connect(
            self.url,
            additional_headers=self.headers,
            compression=None,
            max_size=None,
            open_timeout=self.open_timeout,
        )
        return self

    async def close(self) -> None:
        if self._socket is not None:
            await self._socket.close()
            self._socket = None

    async def __aenter__(self) -> AsyncStreamClient:
        return await self.connect()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ one message
    async def learn(self, X: Any, y: Any, ids: Any = None, *, scores: bool = False) -> dict:
        """Learn ``(X, y)`` as one message (all or nothing); returns the reply."""
        return await self._one(self._message("learn", _rows(X), y, ids, scores=scores))

    async def score(self, X: Any, ids: Any = None, *, keep: bool = True) -> np.ndarray:
        """Scores of ``X`` by the current model (events with ids are kept for their label)."""
        reply = await self._one(self._message("score", _rows(X), None, ids, keep=keep))
        return np.asarray(reply["scores"], dtype=np.float64)

    async def score_probabilities(
        self, X: Any, ids: Any = None, *, keep: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, calibrated probabilities)`` of ``X``."""
        message = self._message("score", _rows(X), None, ids, keep=keep, probabilities=True)
        reply = await self._one(message)
        return (
            np.asarray(reply["scores"], dtype=np.float64),
            np.asarray(reply["probabilities"], dtype=np.float64),
        )

    async def label(self, ids: Any, y: Any) -> list[tuple[str, str]]:
        """Delayed labels of scored events: ``[(id, learned | duplicate | expired | unknown)]``."""
        reply = await self._one(self._message("label", None, y, list(ids)))
        return [(item["id"], item["status"]) for item in reply["results"]]

    # ------------------------------------------------------------------ pipelined
    async def learn_batches(
        self, batches: Iterable[tuple] | AsyncIterable[tuple], *, raise_errors: bool = True
    ) -> Totals:
        """One message per ``(X, y)`` or ``(X, y, ids)`` of ``batches``, pipelined."""
        totals = Totals()

        async def frames() -> AsyncIterator[tuple[int, bytes]]:
            async for batch in _aiter(batches):
                X, y, ids = (*batch, None)[:3]
                X = _rows(X)
                totals.events += len(X)
                yield 1, self._message("learn", X, y, ids)

        await self._pipeline(self._grouped(frames()), totals.add)
        return _checked(totals, raise_errors)

    async def learn_events(
        self, X: Any, y: Any, ids: Any = None, *, raise_errors: bool = True
    ) -> Totals:
        """One message per event, pipelined (several messages per frame)."""
        X, y = _rows(X), np.asarray(y)
        totals = Totals(events=len(X))
        await self._pipeline(self._per_event("learn", X, y, ids), totals.add)
        return _checked(totals, raise_errors)

    async def score_events(self, X: Any, ids: Any = None, *, keep: bool = True) -> np.ndarray:
        """Scores of ``X``, one message per event, pipelined; StreamError if any is refused."""
        X = _rows(X)
        scores: list[float] = []
        totals = Totals(events=len(X))

        def collect(reply: dict) -> None:
            totals.add(reply)
            scores.extend(reply.get("scores", (np.nan,)))

        await self._pipeline(self._per_event("score", X, None, ids, keep=keep), collect)
        _checked(totals, True)
        return np.asarray(scores, dtype=np.float64)

    # ------------------------------------------------------------------ encoding
    def _next_seq(self, count: int = 1) -> int:
        first = self.seq + 1
        self.seq += count
        return first

    def _message(self, op: str, X: Any, y: Any, ids: Any, **options: bool) -> bytes:
        seq = self._next_seq()
        ids = None if ids is None else [None if i is None else str(i) for i in ids]
        if self.binary:
            return encode_binary(op, seq, X, None if y is None else np.asarray(y), ids, **options)
        message: dict[str, Any] = {"seq": seq, "op": op, **options}
        if op == "label":
            message["labels"] = [{"id": i, "y": int(v)} for i, v in zip(ids or (), y, strict=True)]
        else:
            message["events"] = [_event(X, y, ids, row) for row in range(len(X))]
        return orjson.dumps(message, option=_NUMPY)

    async def _per_event(
        self, op: str, X: np.ndarray, y: np.ndarray | None, ids: Any, keep: bool = True
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Frames of one message per event."""
        step = self.frame_messages
        options = {} if keep else {"keep": False}
        for start in range(0, len(X), step):
            stop = min(start + step, len(X))
            part_y = None if y is None else y[start:stop]
            if self.binary:
                part_ids = None if ids is None else ids[start:stop]
                seq = self._next_seq(stop - start)
                yield stop - start, encode_binary_rows(op, seq, X[start:stop], part_y, part_ids,
                                                       keep=keep)  # fmt: skip
                continue
            messages = [
                {"seq": self._next_seq(), "op": op, **options, **_event(X, y, ids, row)}
                for row in range(start, stop)
            ]
            yield stop - start, orjson.dumps(messages, option=_NUMPY)

    async def _grouped(
        self, messages: AsyncIterator[tuple[int, bytes]]
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Encoded single messages -> frames of up to ``frame_messages``."""
        group: list[bytes] = []
        async for _, message in messages:
            group.append(message)
            if len(group) >= self.frame_messages:
                yield len(group), self._join(group)
                group = []
        if group:
            yield len(group), self._join(group)

    def _join(self, messages: list[bytes]) -> bytes:
        return b"".join(messages) if self.binary else b"[" + b",".join(messages) + b"]"

    # ------------------------------------------------------------------ the wire
    @property
    def socket(self) -> ClientConnection:
        if self._socket is None:
            raise RuntimeError("the stream is not connected: use 'with' or call connect()")
        return self._socket

    async def _one(self, message: bytes) -> dict:
        replies: list[dict] = []
        await self._pipeline([(1, message)], replies.append)
        reply = replies[0]
        if "problem" in reply:
            raise StreamError([(reply.get("seq"), reply["problem"])])
        return reply

    async def _pipeline(
        self, frames: Iterable[tuple[int, bytes]] | AsyncIterable[tuple[int, bytes]], on_reply: Any
    ) -> None:
        """Send ``frames``, at most ``window`` messages unanswered; replies to ``on_reply``."""
        socket = self.socket
        unanswered = 0
        try:
            async for count, frame in _aiter(frames):
                await socket.send(frame, text=not self.binary)
                unanswered += count
                while unanswered > self.window:
                    unanswered -= await self._receive(on_reply)
            while unanswered > 0:
                unanswered -= await self._receive(on_reply)
        except ConnectionClosed as closed:
            received = closed.rcvd
            raise StreamClosed(
                None if received is None else received.code,
                "" if received is None else received.reason,
            ) from None

    async def _receive(self, on_reply: Any) -> int:
        replies = orjson.loads(await self.socket.recv(decode=False))
        for reply in replies:
            on_reply(reply)
        return len(replies)


def _event(X: np.ndarray, y: Any, ids: Any, row: int) -> dict[str, Any]:
    """Row ``row`` of ``X`` as an event object, with its label and id unless None."""
    event: dict[str, Any] = {"x": X[row]}
    if y is not None and y[row] is not None:
        event["y"] = int(y[row])
    if ids is not None and ids[row] is not None:
        event["id"] = str(ids[row])
    return event


async def _aiter(items: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


def _checked(totals: Totals, raise_errors: bool) -> Totals:
    if raise_errors and totals.problems:
        raise StreamError(totals.problems, totals)
    return totals


def _blocking(
    method: Callable[Concatenate[AsyncStreamClient, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[StreamClient, P], R]:
    """``method`` of :class:`AsyncStreamClient`, run to completion on the client's loop."""

    @functools.wraps(method)
    def run(self: StreamClient, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._runner.run(method(self._client, *args, **kwargs))

    return run


class StreamClient:
    """:class:`AsyncStreamClient`'s methods, blocking (on a private event loop)."""

    def __init__(self, url: str, model: str, **options: Any) -> None:
        self._runner = asyncio.Runner()
        self._client = AsyncStreamClient(url, model, **options)

    def connect(self) -> StreamClient:
        self._runner.run(self._client.connect())
        return self

    def close(self) -> None:
        try:
            self._runner.run(self._client.close())
        finally:
            self._runner.close()

    def __enter__(self) -> StreamClient:
        return self.connect()

    def __exit__(self, *_: object) -> None:
        self.close()

    learn = _blocking(AsyncStreamClient.learn)
    score = _blocking(AsyncStreamClient.score)
    score_probabilities = _blocking(AsyncStreamClient.score_probabilities)
    label = _blocking(AsyncStreamClient.label)
    learn_batches = _blocking(AsyncStreamClient.learn_batches)
    learn_events = _blocking(AsyncStreamClient.learn_events)
    score_events = _blocking(AsyncStreamClient.score_events)


__all__ = ["AsyncStreamClient", "StreamClient", "StreamClosed", "StreamError", "Totals"]
