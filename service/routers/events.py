"""Events (learn), score, and delayed labels."""

from __future__ import annotations

import math

from fastapi import APIRouter, Request

from service.deps import ServicesDep, read_batch, read_body, run_engine
from service.errors import UnsupportedMediaType
from service.ingest import EVENT_CONTENT_TYPES, JSON, media_type, parse_label_items
from service.schemas import LabelsResponse, LabelStatus, LearnResponse, ScoreResponse

router = APIRouter(prefix="/v1/models", tags=["events"])

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {content_type: {} for content_type in EVENT_CONTENT_TYPES},
    }
}


@router.post("/{model_id}/events", response_model=LearnResponse, openapi_extra=_BODY_DOC)
async def post_events(
    model_id: str,
    request: Request,
    services: ServicesDep,
    scores: bool = False,
    zero_based: bool = False,
) -> LearnResponse:
    """Learn labelled events (JSON, NDJSON, LIBSVM or NPZ), in order, before returning.

    The whole batch is validated first: a bad event rejects the request and changes nothing.
    Events whose id was already learned are skipped and reported as duplicates.
    ``?scores=true`` returns each event's pre-update (prequential) score.
    """
    engine, settings, telemetry = services.engine, services.settings, services.telemetry
    spec = engine.cached_spec(model_id)
    if spec is None:
        spec = await run_engine(engine, engine.spec, model_id)
    batch = await read_batch(request, spec, settings, labelled=True, zero_based=zero_based)
    result = await run_engine(engine, engine.learn, model_id, batch, want_scores=scores)
    telemetry.events_learned.labels(model_id).inc(result.learned)
    if result.duplicate_ids:
        telemetry.duplicates.labels(model_id).inc(len(result.duplicate_ids))
    return LearnResponse(
        model=model_id,
        version=result.version,
        received=result.received,
        learned=result.learned,
        duplicates=len(result.duplicate_ids),
        duplicate_ids=result.duplicate_ids,
        scores=None
        if result.scores is None
        else [None if math.isnan(value) else value for value in result.scores.tolist()],
    )


@router.post("/{model_id}/score", response_model=ScoreResponse, openapi_extra=_BODY_DOC)
async def score(
    model_id: str,
    request: Request,
    services: ServicesDep,
    keep: bool = True,
    zero_based: bool = False,
) -> ScoreResponse:
    """Score events with the current model.  Events with an ``id`` have their features and
    score kept (TTL) so that a label posted later to ``/labels`` is learned and measured with
    the score given now; ``?keep=false`` keeps nothing."""
    engine, settings, telemetry = services.engine, services.settings, services.telemetry
    spec = engine.cached_spec(model_id)
    if spec is None:
        spec = await run_engine(engine, engine.spec, model_id)
    batch = await read_batch(request, spec, settings, labelled=False, zero_based=zero_based)
    version, values, kept = await run_engine(engine, engine.score, model_id, batch, keep=keep)
    telemetry.scored.labels(model_id).inc(len(values))
    return ScoreResponse(model=model_id, version=version, scores=values.tolist(), kept=kept)


@router.post("/{model_id}/labels", response_model=LabelsResponse)
async def post_labels(
    model_id: str,
    request: Request,
    services: ServicesDep,
) -> LabelsResponse:
    """Delayed labels ``[{"id": ..., "y": ...}]`` joined to events scored with an id.

    Each id is reported ``learned``, ``duplicate`` (already learned), ``expired`` (its label
    came after the TTL) or ``unknown``.
    """
    engine, settings, telemetry = services.engine, services.settings, services.telemetry
    if engine.cached_spec(model_id) is None:
        await run_engine(engine, engine.spec, model_id)  # 404 before reading the body
    if media_type(request.headers.get("content-type")) != JSON:
        raise UnsupportedMediaType("labels are sent as application/json", field="content-type")
    body = await read_body(request, settings.max_body_bytes)
    ids, labels = parse_label_items(body, settings.max_batch_events)
    result = await run_engine(engine, engine.labels, model_id, ids, labels)
    telemetry.events_learned.labels(model_id).inc(result.learned)
    return LabelsResponse(
        model=model_id,
        version=result.version,
        learned=result.learned,
        results=[LabelStatus(id=i, status=s) for i, s in result.statuses],  # type: ignore[arg-type]
    )
