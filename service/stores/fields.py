"""How every store lays a model's state out: flat fields of raw bytes with a layout each, and
what a store process remembers of them to send only what changed.

* :func:`encode_fields` / :func:`decode_fields`: each state array is one field holding its raw
  little-endian bytes, with ``<dtype>|<shape>`` as its layout (nothing is ever pickled).  An
  array over :data:`CHUNK_BYTES` is split into chunk fields ``<name>@<i>`` and its layout says
  how many; a chunk whose bytes are all zero is not stored at all (it reads back as zeros).
  A fresh model's buffers are allocated at full capacity by its learner and are zero until
  events fill them, so an empty or young model stores only the chunks that hold something.
* :func:`encode_changes`: the fields that differ from what the store holds (an
  :class:`Encoded` base: each array's layout, its small fields, and a copy of the leading part
  of each chunked array that covers its stored chunks), found by comparing whole arrays with
  a few numpy calls, and the new base.
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

__all__ = [
    "CHUNK_BYTES",
    "Changes",
    "Encoded",
    "KnownStates",
    "decode_fields",
    "encode_changes",
    "encode_fields",
]

T = TypeVar("T")

#: arrays larger than this are stored as several fields ``<name>@0``, ``<name>@1``, ... so that
#: a commit rewrites only the chunks that changed (a window ring buffer, a reservoir or a
#: hashed model's 2**20 weights change in a few places per event).  A one-event commit of the
#: default model changes a few values in each of ~10 arrays: with 16 KiB chunks it wrote
#: ~160 KB; the figures by chunk size are in docs/architecture.md ("What a commit writes").
#: Changing it changes the stored format (the layouts' chunk counts): the SQLite file's schema
#: version goes with it, and a state of another chunk size is refused when decoded.
CHUNK_BYTES = 1024
#: how many models' stored fields a store remembers by default (the default of
#: ``AUCSTREAM_MAX_CACHED_MODELS``; the model cache also makes it forget evicted models)
DEFAULT_KNOWN_MODELS = 1024


def _n_chunks(n_bytes: int) -> int:
    return -(-n_bytes // CHUNK_BYTES)


_NO_CHUNKS = np.zeros(0, dtype=np.int64)


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


class Chunks:
    """What is stored of a chunked array: a copy of its leading units that covers every stored
    (non-zero) chunk -- buffers and rings fill from the front, so this is about what the array
    holds, not its zero capacity -- and the array's size in bytes."""

    __slots__ = ("n_bytes", "units")

    def __init__(self, units: np.ndarray, n_bytes: int) -> None:
        self.units = units
        self.n_bytes = n_bytes

    @property
    def index(self) -> np.ndarray:
        """The indices of the stored chunks."""
        return np.flatnonzero(_chunk_any(self.units, CHUNK_BYTES // self.units.itemsize))


def _write(name: str, units: np.ndarray, index, changes: Changes) -> None:
    per = CHUNK_BYTES // units.itemsize
    for i in np.asarray(index).tolist():
        changes.fields[f"{name}@{i}"] = units[i * per : (i + 1) * per].tobytes()


def _drop(name: str, index, changes: Changes) -> None:
    changes.dropped_fields += [f"{name}@{i}" for i in np.asarray(index).tolist()]


def _stored_chunks(
    name: str, units: np.ndarray, n_bytes: int, changes: Changes, keep: bool = True
) -> Chunks:
    per = CHUNK_BYTES // units.itemsize
    index = np.flatnonzero(_chunk_any(units, per))
    _write(name, units, index, changes)
    last = int(index[-1]) + 1 if index.size and keep else 0
    return Chunks(units[: last * per].copy(), n_bytes)


def _changed_chunks(
    name: str, units: np.ndarray, n_bytes: int, old: Chunks, changes: Changes
) -> Chunks:
    """The chunks of an array that differ from ``old`` (what the store holds) into
    ``changes``, and what the store then holds: ``old`` updated in place when its copy still
    covers every stored chunk (the caller owns it), else a new copy.  A chunk is the same when
    its bytes and its length are, so of two sizes only the chunks full in both are compared.
    A handful of numpy calls per array in the common case (same size, nothing new past the
    copy): their overhead, more than the bytes compared, is the cost of a commit's encoding."""
    if units.dtype != old.units.dtype:  # another size modulo 8: nothing compares
        new = _stored_chunks(name, units, n_bytes, changes)
        _drop(name, [i for i in old.index.tolist() if f"{name}@{i}" not in changes.fields], changes)
        return new
    per = CHUNK_BYTES // units.itemsize
    n_chunks = _n_chunks(n_bytes)
    held = -(-old.units.size // per)
    same_size = n_bytes == old.n_bytes
    comparable = min(held, n_chunks if same_size else min(n_bytes, old.n_bytes) // CHUNK_BYTES)
    end = min(comparable * per, units.size, old.units.size)
    changed = _NO_CHUNKS
    if end:
        unequal = units[:end] != old.units[:end]
        if unequal.any():  # most arrays of a commit did not change: one test for them
            changed = np.flatnonzero(np.logical_or.reduceat(unequal, np.arange(0, end, per)))
    for i in changed.tolist():
        part = slice(i * per, (i + 1) * per)
        if units[part].any():
            _write(name, units, [i], changes)
        elif old.units[part].any():
            _drop(name, [i], changes)
    beyond = changed[:0]
    if comparable < n_chunks and units[comparable * per :].max() != 0:
        beyond = np.flatnonzero(_chunk_any(units[comparable * per :], per)) + comparable
        _write(name, units, beyond, changes)
    if comparable < held:  # stored past what was compared, and not written again: dropped
        was = np.flatnonzero(_chunk_any(old.units[comparable * per :], per)) + comparable
        _drop(name, sorted(set(was.tolist()) - set(beyond.tolist())), changes)
    if same_size and not beyond.size:
        for i in changed.tolist():
            old.units[i * per : (i + 1) * per] = units[i * per : (i + 1) * per]
        return old
    last = int(beyond[-1]) + 1 if beyond.size else comparable
    return Chunks(units[: last * per].copy(), n_bytes)


class Encoded:
    """What is stored of one state, kept by a store process as the base of its next delta
    (:func:`encode_changes`): each array's layout, the small arrays' bytes, and for a chunked
    array the indices of its stored (non-zero) chunks with a copy of their words and its size
    in bytes -- not its zero chunks, so a young model's base costs what it stores."""

    __slots__ = ("chunks", "layouts", "small")

    def __init__(
        self,
        layouts: dict[str, str],
        small: dict[str, bytes],
        chunks: dict[str, Chunks],
    ) -> None:
        self.layouts = layouts
        self.small = small
        self.chunks = chunks

    def field_names(self, name: str) -> list[str]:
        """The fields array ``name`` occupies in the store."""
        if name in self.small:
            return [name]
        if name in self.chunks:
            return [f"{name}@{i}" for i in self.chunks[name].index.tolist()]
        return []

    @classmethod
    def of(cls, arrays: dict[str, np.ndarray]) -> Encoded:
        """The base of a state just read (its arrays decoded)."""
        return encode_changes(arrays, None)[1]


class Changes:
    """What a commit writes (fields and layouts) and deletes (fields, layouts of arrays gone)
    to turn the stored base into the new state; without a base, everything to write."""

    __slots__ = ("dropped_fields", "dropped_layouts", "fields", "layouts")

    def __init__(self) -> None:
        self.fields: dict[str, bytes] = {}
        self.layouts: dict[str, str] = {}
        self.dropped_fields: list[str] = []
        self.dropped_layouts: list[str] = []


def encode_changes(
    arrays: dict[str, np.ndarray], base: Encoded | None, *, keep: bool = True
) -> tuple[Changes, Encoded]:
    """The fields and layouts of ``arrays`` that differ from ``base`` (all of them when None)
    and what the store then holds (``keep=False``: not needed, its copies are not made).
    Chunks are compared as words, all at once per array: the cost of a commit does not grow
    with the number of chunks a state is cut into.  ``base`` may be updated in place: the
    caller owns it (:meth:`KnownStates.take`)."""
    changes = Changes()
    layouts: dict[str, str] = {}
    small: dict[str, bytes] = {}
    chunks: dict[str, Chunks] = {}
    for name, array in arrays.items():
        array = to_little_endian(array)
        layout = layout_of(array.dtype, array.shape)
        n_bytes = array.nbytes
        # a field is sent unless the store holds the same bytes under its name, whatever the
        # layout was: a window's rows grow by one per event, and its chunks stay
        if n_bytes <= CHUNK_BYTES:
            data = array.tobytes()
            small[name] = data
            if base is None or base.small.get(name) != data:
                changes.fields[name] = data
            if base is not None and name in base.chunks:
                changes.dropped_fields += base.field_names(name)
        else:
            layout += f"|{_n_chunks(n_bytes)}"
            words = _units(array)
            if base is not None and name in base.chunks:
                chunks[name] = _changed_chunks(name, words, n_bytes, base.chunks[name], changes)
            else:
                if base is not None and name in base.small:
                    changes.dropped_fields.append(name)
                chunks[name] = _stored_chunks(name, words, n_bytes, changes, keep)
        layouts[name] = layout
        if base is None or base.layouts.get(name) != layout:
            changes.layouts[name] = layout
    if base is not None:
        for name in base.layouts.keys() - arrays.keys():
            changes.dropped_layouts.append(name)
            changes.dropped_fields += base.field_names(name)
    return changes, Encoded(layouts, small, chunks)


def encode_fields(arrays: dict[str, np.ndarray]) -> tuple[dict[str, bytes], dict[str, str]]:
    """State arrays -> (fields, layouts).  A layout is ``<dtype>|<shape>`` for an array in
    one field, ``<dtype>|<shape>|<n chunks>`` for one split into ``<name>@<i>`` fields, of
    which only those with a non-zero byte are returned."""
    changes, _ = encode_changes(arrays, None, keep=False)  # no base: no copy of the chunks
    return changes.fields, changes.layouts


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

    def take(self, model_id: str) -> T | None:
        """What is known of ``model_id``, forgotten: a commit owns its base (it may update it
        in place) and remembers what it wrote once that is stored."""
        with self._lock:
            return self._known.pop(model_id, None)

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
