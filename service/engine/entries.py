"""Log entries: the durable record of one change of one model, self-contained and deterministic
(a replay never reads a clock): :func:`service.engine.learning.apply` makes the change live and
on replay, so checkpoint + entries *is* the model, bit for bit.  :func:`encode` /
:func:`decode` are its bytes (docs/architecture.md, "The log and checkpoints").
"""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass, field

import numpy as np
import orjson

from core.csr import CSRMatrix
from core.logged_fits import LoggedFit
from service.stores.base import to_little_endian

#: the entry format's version, first in every encoded entry (a new layout is a new number,
#: and an entry of another number is refused: 2 added the fits a change installed, 3 holds
#: their trees as three arrays, as state format 9 does)
ENTRY_FORMAT = 3
_HEAD = struct.Struct("<BI")


@dataclass(frozen=True, eq=False)
class Entry:
    """One change of one model (module docstring)."""

    #: unix time the change was applied at
    now: float
    #: the events learned (after duplicate removal), None when the change learns nothing
    X: np.ndarray | CSRMatrix | None = None
    y: np.ndarray | None = None
    #: the scores given at scoring time (delayed labels, the sweep), None: prequential
    recorded: np.ndarray | None = None
    #: sizes of the rounds the events were learned in (one learner call each when that
    #: matters: :func:`service.engine.learning.one_call_is_exact`); empty: one round
    rounds: tuple[int, ...] = ()
    #: counters added after learning (``duplicates``, ``labels_joined`` ...)
    counts: tuple[tuple[str, int], ...] = ()
    #: a metrics-history point written at ``now`` (:func:`service.engine.history.catch_up_due`)
    history: bool = False
    #: the boosted fits the change installed, with their arrays (filled by
    #: :func:`service.engine.learning.apply` on the live path): a replay installs them at the
    #: same position instead of fitting again (:mod:`core.logged_fits`)
    fits: list[LoggedFit] = field(default_factory=list)

    @property
    def n_events(self) -> int:
        return 0 if self.y is None else len(self.y)

    def bounds(self) -> list[tuple[int, int]]:
        # plain integers: a replay asks each of 100,000s of entries (NumPy's cumsum cost ~15 us)
        edges = [0, *itertools.accumulate(self.rounds or (self.n_events,))]
        return list(zip(edges[:-1], edges[1:], strict=True))


class ReplayFailed(Exception):
    """A logged entry that does not apply (a bug: it applied when it was logged)."""

    def __init__(self, version: int, error: BaseException) -> None:
        super().__init__(f"log entry {version} does not apply: {error!r}")
        self.version = version


# ---------------------------------------------------------------------------- bytes
def encode(entry: Entry) -> bytes:
    """The entry as bytes: format, header length, JSON header, the arrays' raw bytes."""
    arrays: list[tuple[str, np.ndarray]] = []
    sparse = isinstance(entry.X, CSRMatrix)
    if isinstance(entry.X, CSRMatrix):
        arrays += [("indptr", entry.X.indptr), ("indices", entry.X.indices), ("data", entry.X.data)]
    elif entry.X is not None:
        arrays.append(("X", entry.X))
    if entry.y is not None:
        arrays.append(("y", entry.y))
    if entry.recorded is not None:
        arrays.append(("recorded", entry.recorded))
    for index, fit in enumerate(entry.fits):
        arrays += [(f"fit{index}:ensemble:{key}", value) for key, value in fit.ensemble.items()]
        arrays += [(f"fit{index}:inner:{key}", value) for key, value in fit.inner.items()]
    parts = [to_little_endian(array) for _, array in arrays]
    header = orjson.dumps(
        {
            "now": entry.now,
            "rounds": list(entry.rounds),
            "counts": [list(pair) for pair in entry.counts],
            "history": entry.history,
            "n_features": int(entry.X.shape[1]) if entry.X is not None else 0,
            "sparse": sparse,
            "fits": [
                [fit.part, fit.generation, fit.fits, fit.fit_from, fit.digest] for fit in entry.fits
            ],  # fmt: skip
            "arrays": [
                [name, part.dtype.str, list(part.shape)]
                for (name, _), part in zip(arrays, parts, strict=True)
            ],
        }
    )
    return b"".join([_HEAD.pack(ENTRY_FORMAT, len(header)), header, *map(bytes, parts)])


#: what follows ``"now"`` in the JSON headers of entries that carry no fit -> their layout: a
#: replay decodes 100,000s of entries of a few layouts, and parsing and checking each header
#: cost more than reading its arrays
_LAYOUTS: dict[bytes, _Layout] = {}
_MAX_LAYOUTS = 256
_NOW = b'{"now":'


@dataclass(frozen=True, eq=False)
class _Layout:
    """An entry's header without its ``now``, parsed and checked: its arrays' name, dtype,
    element count, shape and offset after the header (whose length varies with ``now``'s
    digits), their bytes, and the header's other fields."""

    arrays: tuple[tuple[str, np.dtype, int, tuple[int, ...] | None, int], ...]
    size: int
    header: dict


def _layout(header: dict) -> _Layout:
    """``header``'s arrays checked and placed one after another (ValueError if not)."""
    arrays = []
    offset = 0
    for name, dtype_text, shape in header["arrays"]:
        dtype = np.dtype(dtype_text)
        # a list of non-negative integers
        if dtype.kind not in "iuf" or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"log entry array {name!r} of dtype {dtype_text!r}, shape {shape}")
        count = math.prod(shape)  # np.prod costs ~5 us a call
        arrays.append((name, dtype, count, None if len(shape) == 1 else tuple(shape), offset))
        offset += count * dtype.itemsize
    return _Layout(tuple(arrays), offset, header)


def decode(raw: bytes) -> Entry:
    """:func:`encode`'s inverse (ValueError on bytes it did not write).  A fit's arrays are
    checked by value when a replay installs it (:func:`core.logged_fits.installable`)."""
    version, length = _HEAD.unpack_from(raw)
    if version != ENTRY_FORMAT:
        raise ValueError(
            f"log entry of format {version}, this server reads {ENTRY_FORMAT}: stop the server"
            " cleanly with the version of aucstream that wrote it (a clean stop checkpoints"
            " every model and truncates the log), then start this version"
        )
    start = _HEAD.size + length
    text = raw[_HEAD.size : start]
    comma = text.find(b",", len(_NOW)) if text.startswith(_NOW) else -1
    layout = _LAYOUTS.get(text[comma:]) if comma > 0 else None
    if layout is None:
        header = orjson.loads(text)
        layout = _layout(header)
        if comma > 0 and not header["fits"]:  # an entry with fits is one of its kind
            if len(_LAYOUTS) >= _MAX_LAYOUTS:
                _LAYOUTS.clear()
            _LAYOUTS[text[comma:]] = layout
        now = header["now"]
    else:
        now = orjson.loads(text[len(_NOW) : comma])
    if start + layout.size != len(raw):
        raise ValueError(
            f"log entry of {len(raw)} bytes holds {start + layout.size} bytes of arrays"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, count, shape, offset in layout.arrays:
        array = np.frombuffer(raw, dtype, count, start + offset).copy()
        arrays[name] = array if shape is None else array.reshape(shape)
    header = layout.header
    X: np.ndarray | CSRMatrix | None = arrays.get("X")
    if header["sparse"]:
        X = CSRMatrix(arrays["indptr"], arrays["indices"], arrays["data"], header["n_features"])
    return Entry(
        now=float(now),
        X=X,
        y=arrays.get("y"),
        recorded=arrays.get("recorded"),
        # most entries have neither: no generator made for nothing (a replay decodes 100,000s)
        rounds=tuple(map(int, header["rounds"])) if header["rounds"] else (),
        counts=tuple((str(name), int(count)) for name, count in header["counts"])
        if header["counts"]
        else (),
        history=bool(header["history"]),
        fits=_fits(header["fits"], arrays) if header["fits"] else [],
    )


def _fits(described: list, arrays: dict[str, np.ndarray]) -> list[LoggedFit]:
    """The fits an entry carries, from its header and its ``fit<k>:`` arrays."""
    fits = []
    for index, (part, generation, fits_before, fit_from, digest) in enumerate(described):
        parts: dict[str, dict[str, np.ndarray]] = {"ensemble": {}, "inner": {}}
        prefix = f"fit{index}:"
        for name, value in arrays.items():
            if name.startswith(prefix):
                kind, _, key = name[len(prefix) :].partition(":")
                if kind not in parts:
                    raise ValueError(f"log entry array {name!r} belongs to no part of a fit")
                parts[kind][key] = value
        fits.append(
            LoggedFit(
                str(part),
                int(generation),
                int(fits_before),
                int(fit_from),
                str(digest),
                parts["ensemble"],
                parts["inner"],
            )  # fmt: skip
        )
    return fits
