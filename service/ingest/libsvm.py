"""``text/x-libsvm``: ``<label> <index>:<value> ... [# <event id>]`` per line; indices are
1-based as in LIBSVM and svmlight files (``?zero_based=true`` for 0-based).  Dense and sparse
models only.  The tokens of all lines are converted by one numpy call."""

from __future__ import annotations

from typing import Any

import numpy as np

from core._kernels.validation import first_bad_csr_entry
from core.validation import CSRMatrix
from service.errors import MalformedBody, UnsupportedMediaType
from service.ingest import fields
from service.ingest.batch import Batch, FeatureSpec
from service.ingest.fields import Locator

HASHED_NEEDS_NAMES = (
    "a hashed model takes named features: send application/json or application/x-ndjson"
)


def libsvm_events(
    body: bytes,
    spec: FeatureSpec,
    *,
    labelled: bool,
    max_events: int,
    zero_based: bool = False,
    max_dense_cells: int = fields.MAX_DENSE_CELLS,
) -> Batch:
    """LIBSVM / svmlight text -> batch; tokens of all lines converted by one numpy call."""
    if spec.feature_mode == "hashed":
        raise UnsupportedMediaType(HASHED_NEEDS_NAMES, field="content-type")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedBody(f"LIBSVM body is not UTF-8 text: {error}") from None
    labels: list[str] = []
    raw_ids: list[str | None] = []
    rests: list[str] = []
    counts: list[int] = []
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        content, _, comment = line.partition("#")
        tokens = content.split(None, 1)  # label, then pairs; any whitespace separates
        if not tokens:
            continue  # blank or comment-only line
        head, rest = tokens[0], tokens[1] if len(tokens) > 1 else ""
        labels.append(head)
        raw_ids.append(comment.strip() or None)
        rests.append(rest)
        counts.append(rest.count(":"))
        lines.append(number)
    fields.check_size(len(labels), max_events)
    fields.check_dense_cells(len(labels), spec, max_dense_cells)
    locate = Locator(raw_ids, lines)
    tokens = " ".join(rests).replace(":", " ").split()
    try:
        if len(tokens) != 2 * sum(counts):
            raise ValueError("pairs")
        pairs = np.array(tokens, dtype=np.float64).reshape(-1, 2)
    except ValueError:
        pairs = None
    if pairs is None:
        for index, rest in enumerate(rests):
            for token in rest.split():
                key, colon, value = token.partition(":")
                try:
                    int(key)
                    float(value)
                    ok = bool(colon)
                except ValueError:
                    ok = False
                if not ok:
                    raise locate.error(
                        index,
                        f"malformed LIBSVM pair {token!r}; expected <index>:<value>",
                        malformed=True,
                    )
        raise MalformedBody("malformed LIBSVM body")
    columns = pairs[:, 0]
    if columns.size and (columns != np.floor(columns)).any():
        position = int(np.flatnonzero(columns != np.floor(columns))[0])
        row = int(np.searchsorted(np.cumsum(counts), position, side="right"))
        raise locate.error(row, "LIBSVM feature indices must be integers", malformed=True)
    base = 0 if zero_based else 1
    outside = (columns < base) | (columns > spec.n_features - 1 + base)
    if outside.any():  # checked on the floats: an index beyond int64 must not wrap around
        position = int(np.flatnonzero(outside)[0])
        row = int(np.searchsorted(np.cumsum(counts), position, side="right"))
        hint = "" if zero_based else "; for a 0-based file add ?zero_based=true"
        raise locate.error(
            row,
            f"feature index {int(columns[position])} is outside [{base}, "
            f"{spec.n_features - 1 + base}] (this model has {spec.n_features} features; "
            f"indices are {base}-based here{hint})",
            field="x",
        )
    indices = columns.astype(np.int64) - base
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=indptr[1:])
    _check_pairs(indptr, indices, pairs[:, 1], spec.n_features, base, locate)
    sparse = fields.sparse(
        CSRMatrix(indptr, indices, np.ascontiguousarray(pairs[:, 1]), spec.n_features),
        spec,
        locate,
    )
    X: np.ndarray | CSRMatrix = sparse.toarray() if spec.feature_mode == "dense" else sparse
    y = None
    if labelled:
        values: list[Any] = []
        for index, label in enumerate(labels):
            try:
                number_value = float(label)
            except ValueError:
                raise locate.error(
                    index, f"label {label!r} is not a number; accepted: 0/1 or -1/+1", field="y"
                ) from None
            values.append(int(number_value) if number_value.is_integer() else number_value)
        y = fields.labels_from_values(values, locate)
    return Batch(X, y, fields.parse_ids(raw_ids, locate))


def _check_pairs(
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    n_features: int,
    base: int,
    locate: Locator,
) -> None:
    """Repeated indices and non-finite values, reported as the file numbers features
    (``base``: 1, or 0 with ``?zero_based=true``) with the line at fault: the checks
    ``core.validation`` makes next, whose messages count from 0."""
    row, column, reason = first_bad_csr_entry(indptr, indices, n_features)
    if reason != 0:  # 2: repeated (the range was checked before)
        raise locate.error(int(row), f"feature index {int(column) + base} is repeated", field="x")
    finite = np.isfinite(values)
    if not finite.all():
        position = int(np.flatnonzero(~finite)[0])
        row = int(np.searchsorted(indptr, position, side="right")) - 1
        raise locate.error(
            row,
            f"feature {int(indices[position]) + base} is {float(values[position])}; values must "
            "be finite numbers",
            field="x",
        )
