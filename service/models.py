"""Model requests as the engine takes them: a creation's learner and configuration, validated
with errors naming the request's fields; a reset; the ``/weights`` document."""

from __future__ import annotations

import uuid
from typing import Any

from core.learners import available_learners, learner_class, make_learner, pauc_params_for
from core.learners._base import OnlineLearner
from core.preprocessing import NOT_FOLDABLE
from service.engine import Engine, ServedWeights
from service.engine.model import stored_params
from service.errors import InvalidInput
from service.kernels import require_kernels
from service.schemas import (
    ModelConfig,
    ModelCreate,
    ModelInfo,
    default_regret_window,
    resolve_scaling,
)


def _learner_field(error: Exception) -> str:
    """The request field a learner error (:class:`core.errors.InvalidParameter`) is about."""
    param = getattr(error, "param", None)
    if param is None:
        return "params"
    return param if param == "pauc_range" else f"params.{param}"


def _servable(cls) -> bool:
    return getattr(cls, "online", True) or getattr(cls, "streams_on_window", False)


def servable_learners() -> list[str]:
    return [n for n in available_learners() if _servable(learner_class(n))]


def build_learner(request: ModelCreate) -> OnlineLearner:
    """The learner a creation request asks for, validated; errors name the field."""
    try:
        cls = learner_class(request.learner)
    except ValueError as error:
        raise InvalidInput(str(error), field="learner") from None
    if not _servable(cls):
        raise InvalidInput(
            f"learner {request.learner!r} is a batch solver, not an online learner; "
            f"online learners: {', '.join(servable_learners())}",
            field="learner",
        )
    scaling = resolve_scaling(request.scaling, request.feature_mode)
    try:
        # one pAUC range per model: the range its metrics report is the one its pAUC
        # learners optimise (an explicit contradicting alpha / beta is refused, naming both)
        params = pauc_params_for(request.learner, request.pauc_range, request.params)
        learner = make_learner(request.learner, **params, scaling=scaling)
        learner.initialize(request.n_features)
    except (ValueError, TypeError) as error:
        raise InvalidInput(
            f"learner {request.learner!r}: {error}", field=_learner_field(error)
        ) from None
    if request.feature_mode != "dense" and not cls.supports_sparse:
        raise InvalidInput(
            f"learner {request.learner!r} needs dense features; use feature_mode 'dense'",
            field="feature_mode",
        )
    require_kernels(request.learner, params, scaling, request.n_features)
    return learner


def new_model(
    request: ModelCreate, *, incarnation: str, created_at: float
) -> tuple[ModelConfig, OnlineLearner]:
    """The configuration (every learner parameter explicit) and learner of a new model."""
    learner = build_learner(request)
    regret_window = request.regret_window
    if regret_window is None:
        regret_window = default_regret_window(request.n_features, learner.linear_in_features)
    config = ModelConfig(
        **{**request.model_dump(), **stored_params(learner), "regret_window": regret_window},
        incarnation=incarnation,
        created_at=created_at,
    )
    return config, learner


def create_model(
    engine: Engine, request: ModelCreate, *, replace: bool = False, replaces: str | None = None
) -> ModelInfo:
    """Create the model (``replace``: over one of its id; ``replaces``: that incarnation)."""
    config, learner = new_model(request, incarnation=uuid.uuid4().hex, created_at=engine.clock())
    return engine.create_model(config, learner, replace=replace, replaces=replaces)


def reset_model(engine: Engine, model_id: str) -> ModelInfo:
    """Forget everything learned, keep the configuration; only over the incarnation read here
    (deleted meanwhile: 404; re-created: 409).  A corrupt model can start afresh too."""
    config = engine.current_config(model_id)
    request = ModelCreate(**config.model_dump(include=set(ModelCreate.model_fields)))
    return create_model(engine, request, replace=True, replaces=config.incarnation)


def weights_document(served: ServedWeights) -> dict[str, Any]:
    """The ``/weights`` body (``WeightsResponse``), with numpy arrays for orjson."""
    config = served.config
    if served.raw is None:
        note = NOT_FOLDABLE.get(config.scaling) or (
            (
                "learner 'auto' mixes a candidate that is not linear in the features (its "
                "default third candidate is boosted_embedded, or tree_embedded above 250 "
                "features): the served score has no weights in the raw feature space; coef is "
                "the linear part of the mix on the scaled features. For a linear score, create "
                "the model with a linear learner or with params.candidates that are all linear"
            )
            if config.learner == "auto"
            else (
                f"learner {config.learner!r} is not linear in the features (it learns on a "
                "tree embedding): it has no weights in the raw feature space; coef applies to "
                "its embedded inputs"
            )
        )
    else:
        note = (
            "score(x) = raw_coef . x + raw_intercept on the features as posted (the online "
            f"scaler's statistics of version {served.version} folded in; they move as the "
            "model learns)"
        )
        if config.feature_mode == "hashed":
            note += "; a hashed model's coefficients are per hash bucket, not per name"
    return {
        "model": config.id,
        "version": served.version,
        "n_features": len(served.coef),
        "feature_names": None if config.feature_names is None else list(config.feature_names),
        "scaling": config.scaling,
        "coef": served.coef,
        "intercept": served.intercept,
        "raw_coef": None if served.raw is None else served.raw[0],
        "raw_intercept": None if served.raw is None else served.raw[1],
        "raw_note": note,
    }
