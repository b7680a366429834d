"""Deliberately plain per-event references for ``spam`` and ``solam``, written from the
equations in docs/algorithms/spam.md and docs/algorithms/solam.md (and the [CHOICE]s documented
in the learners' docstrings), not from the kernels: explicit weights, explicit class means,
explicit averages, projections computed from scratch.  Slow and obvious on purpose.
"""

from __future__ import annotations

import math

import numpy as np

from tests.core.naive import PerEventReference


class NaiveSPAM(PerEventReference):
    """SPAM (thesis Alg. 20) with online p, class means and scale-free steps.

    Per event (t counts steps):
      score = w_bar . x (average) or w . x            (pre-update, served model)
      nu = mean of ||x||^2 over events so far (this one included), 1 while 0
      if past warm-up and both classes seen:
        p = n+/(n+ + n-), m+- = class means of the events before this one
        g = 2(1-p)(w.(x - m-) - 1) x   (y=+1)   |   2p(w.(x - m+) + 1) x   (y=-1)   [§4.2]
        u = w - min(eta_t / nu, 1 / (c ||x||^2)) g,  c = 2(1-p) (y=+1) | 2p (y=-1)
            (the rate capped so that no row overshoots its own loss's minimiser)
        l2:          w = u / (1 + eta_t l2)                                        [§4.3]
        elastic net: w = sign(u) max(|u| - eta_t l1 / sqrt(nu), 0) / (1 + eta_t l2)
        w_bar = mean of all iterates after each step   [docs/algorithms/spam.md (spam.9)]
      then the class statistics take the event         [docs/algorithms/spam.md (spam.10)]

    With ``half_life = H`` [docs/algorithms/spam.md (spam.12)-(spam.14)]: after every event the
    class sums, the class weights W+- and the iterate sum and its weight are multiplied by
    2^(-1/H) (so p = W+/(W+ + W-), m+- = sums / W+-, w_bar = iterate sum / its weight), and
    eta_t reads min(t, H) for t.
    """

    def __init__(
        self, n_features, penalty, l2, l1, eta0, learning_rate, average, n_warmup, half_life=None
    ):
        self.w = np.zeros(n_features)
        self.w_sum = np.zeros(n_features)
        self.sum_pos = np.zeros(n_features)
        self.sum_neg = np.zeros(n_features)
        self.half_life = half_life
        self.decay = 1.0 if half_life is None else 2.0 ** (-1.0 / half_life)
        self.weight_pos = self.weight_neg = self.w_weight = 0.0
        self.n_pos = self.n_neg = self.n_seen = self.n_steps = 0
        self.sq_norm_sum = 0.0
        self.penalty, self.l2, self.l1, self.eta0 = penalty, l2, l1, eta0
        self.learning_rate, self.average, self.n_warmup = learning_rate, average, n_warmup

    def served(self):
        if not self.average:
            return self.w
        return self.w_sum / self.w_weight if self.n_steps else np.zeros_like(self.w)

    def step(self, x, label):
        self.n_seen += 1
        self.sq_norm_sum += float(x @ x)
        if self.n_seen > self.n_warmup and self.n_pos > 0 and self.n_neg > 0:
            p = self.weight_pos / (self.weight_pos + self.weight_neg)
            m_pos = self.sum_pos / self.weight_pos
            m_neg = self.sum_neg / self.weight_neg
            self.n_steps += 1
            t = self.n_steps if self.half_life is None else min(self.n_steps, self.half_life)
            if self.learning_rate == "invsqrt":
                eta = self.eta0 / math.sqrt(t)
            else:
                eta = self.eta0 / (1 + self.eta0 * self.l2 * (t - 1))
            nu = self.sq_norm_sum / self.n_seen if self.sq_norm_sum > 0 else 1.0
            if label == 1:
                gradient = 2 * (1 - p) * (self.w @ (x - m_neg) - 1) * x
            else:
                gradient = 2 * p * (self.w @ (x - m_pos) + 1) * x
            curvature = 2 * (1 - p) if label == 1 else 2 * p
            xx = float(x @ x)
            rate = min(eta / nu, 1 / (curvature * xx)) if curvature * xx > 0 else eta / nu
            u = self.w - rate * gradient
            if self.penalty == "l2":
                self.w = u / (1 + eta * self.l2)
            else:
                threshold = eta * self.l1 / math.sqrt(nu)
                self.w = np.sign(u) * np.maximum(np.abs(u) - threshold, 0) / (1 + eta * self.l2)
            self.w_sum = self.w_sum + self.w
            self.w_weight += 1.0
        if label == 1:
            self.n_pos += 1
            self.weight_pos += 1.0
            self.sum_pos = self.sum_pos + x
        else:
            self.n_neg += 1
            self.weight_neg += 1.0
            self.sum_neg = self.sum_neg + x
        # forgetting (spam.12)-(spam.14): everything weighted decays by one event
        self.sum_pos, self.sum_neg = self.sum_pos * self.decay, self.sum_neg * self.decay
        self.weight_pos *= self.decay
        self.weight_neg *= self.decay
        self.w_sum = self.w_sum * self.decay
        self.w_weight *= self.decay


class NaiveSOLAM(PerEventReference):
    """regSOLAM (thesis Alg. 18) run on normalised features x~ = x / sqrt(nu).

    Equations: docs/algorithms/solam.md (solam.4)-(solam.10).

    Per event t (t counts events):
      score = w_bar . x (average) or w . x            (pre-update, served model)
      p_t = (#positives among events 1..t) / t    (includes this label, §3.4)
      nu = mean ||x||^2 so far (1 while 0); kappa = given or max ||x|| / sqrt(nu)
      R = radius or sqrt(2 / l2);  gamma_t = eta0 / sqrt(t)
      in normalised coordinates w~ = sqrt(nu) w, x~ = x / sqrt(nu) (scores unchanged):
        gradients of F_t (§2.3 with q = p_t): the data term D (a multiple of x~), + l2 w~
        w~ <- P_{||.|| <= R}(w~ - gamma_D D - gamma l2 w~);  a, b <- clip(. - gamma dF, +-R kappa)
        gamma_D = min(gamma, 1 / (c ||x~||^2)), c = 2(1-q) (y=+1) | 2q (y=-1)
        alpha <- clip(alpha + gamma dF/dalpha, +-2 R kappa)
      w_bar = sum_t w_t / T over the PRE-update iterates w_t (uniform average)

    With ``half_life = H`` [docs/algorithms/solam.md (solam.12)-(solam.13)]: p_t = W+/(W+ + W-)
    with class weights that, like the iterate sum and T, are multiplied by 2^(-1/H) after
    every event; gamma_t reads min(t, H) for t.
    """

    def __init__(self, n_features, l2, eta0, radius, kappa, average, half_life=None):
        self.w = np.zeros(n_features)
        self.a = self.b = self.alpha = 0.0
        self.w_sum = np.zeros(n_features)
        self.half_life = half_life
        self.decay = 1.0 if half_life is None else 2.0 ** (-1.0 / half_life)
        self.weight_pos = self.weight_neg = 0.0
        self.gamma_sum = 0.0
        self.t = self.n_pos = 0
        self.sq_norm_sum = 0.0
        self.max_norm = 0.0
        self.l2, self.eta0, self.radius, self.kappa, self.average = l2, eta0, radius, kappa, average

    def served(self):
        if not self.average:
            return self.w
        return self.w_sum / self.gamma_sum if self.gamma_sum > 0 else np.zeros_like(self.w)

    def step(self, x, label):
        self.t += 1
        self.n_pos += label == 1
        self.sq_norm_sum += float(x @ x)
        self.max_norm = max(self.max_norm, math.sqrt(float(x @ x)))
        if label == 1:
            self.weight_pos += 1.0
        else:
            self.weight_neg += 1.0
        q = self.weight_pos / (self.weight_pos + self.weight_neg)
        nu = self.sq_norm_sum / self.t if self.sq_norm_sum > 0 else 1.0
        kappa = self.kappa if self.kappa is not None else self.max_norm / math.sqrt(nu)
        radius = self.radius if self.radius is not None else math.sqrt(2 / self.l2)
        t = self.t if self.half_life is None else min(self.t, self.half_life)
        gamma = self.eta0 / math.sqrt(t)
        w_tilde = math.sqrt(nu) * self.w
        x_tilde = x / math.sqrt(nu)
        s = float(w_tilde @ x_tilde)
        a, b, alpha = self.a, self.b, self.alpha
        if label == 1:
            grad_w = 2 * (1 - q) * (s - a) * x_tilde - 2 * (1 + alpha) * (1 - q) * x_tilde
            grad_a, grad_b = -2 * (1 - q) * (s - a), 0.0
            grad_alpha = -2 * (1 - q) * s - 2 * q * (1 - q) * alpha
        else:
            grad_w = 2 * q * (s - b) * x_tilde + 2 * (1 + alpha) * q * x_tilde
            grad_a, grad_b = 0.0, -2 * q * (s - b)
            grad_alpha = 2 * q * s - 2 * q * (1 - q) * alpha
        curvature = 2 * (1 - q) if label == 1 else 2 * q
        xx_tilde = float(x_tilde @ x_tilde)
        stiff = curvature * xx_tilde
        gamma_data = min(gamma, 1 / stiff) if stiff > 0 else gamma
        if self.average:
            self.w_sum = self.w_sum + self.w
            self.gamma_sum += 1
        w_tilde = w_tilde - gamma_data * grad_w - gamma * self.l2 * w_tilde
        norm = float(np.linalg.norm(w_tilde))
        if norm > radius:
            w_tilde = w_tilde * (radius / norm)
        self.w = w_tilde / math.sqrt(nu)
        bound = radius * kappa
        self.a = min(max(a - gamma * grad_a, -bound), bound)
        self.b = min(max(b - gamma * grad_b, -bound), bound)
        self.alpha = min(max(alpha + gamma * grad_alpha, -2 * bound), 2 * bound)
        # forgetting (solam.12)-(solam.13): the weighted sums decay by one event
        self.weight_pos *= self.decay
        self.weight_neg *= self.decay
        self.w_sum = self.w_sum * self.decay
        self.gamma_sum *= self.decay
