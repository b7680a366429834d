"""``application/x-npz``: a NumPy ``.npz`` archive of ``X`` (2-d) or the CSR triple ``indptr``,
``indices``, ``data``; ``y`` (not needed by ``/score``); optional ``ids`` (1-d)."""

from __future__ import annotations

import io
import zipfile

import numpy as np

from core.csr import CSRMatrix
from core.errors import unknown_names
from service.errors import InvalidInput, MalformedBody
from service.ingest import fields
from service.ingest.archive import check_members, member_count, npy_array, npy_layout
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.fields import Locator

NPZ_ARRAYS = ("X", "y", "ids", "indptr", "indices", "data")


def _npz_arrays(body: bytes, max_inflated_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` body as ``np.load(..., allow_pickle=False)`` reads them, through
    the guards and the bounded reader of :mod:`service.ingest.archive`."""
    if body.startswith(b"\x93NUMPY"):
        raise MalformedBody("body is a single .npy array; send an .npz archive (np.savez)")
    try:
        archive = zipfile.ZipFile(io.BytesIO(body))
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise MalformedBody(f"body is not a readable .npz archive: {error}") from None
    with archive:
        members = check_members(
            archive, max_inflated_bytes=max_inflated_bytes, what="the .npz body"
        )
        # np.load's names: a member "X.npy" is the array "X"
        named = {member.filename.removesuffix(".npy"): member for member in members}
        unexpected = unknown_names(named, NPZ_ARRAYS, "unexpected array(s)")
        if unexpected is not None:
            raise InvalidInput(unexpected[1], field=unexpected[0])
        return {
            name: npy_array(body, member, npy_layout(body, member, field=name), field=name)
            for name, member in named.items()
        }


def npz_events(
    body: bytes,
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    max_inflated_bytes: int = fields.MAX_INFLATED_BYTES,
    max_dense_cells: int = fields.MAX_DENSE_CELLS,
) -> Batch:
    """A ``.npz`` body; 413 beyond ``max_inflated_bytes`` inflated or, CSR arrays for a dense
    model, ``max_dense_cells`` values."""
    try:
        n_members = member_count(body, what="the .npz body")
    except MalformedBody:
        n_members = 0  # not a zip archive: the readers below say what it is
    if n_members > len(NPZ_ARRAYS):
        raise InvalidInput(
            f"the .npz body declares {n_members} members; at most {len(NPZ_ARRAYS)} are "
            f"accepted: {', '.join(NPZ_ARRAYS)}",
            field="body",
        )
    arrays = _npz_arrays(body, max_inflated_bytes)
    if "ids" in arrays and arrays["ids"].ndim != 1:
        raise InvalidInput(
            f"'ids' must be 1-d (one id per event), got shape {arrays['ids'].shape}", field="ids"
        )
    raw_ids = arrays["ids"].tolist() if "ids" in arrays else None
    locate = Locator(raw_ids)
    if "X" in arrays:
        X = _dense_member(arrays["X"], spec, locate, max_events)
    elif {"indptr", "indices", "data"} <= set(arrays):
        X = _csr_members(arrays, spec, locate, max_events, max_dense_cells)
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
    """``X`` checked, as CSR for a sparse model."""
    if dense.ndim != 2:
        raise InvalidInput(f"'X' must be 2-d, got shape {dense.shape}", field="X")
    fields.check_size(dense.shape[0], max_events)
    dense = fields.dense(dense, spec, locate, field="X")
    return dense if spec.feature_mode == "dense" else CSRMatrix.from_dense(dense)


def _csr_members(
    arrays: dict[str, np.ndarray],
    spec: FeatureSpec,
    locate: Locator,
    max_events: int,
    max_dense_cells: int,
) -> np.ndarray | CSRMatrix:
    """``indptr``, ``indices``, ``data`` checked, dense for a dense model."""
    try:
        indptr = np.asarray(arrays["indptr"], dtype=np.int64)
        indices = np.asarray(arrays["indices"], dtype=np.int64)
        data = np.asarray(arrays["data"], dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"CSR arrays must be numeric: {error}", field="data") from None
    if indptr.ndim != 1 or indices.ndim != 1 or data.ndim != 1:
        raise InvalidInput("CSR arrays must be 1-d", field="indptr")
    fields.check_size(max(len(indptr) - 1, 0), max_events)
    fields.check_dense_cells(len(indptr) - 1, spec, max_dense_cells)
    X = fields.sparse(CSRMatrix(indptr, indices, data, spec.n_features), spec, locate)
    return X.toarray() if spec.feature_mode == "dense" else X
