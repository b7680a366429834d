"""Snapshot export / import: a documented, pickle-free model archive.

Format (``application/zip``), version 1::

    manifest.json            {"format": "aucstream-snapshot", "format_version": 1,
                              "model": <the model configuration, as GET /v1/models/{id}>,
                              "version": <state version at export>, "exported_at": <unix s>,
                              "arrays": {"<name>": {"file": "arrays/<name>.npy",
                                                    "dtype": "<f8", "shape": [50]}, ...}}
    arrays/<name>.npy        one NumPy .npy file per state array (float64 / int64 / uint64)

Array names are the store's field names: ``learner:<key>`` (the learner state, e.g.
``learner:w``), ``window:<key>`` (metrics window and since-start reservoirs) and
``stats:<key>`` (counters).  Arrays are read back with ``allow_pickle=False`` and checked
against the manifest and against the learner's own state layout; nothing is ever unpickled.
Any zip tool and ``numpy.load`` can read a snapshot.
"""

from __future__ import annotations

import io
import time
import zipfile
from typing import Any

import numpy as np
import orjson

from service.errors import InvalidInput, MalformedBody
from service.schemas import ModelConfig

FORMAT = "aucstream-snapshot"
FORMAT_VERSION = 1
MEDIA_TYPE = "application/zip"
_ALLOWED_KINDS = "iuf"


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


def import_snapshot(body: bytes) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """Read and check a snapshot; raises MalformedBody / InvalidInput naming the problem."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
    except zipfile.BadZipFile as error:
        raise MalformedBody(f"snapshot is not a zip archive: {error}") from None
    with archive:
        try:
            manifest = orjson.loads(archive.read("manifest.json"))
        except KeyError:
            raise InvalidInput("snapshot has no manifest.json", field="manifest.json") from None
        except orjson.JSONDecodeError as error:
            raise MalformedBody(f"manifest.json is not JSON: {error}") from None
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
            try:
                with archive.open(entry["file"]) as handle:
                    array = np.lib.format.read_array(handle, allow_pickle=False)
            except (KeyError, TypeError, ValueError, OSError, zipfile.BadZipFile) as error:
                raise InvalidInput(f"array {name!r} cannot be read: {error}", field=name) from None
            if array.dtype.kind not in _ALLOWED_KINDS:
                raise InvalidInput(f"array {name!r} has dtype {array.dtype}", field=name)
            if array.dtype.str != entry.get("dtype") or list(array.shape) != entry.get("shape"):
                raise InvalidInput(f"array {name!r} does not match its manifest entry", field=name)
            arrays[name] = np.ascontiguousarray(array)
    return config, arrays
