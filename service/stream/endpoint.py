"""``/v1/models/{model_id}/stream``, the WebSocket route (docs/stream.md).  On connect the
origin, the API key, the warm-up and the model are checked, each refused by a close frame with
its reason.  Then a **reader** queues frames, bounded in bytes (backpressure: it stops reading),
and a **handler** takes what is queued, up to the batch limits, applies it
(:class:`~service.stream.session.Session`) and sends the replies as one text frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from service.auth import check_api_key
from service.deps import Services
from service.errors import Forbidden, ServiceError, Unauthorized
from service.hosts import close_reason
from service.ingest import JSON
from service.offload import in_thread_if, large_body, run_engine
from service.stream.blocks import decode_uniform, frame_layout, same_layout
from service.stream.protocol import (
    FrameLimits,
    Message,
    decode_binary,
    decode_text,
    frame_too_large,
)
from service.stream.session import Item, Session, total

logger = logging.getLogger("aucstream.stream")

POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013
INTERNAL_ERROR = 1011
MODEL_NOT_FOUND = 4404  # 4000 + the HTTP status (application close codes are 4000-4999)


async def stream(websocket: WebSocket) -> None:
    services: Services = websocket.app.state.services
    model_id = websocket.path_params["model_id"]
    await websocket.accept()
    refusal = await _refusal(websocket, services, model_id)
    if refusal is not None:
        await websocket.close(*refusal)
        return
    telemetry = services.telemetry
    telemetry.stream_connections.inc()
    try:
        await Connection(websocket, Session(services, model_id), services).serve()
    finally:
        telemetry.stream_connections.dec()


async def _refusal(websocket: WebSocket, services: Services, model_id: str):
    """``(close code, reason)`` when the connection is refused, else None."""
    origin = websocket.headers.get("origin")
    if origin is not None and not origin_allowed(
        origin, websocket.headers.get("host"), services.settings.ws_allowed_origins
    ):
        return POLICY_VIOLATION, close_reason(
            f"origin {origin} is not allowed (AUCSTREAM_WS_ALLOWED_ORIGINS)"
        )
    try:
        check_api_key(websocket, services.settings, writes=True)
    except (Unauthorized, Forbidden) as error:
        return POLICY_VIOLATION, close_reason(error.detail)
    warm = getattr(websocket.app.state, "warm", None)
    if warm is not None and not warm.is_set():
        return TRY_AGAIN_LATER, "warming up: the kernels are still being compiled or loaded"
    engine = services.engine
    try:
        if engine.cached_spec(model_id) is None:
            await run_engine(engine, engine.spec, model_id)
    except ServiceError as error:
        code = MODEL_NOT_FOUND if error.status == 404 else INTERNAL_ERROR
        return code, close_reason(error.detail)
    return None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_and_port(netloc: str, scheme: str) -> tuple[str, int | None]:
    """``(host, port)`` of ``host[:port]`` (brackets kept around an IPv6 address), the port
    defaulting to ``scheme``'s."""
    host, colon, port = netloc.lower().rpartition(":")
    if not colon or "]" in port:  # no port: the colon, if any, was inside an IPv6 address
        host, port = netloc.lower(), ""
    return host, int(port) if port.isdigit() else _DEFAULT_PORTS.get(scheme)


def origin_allowed(origin: str, host: str | None, allowed: list[str]) -> bool:
    """Whether a browser page of ``origin`` may open the stream (docs/stream.md, "Connecting"):
    the server's own origin (scheme, host and port of the ``Host`` connected to), or one of
    ``allowed`` (exact origins, ``null`` for file:// and sandboxed pages, ``*`` for any)."""
    normalized = origin.strip().rstrip("/").lower()
    if "*" in allowed or normalized in {entry.rstrip("/").lower() for entry in allowed}:
        return True
    scheme, separator, netloc = normalized.partition("://")
    if not separator or host is None or scheme not in _DEFAULT_PORTS:
        return False
    return _host_and_port(netloc, scheme) == _host_and_port(host, scheme)


class Connection:
    """The reader and the handler of one connection (module docstring)."""

    def __init__(self, websocket: WebSocket, session: Session, services: Services) -> None:
        self.websocket = websocket
        self.session = session
        settings = services.settings
        self.limits = FrameLimits(
            message_events=settings.max_batch_events,
            frame_messages=settings.ws_max_frame_messages,
            frame_events=settings.ws_max_frame_events,
            message_reasons=settings.max_reasons,
        )
        self.settings = settings
        self.max_frame_bytes = settings.ws_max_frame_bytes
        self.max_messages = settings.ws_max_batch_messages
        self.max_queued_bytes = settings.ws_max_queued_bytes
        self.wait = settings.ws_batch_wait_ms / 1000.0
        self.frames: deque[str | bytes] = deque()
        self.queued_bytes = 0
        self.arrived = asyncio.Event()  # a frame is queued, or the client left
        self.room = asyncio.Event()  # the queue is below its bound
        self.closed = False

    async def serve(self) -> None:
        reader = asyncio.create_task(self.read())
        try:
            await self.handle()
        except Exception:
            logger.exception("stream of model %r failed", self.session.model_id)
            with contextlib.suppress(Exception):
                await self.websocket.close(INTERNAL_ERROR, "internal error")
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def read(self) -> None:
        receive = self.websocket.receive
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                frame = message.get("bytes")
                if frame is None:
                    frame = message.get("text") or ""
                self.frames.append(frame)
                self.queued_bytes += len(frame)
                self.arrived.set()
                while self.queued_bytes > self.max_queued_bytes:
                    self.room.clear()
                    await self.room.wait()  # stop reading: the socket fills, the client waits
        finally:
            self.closed = True
            self.arrived.set()

    async def take(self) -> list[Item]:
        """Decode queued frames (whole) until ``max_messages`` messages or the frame limit's
        events: consecutive binary frames of one layout together, as blocks; a large frame
        (:func:`~service.offload.large_body`) in the thread pool."""
        items: list[Item] = []
        uniform: list[bytes] = []  # binary frames of one layout, not decoded yet
        layout = (0, 0)  # (messages, events) of each frame in uniform
        messages = events = 0
        frames, limits = self.frames, self.limits
        while frames and messages < self.max_messages and events < limits.frame_events:
            frame = frames.popleft()
            self.queued_bytes -= len(frame)
            large = large_body(self.settings, len(frame), JSON)
            if isinstance(frame, bytes) and not large:
                if uniform and same_layout(frame, uniform[0]):
                    uniform.append(frame)
                    messages, events = messages + layout[0], events + layout[1]
                    continue
                found = frame_layout(frame, limits) if len(frame) <= self.max_frame_bytes else None
                if found is not None:
                    self.flush(uniform, items)
                    uniform, layout = [frame], found
                    messages, events = messages + layout[0], events + layout[1]
                    continue
            self.flush(uniform, items)
            uniform = []
            decoded = await in_thread_if(large, self.decode, frame)
            items.extend(decoded)
            messages, events = messages + len(decoded), events + total(decoded)
        self.flush(uniform, items)
        if self.queued_bytes <= self.max_queued_bytes:
            self.room.set()
        return items

    def flush(self, frames: list[bytes], items: list[Item]) -> None:
        """Frames of one layout -> their blocks, else (refused as blocks) their messages."""
        if not frames:
            return
        blocks = decode_uniform(frames, self.limits.message_events)
        if blocks is not None:
            items.extend(blocks)
        else:
            for frame in frames:
                items.extend(self.decode(frame))

    def decode(self, frame: str | bytes) -> list[Message]:
        if len(frame) > self.max_frame_bytes:
            return [frame_too_large(len(frame), self.max_frame_bytes, "bytes")]
        if isinstance(frame, bytes):
            return decode_binary(frame, self.limits)
        return decode_text(frame, self.limits)

    async def next_batch(self) -> list[Item] | None:
        """The messages to apply next, waiting up to ``wait`` for more (None once the client
        has left)."""
        while not self.closed and not self.frames:
            self.arrived.clear()
            await self.arrived.wait()
        if self.closed:
            return None
        messages = await self.take()
        clock = asyncio.get_running_loop().time
        deadline = clock() + self.wait
        while total(messages, "n_messages") < self.max_messages and not self.closed:
            remaining = deadline - clock()
            if remaining <= 0:
                break
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)
            messages.extend(await self.take())
        return messages

    async def handle(self) -> None:
        send = self.websocket.send
        while (messages := await self.next_batch()) is not None:
            if not messages:
                continue
            text = await self.session.handle(messages)
            try:
                await send({"type": "websocket.send", "text": text})
            except (WebSocketDisconnect, RuntimeError, OSError):
                return  # the client left: its replies have nowhere to go


#: the route, mounted by ``service.app``
route = WebSocketRoute("/v1/models/{model_id}/stream", stream)
