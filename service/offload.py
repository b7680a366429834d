"""Where work runs, on the event loop or in the thread pool: the one rule of every path that
takes events (docs/architecture.md, "The event loop").  Bodies and frames are judged by bytes,
batches by events; smaller work runs inline, where a thread hop costs more than it saves."""

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
#: loop, by its parsing cost per byte (loadtest/README.md): x1 for the rest, x16 for dense JSON /
#: NDJSON, x64 for stored NPZ (a copy).  A compressed NPZ always leaves the loop.
DENSE_TEXT_FACTOR = 16
NPZ_FACTOR = 64

#: the bytes a coefficient adds to the JSON of ``GET .../weights`` (coef and raw_coef, ~24 each,
#: and its name), a document judged as a dense JSON body of its size
WEIGHT_BYTES = 64

#: the most events a batch may hold and still be learned or scored on the event loop
#: (loadtest/README.md, "The offload rule")
INLINE_EVENTS = 1_000
#: what a stream message costs beside its events, counted in events
MESSAGE_EVENTS = 3


def inline_limit(settings: Settings, kind: str, spec: FeatureSpec | None = None) -> int:
    """The largest body of media type ``kind`` parsed on the event loop."""
    if kind == NPZ:
        return settings.offload_body_bytes * NPZ_FACTOR
    if spec is not None and spec.feature_mode == "dense" and kind in (JSON, NDJSON):
        return settings.offload_body_bytes * DENSE_TEXT_FACTOR
    return settings.offload_body_bytes


def large_body(settings: Settings, size: int, kind: str, spec: FeatureSpec | None = None) -> bool:
    """Whether a body (or frame) of ``size`` bytes is handled in the thread pool."""
    return size > inline_limit(settings, kind, spec)


def large_weights(settings: Settings, n_coef: int) -> bool:
    """Whether the weights document of ``n_coef`` coefficients is written in the thread pool."""
    return WEIGHT_BYTES * n_coef > settings.offload_body_bytes * DENSE_TEXT_FACTOR


def large_batch(n_events: int, n_messages: int = 0) -> bool:
    """Whether a batch (of ``n_messages`` stream messages) is handled in the thread pool."""
    return n_events + MESSAGE_EVENTS * n_messages > INLINE_EVENTS


async def in_thread_if(large: bool, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)``, in the thread pool when ``large``; not for engine calls."""
    if large:
        return await run_in_threadpool(functools.partial(function, *args, **kwargs))
    return function(*args, **kwargs)


async def run_engine(
    engine: Engine, function: Callable[..., T], *args: Any, offload: bool = False, **kwargs: Any
) -> T:
    """An engine call: inline when the store never blocks (memory) and the work is small, else
    in the thread pool (``offload=True``: the work is large)."""
    return await in_thread_if(offload or engine.store.blocking, function, *args, **kwargs)


async def model_spec(engine: Engine, model_id: str) -> FeatureSpec:
    """The feature layout to parse a body with (404 before the body is read)."""
    spec = engine.cached_spec(model_id)
    return spec if spec is not None else await run_engine(engine, engine.spec, model_id)
