"""Models: create, list, get, delete, reset, weights, snapshot export / import."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Depends, Request, Response, status
from starlette.concurrency import run_in_threadpool

from service import models as model_requests
from service import snapshot
from service.body import read_body, require_json
from service.deps import EngineDep, SettingsDep
from service.errors import InvalidInput, ModelExists, UnsupportedMediaType
from service.ingest import media_type
from service.offload import in_thread_if, large_weights, run_engine
from service.openapi import SNAPSHOT_BODY, problems
from service.schemas import ModelCreate, ModelInfo, ModelList, WeightsResponse

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.post(
    "",
    response_model=ModelInfo,
    status_code=status.HTTP_201_CREATED,
    responses=problems(400, 408, 409, 415, 422, 507),  # type: ignore[arg-type]
    dependencies=[Depends(require_json)],
)
async def create_model(request_body: ModelCreate, engine: EngineDep) -> ModelInfo:
    """Create a model; learner hyper-parameters are validated and errors name the field."""
    return await run_engine(engine, model_requests.create_model, engine, request_body)


@router.get("", response_model=ModelList)
async def list_models(engine: EngineDep) -> ModelList:
    return ModelList(models=await run_engine(engine, engine.list_models))


@router.get("/{model_id}", response_model=ModelInfo)
async def get_model(model_id: str, engine: EngineDep) -> ModelInfo:
    return await run_engine(engine, engine.info, model_id)


@router.delete("/{model_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_model(model_id: str, engine: EngineDep) -> Response:
    await run_engine(engine, engine.delete_model, model_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{model_id}/reset", response_model=ModelInfo)
async def reset_model(model_id: str, engine: EngineDep) -> ModelInfo:
    """Forget everything learned (state, metrics, event ids, pending labels)."""
    return await run_engine(engine, model_requests.reset_model, engine, model_id)


@router.get("/{model_id}/weights", response_model=WeightsResponse)
async def weights(model_id: str, engine: EngineDep, settings: SettingsDep) -> Response:
    """The served weights (the averaged iterate for learners that average): on the scaled
    features the model learns from (``coef``, ``intercept``) and on the features as posted
    (``raw_coef``, ``raw_intercept``: the online scaler folded in), with the feature names."""
    served = await run_engine(engine, engine.weights, model_id)

    def render() -> bytes:
        document = model_requests.weights_document(served)
        return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)

    content = await in_thread_if(large_weights(settings, len(served.coef)), render)
    return Response(content, media_type="application/json")


@router.get(
    "/{model_id}/snapshot",
    response_class=Response,
    responses={200: {"content": {snapshot.MEDIA_TYPE: {}}}},
)
async def export_snapshot(model_id: str, engine: EngineDep) -> Response:
    """The model as a pickle-free zip of .npy arrays plus a JSON manifest (see
    ``service/snapshot.py`` for the format)."""
    # in the thread pool: 10-30 s for a large model
    body = await run_in_threadpool(lambda: snapshot.export_snapshot(*engine.state_arrays(model_id)))
    return Response(
        body,
        media_type=snapshot.MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{model_id}.aucstream.zip"'},
    )


@router.put(
    "/{model_id}/snapshot",
    response_model=ModelInfo,
    status_code=status.HTTP_201_CREATED,
    openapi_extra=SNAPSHOT_BODY,
    responses=problems(400, 408, 409, 413, 415, 422, 507),  # type: ignore[arg-type]
)
async def import_snapshot(
    model_id: str, request: Request, engine: EngineDep, settings: SettingsDep, replace: bool = False
) -> ModelInfo:
    """Create model ``model_id`` from a snapshot (``replace=true`` overwrites an existing one)."""
    if media_type(request.headers.get("content-type")) not in snapshot.IMPORTED_MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"a snapshot is sent as {snapshot.MEDIA_TYPE}", field="content-type"
        )
    body = await read_body(request, settings.max_body_bytes)
    config, arrays = await run_in_threadpool(
        snapshot.import_snapshot,
        body,
        max_inflated_bytes=settings.max_inflated_bytes,
        max_manifest_bytes=settings.max_manifest_bytes,
    )
    try:
        config = config.model_copy(update={"id": model_id})
        ModelCreate.model_validate(config.model_dump(include=set(ModelCreate.model_fields)))
    except ValueError as error:
        raise InvalidInput(f"invalid model id: {error}", field="model_id") from None
    try:
        return await run_engine(
            engine, engine.restore_model, config, arrays, replace=replace, offload=True
        )
    except ModelExists as exists:
        # the one way past the conflict is a query parameter: name it
        raise ModelExists(
            f"{exists.detail}; add ?replace=true to the PUT to overwrite it with the snapshot",
            field=exists.field,
        ) from None
