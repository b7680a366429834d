"""Guards for zip uploads (NPZ bodies, snapshots), checked on cheap bytes before anything is
inflated or allocated, and the bounded reader of their members.

A small deflated or bzip2 member can expand a thousandfold and a ``.npy`` header can claim any
shape; numpy and zipfile believe both.  So the member count, each member's method (stored or
deflate: other codecs inflate a whole chunk in one unbounded call) and declared size, and each
``.npy`` header against its member are checked first; :func:`member_content` then inflates in
bounded steps, stopping where a member produces more than it declared.
"""

from __future__ import annotations

import functools
import io
import math
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
from isal.isal_zlib import crc32

from service.errors import InvalidInput, MalformedBody, PayloadTooLarge, UnsupportedMediaType

#: the end-of-central-directory record: signature, disk numbers, entries on this disk and in
#: total, size and offset of the central directory, comment length
_END_RECORD = struct.Struct("<4s4H2LH")
_END_SIGNATURE = b"PK\x05\x06"
#: an end record sits in the last 22 bytes, plus a comment of at most 65,535 bytes
_END_SEARCH = _END_RECORD.size + 65_535
#: a central directory entry: signature, flags, method, lengths of the name, extra field and
#: comment (the name follows the entry's 46 fixed bytes)
_DIRECTORY_ENTRY = struct.Struct("<4s4xHH16xHHH")
_DIRECTORY_ENTRY_SIZE = 46
_DIRECTORY_SIGNATURE = b"PK\x01\x02"
#: a local file header: signature, 22 bytes the directory repeats, lengths of the name and of
#: the extra field (the member's data follows them)
LOCAL_HEADER = struct.Struct("<4s22xHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
#: .npy preamble: magic (6), version (2), header length (2 or 4); numpy's own header limit
_NPY_PREAMBLE = 12
_NPY_MAX_HEADER = 10_000
#: most bytes one inflate step produces: what a member costs beyond its own bytes
_INFLATE_STEP = 2**20

#: what ``np.savez(_compressed)`` and the snapshot export write; :func:`member_content` bounds both
ACCEPTED_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
#: names of the other methods of the zip specification (APPNOTE 4.4.5), for the refusal
_METHOD_NAMES = {
    1: "shrink", 2: "reduce", 3: "reduce", 4: "reduce", 5: "reduce", 6: "implode",
    9: "deflate64", 10: "PKWARE DCL implode", 12: "bzip2", 14: "LZMA", 16: "IBM z/OS CMPSC",
    18: "IBM TERSE", 19: "IBM LZ77", 20: "zstandard", 93: "zstandard", 94: "MP3", 95: "xz",
    96: "JPEG", 97: "WavPack", 98: "PPMd", 99: "AES encryption",
}  # fmt: skip


class UnreadableDirectory(ValueError):
    """The central directory cannot be read record by record (the general reader says why)."""


def _end_record(body: bytes) -> tuple[int, int, int] | None:
    """``(position, members in total, offset of the central directory)``, or None."""
    position = body.rfind(_END_SIGNATURE, max(0, len(body) - _END_SEARCH))
    if position < 0 or position + _END_RECORD.size > len(body):
        return None
    _, _, _, _, total, _, offset, _ = _END_RECORD.unpack_from(body, position)
    return position, int(total), int(offset)


def member_count(body: bytes, *, what: str) -> int:
    """The number of members the end record declares (before zipfile builds an object per
    entry); a body without one is not a zip archive."""
    end = _end_record(body)
    if end is None:
        raise MalformedBody(f"{what} is not a zip archive (no end-of-central-directory record)")
    return end[1]  # 0xFFFF when a zip64 record holds the real number


def central_directory(body: bytes, *, most: int) -> Iterator[tuple[str, int, int]]:
    """``(name, compression method, flags)`` of each member, read from the central directory
    as needed without zipfile's objects (cheap enough for the event loop);
    :class:`UnreadableDirectory` where a record cannot be read or beyond ``most`` members."""
    end = _end_record(body)
    if end is None:
        raise UnreadableDirectory("no end-of-central-directory record")
    directory_end, total, position = end
    if total > most:
        raise UnreadableDirectory(f"{total} members declared, more than {most}")
    for _ in range(total):
        if position + _DIRECTORY_ENTRY_SIZE > directory_end:
            raise UnreadableDirectory("a directory record runs past the directory")
        signature, flags, method, *lengths = _DIRECTORY_ENTRY.unpack_from(body, position)
        if signature != _DIRECTORY_SIGNATURE:
            raise UnreadableDirectory("a directory record without its signature")
        start = position + _DIRECTORY_ENTRY_SIZE
        encoding = "utf-8" if flags & 0x800 else "cp437"  # as zipfile decodes names
        yield body[start : start + lengths[0]].decode(encoding, "replace"), method, flags
        position = start + sum(lengths)


def check_method(name: str, method: int, flags: int, *, what: str) -> None:
    """415 naming the member and its codec unless it is stored or deflated, unencrypted."""
    if flags & 0x1:
        raise UnsupportedMediaType(
            f"{what}: member {name!r} is encrypted; send it unencrypted", field=name
        )
    if method not in ACCEPTED_METHODS:
        codec = _METHOD_NAMES.get(method, f"compression method {method}")
        raise UnsupportedMediaType(
            f"{what}: member {name!r} is compressed with {codec}; only stored and deflate "
            "members are accepted (what numpy.savez, numpy.savez_compressed and zipfile's "
            "ZIP_DEFLATED write)",
            field=name,
        )


def check_members(
    archive: zipfile.ZipFile, *, max_inflated_bytes: int, what: str
) -> list[zipfile.ZipInfo]:
    """The members, each stored or deflated (415 otherwise), together declaring at most
    ``max_inflated_bytes`` (413 otherwise): the central directory alone is read."""
    members = archive.infolist()
    for member in members:
        check_method(member.filename, member.compress_type, member.flag_bits, what=what)
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


def _member_data(body: bytes, member: zipfile.ZipInfo, field: str) -> memoryview:
    """The member's bytes as stored in ``body`` (after its local header), without a copy."""
    start = member.header_offset
    if start < 0 or start + LOCAL_HEADER.size > len(body):
        raise MalformedBody(f"{field!r}: its local header is outside the archive", field=field)
    signature, name_length, extra_length = LOCAL_HEADER.unpack_from(body, start)
    if signature != _LOCAL_SIGNATURE:
        raise MalformedBody(f"{field!r}: no local header where the directory says", field=field)
    data_start = start + LOCAL_HEADER.size + name_length + extra_length
    data_end = data_start + member.compress_size
    if data_end > len(body):
        raise MalformedBody(
            f"{field!r}: {member.compress_size:,} bytes declared, the archive ends before",
            field=field,
        )
    return memoryview(body)[data_start:data_end]


def member_content(
    body: bytes, member: zipfile.ZipInfo, *, field: str, prefix: int | None = None
) -> bytes | memoryview:
    """A member of :func:`check_members` (its first ``prefix`` bytes when given) read from
    ``body``: a stored member as a view, a deflated one inflated in bounded steps up to the
    size it declares; one that would produce more or less, or whose CRC-32 differs, is a 400
    naming ``field``."""
    data = _member_data(body, member, field)
    declared = member.file_size
    wanted = declared if prefix is None else min(prefix, declared)
    if member.compress_type == zipfile.ZIP_STORED:
        if prefix is None and len(data) != declared:
            raise MalformedBody(
                f"{field!r} is stored in {len(data):,} bytes but declares {declared:,}", field=field
            )
        content: bytes | memoryview = data[:wanted]
    else:  # deflated: check_members refused every other method
        content = _inflate(data, wanted, field=field, whole=prefix is None)
    if prefix is None:
        if len(content) != declared:
            raise MalformedBody(
                f"{field!r} inflates to {len(content):,} bytes but declares {declared:,}",
                field=field,
            )
        if crc32(content) != member.CRC:
            raise MalformedBody(f"{field!r} is corrupt (bad CRC-32)", field=field)
    return content


def _inflate(data: memoryview, wanted: int, *, field: str, whole: bool) -> bytes:
    """Inflate raw deflate ``data`` to at most ``wanted`` bytes; with ``whole``, refuse a
    stream that goes on past them (the member lied about its size)."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    parts: list[bytes] = []
    produced = 0
    source: bytes | memoryview = data
    try:
        while produced < wanted and not inflater.eof:
            part = inflater.decompress(source, min(_INFLATE_STEP, wanted - produced))
            source = inflater.unconsumed_tail
            if not part:
                break  # the input is spent before the stream ends: short, caught by the caller
            parts.append(part)
            produced += len(part)
        if whole and not inflater.eof and inflater.decompress(source, 1):
            raise MalformedBody(
                f"{field!r} inflates to more than the {wanted:,} bytes it declares; refused there",
                field=field,
            )
    except zlib.error as error:
        raise MalformedBody(
            f"{field!r} is not a valid deflate stream: {error}", field=field
        ) from None
    return b"".join(parts)


class NpyLayout(NamedTuple):
    """What a ``.npy`` header declares, and the size of the preamble before the data."""

    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of data the header claims, in Python integers (no int64 overflow)."""
        return math.prod(self.shape) * self.dtype.itemsize


def _header(prefix: bytes | memoryview) -> NpyLayout:
    """The layout of the ``.npy`` preamble starting ``prefix``, parsed once per distinct header
    (numpy's parser runs ``ast.literal_eval``, slow next to reading a small batch)."""
    length_bytes = 2 if prefix[6:7] == b"\x01" else 4  # format 1.0, else 2.0 / 3.0
    end = 8 + length_bytes + int.from_bytes(prefix[8 : 8 + length_bytes], "little")
    return _parsed_header(bytes(prefix[:end]))


@functools.lru_cache(maxsize=256)
def _parsed_header(header: bytes) -> NpyLayout:
    fmt = np.lib.format
    stream = io.BytesIO(header)
    if fmt.read_magic(stream) == (1, 0):
        shape, fortran_order, dtype = fmt.read_array_header_1_0(stream)
    else:
        shape, fortran_order, dtype = fmt.read_array_header_2_0(stream)
    return NpyLayout(tuple(shape), fortran_order, dtype, stream.tell())


def npy_layout(body: bytes, member: zipfile.ZipInfo, *, field: str) -> NpyLayout:
    """A member's ``.npy`` header (only its first bytes inflated), whose shape and dtype must
    claim exactly the bytes the member declares, and no objects (never unpickled): 422."""
    try:
        layout = _header(
            member_content(body, member, field=field, prefix=_NPY_PREAMBLE + _NPY_MAX_HEADER)
        )
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as error:
        raise InvalidInput(
            f"{field!r} is not a readable .npy array: {error}", field=field
        ) from None
    if layout.dtype.hasobject:
        raise InvalidInput(
            f"{field!r} holds Python objects (dtype {layout.dtype}), which are never unpickled",
            field=field,
        )
    if any(size < 0 for size in layout.shape):
        raise InvalidInput(f"{field!r} has a negative dimension {layout.shape}", field=field)
    held = member.file_size - layout.offset
    if layout.nbytes != held:
        raise InvalidInput(
            f"{field!r}: its header claims shape {layout.shape} of {layout.dtype} "
            f"({layout.nbytes:,} bytes) but the member holds {held:,} bytes",
            field=field,
        )
    return layout


def npy_array(body: bytes, member: zipfile.ZipInfo, layout: NpyLayout, *, field: str):
    """The member's array of a checked ``layout``, as a writable C-contiguous copy."""
    raw = member_content(body, member, field=field)
    flat = np.frombuffer(
        raw, dtype=layout.dtype, count=math.prod(layout.shape), offset=layout.offset
    )
    if layout.fortran_order:
        return flat.reshape(layout.shape, order="F").copy(order="C")
    return flat.reshape(layout.shape).copy()
