"""A deliberately plain per-event reference for ``logistic``: McMahan et al. (KDD 2013),
Algorithm 1, written from the equations in ``core.learners.logistic`` with explicit loops over
every coordinate (no lazy weights, no skipping of zeros: a zero feature gets g_i = 0 and the
update leaves it unchanged, which this reference checks by doing it anyway).  With
``half_life`` every accumulator is multiplied by ``2 ** (-1 / half_life)`` after every event
(docs/algorithms/logistic.md (logistic.9)), eagerly, where the kernels catch up lazily.  With
``base_rate_offset`` the score gains ``log((n_+ + 1/2) / (n_- + 1/2))`` of the labels learned
before (logistic.10), the counts discounted like the accumulators.

With the Laplace solver (``solver="laplace"``, or None on a narrow model without l1, l2 or
half_life; docs/algorithms/logistic.md (logistic.11)-(logistic.14)) the reference keeps the
*precision* matrix ``A`` (the inverse covariance) and inverts it after every event, where the
kernel downdates the covariance by Sherman-Morrison: ``A += h x~ x~^T``, ``m += A^-1 x~ (y - p)``
with ``p`` and ``h = p (1 - p)`` at the old mean; ``process_noise`` (logistic.14) is added to
the diagonal of the inverted precision before each event.

With ``number_prior_variance`` (docs/algorithms/logistic.md (logistic.16)-(logistic.17)) each
held column remembers the magnitude of its non-zero values; the first event whose value has
another magnitude makes it a number: its prior precision ``1 / prior_variance`` on the
diagonal of ``A`` becomes ``1 / number_prior_variance``, ``A m`` unchanged (the kernel swaps
the prior in the covariance by Sherman-Morrison), and from then on (logistic.14) caps its
variance there.

With ``empirical_prior_per_weight`` (docs/algorithms/logistic.md (logistic.18)-(logistic.19)),
after the event at which the rarer class's count reaches that many events per weight of the
belief (the features and the intercept), the prior variance is re-estimated once:
:func:`evidence_prior` by determinants and solves."""

from __future__ import annotations

import math

import numpy as np

from core._kernels.logistic_laplace import EVIDENCE_RANGE, EVIDENCE_STEPS

#: the widest model ``solver=None`` gives the Laplace solver (core.learners.logistic)
LAPLACE_DEFAULT_FEATURES = 128


def evidence_prior(mean, covariance, prior):
    """(logistic.18)-(logistic.19) from their definitions: the Gaussian likelihood left when
    the prior ``N(0, prior I)`` is divided out of the belief, and for each variance ``b`` of
    the grid its log evidence up to a constant, ``-1/2 logdet(I + b H) + 1/2 eta^T (H + I /
    b)^-1 eta``; the belief under the best ``b`` by an inverse.  ``H`` as the kernel takes it
    (eigenvalues below 0 set to 0; without process noise there are none beyond rounding)."""
    size = mean.shape[0]
    precision = np.linalg.inv(covariance)
    eta = precision @ mean
    values, vectors = np.linalg.eigh((precision + precision.T) / 2 - np.eye(size) / prior)
    curvature = vectors @ np.diag(np.maximum(values, 0.0)) @ vectors.T
    grid = [prior * EVIDENCE_RANGE ** (j / EVIDENCE_STEPS) for j in range(EVIDENCE_STEPS + 1)]
    evidence = []
    for b in grid:
        _, logdet = np.linalg.slogdet(np.eye(size) + b * curvature)
        evidence.append(
            -0.5 * logdet + 0.5 * eta @ np.linalg.solve(curvature + np.eye(size) / b, eta)
        )
    best = grid[int(np.argmax(evidence))]
    posterior = np.linalg.inv(curvature + np.eye(size) / best)
    return best, posterior @ eta, posterior


class NaiveLogistic:
    def __init__(
        self,
        n_features,
        alpha,
        beta,
        l1,
        l2,
        fit_intercept,
        half_life=None,
        base_rate_offset=False,
        solver="ftrl",
        prior_variance=0.3,
        process_noise=0.0,
        max_columns=None,
        number_prior_variance=None,
        empirical_prior_per_weight=None,
    ):
        if solver is None and max_columns is not None:
            solver = "laplace"
        if solver is None:
            ftrl_only = l1 > 0 or l2 > 0 or half_life is not None
            narrow = n_features <= LAPLACE_DEFAULT_FEATURES
            solver = "laplace" if narrow and not ftrl_only else "ftrl"
        self.laplace = solver == "laplace"
        self.mean = np.zeros(n_features + 1)
        self.precision = np.eye(n_features + 1) / prior_variance
        self.prior_variance, self.process_noise = prior_variance, process_noise
        # coordinate n_features is the intercept's constant feature 1 (no penalty)
        self.z = [0.0] * (n_features + 1)
        self.n = [0.0] * (n_features + 1)
        self.n_features = n_features
        self.alpha, self.beta, self.l1, self.l2 = alpha, beta, l1, l2
        self.fit_intercept = fit_intercept
        self.decay = 1.0 if half_life is None else 2.0 ** (-1.0 / half_life)
        self.base_rate_offset = base_rate_offset
        self.negatives = self.positives = 0.0
        # with max_columns: the columns given a slot, in the order they first appeared
        # (docs/algorithms/logistic.md (logistic.15)); the others are read as 0
        self.max_columns, self.held = max_columns, []
        # with number_prior_variance: each column's one magnitude so far, and the numbers
        self.number_prior_variance, self.magnitude, self.numbers = number_prior_variance, {}, set()
        # with empirical_prior_per_weight: the rarer class's count that re-estimates the prior
        per_weight = empirical_prior_per_weight
        self.evidence_at = 0.0 if per_weight is None else per_weight * (n_features + 1)

    def offset(self):
        if not self.base_rate_offset:
            return 0.0
        return math.log((self.positives + 0.5) / (self.negatives + 0.5))

    def weight(self, i):
        if self.laplace:
            return float(self.mean[i])
        if i == self.n_features and not self.fit_intercept:
            return 0.0
        l1, l2 = (0.0, 0.0) if i == self.n_features else (self.l1, self.l2)
        z = self.z[i]
        if abs(z) <= l1:
            return 0.0
        return -(z - math.copysign(l1, z)) / ((self.beta + math.sqrt(self.n[i])) / self.alpha + l2)

    def served(self):
        """The served weights (the contract's name for :meth:`weights`)."""
        return self.weights()

    def weights(self):
        return np.array([self.weight(i) for i in range(self.n_features)])

    def intercept(self):
        return self.weight(self.n_features)

    def in_use(self, x):
        """``x`` on the held columns (all of them without ``max_columns``), taking the free
        slots for its new non-zero columns first."""
        if self.max_columns is None:
            return x
        for i in np.flatnonzero(x):
            if int(i) not in self.held and len(self.held) < self.max_columns:
                self.held.append(int(i))
        mask = np.zeros(len(x))
        mask[self.held] = 1.0
        return x * mask

    def score(self, x):
        if self.max_columns is not None:
            x = np.asarray(x, dtype=np.float64) * np.isin(np.arange(len(x)), self.held)
        features = float(sum(self.weight(i) * x[i] for i in range(self.n_features)))
        return features + self.intercept() + self.offset()

    def learn(self, X, y):
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
        scores = []
        for x, label in zip(X, np.asarray(y).tolist(), strict=True):
            if self.laplace:
                scores.append(self.learn_laplace(x, label))
                continue
            x = list(x) + [1.0]
            w = [self.weight(i) for i in range(self.n_features + 1)]
            s = sum(w[i] * x[i] for i in range(self.n_features)) + w[self.n_features]
            s += self.offset()
            scores.append(s)
            p = 1.0 / (1.0 + math.exp(-s))
            y01 = 1.0 if label in (1, True) else 0.0
            last = self.n_features + (1 if self.fit_intercept else 0)
            for i in range(last):
                g = (p - y01) * x[i]
                sigma = (math.sqrt(self.n[i] + g * g) - math.sqrt(self.n[i])) / self.alpha
                self.z[i] += g - sigma * w[i]
                self.n[i] += g * g
            if y01 == 1.0:
                self.positives += 1.0
            else:
                self.negatives += 1.0
            self.positives *= self.decay
            self.negatives *= self.decay
            self.z = [value * self.decay for value in self.z]
            self.n = [value * self.decay for value in self.n]
        return np.array(scores)

    def learn_kinds(self, x):
        """A held column whose value has another magnitude than its earlier ones becomes a
        number: its prior precision on ``A``'s diagonal is swapped (logistic.17)."""
        if self.number_prior_variance is None:
            return
        for i in np.flatnonzero(x).tolist():
            size = abs(float(x[i]))
            if i in self.numbers:
                continue
            if i not in self.magnitude:
                self.magnitude[i] = size
            elif self.magnitude[i] != size:
                self.numbers.add(i)
                # the belief's information vector A m stays: the prior's mean is 0
                information = self.precision @ self.mean
                swap = 1.0 / self.number_prior_variance - 1.0 / self.prior_variance
                self.precision[i, i] += swap
                self.mean = np.linalg.solve(self.precision, information)

    def prior_of(self, i):
        return self.number_prior_variance if i in self.numbers else self.prior_variance

    def learn_laplace(self, x, label):
        x = self.in_use(x)
        self.learn_kinds(x)
        if self.process_noise > 0.0:  # (logistic.14) on the covariance, then back
            covariance = np.linalg.inv(self.precision)
            for i in range(self.n_features + 1):
                room = self.prior_of(i) - covariance[i, i]
                covariance[i, i] += max(0.0, min(self.process_noise, room))
            self.precision = np.linalg.inv(covariance)
        x = np.append(x, 1.0 if self.fit_intercept else 0.0)
        s = float(sum(self.mean[i] * x[i] for i in range(self.n_features + 1))) + self.offset()
        p = 1.0 / (1.0 + math.exp(-s))
        y01 = 1.0 if label in (1, True) else 0.0
        self.precision += p * (1.0 - p) * np.outer(x, x)
        self.mean += np.linalg.inv(self.precision) @ x * (y01 - p)
        rarer = min(self.positives, self.negatives)
        if y01 == 1.0:
            self.positives += 1.0
        else:
            self.negatives += 1.0
        if 0 < self.evidence_at and rarer < self.evidence_at <= min(self.positives, self.negatives):
            best, mean, covariance = evidence_prior(
                self.mean, np.linalg.inv(self.precision), self.prior_variance
            )
            if best > self.prior_variance:  # b* = a leaves the belief as it is
                self.mean, self.precision = mean, np.linalg.inv(covariance)
        return s
