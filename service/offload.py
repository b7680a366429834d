"""Where an engine call runs: on the event loop or in the thread pool."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from service.engine import Engine
from service.ingest import FeatureSpec

T = TypeVar("T")


async def run_engine(
    engine: Engine,
    function: Callable[..., T],
    *args: Any,
    offload: bool = False,
    **kwargs: Any,
) -> T:
    """Call an engine method (or a function of ``engine``): inline when the store never blocks
    (memory) and the work is small, else in the thread pool (Redis round trips must not stall
    the event loop, nor must learning a large batch; ``offload=True`` says the work is large,
    see :func:`service.body.read_batch`).

    Why inline for the memory store: a thread-pool hop costs more CPU and latency than scoring
    one event or learning a small batch (loadtest/README.md); the work is CPU-bound either way,
    so a thread would add latency without adding parallelism.
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
