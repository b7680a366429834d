"""The fit buffer of ``boosted_embedded`` (docs/algorithms/boosted_embedded.md
(boosted_embedded.3)) as a plain loop: a ``deque(maxlen=capacity)`` of ``(row, label,
weight)`` that keeps every positive and, once full, each negative with probability
``min(1, ratio * P / N)`` (one SplitMix64 draw per such negative), weighing its inverse; and
the fit's correction of the margin for that sampling (boosted_embedded.5)."""

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


def sampling_shift(labels, weights, p=0.3):
    """He et al.'s correction of a probability ``p`` learned on negatives kept at rate ``r``,
    ``q = p / (p + (1 - p) / r)``, as the change of the log-odds it makes (the same for every
    ``p``), ``r`` the negatives' mean rate: kept negatives over the negatives they stand for,
    summed in a loop over the rows."""
    kept = stood_for = 0.0
    for label, weight in zip(labels.tolist(), weights.tolist(), strict=True):
        if label <= 0:
            kept += 1.0
            stood_for += weight
    rate = kept / stood_for
    corrected = p / (p + (1.0 - p) / rate)
    return float(np.log(corrected / (1.0 - corrected)) - np.log(p / (1.0 - p)))
