"""Reason codes: the features that pushed each event's score up or down the most
(docs/algorithms/reasons.md), from the learner's
:meth:`~core.learners._base.OnlineLearner.contributions`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.csr import CSRMatrix
from core.hashing import FeatureHasher
from core.validation import row_range

#: [CHOICE] most cells (events x features) of contributions computed at a time: the learner
#: returns them dense, so a batch of a wide (hashed) model is explained a few rows at a time
CONTRIBUTION_CELLS = 2**20


def hashed_names(row: dict[str, Any], hasher: FeatureHasher) -> dict[int, str]:
    """The hash column of each name of an event's ``x`` object as the ingest hashes it (a
    string value is the feature ``"name=value"``, a null nothing); names that share a column
    are joined by ``|``."""
    columns: dict[int, str] = {}
    for name, value in row.items():
        if value is None:
            continue
        feature = f"{name}={value}" if type(value) is str else name
        column = hasher.column_of(feature)[0]
        columns[column] = f"{columns[column]}|{feature}" if column in columns else feature
    return columns


def top_reasons(
    learner: Any,
    X: np.ndarray | CSRMatrix,
    k: int,
    feature_names: Sequence[str] | None,
    named_rows: list[Any] | None = None,
    hasher: FeatureHasher | None = None,
) -> list[dict[str, Any]]:
    """Per event, the ``k`` largest non-zero contributions by absolute value, each ``{"feature":
    name or column index, "contribution": c}``, with ``others`` (the other features' sum) and
    ``baseline`` (the reference event's score), so that ``sum(contributions) + others +
    baseline`` is the event's score. ``X`` is a validated batch that fits the learner. Given the
    events' ``x`` objects (``named_rows``) and the ``hasher``, a hashed model's columns are named
    by the names that fell in them (else their index)."""
    n_events, n_features = X.shape
    k = min(k, n_features)
    step = max(1, CONTRIBUTION_CELLS // max(1, n_features))
    explained: list[dict[str, Any]] = []
    for start in range(0, n_events, step):
        part = row_range(X, start, min(n_events, start + step))
        contributions, baseline = learner.contributions(part, check_input=False)
        magnitude = np.abs(contributions)
        top = np.argpartition(-magnitude, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(magnitude, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        values = np.take_along_axis(contributions, top, axis=1)
        others = contributions.sum(axis=1) - values.sum(axis=1)
        labels = (
            np.asarray(feature_names, dtype=object)[top].tolist()
            if feature_names is not None
            else top.tolist()
        )
        if named_rows is not None and hasher is not None:
            rows = named_rows[start : start + len(labels)]
            for columns, sent in zip(labels, rows, strict=True):
                known = hashed_names(sent, hasher)
                columns[:] = [known.get(column, column) for column in columns]
        for names, row, rest, base in zip(
            labels, values.tolist(), others.tolist(), baseline.tolist(), strict=True
        ):
            explained.append(
                {
                    # a feature that contributes nothing is no reason (a hashed model's
                    # empty columns, a weight of 0, a value equal to the reference's): fewer
                    # than k when fewer contribute
                    "contributions": [
                        {"feature": name, "contribution": value}
                        for name, value in zip(names, row, strict=True)
                        if value != 0.0
                    ],
                    "others": rest,
                    "baseline": base,
                }
            )
    return explained
