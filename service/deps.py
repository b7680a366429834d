"""Typed FastAPI dependencies (``EngineDep``, ``SettingsDep``) and the request-body helpers."""

from __future__ import annotations

import functools
import hmac
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, HTTPConnection

from service.engine import Engine
from service.errors import (
    Forbidden,
    ModelChanged,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
)
from service.ingest import (
    JSON,
    NDJSON,
    NPZ,
    Batch,
    FeatureSpec,
    NDJSONReader,
    media_type,
    parse_events,
)
from service.ingest.archive import check_method
from service.ingest.npz import NPZ_ARRAYS
from service.ingest.objects import parse_json
from service.queue import Appended, StreamQueue
from service.settings import Settings
from service.telemetry import Telemetry


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_telemetry(request: Request) -> Telemetry:
    return request.app.state.telemetry


# The dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in
# the thread pool, a hop that costs more CPU than these functions and than scoring one event.
@dataclass(frozen=True)
class Services:
    """What the hot routes need, resolved as one dependency (each FastAPI dependency costs
    ~20-40 µs per request; the ingest and score routes are where that shows)."""

    engine: Engine
    settings: Settings
    telemetry: Telemetry
    #: queue mode: where validated batches are appended (None in sync mode)
    queue: StreamQueue | None = None


async def get_services(request: Request) -> Services:
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
TelemetryDep = Annotated[Telemetry, Depends(get_telemetry)]

T = TypeVar("T")

_READ_METHODS = {"GET", "HEAD", "OPTIONS"}


def _presented_key(connection: HTTPConnection) -> str | None:
    key = connection.headers.get("x-api-key")
    if key:
        return key
    authorization = connection.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(key: str, keys: list[str]) -> bool:
    return any(hmac.compare_digest(key.encode(), candidate.encode()) for candidate in keys)


def check_api_key(connection: HTTPConnection, settings: Settings, *, writes: bool) -> None:
    """401 without a known key, 403 for a read-only key on a route that ``writes``, when keys
    are configured (``X-API-Key`` or ``Authorization: Bearer``); the REST routes and the
    stream (on connect) share it."""
    if not settings.auth_enabled:
        return
    key = _presented_key(connection)
    if key is None:
        raise Unauthorized(
            "this server requires an API key: send it as 'X-API-Key' or "
            "'Authorization: Bearer <key>'",
            field="X-API-Key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if _matches(key, settings.api_keys):
        return
    if _matches(key, settings.read_only_api_keys):
        if not writes:
            return
        raise Forbidden("this API key is read-only; writing needs a read-write key")
    raise Unauthorized("unknown API key", field="X-API-Key", headers={"WWW-Authenticate": "Bearer"})


async def require_json(request: Request) -> None:
    """For a route with a declared JSON body: 415 for a body declared as anything but
    ``application/json`` (FastAPI would read it as bytes and answer 422 about the fields),
    and 400 for a body that is not strict JSON as ``/events`` reads it (FastAPI's decoder
    takes Python's ``NaN`` / ``Infinity``), before the fields are validated."""
    if media_type(request.headers.get("content-type")) != JSON:
        raise UnsupportedMediaType(
            f"send the body as {JSON}, not {request.headers.get('content-type') or '(none)'}",
            field="content-type",
        )
    parse_json(await request.body())  # already read by FastAPI: a small body decoded again


async def require_api_key(request: Request) -> None:
    """When keys are configured every /v1 route needs one; read-only keys may only GET."""
    check_api_key(request, request.app.state.settings, writes=request.method not in _READ_METHODS)


async def run_engine(
    engine: Engine,
    function: Callable[..., T],
    *args: Any,
    offload: bool = False,
    **kwargs: Any,
) -> T:
    """Call an engine method: inline when the store never blocks (memory) and the work is
    small, else in the thread pool (Redis round trips must not stall the event loop, nor must
    learning a large batch; ``offload=True`` says the work is large, see :func:`read_batch`).

    Why inline for the memory store: a thread-pool hop costs ~0.05 ms of CPU and ~0.1 ms of
    latency (measured), more than scoring one event or learning a small batch; the work is
    CPU-bound either way, so a thread would add latency without adding parallelism.
    """
    if offload or engine.store.blocking:
        return await run_in_threadpool(functools.partial(function, *args, **kwargs))
    return function(*args, **kwargs)


async def model_spec(engine: Engine, model_id: str) -> FeatureSpec:
    """The feature layout to parse a body with: from the process cache without a call, else
    through :func:`run_engine` (a store round trip must not stall the event loop); raises
    :class:`~service.errors.ModelNotFound` before the body is read."""
    spec = engine.cached_spec(model_id)
    return spec if spec is not None else await run_engine(engine, engine.spec, model_id)


async def enqueue(
    services: Services,
    model_id: str,
    spec: FeatureSpec | None,
    append: Callable[[str], Appended],
) -> Appended:
    """Queue mode: append a validated batch for the incarnation it was parsed against; if the
    model was re-created since (by any process) with the same layout, append to the new one,
    else 409.  Counts the events queued."""
    engine = services.engine
    incarnation = engine.cached_incarnation(model_id)
    if incarnation is None:
        incarnation = (await run_engine(engine, engine.model, model_id)).incarnation
    try:
        appended = await run_in_threadpool(append, incarnation)
    except ModelChanged:
        current = await run_engine(engine, engine.model, model_id)  # reloads the new one
        if spec is not None and current.spec != spec:
            raise
        appended = await run_in_threadpool(append, current.incarnation)
    services.telemetry.events_queued.labels(model_id).inc(appended.events)
    return appended


async def read_body(
    request: Request, limit: int, feed: Callable[[bytes], None] | None = None
) -> bytes:
    """The whole body, refusing more than ``limit`` bytes (before reading, from
    Content-Length, and while reading, for chunked bodies).  With ``feed``, each chunk goes
    to ``feed`` as it arrives instead (and nothing is returned)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes exceeds the limit of {limit} bytes")
    # ``receive`` itself rather than ``Request.stream()``: an async generator costs ~1-2 us
    # per request (the event loop's hooks keep every one in a WeakSet), half of parsing a
    # one-event body; the messages are read as ``stream()`` reads them
    receive = request.receive
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
        if feed is None:
            chunks.append(chunk)
        elif chunk:
            feed(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def check_id_bytes(batch: Batch, limit: int) -> Batch:
    """413 when the batch's event ids, which the service remembers (for a day by default),
    add up to more than ``limit`` characters."""
    if batch.ids is not None:
        total = sum(len(event_id) for event_id in batch.ids if event_id is not None)
        if total > limit:
            raise PayloadTooLarge(
                f"the batch's event ids add up to {total:,} characters, more than the limit "
                f"of {limit:,} per request (AUCSTREAM_MAX_EVENT_ID_BYTES)",
                field="id",
            )
    return batch


#: How many times ``settings.offload_body_bytes`` a body may be and still be parsed on the event
#: loop, by what parsing it costs per byte (CPU, measured on the 2-vCPU development machine):
#: LIBSVM ~17 ns, JSON / NDJSON of sparse or hashed models 7-190 ns (a new feature name for
#: every value is the worst): x1; JSON of dense models ~1.6 ns, NDJSON ~4 ns: x16; NPZ whose
#: members are stored (parsing is a copy, 0.2-0.5 ns): x64.  A compressed NPZ is always parsed
#: in the thread pool (inflating costs per byte of output, which the body size does not bound).
DENSE_TEXT_FACTOR = 16
NPZ_FACTOR = 64
_ZIP_END = b"PK\x05\x06"
_ZIP_ENTRY = b"PK\x01\x02"
#: end of central directory: entries in total, (size,) offset of the directory
_ZIP_END_FIELDS = struct.Struct("<H4xI")
#: a directory entry: signature, flags, compression method, lengths of name, extra field,
#: comment
_ZIP_ENTRY_FIELDS = struct.Struct("<4s4xHH16xHHH")


def npz_compressed(body: bytes) -> bool:
    """Whether any member of a zip archive is compressed, from its central directory (~2 us
    for an NPZ of three arrays); True too when the directory cannot be read or has more
    entries than an NPZ may (the parser will say why).  A member neither stored nor deflated
    (or encrypted) is refused here, on the event loop, with the parser's 415 naming it."""
    end = body.rfind(_ZIP_END, max(0, len(body) - 65_557))  # the comment is at most 64 KiB
    if end < 0 or end + 22 > len(body):
        return True
    n_entries, position = _ZIP_END_FIELDS.unpack_from(body, end + 10)
    if n_entries > len(NPZ_ARRAYS):
        return True
    compressed = False
    for _ in range(n_entries):
        if position + 46 > end:
            return True
        signature, flags, method, *lengths = _ZIP_ENTRY_FIELDS.unpack_from(body, position)
        if signature != _ZIP_ENTRY:
            return True
        encoding = "utf-8" if flags & 0x800 else "cp437"  # as zipfile decodes names
        name = body[position + 46 : position + 46 + lengths[0]].decode(encoding, "replace")
        check_method(name, method, flags, what="the .npz body")
        compressed = compressed or method != zipfile.ZIP_STORED
        position += 46 + sum(lengths)
    return compressed


def inline_limit(settings: Settings, kind: str, spec: FeatureSpec) -> int:
    """The largest body of media type ``kind`` parsed on the event loop (see the factors)."""
    if kind == NPZ:
        return settings.offload_body_bytes * NPZ_FACTOR
    if spec.feature_mode == "dense" and kind in (JSON, NDJSON):
        return settings.offload_body_bytes * DENSE_TEXT_FACTOR
    return settings.offload_body_bytes


async def read_batch(
    request: Request,
    spec: FeatureSpec,
    settings: Settings,
    *,
    labelled: bool,
    zero_based: bool = False,
) -> tuple[Batch, bool]:
    """Parse the body into a validated batch; NDJSON is decoded line by line as it streams.

    Returns the batch and whether the body was large: then it was parsed in the thread pool
    (a 9 MB body of hashed JSON costs seconds to parse: on the event loop it would hold every
    other request, ``/healthz`` included, that long), and the caller learns or scores it there
    too.  Smaller bodies are parsed inline, as a thread hop costs more than it saves there
    (a 1,000-event dense JSON body, ~1 MB, cost 0.5-0.9 ms more CPU per request in the thread
    pool than inline: a third of the request).  See :func:`inline_limit`.
    """
    content_type = request.headers.get("content-type")
    kind = media_type(content_type)
    limit = inline_limit(settings, kind, spec)
    if kind == NDJSON:
        reader = NDJSONReader(settings.max_batch_events, decode_inline_bytes=limit)
        await read_body(request, settings.max_body_bytes, feed=reader.feed)
        large = reader.deferred
        finish = functools.partial(reader.finish, spec, labelled=labelled)
        batch = await run_in_threadpool(finish) if large else finish()
    else:
        body = await read_body(request, settings.max_body_bytes)
        parse = functools.partial(
            parse_events,
            body,
            content_type,
            spec,
            labelled=labelled,
            max_events=settings.max_batch_events,
            zero_based=zero_based,
            max_dense_cells=settings.max_dense_cells,
            max_inflated_bytes=settings.max_inflated_bytes,
        )
        large = len(body) > limit or (kind == NPZ and npz_compressed(body))
        batch = await run_in_threadpool(parse) if large else parse()
    return check_id_bytes(batch, settings.max_event_id_bytes), large
