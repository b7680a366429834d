"""A deliberately plain SPDAM (Natole thesis Alg. 21, docs/algorithms/spdam.md (spdam.2)-(spdam.9)):
the transformed events materialised as a dense matrix, each step written as printed (the
argmax / argmin of the dual and primal steps solved in closed form, the primal one by
``np.linalg.solve`` instead of Sherman-Morrison), the duality gap from its definition, and a
window learner built on Python lists.  Slow and obvious on purpose."""

from __future__ import annotations

import math

import numpy as np

from tests.core.naive import event_labels, event_rows
from tests.core.naive.baselines import SplitMix64


def transformed(X, y, double_prior):
    """``xbar_i = (x_i - m_{y_i}) / sqrt(c p_{y_i})`` (spdam.2) and the vector ``b = m- - m+``."""
    X, y = np.asarray(X, dtype=float), np.asarray(y)
    n = len(y)
    factor = 2.0 if double_prior else 1.0
    rows = np.empty_like(X)
    means = {}
    for label in (1, -1):
        members = y == label
        means[label] = X[members].mean(axis=0)
        rows[members] = (X[members] - means[label]) / math.sqrt(factor * members.sum() / n)
    return rows, means[-1] - means[1]


def gap(Xbar, b, lam, w, beta):
    """``(P(w) - D(beta), P(w))`` with P (spdam.4) and D by minimising the Lagrangian over w
    exactly: the gradient of ``<u, w> + g(w)`` vanishes at ``(b b^T + mu I) w = -(u + b)``."""
    n, d = Xbar.shape
    mu = lam / 2.0

    def g(v):
        return 0.5 * (b @ v) ** 2 + b @ v + 0.5 * mu * v @ v

    primal = np.mean((Xbar @ w) ** 2) / 2.0 + g(w)
    u = Xbar.T @ beta / n
    w_of_u = np.linalg.solve(np.outer(b, b) + mu * np.eye(d), -(u + b))
    dual = u @ w_of_u - beta @ beta / (2.0 * n) + g(w_of_u)
    return primal - dual, primal


def balanced_sigma(n, m, kappa_sq, mu):
    """The sigma at which the primal contraction ``mu / (mu + 2 sigma kappa^2)`` of (5.18)
    equals the dual one, ``(1/n) / (1/m + 1/(2 sigma m))``, found by bisection (the first falls
    and the second rises with sigma)."""

    def excess(sigma):
        return mu / (mu + 2 * sigma * kappa_sq) - (1 / n) / (1 / m + 1 / (2 * sigma * m))

    low, high = 0.0, 1.0
    while excess(high) > 0:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) > 0 else (low, middle)
    return (low + high) / 2


def solve(X, y, w, beta, fresh, rng, *, lam, batch_fraction, sigma, tau, transform, tol,
          max_epochs, printed_sigma=False):  # fmt: skip
    """Alg. 21 from ``(w, beta)``; returns ``(w, beta, epochs, gap, converged)``.
    ``printed_sigma``: Theorem 5.1's sigma as printed (the stream) instead of the balanced one."""
    y = np.asarray(y)
    if (y > 0).all() or (y < 0).all():
        return w, beta, 0, 0.0, False
    Xbar, b = transformed(X, y, transform == "sqrt_2p")
    n, d = Xbar.shape
    mu = lam / 2.0
    beta = beta.copy()
    for i in fresh:
        beta[i] = Xbar[i] @ w
    kappa_sq = max(float(row @ row) for row in Xbar)
    if kappa_sq == 0.0:
        return -b / (mu + b @ b), np.zeros(n), 0, 0.0, True
    m = min(n, max(1, math.ceil(batch_fraction * n)))
    if sigma is None and printed_sigma:  # Theorem 5.1 as printed (spdam.8), the stream's
        root = math.sqrt((n - m) ** 2 + 4 * n * kappa_sq * m / mu)
        sigma = ((n - m) + root) / (8 * m * kappa_sq)
    elif sigma is None:  # from Theorem 5.1's proof, (5.18) with the 1/m kept (spdam.8)
        sigma = balanced_sigma(n, m, kappa_sq, mu)
    if tau is None:
        tau = 1.0 / (4.0 * sigma * kappa_sq)
    theta = 1.0 - mu / (mu + 2.0 * sigma * kappa_sq)
    w = w.copy()
    w_bar = w.copy()
    u = Xbar.T @ beta / n
    epochs, current, primal = 0, math.inf, 0.0
    order = list(range(n))  # one permutation per solve, partially reshuffled at every step
    while epochs < max_epochs:
        for _ in range(math.ceil(n / m)):
            chosen = []
            for k in range(m):  # the first m of a partial Fisher-Yates shuffle
                swap = k + rng.below(n - k)
                order[k], order[swap] = order[swap], order[k]
                chosen.append(order[k])
            old = beta.copy()
            for i in (
                chosen
            ):  # argmax of beta_i <w_bar, xbar_i> - beta_i^2/2 - (beta_i - old)^2/(2 sigma)
                beta[i] = (old[i] + sigma * (Xbar[i] @ w_bar)) / (1.0 + sigma)
            u_new = u + sum((beta[i] - old[i]) * Xbar[i] for i in chosen) / n
            u_bar = u + (n / m) * (u_new - u)
            # argmin <u_bar, w> + g(w) + ||w - w_t||^2 / (2 tau)
            system = np.outer(b, b) + (mu + 1.0 / tau) * np.eye(d)
            w_new = np.linalg.solve(system, w / tau - u_bar - b)
            w_bar = w_new + theta * (w_new - w)
            w, u = w_new, u_new
        epochs += 1
        current, primal = gap(Xbar, b, lam, w, beta)
        if current <= tol * abs(primal):  # a relative gap (spdam.9)
            break
    return w, beta, epochs, max(current, 0.0), current <= tol * abs(primal)


class NaiveSPDAMStream:
    """The window learner of ``partial_fit``: the latest ``window`` events in a list, each
    batch appended and then solved for ``stream_epochs`` epochs from the current ``w`` and
    duals, a new event's dual started at ``<w, xbar>``."""

    def __init__(self, n_features, lam, batch_fraction, sigma, tau, transform, tol, window,
                 stream_epochs, random_state=None):  # fmt: skip
        self.w = np.zeros(n_features)
        self.slots: list[tuple[np.ndarray, int, float]] = []  # ring buffer by slot
        self.next = 0
        self.window = window
        self.rng = SplitMix64(0 if random_state is None else random_state)
        self.options = dict(lam=lam, batch_fraction=batch_fraction, sigma=sigma, tau=tau,
                            transform=transform, tol=tol, max_epochs=stream_epochs,
                            printed_sigma=True)  # fmt: skip

    def learn(self, X, y) -> np.ndarray:
        rows, labels = event_rows(X), event_labels(y)
        scores = np.array([row @ self.w for row in rows])
        fresh = []
        for row, label in list(zip(rows, labels, strict=True))[-self.window :]:
            if self.next < len(self.slots):
                self.slots[self.next] = (row, label, 0.0)
            else:
                self.slots.append((row, label, 0.0))
            fresh.append(self.next)
            self.next = (self.next + 1) % self.window
        X_window = np.array([slot[0] for slot in self.slots])
        y_window = np.array([slot[1] for slot in self.slots])
        beta = np.array([slot[2] for slot in self.slots])
        if (y_window > 0).any() and (y_window < 0).any():
            self.w, beta, *_ = solve(X_window, y_window, self.w, beta, fresh, self.rng,
                                     **self.options)  # fmt: skip
            self.slots = [
                (r, lab, float(b)) for (r, lab, _), b in zip(self.slots, beta, strict=True)
            ]
        return scores

    def served(self) -> np.ndarray:
        return self.w
