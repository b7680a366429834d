"""Request bodies as the routes read them: size limits, strict JSON, and an event batch parsed
on the event loop or in the thread pool (:func:`read_batch`)."""

from __future__ import annotations

import zipfile
from collections.abc import Callable

from fastapi import Request
from starlette.requests import ClientDisconnect

from service.errors import PayloadTooLarge, UnsupportedMediaType
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
from service.ingest.archive import UnreadableDirectory, central_directory, check_method
from service.ingest.npz import NPZ_ARRAYS
from service.ingest.objects import parse_json
from service.offload import in_thread_if, inline_limit, large_batch
from service.settings import Settings


def require_json_media(request: Request) -> None:
    """415 unless the request's body is declared as JSON."""
    if media_type(request.headers.get("content-type")) != JSON:
        raise UnsupportedMediaType(
            f"send the body as {JSON}, not {request.headers.get('content-type') or '(none)'}",
            field="content-type",
        )


async def require_json(request: Request) -> None:
    """For a route with a declared JSON body: 415 for another media type, 400 for a body that
    is not strict JSON (FastAPI's decoder takes ``NaN``), before the fields are validated."""
    require_json_media(request)
    parse_json(await request.body())  # already read by FastAPI: a small body decoded again


async def read_body(
    request: Request, limit: int, feed: Callable[[bytes], None] | None = None
) -> bytes:
    """The whole body, 413 past ``limit`` bytes; with ``feed``, each chunk goes there instead."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes exceeds the limit of {limit} bytes")
    # ``receive`` rather than ``Request.stream()``: an async generator costs as much as parsing
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
    """413 when the batch's event ids, remembered, add up to more than ``limit`` characters."""
    if batch.ids is not None:
        total = sum(len(event_id) for event_id in batch.ids if event_id is not None)
        if total > limit:
            raise PayloadTooLarge(
                f"the batch's event ids add up to {total:,} characters, more than the limit "
                f"of {limit:,} per request (AUCSTREAM_MAX_EVENT_ID_BYTES)",
                field="id",
            )
    return batch


def npz_compressed(body: bytes) -> bool:
    """Whether any member of a zip archive is compressed (or the directory unreadable: the
    parser says why); a member neither stored nor deflated is refused here (415)."""
    compressed = False
    try:
        for name, method, flags in central_directory(body, most=len(NPZ_ARRAYS)):
            check_method(name, method, flags, what="the .npz body")
            compressed = compressed or method != zipfile.ZIP_STORED
    except UnreadableDirectory:
        return True
    return compressed


async def read_batch(
    request: Request,
    spec: FeatureSpec,
    settings: Settings,
    *,
    labelled: bool,
    zero_based: bool = False,
) -> tuple[Batch, bool]:
    """The body's validated batch, and whether the work is large (:mod:`service.offload`)."""
    content_type = request.headers.get("content-type")
    kind = media_type(content_type)
    limit = inline_limit(settings, kind, spec)
    if kind == NDJSON:
        reader = NDJSONReader(settings.max_batch_events, decode_inline_bytes=limit)
        await read_body(request, settings.max_body_bytes, feed=reader.feed)
        large = reader.deferred
        batch = await in_thread_if(large, reader.finish, spec, labelled=labelled)
    else:
        body = await read_body(request, settings.max_body_bytes)
        large = len(body) > limit or (kind == NPZ and npz_compressed(body))
        batch = await in_thread_if(
            large, parse_events, body, content_type, spec, labelled=labelled, zero_based=zero_based,
            max_events=settings.max_batch_events, max_dense_cells=settings.max_dense_cells,
            max_inflated_bytes=settings.max_inflated_bytes,
        )  # fmt: skip
    return check_id_bytes(batch, settings.max_event_id_bytes), large or large_batch(len(batch))
