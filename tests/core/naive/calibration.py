"""Online Platt scaling written the plain way (docs/algorithms/calibration.md
(calibration.1)-(calibration.8)): per event, numpy's mean and variance of the weighted scores
seen so far and a 2x2 linear solve of the Newton step; the probability served is the mean of
the Beta posterior whose prior is centred on the base rate of the labels seen."""

from __future__ import annotations

import math

import numpy as np


class NaivePlatt:
    #: the clipping bounds and the ridge, as the kernel names them
    BOUNDS = ("ridge", "score_bound", "standard_bound", "theta_bound")

    def __init__(
        self, memory, *, prior, ridge, score_bound, standard_bound, theta_bound, prior_strength
    ):
        self.decay = 1.0 - 1.0 / memory
        self.ridge, self.score_bound = ridge, score_bound
        self.standard_bound, self.theta_bound = standard_bound, theta_bound
        self.theta = np.array([1.0, 0.0])
        self.curvature = np.array([[prior, 0.0], [0.0, prior]])
        self.seen: list[float] = []  # every clipped score fed, oldest first
        self.labels: list[int] = []  # every label fed, 1 or 0
        self.prior_strength = prior_strength

    def _moments(self):
        """The discounted mean and variance of the scores seen (weights decay ** age)."""
        if not self.seen:
            return 0.0, 0.0
        scores = np.array(self.seen)
        weights = self.decay ** np.arange(len(scores) - 1, -1, -1, dtype=np.float64)
        mean = np.sum(weights * scores) / weights.sum()
        return mean, np.sum(weights * (scores - mean) ** 2) / weights.sum()

    def _standardized(self, score):
        mean, variance = self._moments()
        u = min(max(float(score), -self.score_bound), self.score_bound) - mean
        if variance > 0:
            u /= math.sqrt(variance)
        return min(max(u, -self.standard_bound), self.standard_bound)

    @staticmethod
    def _sigmoid(z):
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def platt_probability(self, score):
        return self._sigmoid(self.theta[0] * self._standardized(score) + self.theta[1])

    def probability(self, score):
        """The posterior mean of Beta(kappa pi + n_e p, kappa (1 - pi) + n_e (1 - p)): the
        prior of kappa events at the base rate pi, the Platt probability p as n_e events."""
        p = self.platt_probability(score)
        if self.prior_strength == 0:
            return p
        labels = np.array(self.labels, dtype=np.float64)
        n_positive, n_negative = labels.sum(), (1 - labels).sum()
        base_rate = (n_positive + 0.5) / (len(labels) + 1.0)
        evidence = 0.0
        if n_positive and n_negative:  # half the harmonic mean of the two counts
            evidence = 1.0 / (1.0 / n_positive + 1.0 / n_negative)
        alpha = self.prior_strength * base_rate + evidence * p
        beta = self.prior_strength * (1.0 - base_rate) + evidence * (1.0 - p)
        return alpha / (alpha + beta)

    def feed(self, score, label):
        self.seen.append(min(max(float(score), -self.score_bound), self.score_bound))
        self.labels.append(1 if label > 0 else 0)
        x = np.array([self._standardized(score), 1.0])
        p = self._sigmoid(self.theta @ x)
        self.curvature = self.decay * self.curvature + p * (1.0 - p) * np.outer(x, x)
        system = self.curvature + self.ridge * np.eye(2)
        step = np.linalg.solve(system, (p - (1.0 if label > 0 else 0.0)) * x)
        self.theta = np.clip(self.theta - step, -self.theta_bound, self.theta_bound)
