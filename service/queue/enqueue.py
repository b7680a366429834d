"""Queue mode's side of a request: a validated batch appended to the model's stream for the
incarnation it was parsed against (the HTTP routes and the WebSocket stream share it)."""

from __future__ import annotations

import numpy as np
from starlette.concurrency import run_in_threadpool

from service.deps import Services
from service.errors import ModelChanged
from service.ingest import Batch, FeatureSpec
from service.offload import run_engine
from service.queue.streams import Appended


async def enqueue(
    services: Services,
    model_id: str,
    spec: FeatureSpec | None,
    batch: Batch | None = None,
    labels: tuple[list[str], np.ndarray] | None = None,
) -> Appended:
    """Append a validated ``batch`` of events (parsed as ``spec`` describes) or delayed
    ``labels`` (ids, labels) for the incarnation it was parsed against; if the model was
    re-created since (by any process) with the same layout, append to the new one, else 409.
    Counts the events queued.  The entries are encoded in the thread that appends them."""
    engine, queue = services.engine, services.queue
    assert queue is not None

    def append(incarnation: str) -> Appended:
        if batch is not None:
            return queue.append_shared(model_id, incarnation, queue.event_entries(batch))
        assert labels is not None
        return queue.append_shared(model_id, incarnation, queue.label_entries(*labels))

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
