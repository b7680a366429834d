"""The OpenAPI document: FastAPI's, completed where it cannot know: the bodies parsed by hand,
every error as a ``Problem``, ``POST /v1/models`` as one variant per learner (``params`` from its
declared constraints), and the API keys' ``securitySchemes``."""

from __future__ import annotations

import copy
import inspect
import json
from typing import Any

from core.learners import learner_class
from core.learners._params import parameters_schema
from core.validation import FEATURE_BOUND
from service import snapshot
from service.auth import READ_METHODS
from service.errors import PROBLEM_MEDIA_TYPE
from service.ingest import fields, libsvm
from service.models import servable_learners
from service.schemas import DEFAULT_LEARNER, ModelCreate, Problem

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

#: what each status means in this API
_STATUS_DESCRIPTIONS = {
    400: "Malformed body (invalid JSON, a broken LIBSVM line, a corrupt archive)",
    401: "An API key is required (X-API-Key or Authorization: Bearer) or is unknown",
    403: "The API key is read-only",
    404: "No such model",
    408: "The request body did not arrive in time",
    409: "Conflict (the model exists, or changed during the request)",
    413: "Too large (body, batch, ids, dense copy, inflated archive)",
    415: "Unsupported content type",
    422: "Invalid input: the problem names the field, event or line at fault",
    429: "Queue mode: the model's backlog is full; retry after Retry-After seconds",
    503: "Store unavailable, kernels still warming up, or too much write contention",
    507: "A bound on what the service keeps is reached (models, model bytes, kept records)",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: each status as an ``application/problem+json`` Problem."""
    return {status: _problem_response(status) for status in statuses}


def _problem_response(status: int) -> dict[str, Any]:
    return {
        "description": _STATUS_DESCRIPTIONS[status],
        "content": {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}},
    }


# ---------------------------------------------------------------------- request bodies
#: JSON integers the decoder reads as integers (a larger one is a float, refused as an id)
_ID_INTEGER = {"type": "integer", "minimum": fields.ID_MIN, "maximum": fields.ID_MAX}
_ID = {
    "description": f"event id (1 to {fields.MAX_ID_CHARACTERS} characters, or a 64-bit "
    "integer): an event whose id was learned is skipped as a duplicate; /score keeps its "
    "features for a later label",
    "anyOf": [
        {"type": "string", "minLength": 1, "maxLength": fields.MAX_ID_CHARACTERS},
        _ID_INTEGER,
    ],
}
_LABEL = {
    "description": "label: 1 / 0, +1 / -1 or true / false (one batch uses 0 or -1, not both)",
    "enum": [*sorted(fields.LABEL_VALUES, key=lambda v: (abs(v), -v)), True, False],
}
#: a feature's value (JSON has no NaN or infinity; beyond the bound learning could overflow)
_FEATURE_VALUE: dict[str, Any] = {
    "type": "number",
    "minimum": -FEATURE_BOUND,
    "maximum": FEATURE_BOUND,
}
_FEATURES = {
    "description": "features, by the model's feature_mode: dense = a list of n_features "
    'numbers; sparse = {"indices": [...], "values": [...]} (0-based indices); hashed = '
    '{"name": value} (a string value is one-hot: "country": "FR" -> feature "country=FR")',
    "anyOf": [
        {"title": "Dense", "type": "array", "items": _FEATURE_VALUE},
        {
            "title": "Sparse",
            "type": "object",
            "properties": {
                "indices": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "values": {"type": "array", "items": _FEATURE_VALUE},
            },
            "required": ["indices", "values"],
            "additionalProperties": False,
        },
        {
            "title": "Named",
            "type": "object",
            "additionalProperties": {"anyOf": [_FEATURE_VALUE, {"type": ["string", "boolean"]}]},
        },
    ],
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "Event": {
        "type": "object",
        "description": "a labelled event (no other keys)",
        "properties": {"id": _ID, "x": _FEATURES, "y": _LABEL},
        "required": ["x", "y"],
        "additionalProperties": False,
    },
    "ScoreEvent": {
        "type": "object",
        "description": "an event to score (a label 'y', if present, is not used)",
        "properties": {"id": _ID, "x": _FEATURES, "y": {"anyOf": [_LABEL, {"type": "null"}]}},
        "required": ["x"],
        "additionalProperties": False,
    },
    "LabelItem": {
        "type": "object",
        "properties": {"id": _ID, "y": _LABEL},
        "required": ["id", "y"],
        "additionalProperties": False,
    },
}


def _holding_label(*values: Any) -> dict[str, Any]:
    return {
        "contains": {
            "type": "object",
            "properties": {"y": {"enum": list(values)}},
            "required": ["y"],
        }
    }


#: a batch's labels are 0 / 1 or -1 / +1 (booleans either way), not 0 (false) and -1 both
_ONE_CONVENTION = {"not": {"allOf": [_holding_label(0, False), _holding_label(-1)]}}


def _items(item: str, *, labelled: bool) -> dict[str, Any]:
    """A list of at least one ``item``; ``labelled``: its labels in one convention."""
    items = {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}, "minItems": 1}
    return {**items, **_ONE_CONVENTION} if labelled else items


def _batch(key: str, item: str) -> dict[str, Any]:
    """``{key: [item, ...]}`` or the bare list."""
    items = _items(item, labelled=item != "ScoreEvent")
    wrapped = {"type": "object", "properties": {key: items}, "required": [key]}
    return {"anyOf": [{**wrapped, "additionalProperties": False}, items]}


#: a LIBSVM body as ``service.ingest.libsvm`` reads it: ``<label> <index>:<value> ... [# <id>]``
#: lines (the label optional for /score), blank and comment lines skipped, one event at least
_COMMENT = rf"(?:#\s*[^\n]{{0,{fields.MAX_ID_CHARACTERS}}}?\s*)?"
_BLANK_LINE = rf"{libsvm.WHITESPACE}*(?:#[^\n]*)?"


def _libsvm_pattern(*, labelled: bool) -> str:
    W, PAIR, LABEL = libsvm.WHITESPACE, libsvm.PAIR, libsvm.LABEL  # noqa: N806
    first = LABEL if labelled else f"(?:{LABEL}|{PAIR})"
    event = rf"{W}*{first}(?:{W}+{PAIR})*{W}*{_COMMENT}"
    return rf"^(?:{_BLANK_LINE}\n)*{event}(?:\n(?:{event}|{_BLANK_LINE}))*\n?$"


_NPZ = {
    "type": "string",
    "format": "binary",
    "description": "a NumPy .npz archive (np.savez; compressed members too, never "
    "unpickled): X (n_events x n_features) or the CSR triple indptr / indices / data; y "
    "(labels, not needed by /score); optional ids (strings or integers).  From Python: "
    "np.savez(buffer, X=X, y=y, ids=np.array(ids)), then send buffer.getvalue()",
}


def events_body(*, labelled: bool) -> dict[str, Any]:
    """``openapi_extra`` of ``/events`` (``labelled``) and ``/score``: the body in each content
    type, with examples for a dense model of 3 features."""
    event = "Event" if labelled else "ScoreEvent"
    label, comment = ("1 ", "") if labelled else ("", " (a label, if any, is not used)")
    first, second = ("tx-1", "tx-2") if labelled else ("tx-3", "tx-4")  # /labels: tx-3, tx-4
    labels = ({"y": 1}, {"y": 0}) if labelled else ({}, {})
    events = [
        {"id": first, "x": [0.5, 120.0, 1.0], **labels[0]},
        {"id": second, "x": [0.1, 15.5, 0.0], **labels[1]},
    ]
    return {
        "requestBody": {
            "required": True,
            "description": "the events, in order; the whole batch is validated first",
            "content": {
                "application/json": {
                    "schema": _batch("events", event),
                    "example": {"events": events},
                },
                "application/x-ndjson": {
                    "schema": {
                        **_items(event, labelled=labelled),
                        "description": "one event object per line (this schema is of the "
                        "lines' objects, in order)",
                    },
                    "example": "".join(json.dumps(line) + "\n" for line in events),
                },
                "text/x-libsvm": {
                    "schema": {
                        "type": "string",
                        "pattern": _libsvm_pattern(labelled=labelled),
                        "description": "one event per line: "
                        + ("<label> " if labelled else "[<label>] ")
                        + "<index>:<value> ... [# <event id>]; indices 1-based "
                        "(?zero_based=true for 0-based); dense and sparse models" + comment,
                    },
                    "example": f"{label}1:0.5 2:120 3:1 # {first}\n{label.replace('1', '0')}"
                    f"1:0.1 2:15.5 # {second}\n",
                },
                "application/x-npz": {"schema": _NPZ},
            },
        }
    }


LABELS_BODY = {
    "requestBody": {
        "required": True,
        "description": "delayed labels of events scored with an id",
        "content": {
            "application/json": {
                "schema": _batch("labels", "LabelItem"),
                "example": {"labels": [{"id": "tx-3", "y": 1}, {"id": "tx-4", "y": 0}]},
            }
        },
    }
}


_ARCHIVE = {
    "type": "string",
    "format": "binary",
    "description": "a snapshot as GET .../snapshot exports it (a zip of .npy arrays and "
    "a JSON manifest, never unpickled)",
}
SNAPSHOT_BODY = {
    "requestBody": {
        "required": True,
        "content": {kind: {"schema": _ARCHIVE} for kind in snapshot.IMPORTED_MEDIA_TYPES},
    }
}


# ---------------------------------------------------------------------- the whole document
MODEL_ID = {
    "type": "string",
    "pattern": ModelCreate.model_json_schema()["properties"]["id"]["pattern"],
    "description": "the model's id (as created)",
}
SECURITY_SCHEMES = {
    "ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    "Bearer": {"type": "http", "scheme": "bearer", "description": "the same API key"},
}


def complete(document: dict[str, Any], *, auth_enabled: bool) -> dict[str, Any]:
    """Complete FastAPI's ``document`` in place (module docstring) and return it."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs"))
    schemas["Problem"] = problem
    schemas.update(SCHEMAS)
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    document["components"]["securitySchemes"] = SECURITY_SCHEMES
    # with keys configured, every /v1 route needs one; without, the schemes are optional
    security: list[dict[str, list[str]]] = [{"ApiKey": []}, {"Bearer": []}]
    if not auth_enabled:
        security.append({})
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "model_id" and parameter["in"] == "path":
                    parameter["schema"] = MODEL_ID
            responses = operation.setdefault("responses", {})
            if "422" in responses:
                responses["422"] = _problem_response(422)
            if not path.startswith("/v1/"):
                continue
            operation["security"] = security
            common = [401, 503]
            if method.upper() not in READ_METHODS:
                common.append(403)
            if "{model_id}" in path:
                common.append(404)
            for status in common:
                responses.setdefault(str(status), _problem_response(status))
    _learner_variants(document)
    return document


def learner_params_schemas() -> dict[str, dict[str, Any]]:
    """``{learner: JSON Schema of its params}`` for every servable learner, from its declared
    constraints (``scaling`` is a model field, not a parameter)."""
    result = {}
    for name in servable_learners():
        cls = learner_class(name)
        defaults = {
            parameter.name: parameter.default
            for parameter in inspect.signature(cls.__init__).parameters.values()
        }
        schema = parameters_schema(cls._parameter_constraints, defaults, exclude={"scaling"})
        schema["title"] = f"params of {name}"
        if "pauc_range" in schema["properties"]:  # auto: null means the model's range
            declared = schema["properties"]["pauc_range"]
            schema["properties"]["pauc_range"] = {"anyOf": [declared, {"type": "null"}]}
        if cls.optimises_pauc or "pauc_range" in schema["properties"]:
            schema["description"] = (
                "alpha / beta (pauc_range for auto) are set from the model's pauc_range; an "
                "explicit value must equal it"
            )
        result[name] = schema
    return result


def _learner_variants(document: dict[str, Any]) -> None:
    """``POST /v1/models`` takes one ``ModelCreate`` variant per learner."""
    schemas = document["components"]["schemas"]
    base = schemas.get("ModelCreate")
    operation = document.get("paths", {}).get("/v1/models", {}).get("post")
    if base is None or operation is None:
        return
    variants = []
    for name, params in learner_params_schemas().items():
        params_name = f"Params_{name}"
        schemas[params_name] = params
        variant = copy.deepcopy(base)
        variant["title"] = f"ModelCreate ({name})"
        learner = {"const": name, "description": base["properties"]["learner"]["description"]}
        if name == DEFAULT_LEARNER:
            learner["default"] = name
        else:
            variant["required"] = [*variant.get("required", []), "learner"]
        variant["properties"]["learner"] = learner
        variant["properties"]["params"] = {"$ref": f"#/components/schemas/{params_name}"}
        schemas[f"ModelCreate_{name}"] = variant
        variants.append({"$ref": f"#/components/schemas/ModelCreate_{name}"})
    content = operation["requestBody"]["content"]["application/json"]
    content["schema"] = {"oneOf": variants}
    content["example"] = {"id": "fraud", "n_features": 3, "learner": "spam", "params": {"eta0": 4}}
