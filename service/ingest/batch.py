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
    #: a dense or sparse model's feature names: ``x`` may be ``{"name": value}`` (ingest.named)
    feature_names: tuple[str, ...] | None = None
    #: a missing value (JSON null, NaN): ``refuse``, ``zero``, or the running ``mean`` (engine)
    missing_values: MissingValuesName = "refuse"

    @property
    def fills_missing(self) -> bool:
        return self.missing_values != "refuse"

    @property
    def marks_missing(self) -> bool:
        """Whether a missing value stays NaN for the engine's running mean (dense models: in a
        sparse or hashed one it is left out, 0)."""
        return self.missing_values == "mean" and self.feature_mode == "dense"

    def hasher(self) -> FeatureHasher:
        return _hasher(self.n_features)


_hasher = functools.cache(FeatureHasher)


@dataclass
class Batch:
    """A validated batch: features (dense float64 or CSR), labels in {-1, +1} or None, ids
    (None when no event has one, else one per event: None is never deduplicated)."""

    X: np.ndarray | CSRMatrix
    y: np.ndarray | None
    ids: list[str | None] | None
    #: a hashed model's JSON events' ``x`` as sent, for reason codes to name a hash column
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
    """Consecutive batches of one model as one, for one engine call (the learners give the
    same state whether a sequence is learned at once or in parts); unlabelled if one is."""
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
