"""Size guards for zip uploads (NPZ bodies, snapshots), applied before anything is inflated or
allocated.

A 2 MB deflated member can expand to 2 GB, and a 100-byte ``.npy`` header can claim a shape of
``(2**40,)``; numpy and zipfile believe both.  So, in this order, from bytes that are cheap to
read:

1. the end-of-central-directory record: the number of members (a central directory of a
   million entries would cost hundreds of MB of ``ZipInfo`` objects);
2. the central directory: each member's *uncompressed* size, summed against the limit
   (zipfile never inflates a member beyond the size recorded there: a member that inflates to
   more fails its CRC check instead);
3. each ``.npy`` header (read by inflating only its first bytes): the bytes its shape and dtype
   claim, computed without overflow, must be exactly what the member holds.

Then reading a member allocates at most what the central directory declared, bounded above.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile

import numpy as np

from service.errors import InvalidInput, MalformedBody, PayloadTooLarge

__all__ = ["NpyLayout", "check_members", "member_count", "npy_layout"]

_END_RECORD = struct.Struct("<4s4H2LH")  # signature, disk numbers, entries here, total, ...
_END_SIGNATURE = b"PK\x05\x06"
#: an end record sits in the last 22 bytes, plus a comment of at most 65,535 bytes
_END_SEARCH = _END_RECORD.size + 65_535
#: .npy preamble: magic (6), version (2), header length (2 or 4); numpy's own header limit
_NPY_PREAMBLE = 12
_NPY_MAX_HEADER = 10_000


def member_count(body: bytes, *, what: str) -> int:
    """The number of members the end-of-central-directory record declares (before zipfile
    builds one object per entry).  A body without a record is not a zip archive."""
    position = body.rfind(_END_SIGNATURE, max(0, len(body) - _END_SEARCH))
    if position < 0 or position + _END_RECORD.size > len(body):
        raise MalformedBody(f"{what} is not a zip archive (no end-of-central-directory record)")
    _, _, _, _, total, _, _, _ = _END_RECORD.unpack_from(body, position)
    return int(total)  # 0xFFFF when a zip64 record holds the real number


def check_members(
    archive: zipfile.ZipFile, *, max_inflated_bytes: int, what: str
) -> list[zipfile.ZipInfo]:
    """The members, after checking that together they inflate to at most
    ``max_inflated_bytes`` (413 otherwise), from the central directory alone."""
    members = archive.infolist()
    total = sum(member.file_size for member in members)
    if total > max_inflated_bytes:
        largest = max(members, key=lambda member: member.file_size)
        raise PayloadTooLarge(
            f"{what} inflates to {total:,} bytes ({largest.filename!r}: "
            f"{largest.file_size:,}), more than the limit of {max_inflated_bytes:,} bytes "
            "(AUCSTREAM_MAX_INFLATED_BYTES)",
            field=largest.filename,
        )
    return members


class NpyLayout:
    """What a ``.npy`` header declares: ``shape``, ``fortran_order``, ``dtype`` and the size of
    the preamble before the data (``offset``)."""

    __slots__ = ("dtype", "fortran_order", "offset", "shape")

    def __init__(self, shape, fortran_order, dtype, offset) -> None:
        self.shape, self.fortran_order, self.dtype, self.offset = (
            shape,
            fortran_order,
            dtype,
            offset,
        )

    @property
    def nbytes(self) -> int:
        """Bytes of data the header claims, in Python integers (no int64 overflow)."""
        return math.prod(self.shape) * self.dtype.itemsize


def npy_layout(archive: zipfile.ZipFile, member: zipfile.ZipInfo, *, field: str) -> NpyLayout:
    """Read a member's ``.npy`` header (inflating only its first bytes) and check that its
    shape and dtype claim exactly the bytes the member holds (422 naming ``field``
    otherwise); object dtypes, which would need unpickling, are refused."""
    fmt = np.lib.format
    try:
        with archive.open(member) as handle:
            preamble = handle.read(_NPY_PREAMBLE + _NPY_MAX_HEADER)
    except (OSError, zipfile.BadZipFile, EOFError, RuntimeError, NotImplementedError) as error:
        raise MalformedBody(f"{field!r} cannot be read: {error}", field=field) from None
    stream = io.BytesIO(preamble)
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = fmt.read_array_header_1_0(stream)
        else:
            shape, fortran_order, dtype = fmt.read_array_header_2_0(stream)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as error:
        raise InvalidInput(
            f"{field!r} is not a readable .npy array: {error}", field=field
        ) from None
    if dtype.hasobject:
        raise InvalidInput(
            f"{field!r} holds Python objects (dtype {dtype}), which are never unpickled",
            field=field,
        )
    layout = NpyLayout(tuple(shape), fortran_order, dtype, stream.tell())
    if any(size < 0 for size in layout.shape):
        raise InvalidInput(f"{field!r} has a negative dimension {layout.shape}", field=field)
    held = member.file_size - layout.offset
    if layout.nbytes != held:
        raise InvalidInput(
            f"{field!r}: its header claims shape {layout.shape} of {dtype} "
            f"({layout.nbytes:,} bytes) but the member holds {held:,} bytes",
            field=field,
        )
    return layout
