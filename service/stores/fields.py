"""How every store lays a model's state out: flat fields of raw bytes with a layout each, and
what a store process remembers of them to send only what changed.

* :func:`encode_fields` / :func:`decode_fields`: each state array is one field holding its raw
  little-endian bytes, with ``<dtype>|<shape>`` as its layout (nothing is ever pickled).  An
  array over :data:`CHUNK_BYTES` is split into chunk fields ``<name>@<i>`` and its layout says
  how many; a chunk whose bytes are all zero is not stored at all (it reads back as zeros).
  A fresh model's buffers are allocated at full capacity by its learner and are zero until
  events fill them, so an empty or young model stores only the chunks that hold something.
* :class:`KnownStates`: what this process knows a store holds for its most recently used
  models, the base a commit diffs against to send only the changed fields.  Bounded, and
  forgotten when the model leaves the process's model cache (:meth:`forget`), so that it
  costs what the cache costs, not one copy of every model ever touched.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Generic, TypeVar

import numpy as np

from service.stores.base import decode_array, layout_of, to_little_endian

__all__ = ["CHUNK_BYTES", "KnownStates", "decode_fields", "encode_fields"]

T = TypeVar("T")

#: arrays larger than this are stored as several fields ``<name>@0``, ``<name>@1``, ... so that
#: a commit rewrites only the chunks that changed (a window ring buffer, a reservoir or a
#: hashed model's 2**20 weights change in a few places per batch).  Measured with the default
#: window and reservoirs: 16 KiB sends 28 KB per single-event commit (64 KiB: 106 KB; whole
#: arrays: 315 KB) and 207 KB per 1,000-event commit (285 KB), for less CPU on both sides.
CHUNK_BYTES = 16 * 1024
#: how many models' stored fields a store remembers by default (the default of
#: ``AUCSTREAM_MAX_CACHED_MODELS``; the model cache also makes it forget evicted models)
DEFAULT_KNOWN_MODELS = 1024
_ZERO_CHUNK = bytes(CHUNK_BYTES)


def encode_fields(arrays: dict[str, np.ndarray]) -> tuple[dict[str, bytes], dict[str, str]]:
    """State arrays -> (fields, layouts).  A layout is ``<dtype>|<shape>`` for an array in
    one field, ``<dtype>|<shape>|<n chunks>`` for one split into ``<name>@<i>`` fields, of
    which only those with a non-zero byte are returned.

    Each stored byte is copied once, from the array into its field (no intermediate
    ``tobytes``)."""
    fields: dict[str, bytes] = {}
    layouts: dict[str, str] = {}
    for name, array in arrays.items():
        array = to_little_endian(array)
        layout = layout_of(array.dtype, array.shape)
        if array.nbytes <= CHUNK_BYTES:
            fields[name] = array.tobytes()
        else:
            view = array.reshape(-1).view(np.uint8).data
            n_chunks = -(-array.nbytes // CHUNK_BYTES)
            for index in range(n_chunks):
                chunk = bytes(view[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES])
                # a comparison stops at the first non-zero byte: nearly free for a chunk in use
                if chunk != (_ZERO_CHUNK if len(chunk) == CHUNK_BYTES else bytes(len(chunk))):
                    fields[f"{name}@{index}"] = chunk
            layout += f"|{n_chunks}"
        layouts[name] = layout
    return fields, layouts


def decode_fields(raw: dict[str, bytes], layouts: dict[str, str]) -> dict[str, np.ndarray]:
    """The arrays of :func:`encode_fields`'s fields; ValueError naming the array when a field
    does not fit its layout."""
    arrays = {}
    for name, layout in layouts.items():
        parts = layout.split("|")
        if len(parts) == 3:
            arrays[name] = _decode_chunked(name, raw, parts[0], parts[1], int(parts[2]))
        else:
            arrays[name] = decode_array(raw[name], layout)
    return arrays


def _decode_chunked(
    name: str, raw: dict[str, bytes], dtype_text: str, shape_text: str, n_chunks: int
) -> np.ndarray:
    # decode_array checks the dtype (numbers only) and the shape's syntax on an empty array
    # before anything of the declared size is allocated
    empty = decode_array(b"", f"{dtype_text}|0")
    shape = tuple(int(part) for part in shape_text.split(",")) if shape_text else ()
    if any(size < 0 for size in shape):
        raise ValueError(f"state array {name!r}: negative shape {shape_text!r}")
    n_bytes = math.prod(shape) * empty.dtype.itemsize
    if n_chunks != -(-n_bytes // CHUNK_BYTES) or n_bytes <= CHUNK_BYTES:
        raise ValueError(f"state array {name!r}: {n_chunks} chunks do not hold {n_bytes} bytes")
    array = np.zeros(shape, dtype=empty.dtype)
    flat = array.reshape(-1).view(np.uint8)
    for index in range(n_chunks):
        chunk = raw.get(f"{name}@{index}")
        if chunk is None:  # all zeros: not stored
            continue
        start = index * CHUNK_BYTES
        expected = min(CHUNK_BYTES, n_bytes - start)
        if len(chunk) != expected:
            raise ValueError(
                f"state array {name!r}: chunk {index} holds {len(chunk)} bytes, not {expected}"
            )
        flat[start : start + expected] = np.frombuffer(chunk, dtype=np.uint8)
    return array


class KnownStates(Generic[T]):
    """What a store process knows is stored for its most recently used models (the base of a
    delta commit), at most ``capacity`` of them, the least recently used forgotten first.
    Thread-safe."""

    def __init__(self, capacity: int = DEFAULT_KNOWN_MODELS) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._known: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._known)

    def get(self, model_id: str) -> T | None:
        with self._lock:
            known = self._known.get(model_id)
            if known is not None:
                self._known.move_to_end(model_id)
            return known

    def remember(self, model_id: str, known: T) -> None:
        with self._lock:
            self._known[model_id] = known
            self._known.move_to_end(model_id)
            while len(self._known) > self.capacity:
                self._known.popitem(last=False)

    def forget(self, model_id: str) -> None:
        """Nothing is known of ``model_id`` any more: its next commit rewrites it whole."""
        with self._lock:
            self._known.pop(model_id, None)
