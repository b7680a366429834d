"""Deliberately plain per-event references for ``oam`` and ``opauc``, written from the
equations in docs/algorithms/oam.md and docs/algorithms/opauc.md (and the [CHOICE]s in the
learners' docstrings), not from the kernels: Python lists for buffers, numpy one-liners for every
formula, the covariance recursion exactly as printed in the notes, SciPy's root finder for the
AdaOAM projection and an SVD for frequent directions.  Slow and obvious on purpose.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from tests.core.naive import PerEventReference, biased_reservoir_offer

MASK64 = (1 << 64) - 1


class SplitMix64:
    """SplitMix64 (Steele, Lea, Flood 2014) in Python integers, plus Lemire's unbiased
    rejection for a uniform integer below n: the PRNG the learners keep in their state."""

    def __init__(self, seed: int):
        self.state = seed % (1 << 64)

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def unit(self) -> float:
        """A uniform float in [0, 1) from the top 53 bits."""
        return (self.next() >> 11) / 9007199254740992.0

    def below(self, n: int) -> int:
        threshold = (-n) % n  # (2^64 - n) mod n
        while True:
            value = self.next()
            if value >= threshold:
                return value % n


class NaiveOAM(PerEventReference):
    """OAM (thesis Alg. 4-7, errata 1-2).

    Per event (x, y):
      score = w . x
      N_y += 1; buffer B_y takes x by reservoir sampling (Alg. 5): append while |B| < cap,
        else j = U{0..N_y-1}; if j < cap: B[j] = x
      C_t = C max(1, N_opp / cap_opp)
      seq: for b in B_opp: u = y (x - b); if ||u|| > 0:
               w += min(C_t/2, max(0, 1 - w.u)/||u||^2) u
      gra: w_old = w; for b in B_opp: if y w_old.(x - b) <= 1: w += C_t y (x - b)/2

    With ``half_life = H`` [docs/algorithms/oam.md (oam.6)-(oam.7)]: H_y = H N_y / N (the
    class's share of H); of the cap slots n = min(cap, floor(H_y / ln 2)) are used; B_y takes x
    with probability n ln 2 / H_y and then replaces a uniform resident with probability
    |B_y| / n (always when |B_y| >= n), else appends (Aggarwal's biased reservoir); N_opp in
    C_t becomes min(N_opp, H_opp / ln 2).
    """

    def __init__(
        self, n_features, variant="seq", C=1.0, cap_pos=100, cap_neg=100, seed=0, half_life=None
    ):
        self.half_life = half_life
        self.w = np.zeros(n_features)
        self.buffers = {1: [], -1: []}
        self.capacity = {1: cap_pos, -1: cap_neg}
        self.count = {1: 0, -1: 0}
        self.variant, self.C = variant, C
        self.rng = SplitMix64(seed)

    def step(self, x, label):
        self.count[label] += 1
        buffer = self.buffers[label]
        total = self.count[1] + self.count[-1]
        if self.half_life is not None:
            self._offer_biased(buffer, self.capacity[label], x, self.count[label] / total)
        elif len(buffer) < self.capacity[label]:
            buffer.append(x.copy())
        else:
            j = self.rng.below(self.count[label])
            if j < self.capacity[label]:
                buffer[j] = x.copy()
        opposite = -label
        n_opposite = self.count[opposite]
        if self.half_life is not None:
            n_opposite = min(n_opposite, self.half_life * n_opposite / total / np.log(2.0))
        weight = self.C * max(1.0, n_opposite / self.capacity[opposite])
        if self.variant == "seq":
            for b in self.buffers[opposite]:
                u = label * (x - b)
                norm2 = float(u @ u)
                if norm2 > 0:
                    tau = min(weight / 2, max(0.0, 1.0 - float(self.w @ u)) / norm2)
                    self.w = self.w + tau * u
        else:
            w_old = self.w.copy()
            for b in self.buffers[opposite]:
                if label * float(w_old @ (x - b)) <= 1.0:
                    self.w = self.w + weight * label * (x - b) / 2

    def _offer_biased(self, buffer, capacity, x, share):
        biased_reservoir_offer(
            buffer, capacity, x, self.half_life * share, self.rng.unit, self.rng.below
        )


def weighted_ball_projection(u, h, radius):
    """argmin_{||w|| <= r} (w - u)^T diag(h) (w - u): u inside; else w_i = h_i u_i / (h_i + mu)
    with ||w(mu)|| = r, mu found by Brent's method (docs/algorithms/opauc.md (opauc.8))."""
    if np.linalg.norm(u) <= radius:
        return u.copy()

    def excess(mu):
        return np.linalg.norm(h * u / (h + mu)) - radius

    mu = brentq(
        excess, 0.0, h.max() * np.linalg.norm(u) / radius, xtol=1e-300, rtol=9e-16, maxiter=10_000
    )
    return h * u / (h + mu)


def frequent_directions_shrink(sketch, rank):
    """Shrink a 2k × d sketch to its top-k directions: SVD B = U Σ Vᵀ, θ = σ_{k+1}²,
    rows sqrt(σ_i² - θ) v_i for σ_i² > θ (Liberty 2013)."""
    _, sigma, vt = np.linalg.svd(sketch, full_matrices=False)
    squares = sigma**2
    theta = max(squares[rank], 0.0) if len(squares) > rank else 0.0
    rows = [
        np.sqrt(s - theta) * v for s, v in zip(squares[:rank], vt[:rank], strict=True) if s > theta
    ]
    return rows


class NaiveOPAUC(PerEventReference):
    """OPAUC (thesis Alg. 8) / AdaOAM (Alg. 9), optionally with a frequent-directions sketch.

    Per event (x, y):
      score = w . x
      own class: T += 1; c_old = c; c = c + (x - c)/T                                 (2.13)
        full:   Γ = Γ + (x xᵀ - Γ - c_old c_oldᵀ)/T + c_old c_oldᵀ - c cᵀ   (opauc.4)
        sketch: rows += [sqrt((T-1)/T) (x - c_old)] (T >= 2); shrink when 2k rows
      nu = running mean of ||x||^2 (auto step only); eta_t = eta / nu, and at full rank
        eta_t = min(eta_t, 1 / (||z||^2 + trace(S) + λ)) (no step overshoots the event's loss)
      if the opposite class was seen:
        S = Γ_opp (full) or Bᵀ B / T_opp (sketch); z = x - c_opp
        g = λ w - y z + z (zᵀ w) + S w                                              (2.11)/(2.12)
        plain:    w = w - eta_t g
        adaptive: G += g²; H = δ + sqrt(G); w = Π^H_{||w|| <= 1/sqrt(λ)}(w - eta g / H)  (Alg. 9)

    With ``half_life = H`` [docs/algorithms/opauc.md (opauc.12)-(opauc.13)], full rank: the
    own class's rate is a = max(1/T, 1 - 2^(-1/H_y)), H_y = H T / N (N events so far), and
    c = c_old + a (x - c_old), Γ = (1 - a)(Γ + c_old c_oldᵀ) + a x xᵀ - c cᵀ (exponentially
    weighted moments); AdaOAM's G = 2^(-1/H) G + g².
    """

    def __init__(self, n_features, lam=1e-4, eta=0.5, auto_eta=True, adaptive=False,
                 delta=1e-8, rank=None, half_life=None):  # fmt: skip
        self.half_life = half_life
        d = n_features
        self.w = np.zeros(d)
        self.mean = {1: np.zeros(d), -1: np.zeros(d)}
        self.cov = {1: np.zeros((d, d)), -1: np.zeros((d, d))}
        self.sketch = {1: [], -1: []}
        self.count = {1: 0, -1: 0}
        self.grad_sq = np.zeros(d)
        self.sq_norm_mean = 0.0
        self.n_projections = 0  # steps where the AdaOAM ball was active
        self.lam, self.eta, self.auto_eta = lam, eta, auto_eta
        self.adaptive, self.delta, self.rank = adaptive, delta, rank

    def _learn_moments(self, label, T, x, c_old):
        """The running mean (2.13) and covariance (opauc.4) or sketch of the class."""
        c = c_old + (x - c_old) / T
        self.mean[label] = c
        if self.rank is None:
            G = self.cov[label]
            self.cov[label] = (
                G
                + (np.outer(x, x) - G - np.outer(c_old, c_old)) / T
                + np.outer(c_old, c_old)
                - np.outer(c, c)
            )
        elif T >= 2:
            self.sketch[label].append(np.sqrt((T - 1) / T) * (x - c_old))
            if len(self.sketch[label]) == 2 * self.rank:
                self.sketch[label] = frequent_directions_shrink(
                    np.array(self.sketch[label]), self.rank
                )

    def covariance(self, label):
        if self.rank is None:
            return self.cov[label]
        d = len(self.w)
        rows = self.sketch[label]
        B = np.array(rows) if rows else np.zeros((0, d))
        return B.T @ B / self.count[label] if self.count[label] else np.zeros((d, d))

    def step(self, x, label):
        self.count[label] += 1
        T = self.count[label]
        c_old = self.mean[label].copy()
        if self.half_life is not None:
            own_half_life = self.half_life * T / (self.count[1] + self.count[-1])
            a = max(1.0 / T, 1.0 - 2.0 ** (-1.0 / own_half_life))
            c = c_old + a * (x - c_old)
            self.mean[label] = c
            second = self.cov[label] + np.outer(c_old, c_old)
            self.cov[label] = (1 - a) * second + a * np.outer(x, x) - np.outer(c, c)
        else:
            self._learn_moments(label, T, x, c_old)
        n_seen = self.count[1] + self.count[-1]
        self.sq_norm_mean += (float(x @ x) - self.sq_norm_mean) / n_seen
        eta = self.eta / self.sq_norm_mean if self.auto_eta and self.sq_norm_mean > 0 else self.eta
        opposite = -label
        if self.count[opposite] == 0:
            return
        z = x - self.mean[opposite]
        g = self.lam * self.w - label * z + z * float(z @ self.w)
        g = g + self.covariance(opposite) @ self.w
        if self.auto_eta and self.rank is None:
            curvature = float(z @ z) + float(np.trace(self.cov[opposite])) + self.lam
            eta = min(eta, 1.0 / curvature)
        if not self.adaptive:
            self.w = self.w - eta * g
            return
        decay = 1.0 if self.half_life is None else 2.0 ** (-1.0 / self.half_life)
        self.grad_sq = self.grad_sq * decay + g * g
        h = self.delta + np.sqrt(self.grad_sq)
        u = self.w - eta * np.divide(g, h, out=np.zeros_like(g), where=h > 0)
        if self.lam > 0:
            self.n_projections += np.linalg.norm(u) > 1 / np.sqrt(self.lam)
            self.w = weighted_ball_projection(u, h, 1 / np.sqrt(self.lam))
        else:
            self.w = u
