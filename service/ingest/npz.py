"""``application/x-npz``: a NumPy ``.npz`` archive loaded with ``allow_pickle=False`` (object
arrays are refused): ``X`` (2-d) or the CSR triple ``indptr``, ``indices``, ``data``; ``y``
(labels; not needed by ``/score``); optional ``ids`` (1-d strings or integers)."""

from __future__ import annotations

import functools
import io
import struct
import zipfile

import numpy as np
from isal.isal_zlib import crc32

from core.validation import CSRMatrix
from service.errors import InvalidInput, MalformedBody, UnsupportedMediaType
from service.ingest import fields
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.fields import Locator
from service.ingest.libsvm import HASHED_NEEDS_NAMES

NPZ_ARRAYS = ("X", "y", "ids", "indptr", "indices", "data")


def _read_member(archive: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """One array of an archive opened by ``np.load(..., allow_pickle=False)``.

    Why not ``archive[name]``: numpy reads a member through zipfile in small chunks, which
    costs about as much as learning a 1,000-event batch.  Reading the member in one call and
    viewing the bytes after the .npy header is ~3x faster.  Same safety: the header's dtype is
    checked and an object dtype (the only one that would need unpickling) is refused; nothing
    is ever unpickled.
    """
    fmt = np.lib.format
    assert archive.zip is not None
    raw = archive.zip.read(f"{name}.npy")
    stream = io.BytesIO(raw)
    version = fmt.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = fmt.read_array_header_1_0(stream)
    else:
        shape, fortran_order, dtype = fmt.read_array_header_2_0(stream)
    if dtype.hasobject:
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - stream.tell() < count * dtype.itemsize:
        raise EOFError(f"array {name!r} is truncated")
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=stream.tell())
    if fortran_order:
        return flat.reshape(tuple(shape), order="F").copy(order="C")
    return flat.reshape(tuple(shape)).copy()  # writable, C-contiguous


def _npz_arrays(body: bytes) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` body, through ``np.load(..., allow_pickle=False)``."""
    try:
        archive = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise MalformedBody(f"body is not a readable .npz archive: {error}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise MalformedBody("body is a single .npy array; send an .npz archive (np.savez)")
    with archive:
        names = set(archive.files)
        unexpected = sorted(names - set(NPZ_ARRAYS))
        if unexpected:
            raise InvalidInput(
                f"unexpected array(s) {', '.join(map(repr, unexpected))}; accepted: "
                f"{', '.join(NPZ_ARRAYS)}",
                field=unexpected[0],
            )
        arrays = {}
        for name in names:
            try:
                arrays[name] = _read_member(archive, name)
            except ValueError as error:  # object arrays: "Object arrays cannot be loaded ..."
                raise InvalidInput(
                    f"array {name!r} cannot be loaded: {error}", field=name
                ) from None
            except (OSError, zipfile.BadZipFile, EOFError) as error:
                raise MalformedBody(f"array {name!r} is corrupt: {error}", field=name) from None
    return arrays


# Fast path for what ``np.savez`` writes (stored members, no encryption): each member is read
# straight from the body (one copy into a fresh array) instead of through np.load, zipfile's
# member reader (a copy) and the .npy header parser (``ast.literal_eval``, ~20-50 us a header;
# parsed headers are cached, a batch of the same shape has the same header).  The CRC-32 of each
# member is still checked, by ISA-L (the value of zlib.crc32 at ~0.02 ms per MB instead of
# ~0.25 ms, which was ~10% of a 1,000-event NPZ request).  Anything else (compressed members, a
# bad CRC, unexpected names, an object dtype ...) returns None and the general path answers.
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, name length, extra length
_NPY_MAGIC = b"\x93NUMPY"


@functools.lru_cache(maxsize=256)
def _npy_header(preamble: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of a .npy preamble (magic, version, header), by numpy's
    own parser, as ``_read_member`` reads it."""
    fmt = np.lib.format
    stream = io.BytesIO(preamble)
    version = fmt.read_magic(stream)
    if version == (1, 0):
        return fmt.read_array_header_1_0(stream)
    return fmt.read_array_header_2_0(stream)


def _npz_arrays_fast(body: bytes) -> dict[str, np.ndarray] | None:
    if not body.startswith(b"PK\x03\x04"):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            members = archive.infolist()
    except (ValueError, OSError, zipfile.BadZipFile, EOFError):
        return None
    view = memoryview(body)
    arrays: dict[str, np.ndarray] = {}
    for member in members:
        name = member.filename[:-4]
        if (
            not member.filename.endswith(".npy")
            or name not in NPZ_ARRAYS
            or name in arrays
            or member.compress_type != zipfile.ZIP_STORED
            or member.flag_bits & 0x1  # encrypted
            or member.compress_size != member.file_size
        ):
            return None
        start = member.header_offset
        if start + _LOCAL_HEADER.size > len(body):
            return None
        signature, name_length, extra_length = _LOCAL_HEADER.unpack_from(body, start)
        name_start = start + _LOCAL_HEADER.size
        data_start = name_start + name_length + extra_length
        data_end = data_start + member.file_size
        if (
            signature != b"PK\x03\x04"
            or view[name_start : name_start + name_length] != member.orig_filename.encode()
            or data_end > len(body)
            or crc32(view[data_start:data_end]) != member.CRC
            or view[data_start : data_start + 6] != _NPY_MAGIC
        ):
            return None
        major = body[data_start + 6]
        if major == 1:
            header_end = (
                data_start + 10 + int.from_bytes(view[data_start + 8 : data_start + 10], "little")
            )
        elif major in (2, 3):
            header_end = (
                data_start + 12 + int.from_bytes(view[data_start + 8 : data_start + 12], "little")
            )
        else:
            return None
        if header_end > data_end:
            return None
        try:
            shape, fortran_order, dtype = _npy_header(bytes(view[data_start:header_end]))
        except (ValueError, OSError, EOFError):
            return None
        count = int(np.prod(shape, dtype=np.int64))
        if dtype.hasobject or count < 0 or data_end - header_end < count * dtype.itemsize:
            return None
        flat = np.frombuffer(body, dtype=dtype, count=count, offset=header_end)
        if fortran_order:
            arrays[name] = flat.reshape(tuple(shape), order="F").copy(order="C")
        else:
            arrays[name] = flat.reshape(tuple(shape)).copy()  # writable, C-contiguous
    return arrays or None


def npz_events(body: bytes, spec: FeatureSpec, *, labelled: bool, max_events: int) -> Batch:
    """A ``.npz`` archive, loaded with ``allow_pickle=False``."""
    if spec.feature_mode == "hashed":
        raise UnsupportedMediaType(HASHED_NEEDS_NAMES, field="content-type")
    arrays = _npz_arrays_fast(body)
    if arrays is None:
        arrays = _npz_arrays(body)
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise InvalidInput(f"array {name!r} holds Python objects", field=name)
    raw_ids = arrays["ids"].tolist() if "ids" in arrays else None
    locate = Locator(raw_ids)
    if "X" in arrays:
        X = _dense_member(arrays["X"], spec, locate, max_events)
    elif {"indptr", "indices", "data"} <= set(arrays):
        X = _csr_members(arrays, spec, locate, max_events)
    else:
        raise InvalidInput(
            "the archive needs 'X' (dense) or 'indptr', 'indices' and 'data' (CSR)", field="X"
        )
    n_events = int(X.shape[0])
    y = None
    if labelled:
        if "y" not in arrays:
            raise InvalidInput("the archive has no labels 'y'", field="y")
        y = fields.labels_from_array(arrays["y"], n_events, locate)
    ids = None
    if raw_ids is not None:
        if len(raw_ids) != n_events:
            raise InvalidInput(f"got {len(raw_ids)} ids for {n_events} events", field="ids")
        ids = fields.parse_ids(raw_ids, locate)
    return Batch(X, y, ids)


def _dense_member(
    dense: np.ndarray, spec: FeatureSpec, locate: Locator, max_events: int
) -> np.ndarray | CSRMatrix:
    """``X``, checked by ``core.validation``; as CSR for a sparse model."""
    if dense.ndim != 2:
        raise InvalidInput(f"'X' must be 2-d, got shape {dense.shape}", field="X")
    fields.check_size(dense.shape[0], max_events)
    dense = fields.dense(dense, spec, locate, field="X")
    if spec.feature_mode == "dense":
        return dense
    rows, columns = np.nonzero(dense)
    indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
    return CSRMatrix(indptr, columns.astype(np.int64), dense[rows, columns], spec.n_features)


def _csr_members(
    arrays: dict[str, np.ndarray], spec: FeatureSpec, locate: Locator, max_events: int
) -> np.ndarray | CSRMatrix:
    """``indptr``, ``indices``, ``data``, checked by ``core.validation``; dense for a dense
    model."""
    try:
        indptr = np.asarray(arrays["indptr"], dtype=np.int64)
        indices = np.asarray(arrays["indices"], dtype=np.int64)
        data = np.asarray(arrays["data"], dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"CSR arrays must be numeric: {error}", field="data") from None
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
        raise InvalidInput("CSR arrays must be 1-d", field="indptr")
    fields.check_size(max(len(indptr) - 1, 0), max_events)
    X = fields.sparse(CSRMatrix(indptr, indices, data, spec.n_features), spec, locate)
    return X.toarray() if spec.feature_mode == "dense" else X
