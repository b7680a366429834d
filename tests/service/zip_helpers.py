"""Zip archives built by hand (members whose sizes lie, deflate streams built cheaply) and
``.npy`` members, for the bomb tests (test_hostile_bombs.py, test_hostile_zip.py)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")


def raw_zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip archive from ``(name, data as stored, crc32, uncompressed size, method)``: lets a
    test write a deflate stream it built itself, or sizes that lie."""
    body, central = bytearray(), bytearray()
    for name, data, crc, size, method in members:
        encoded = name.encode()
        offset = len(body)
        body += _LOCAL.pack(b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(data), size,
                            len(encoded), 0)  # fmt: skip
        body += encoded + data
        central += _CENTRAL.pack(b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc, len(data),
                                 size, len(encoded), 0, 0, 0, 0, 0, offset)  # fmt: skip
        central += encoded
    end = _END.pack(b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(body), 0)
    return bytes(body + central + end)


def deflated(prefix: bytes, fill: bytes, size: int) -> tuple[bytes, int, int]:
    """``prefix`` then ``fill`` repeated to ``size`` bytes in all, deflated cheaply: after a full
    flush the compressor forgets its window, so every 64 MiB block of ``fill`` compresses to
    the same bytes and is compressed once.  Returns ``(data, crc32, size)``."""
    block = fill * (64 * 2**20 // len(fill))
    n_blocks, rest = divmod(size - len(prefix), len(block))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    first = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    second = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert first == second
    tail = compressor.compress(block[:rest]) + compressor.flush()
    crc = zlib.crc32(prefix)
    block_crc = crc
    for _ in range(n_blocks):
        block_crc = zlib.crc32(block, block_crc)
    crc = zlib.crc32(block[:rest], block_crc)
    return head + first * n_blocks + tail, crc, size


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    return name, data, zlib.crc32(data), len(data), 0


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
