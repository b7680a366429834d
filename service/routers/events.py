"""Events (learn), score, and delayed labels."""

from __future__ import annotations

import math
from collections import Counter
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from service.body import read_batch, read_body, require_json_media
from service.deps import Services, ServicesDep
from service.errors import InvalidInput
from service.fastlane import SettingBound, lane
from service.ingest import JSON, Batch, FeatureSpec, parse_label_items
from service.offload import in_thread_if, large_batch, large_body, model_spec
from service.openapi import LABELS_BODY, events_body, problems
from service.queue.enqueue import enqueue
from service.schemas import LabelsResponse, LearnResponse, QueuedResponse, ScoreResponse

#: ``?reasons=k``: 0 to ``AUCSTREAM_MAX_REASONS``
Reasons = Annotated[
    int,
    Query(
        ge=0,
        description="return each event's k largest feature contributions (0: none; at most "
        "AUCSTREAM_MAX_REASONS, 20 by default)",
    ),
    SettingBound("max_reasons"),
]

#: ``/events`` and ``/score`` are served by the lane (:mod:`service.fastlane`)
router = APIRouter(prefix="/v1/models", tags=["events"])

#: statuses every body-reading route can answer (besides those of every /v1 route)
_BODY_PROBLEMS = (400, 408, 413, 415, 422)
_QUEUED_DOC = {
    202: {"model": QueuedResponse, "description": "queue mode: appended, learned later"},
    **problems(429),
}


async def _read_events(
    services: Services, model_id: str, request: Request, labelled: bool, zero_based: bool
) -> tuple[FeatureSpec, Batch, bool]:
    """The model's layout (404 before the body is read), the body's validated batch, and
    whether the work is large (:func:`~service.body.read_batch`)."""
    spec = await model_spec(services.engine, model_id)
    batch, large = await read_batch(
        request, spec, services.settings, labelled=labelled, zero_based=zero_based
    )
    return spec, batch, large


async def _enqueue(
    services: Services, request: Request, model_id: str, spec: FeatureSpec | None, **data: Any
) -> JSONResponse:
    """Queue mode: the 202 of a batch (or labels: ``data``) appended to the model's stream
    (see ``enqueue``)."""
    appended = await enqueue(services, model_id, spec, **data)
    request.state.log_fields = {"queued": appended.events, "stream_ids": appended.stream_ids}
    body = QueuedResponse(
        model=model_id,
        queued=appended.events,
        stream_ids=appended.stream_ids,
        backlog_events=appended.backlog_events,
    )
    return JSONResponse(body.model_dump(), status_code=202)


@router.post(
    "/{model_id}/events",
    response_model=LearnResponse,
    openapi_extra=events_body(labelled=True),
    responses={**_QUEUED_DOC, **problems(*_BODY_PROBLEMS, 409)},  # type: ignore[dict-item]
)
@lane
async def post_events(
    model_id: str,
    request: Request,
    services: ServicesDep,
    scores: bool = False,
    zero_based: bool = False,
) -> Response:
    """Learn labelled events (JSON, NDJSON, LIBSVM or NPZ), in order, before returning.

    The whole batch is validated first: a bad event rejects the request and changes nothing.
    Events whose id was already learned are skipped and reported as duplicates.
    ``?scores=true`` returns each event's pre-update (prequential) score.

    Queue mode: the validated batch is appended to the model's stream and the answer is 202
    with the stream ids (a worker learns it; duplicates are counted in the model's metrics);
    429 with ``Retry-After`` when the model's backlog is full.
    """
    if services.queue is not None and scores:
        raise InvalidInput(
            "pre-update scores need sync mode: in queue mode events are learned later by a "
            "worker (read them back with GET .../metrics)",
            field="scores",
        )
    spec, batch, large = await _read_events(services, model_id, request, True, zero_based)
    if services.queue is not None:
        return await _enqueue(services, request, model_id, spec, batch=batch)
    telemetry = services.telemetry
    result = await services.engine.coalesce.learn(model_id, batch, want_scores=scores, large=large)
    telemetry.count_learned(model_id, result.learned, result.drifts)
    if result.duplicate_ids:
        telemetry.child(telemetry.duplicates, model_id).inc(len(result.duplicate_ids))
    body: dict[str, Any] = {
        "model": model_id,
        "version": result.version,
        "received": result.received,
        "learned": result.learned,
        "duplicates": len(result.duplicate_ids),
        "duplicate_ids": result.duplicate_ids,
        "scores": None
        if result.scores is None
        else [None if math.isnan(value) else value for value in result.scores.tolist()],
    }
    if telemetry.log_requests:
        logged = ("received", "learned", "duplicates", "version")
        request.state.log_fields = {name: body[name] for name in logged}
    return json_response(body)


@router.post(
    "/{model_id}/score",
    response_model=ScoreResponse,
    openapi_extra=events_body(labelled=False),
    responses=problems(*_BODY_PROBLEMS, 507),  # type: ignore[arg-type]
)
@lane
async def score(
    model_id: str,
    request: Request,
    services: ServicesDep,
    keep: bool = True,
    zero_based: bool = False,
    probabilities: bool = False,
    reasons: Reasons = 0,
) -> Response:
    """Score events with the current model.  Events with an ``id`` have their features and
    score kept (TTL) so that a label posted later to ``/labels`` is learned and measured with
    the score given now; ``?keep=false`` keeps nothing.  ``?probabilities=true`` adds each
    score's calibrated probability (the model's online Platt scaling, learned on its labelled
    stream: docs/algorithms/calibration.md); ``?reasons=k`` each event's k largest feature
    contributions (docs/algorithms/reasons.md)."""
    _, batch, large = await _read_events(services, model_id, request, False, zero_based)
    scored = await services.engine.coalesce.score(
        model_id, batch, keep=keep, probabilities=probabilities, reasons=reasons, large=large
    )
    values, calibrated = scored.scores, scored.probabilities
    services.telemetry.child(services.telemetry.scored, model_id).inc(len(values))
    body: dict[str, Any] = {
        "model": model_id,
        "version": scored.version,
        "scores": values.tolist(),
        "kept": scored.kept,
        "probabilities": None if calibrated is None else calibrated.tolist(),
        "reasons": scored.reasons,
    }
    return json_response(body)


def json_response(body: dict[str, Any]) -> Response:
    """The 200 of ``/events``, ``/score`` or ``/labels``: ``body``, the fields of the route's
    ``response_model`` (their one declaration), written by orjson: the same bytes as pydantic's
    ``model_dump_json`` (tests/service/test_hot_lane.py compares them) without building a model
    of values the engine made, which costs a one-event request measurably (loadtest/README.md)."""
    return Response(orjson.dumps(body), media_type="application/json")


@router.post(
    "/{model_id}/labels",
    response_model=LabelsResponse,
    openapi_extra=LABELS_BODY,
    responses={**_QUEUED_DOC, **problems(*_BODY_PROBLEMS)},  # type: ignore[dict-item]
)
@lane
async def post_labels(model_id: str, request: Request, services: ServicesDep) -> Response:
    """Delayed labels ``[{"id": ..., "y": ...}]`` joined to events scored with an id.

    Each id is reported ``learned``, ``duplicate`` (already learned), ``expired`` (its label
    came after the TTL) or ``unknown``.

    Queue mode: the validated labels are appended to the model's stream (202, stream ids);
    the worker joins them, and the outcome per id shows in the model's counts
    (``labels_joined``, ``duplicates`` ...) and the worker's log, not in the response.
    """
    engine, settings, telemetry = services.engine, services.settings, services.telemetry
    await model_spec(engine, model_id)  # 404 before reading the body
    require_json_media(request)
    body = await read_body(request, settings.max_body_bytes)
    large = large_body(settings, len(body), JSON)
    ids, labels = await in_thread_if(large, parse_label_items, body, settings.max_batch_events)
    large = large or large_batch(len(ids))
    if services.queue is not None:
        return await _enqueue(services, request, model_id, None, labels=(ids, labels))
    result = await engine.coalesce.labels(model_id, ids, labels, large=large)
    telemetry.count_learned(model_id, result.learned, result.drifts)
    for status, count in Counter(status for _, status in result.statuses).items():
        telemetry.labels.labels(model_id, status).inc(count)
    if telemetry.log_requests:
        request.state.log_fields = {"received": len(ids), "learned": result.learned}
    answer: dict[str, Any] = {
        "model": model_id,
        "version": result.version,
        "learned": result.learned,
        "results": [{"id": i, "status": s} for i, s in result.statuses],
    }
    return json_response(answer)
