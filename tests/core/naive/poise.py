"""A deliberately plain POISE stream (docs/algorithms/poise.md (poise.3)-(poise.7),
(poise.11)-(poise.15)): Python lists for both reservoirs, each negative row kept with the score
(poise.7) gives it (computed when the row joins, recomputed for every row after a step on the
adversary's set and only then), order statistics by sorting, the hinge subgradient summed pair
by pair; with ``auc_weight``, every other negative's step on the all-negatives term against
``auc_positives`` positives drawn with replacement; with ``half_life``, biased reservoirs and
the scaled step counter; with ``average``, the served model is the polynomially decaying
average of the iterates (poise.13)."""

from __future__ import annotations

import math

import numpy as np

from tests.core.naive import biased_reservoir_offer, event_labels, event_rows
from tests.core.naive.baselines import SplitMix64


def rank(fraction, size):
    """k with k / (size + 1) = fraction, rounded half up, within [1, size]; 0 for 0."""
    if fraction <= 0:
        return 0
    return max(1, min(size, math.floor(fraction * (size + 1) + 0.5)))


class NaivePOISE:
    def __init__(self, n_features, alpha, beta, lam, project, sd_ratio, max_negatives,
                 positive_capacity, random_state=None, half_life=None,
                 average=True, auc_weight=0.0, auc_positives=8):  # fmt: skip
        seed = 0 if random_state is None else random_state
        self.w = np.random.default_rng(seed).uniform(-1.0, 1.0, n_features) / np.sqrt(n_features)
        fraction = alpha if alpha > 0 else beta
        size = round((1 - fraction) / (sd_ratio**2 * fraction) - 2)
        self.capacity = {1: positive_capacity, -1: min(max(size, 2), max_negatives)}
        self.rows = {1: [], -1: []}
        self.seen = {1: 0, -1: 0}
        self.rng = SplitMix64(seed)
        self.alpha, self.beta, self.lam, self.project = alpha, beta, lam, project
        self.updates = 0
        self.auc_steps = 0
        self.auc_weight, self.auc_positives = auc_weight, auc_positives
        self.half_life = half_life
        self.average = self.w.copy() if average else None

    def offer(self, label, x):
        self.seen[label] += 1
        rows, capacity = self.rows[label], self.capacity[label]
        if self.half_life is not None:  # (poise.11): the class's share of H stream events
            events = self.seen[1] + self.seen[-1]
            biased_reservoir_offer(
                rows, capacity, x, self.half_life * self.seen[label] / events,
                self.rng.unit, self.rng.below,
            )  # fmt: skip
        elif self.seen[label] <= capacity:
            rows.append(x)
        else:
            j = self.rng.below(self.seen[label])
            if j < capacity:
                rows[j] = x

    def adversary_picks(self, score):
        # a negative's row ends with its score as of its joining or the last adversary step
        scores = sorted((row[-1] for row in self.rows[-1]), reverse=True)
        if not scores:
            return False
        upper = rank(self.alpha, len(scores))
        below_top = upper == 0 or score <= scores[upper - 1]
        return score > scores[rank(self.beta, len(scores)) - 1] and below_top

    def learn(self, X, y) -> np.ndarray:
        out = []
        share = self.auc_weight * (self.beta - self.alpha)  # (poise.14)
        for x, label in zip(event_rows(X), event_labels(y), strict=True):
            score = x @ self.w
            out.append(score if self.average is None else x @ self.average)
            if label == 1:
                self.offer(1, x)
                continue
            positives = self.rows[1]
            if positives and self.adversary_picks(score):
                self.step(x, score, positives, 1 + share)
                self.rows[-1] = [np.append(row[:-1], row[:-1] @ self.w) for row in self.rows[-1]]
            elif positives and share > 0:  # (poise.15): drawn positives, scores kept
                drawn = [positives[self.rng.below(len(positives))]
                         for _ in range(self.auc_positives)]  # fmt: skip
                self.step(x, score, drawn, share)
                self.auc_steps += 1
            self.offer(-1, np.append(x, x @ self.w))
        return np.array(out)

    def step(self, x, score, positives, weight):
        gradient = np.zeros_like(self.w)
        for p in positives:  # hinge max(0, 1 - w.(p - x)) per pair
            if 1 - (p @ self.w - score) > 0:
                gradient += x - p
        gradient *= weight / len(positives)
        self.updates += 1
        k = self.updates
        if self.half_life is not None:  # (poise.12), this event counted in t
            scaled = k * min(1.0, self.half_life / (self.seen[1] + self.seen[-1] + 1))
            k = max(min(k, 2.0), scaled)
        eta = 1 / (self.lam * k)
        self.w = (1 - eta * self.lam) * self.w - eta * gradient
        norm = np.linalg.norm(self.w)
        if self.project and norm > 1 / math.sqrt(self.lam):
            self.w *= (1 / math.sqrt(self.lam)) / norm
        if self.average is not None:  # weight 2 / (k + 1) on the new iterate
            rate = 2 / (k + 1)
            self.average = (1 - rate) * self.average + rate * self.w

    def served(self):
        return self.w if self.average is None else self.average
