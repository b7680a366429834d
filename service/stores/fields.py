"""How every store lays a model's checkpoint out: flat fields of raw bytes with a layout each.

:func:`encode_fields` / :func:`decode_fields`: each state array is one field holding its raw
little-endian bytes, with ``<dtype>|<shape>`` as its layout (nothing is ever pickled).  An array
over :data:`CHUNK_BYTES` is split into chunk fields ``<name>@<i>`` and its layout says how many;
a chunk whose bytes are all zero is not stored at all (it reads back as zeros).  A fresh
model's buffers are allocated at full capacity by its learner and are zero until events fill
them, so an empty or young model stores only the chunks that hold something.
"""

from __future__ import annotations

import math

import numpy as np

from service.stores.base import decode_array, layout_of, to_little_endian

__all__ = ["CHUNK_BYTES", "decode_fields", "encode_fields"]

#: arrays larger than this are stored as several fields ``<name>@0``, ``<name>@1``, ..., the
#: all-zero ones left out (a young model's buffers, allocated at capacity, are mostly zeros).
#: Changing it changes the stored format (the layouts' chunk counts): the SQLite file's schema
#: version goes with it, and a state of another chunk size is refused when decoded.
CHUNK_BYTES = 1024


def _n_chunks(n_bytes: int) -> int:
    return -(-n_bytes // CHUNK_BYTES)


def _units(array: np.ndarray) -> np.ndarray:
    """An array's bytes as a flat view of the widest unsigned integers that divide its size
    (8 bytes for every float64 / int64 array; a chunk holds a whole number of either)."""
    if array.dtype.itemsize == 8:
        return array.reshape(-1).view(np.uint64)
    flat = array.reshape(-1).view(np.uint8)
    return flat.view(np.uint64) if flat.size % 8 == 0 else flat


def _chunk_any(units: np.ndarray, per: int) -> np.ndarray:
    """Which chunks of ``per`` units hold a non-zero byte (a maximum per chunk: one pass, no
    copy, the cheapest reduction measured)."""
    if not units.size:
        return np.zeros(0, dtype=bool)
    return np.maximum.reduceat(units, np.arange(0, units.size, per)) != 0


def encode_fields(arrays: dict[str, np.ndarray]) -> tuple[dict[str, bytes], dict[str, str]]:
    """State arrays -> (fields, layouts).  A layout is ``<dtype>|<shape>`` for an array in
    one field, ``<dtype>|<shape>|<n chunks>`` for one split into ``<name>@<i>`` fields, of
    which only those with a non-zero byte are returned."""
    fields: dict[str, bytes] = {}
    layouts: dict[str, str] = {}
    for name, array in arrays.items():
        array = to_little_endian(array)
        layout = layout_of(array.dtype, array.shape)
        if array.nbytes <= CHUNK_BYTES:
            fields[name] = array.tobytes()
        else:
            layout += f"|{_n_chunks(array.nbytes)}"
            units = _units(array)
            per = CHUNK_BYTES // units.itemsize
            for i in np.flatnonzero(_chunk_any(units, per)).tolist():
                fields[f"{name}@{i}"] = units[i * per : (i + 1) * per].tobytes()
        layouts[name] = layout
    return fields, layouts


def decode_fields(raw: dict[str, bytes], layouts: dict[str, str]) -> dict[str, np.ndarray]:
    """The arrays of :func:`encode_fields`'s fields; ValueError naming the array when a field
    does not fit its layout."""
    # the stored chunks of each array, found in one pass over the fields (a state has far
    # fewer stored chunks than chunk slots: zero chunks are not stored)
    chunks: dict[str, dict[int, bytes]] = {}
    for field, data in raw.items():
        name, at, index = field.rpartition("@")
        if at and index.isdigit():
            chunks.setdefault(name, {})[int(index)] = data
    arrays = {}
    for name, layout in layouts.items():
        parts = layout.split("|")
        if len(parts) == 3:
            stored = chunks.get(name, {})
            arrays[name] = _decode_chunked(name, stored, parts[0], parts[1], int(parts[2]))
        else:
            arrays[name] = decode_array(raw[name], layout)
    return arrays


def _decode_chunked(
    name: str, stored: dict[int, bytes], dtype_text: str, shape_text: str, n_chunks: int
) -> np.ndarray:
    # decode_array checks the dtype (numbers only) and the shape's syntax on an empty array
    # before anything of the declared size is allocated
    empty = decode_array(b"", f"{dtype_text}|0")
    shape = tuple(int(part) for part in shape_text.split(",")) if shape_text else ()
    if any(size < 0 for size in shape):
        raise ValueError(f"state array {name!r}: negative shape {shape_text!r}")
    n_bytes = math.prod(shape) * empty.dtype.itemsize
    if n_chunks != _n_chunks(n_bytes) or n_bytes <= CHUNK_BYTES:
        raise ValueError(
            f"state array {name!r}: {n_chunks} chunks do not hold {n_bytes} bytes in chunks "
            f"of {CHUNK_BYTES} bytes (a state written with another chunk size, by another "
            "version of aucstream, is not read)"
        )
    array = np.zeros(shape, dtype=empty.dtype)
    flat = array.reshape(-1).view(np.uint8)
    # runs of consecutive stored chunks, each copied in once (the others are zeros)
    run: list[bytes] = []
    first = 0
    for index in sorted(i for i in stored if i < n_chunks):
        chunk = stored[index]
        expected = min(CHUNK_BYTES, n_bytes - index * CHUNK_BYTES)
        if len(chunk) != expected:
            raise ValueError(
                f"state array {name!r}: chunk {index} holds {len(chunk)} bytes, not {expected}"
            )
        if run and index != first + len(run):
            _copy_run(flat, first, run)
            run = []
        if not run:
            first = index
        run.append(chunk)
    if run:
        _copy_run(flat, first, run)
    return array


def _copy_run(flat: np.ndarray, first: int, run: list[bytes]) -> None:
    data = b"".join(run)
    start = first * CHUNK_BYTES
    flat[start : start + len(data)] = np.frombuffer(data, dtype=np.uint8)
