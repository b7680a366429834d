"""A deliberately plain Page-Hinkley on the per-event pairwise loss, from
docs/algorithms/drift.md (drift.1)-(drift.3): Python lists for the recent scores, the loss by a
loop over them, the statistics as Python floats."""

from __future__ import annotations

import math


class NaivePageHinkley:
    def __init__(self, capacity=64, delta=0.05, threshold=50.0, min_losses=100):
        self.capacity, self.delta, self.threshold = capacity, delta, threshold
        self.min_losses = min_losses
        self.recent = {1: [], -1: []}  # newest last, at most `capacity`
        self.losses = []  # since the last reset
        self.events = 0
        self.detections = []

    def update(self, scores, labels):
        for score, label in zip(scores, labels, strict=True):
            label = 1 if label > 0 else -1
            other = self.recent[-label]
            # a loss only against enough of the other class that one of its scores moves it by
            # at most delta (or a full ring)
            needed = self.capacity
            if self.delta > 0 and 1 / self.delta < self.capacity:
                needed = math.ceil(1 / self.delta)
            if len(other) >= needed:
                # (drift.1): the share of the other class ranked on the wrong side, ties half
                wrong = sum(
                    0.5 if s == score else float(s > score if label == 1 else s < score)
                    for s in other
                )
                self.losses.append(wrong / len(other))
                # (drift.2) from scratch: U_n = sum_t (loss_t - mean_t - delta), mean_t the
                # mean of the first t losses; M_n = min(0, U_1 .. U_n)
                cumulative, minimum = 0.0, 0.0
                for t in range(1, len(self.losses) + 1):
                    mean_t = sum(self.losses[:t]) / t
                    cumulative += self.losses[t - 1] - mean_t - self.delta
                    minimum = min(minimum, cumulative)
                # (drift.3)
                if len(self.losses) >= self.min_losses and cumulative - minimum > self.threshold:
                    self.detections.append(self.events)
                    self.losses = []
                    self.recent = {1: [], -1: []}
            self.recent[label] = (self.recent[label] + [score])[-self.capacity :]
            self.events += 1
        return self
