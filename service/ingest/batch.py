"""What parsing produces: a validated :class:`Batch` for the model's :class:`FeatureSpec`."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.csr import CSRMatrix
from core.hashing import FeatureHasher
from service.schemas import FeatureModeName, MissingValuesName


@dataclass(frozen=True)
class FeatureSpec:
    """What a model expects of its events."""

    n_features: int
    feature_mode: FeatureModeName
    accept_sparse: bool = True
    #: the model's feature names (dense and sparse models created with them): events may
    #: then give ``x`` as ``{"name": value}`` (:mod:`service.ingest.named`)
    feature_names: tuple[str, ...] | None = None
    #: what a missing value (JSON null, NaN) does: ``refuse`` it, read it as ``zero``, or as
    #: the feature's running ``mean`` (filled by the engine: :mod:`service.engine.missing`)
    missing_values: MissingValuesName = "refuse"

    @property
    def fills_missing(self) -> bool:
        return self.missing_values != "refuse"

    @property
    def marks_missing(self) -> bool:
        """Whether a missing value stays NaN in the parsed batch, for the engine to fill with
        the running mean (dense models only: in a sparse or hashed one it is left out, 0)."""
        return self.missing_values == "mean" and self.feature_mode == "dense"

    def hasher(self) -> FeatureHasher:
        return _hasher(self.n_features)


_hasher = functools.cache(FeatureHasher)


@dataclass
class Batch:
    """A validated batch: features (dense float64 or CSR), labels in {-1, +1} or None, ids.

    ``ids`` is None when no event has an id; otherwise one entry per event (None for an event
    without id, which is then never deduplicated).
    """

    X: np.ndarray | CSRMatrix
    y: np.ndarray | None
    ids: list[str | None] | None
    #: a hashed model's JSON events: each event's ``x`` object as sent (not copied), so that
    #: reason codes can name a hash column by the names that fell in it
    named_rows: list[Any] | None = None

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def take(self, rows: np.ndarray) -> Batch:
        """The events at ``rows`` (indices), in that order."""
        X = self.X.take_rows(rows) if isinstance(self.X, CSRMatrix) else self.X[rows]
        y = None if self.y is None else self.y[rows]
        ids = None if self.ids is None else [self.ids[i] for i in rows.tolist()]
        named = None if self.named_rows is None else [self.named_rows[i] for i in rows.tolist()]
        return Batch(X, y, ids, named)


def concatenate(batches: Sequence[Batch]) -> Batch:
    """Consecutive batches of one model as one (learned in one engine call: the learners give
    the same state bit for bit whether a sequence is learned at once or in parts), labelled
    or not (events to score: a batch without labels leaves the whole without)."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0].X
    X: np.ndarray | CSRMatrix
    if isinstance(first, CSRMatrix):
        parts: list[CSRMatrix] = [b.X for b in batches]  # type: ignore[misc]
        pieces = [parts[0].indptr[:1]]
        offset = 0
        for part in parts:
            pieces.append(part.indptr[1:] + offset)
            offset += part.nnz
        X = CSRMatrix(
            np.concatenate(pieces).astype(np.int64),
            np.concatenate([p.indices for p in parts]),
            np.concatenate([p.data for p in parts]),
            first.n_features,
        )
    else:
        X = np.concatenate([b.X for b in batches])  # type: ignore[misc]
    y: np.ndarray | None = None  # events to score
    if all(b.y is not None for b in batches):
        y = np.concatenate([b.y for b in batches])  # type: ignore[misc]
    ids: list[str | None] | None = None
    if any(b.ids is not None for b in batches):
        ids = []
        for b in batches:
            ids.extend(b.ids if b.ids is not None else [None] * len(b))
    return Batch(X, y, ids)
