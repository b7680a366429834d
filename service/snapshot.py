"""Snapshot export / import: a pickle-free zip of one ``.npy`` per state array and a JSON
manifest, checked against the manifest and the learner's own layout (format: docs/api.md,
"Snapshots")."""

from __future__ import annotations

import io
import time
import zipfile
from typing import Any

import numpy as np
import orjson

from service.errors import InvalidInput, MalformedBody, PayloadTooLarge
from service.ingest.archive import (
    check_members,
    member_content,
    member_count,
    npy_array,
    npy_layout,
)
from service.schemas import ModelConfig

FORMAT = "aucstream-snapshot"
FORMAT_VERSION = 1
MEDIA_TYPE = "application/zip"
#: the media types an import accepts
IMPORTED_MEDIA_TYPES = (MEDIA_TYPE, "application/octet-stream")
_ALLOWED_KINDS = "iuf"
#: most members of a snapshot (its arrays and the manifest; a model has a few dozen arrays)
MAX_MEMBERS = 4096


def export_snapshot(config: ModelConfig, version: int, arrays: dict[str, np.ndarray]) -> bytes:
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": config.model_dump(mode="json"),
        "version": version,
        "exported_at": time.time(),
        "arrays": {},
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in sorted(arrays.items()):
            array = np.ascontiguousarray(array)
            path = f"arrays/{name}.npy"
            payload = io.BytesIO()
            np.lib.format.write_array(payload, array, allow_pickle=False)
            archive.writestr(path, payload.getvalue())
            manifest["arrays"][name] = {
                "file": path,
                "dtype": array.dtype.str,
                "shape": list(array.shape),
            }
        archive.writestr("manifest.json", orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return buffer.getvalue()


def import_snapshot(
    body: bytes, *, max_inflated_bytes: int, max_manifest_bytes: int
) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """Read and check a snapshot (MalformedBody / InvalidInput); nothing is inflated before
    :mod:`service.ingest.archive`'s size guards pass."""
    if member_count(body, what="the snapshot") > MAX_MEMBERS:
        raise PayloadTooLarge(
            f"the snapshot declares more than {MAX_MEMBERS} members", field="manifest.arrays"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
    except zipfile.BadZipFile as error:
        raise MalformedBody(f"snapshot is not a zip archive: {error}") from None
    with archive:
        members = {
            member.filename: member
            for member in check_members(
                archive, max_inflated_bytes=max_inflated_bytes, what="the snapshot"
            )
        }
        manifest_member = members.get("manifest.json")
        if manifest_member is None:
            raise InvalidInput("snapshot has no manifest.json", field="manifest.json")
        if manifest_member.file_size > max_manifest_bytes:
            raise PayloadTooLarge(
                f"manifest.json inflates to {manifest_member.file_size:,} bytes, more than "
                f"the limit of {max_manifest_bytes:,} (AUCSTREAM_MAX_MANIFEST_BYTES)",
                field="manifest.json",
            )
        try:
            manifest = orjson.loads(member_content(body, manifest_member, field="manifest.json"))
        except orjson.JSONDecodeError as error:
            raise MalformedBody(f"manifest.json is not JSON: {error}") from None
        if not isinstance(manifest, dict):
            raise InvalidInput("manifest.json must be a JSON object", field="manifest.json")
        if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
            raise InvalidInput(
                f"not an {FORMAT} version {FORMAT_VERSION} archive", field="manifest.format"
            )
        try:
            config = ModelConfig.model_validate(manifest["model"])
        except (KeyError, ValueError) as error:
            raise InvalidInput(
                f"manifest 'model' is invalid: {error}", field="manifest.model"
            ) from None
        arrays: dict[str, np.ndarray] = {}
        entries = manifest.get("arrays")
        if not isinstance(entries, dict):
            raise InvalidInput("manifest 'arrays' must be an object", field="manifest.arrays")
        for name, entry in entries.items():
            member = members.get(str(entry.get("file"))) if isinstance(entry, dict) else None
            if member is None:
                raise InvalidInput(f"array {name!r} has no member in the archive", field=name)
            layout = npy_layout(body, member, field=name)
            if layout.dtype.kind not in _ALLOWED_KINDS:
                raise InvalidInput(f"array {name!r} has dtype {layout.dtype}", field=name)
            if layout.dtype.str != entry.get("dtype") or list(layout.shape) != entry.get("shape"):
                raise InvalidInput(f"array {name!r} does not match its manifest entry", field=name)
            arrays[name] = npy_array(body, member, layout, field=name)
    return config, arrays


#: [CHOICE] the probe events an imported state must score and learn finitely (the origin, unit
#: vectors' signs, seeded normal rows): a state that cannot is unusable whatever its bounds.
PROBE_EVENTS = 8


def probe_learner(learner: Any) -> None:
    """InvalidInput unless the learner scores the probe events finitely and, on a copy, learns
    them into a state that passes its invariants."""
    X = np.random.default_rng(0).standard_normal((PROBE_EVENTS, learner.n_features_in_))
    X[0], X[1], X[2] = 0.0, 1.0, -1.0
    y = np.where(np.arange(PROBE_EVENTS) % 2 == 0, 1, -1).astype(np.int64)
    try:
        scores = learner.decision_function(X)
        if not np.isfinite(scores).all():
            raise ValueError("its scores of ordinary events are not finite")
        copy = type(learner).from_state(learner.get_params(), learner.get_state())
        learned = copy.prequential_step(X, y)
        if not np.isfinite(learned).all():
            raise ValueError("its scores while learning ordinary events are not finite")
        copy.validate_state(copy.get_state())
    except ValueError as error:
        raise InvalidInput(
            f"snapshot state is unusable: exercised on {PROBE_EVENTS} ordinary events, {error}",
            field="learner",
        ) from None
