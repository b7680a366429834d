"""The fit buffer of ``boosted_embedded`` (docs/algorithms/boosted_embedded.md
(boosted_embedded.3)) as a plain loop: a ``deque(maxlen=capacity)`` of ``(row, label,
weight)`` that keeps every positive and, once full, each negative with probability
``min(1, ratio * P / N)`` (one SplitMix64 draw per such negative), weighing its inverse."""

from __future__ import annotations

from collections import deque

import numpy as np

from tests.core.naive.baselines import SplitMix64


class FitBuffer:
    def __init__(self, capacity: int, ratio: float, seed: int) -> None:
        self.capacity, self.ratio = capacity, ratio
        self.rng = SplitMix64(seed)
        self.rows: deque = deque(maxlen=capacity)
        self.positives = self.negatives = 0

    def offer(self, x: np.ndarray, label: int) -> None:
        rate = 1.0
        if label > 0:
            self.positives += 1
        else:
            self.negatives += 1
            if len(self.rows) == self.capacity:
                rate = min(1.0, self.ratio * self.positives / self.negatives)
        if rate >= 1.0 or self.rng.unit() < rate:
            self.rows.append((np.array(x, dtype=float), int(label), 1.0 / rate))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows, labels and weights, oldest first."""
        rows = list(self.rows)
        width = len(rows[0][0]) if rows else 0
        return (
            np.array([r[0] for r in rows]).reshape(len(rows), width),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows]),
        )


def weighted_edges(column: np.ndarray, weights: np.ndarray, max_bins: int = 255) -> np.ndarray:
    """The upper edges of a feature's bins, one value at a time: the midpoints of its distinct
    values when it has at most ``max_bins``, else, for k = 1 .. max_bins - 1, the first value
    (in sorted order) whose cumulative weight reaches ``k / max_bins`` of the total."""
    pairs = sorted(zip(column.tolist(), weights.tolist(), strict=True), key=lambda p: p[0])
    distinct = sorted(set(column.tolist()))
    if len(distinct) <= max_bins:
        return np.array([(a + b) / 2.0 for a, b in zip(distinct, distinct[1:], strict=False)])
    total = sum(w for _, w in pairs)
    edges = set()
    for k in range(1, max_bins):
        running = 0.0
        for value, weight in pairs:
            running += weight
            if running >= k / max_bins * total:
                edges.add(value)
                break
    return np.array(sorted(edges))
