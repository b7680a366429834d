"""Where work runs: on the event loop, or in the thread pool -- the one statement of the rule
(docs/architecture.md, "The event loop"), applied by every path that takes events.  Bodies and
frames are judged by bytes before parsing (:func:`large_body`), batches by events after
(:func:`large_batch`); smaller work runs inline, where a thread hop costs more than it saves.
Every engine call is still made, and awaited, on the app's event loop, which hands the call
itself to a thread (:func:`run_engine`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from service.engine import Engine
from service.ingest import JSON, NDJSON, NPZ, FeatureSpec
from service.settings import Settings

T = TypeVar("T")

#: How many times ``settings.offload_body_bytes`` a body may be and still be parsed on the event
#: loop, by what parsing it costs per byte (loadtest/README.md has the costs): LIBSVM, and JSON /
#: NDJSON of sparse or hashed models (a new feature name for every value is the worst), x1;
#: JSON and NDJSON of dense models, about ten times cheaper, x16; NPZ whose members are stored
#: (parsing is a copy), cheaper again, x64.  A compressed NPZ is always parsed in the thread pool
#: (inflating costs per byte of output, which the body size does not bound).  Stream frames and
#: label bodies are x1: they are made into Python objects a message or a label at a time.
DENSE_TEXT_FACTOR = 16
NPZ_FACTOR = 64

#: the most events a batch may hold and still be learned or scored on the event loop (and, on
#: the stream, validated and answered there): below it a thread hop costs more than it saves,
#: beyond it the work dwarfs a hop (loadtest/README.md, "The offload rule", has the figures)
INLINE_EVENTS = 1_000
#: what a stream message costs beside learning its events, counted in events (it is made into
#: a Python object, validated and answered with a reply of its own): one-event messages leave
#: the loop past 250 a batch
MESSAGE_EVENTS = 3


def inline_limit(settings: Settings, kind: str, spec: FeatureSpec | None = None) -> int:
    """The largest body of media type ``kind`` parsed on the event loop (see the factors);
    without ``spec`` (stream frames, label bodies), ``AUCSTREAM_OFFLOAD_BODY_BYTES``."""
    if kind == NPZ:
        return settings.offload_body_bytes * NPZ_FACTOR
    if spec is not None and spec.feature_mode == "dense" and kind in (JSON, NDJSON):
        return settings.offload_body_bytes * DENSE_TEXT_FACTOR
    return settings.offload_body_bytes


def large_body(settings: Settings, size: int, kind: str, spec: FeatureSpec | None = None) -> bool:
    """Whether a body (or frame) of ``size`` bytes of media type ``kind`` is parsed in the
    thread pool, and its batch learned or scored there."""
    return size > inline_limit(settings, kind, spec)


def large_batch(n_events: int, n_messages: int = 0) -> bool:
    """Whether a batch of ``n_events`` events (carried by ``n_messages`` stream messages) is
    learned or scored in the thread pool."""
    return n_events + MESSAGE_EVENTS * n_messages > INLINE_EVENTS


async def in_thread_if(large: bool, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)``: in the thread pool when the work is ``large``, else
    inline.  Not for engine calls (:func:`run_engine`, or the coalescer)."""
    if large:
        return await run_in_threadpool(functools.partial(function, *args, **kwargs))
    return function(*args, **kwargs)


async def run_engine(
    engine: Engine,
    function: Callable[..., T],
    *args: Any,
    offload: bool = False,
    **kwargs: Any,
) -> T:
    """Call an engine method (or a function of ``engine``): inline when the store never blocks
    (memory) and the work is small, else in the thread pool (Redis round trips must not stall
    the event loop, nor must learning a large batch; ``offload=True`` says the work is large).
    """
    return await in_thread_if(offload or engine.store.blocking, function, *args, **kwargs)


async def model_spec(engine: Engine, model_id: str) -> FeatureSpec:
    """The feature layout to parse a body with: from the process cache without a call, else
    through :func:`run_engine` (a store round trip must not stall the event loop); raises
    :class:`~service.errors.ModelNotFound` before the body is read."""
    spec = engine.cached_spec(model_id)
    return spec if spec is not None else await run_engine(engine, engine.spec, model_id)
