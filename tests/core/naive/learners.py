"""Deliberately plain per-event references for ``spam`` and ``solam``, written from the
equations in ``papers/notes/001_spam_thesis.md`` (and the [CHOICE]s documented in the learners'
docstrings), not from the kernels: explicit weights, explicit class means, explicit averages,
projections computed from scratch.  Slow and obvious on purpose.
"""

from __future__ import annotations

import math

import numpy as np

from tests.core.naive import event_labels, event_rows


class NaiveSPAM:
    """SPAM (thesis Alg. 20) with online p, class means and scale-free steps.

    Per event (t counts steps):
      score = w_bar . x (average) or w . x            (pre-update, served model)
      nu = mean of ||x||^2 over events so far (this one included), 1 while 0
      if past warm-up and both classes seen:
        p = n+/(n+ + n-), m+- = class means of the events before this one
        g = 2(1-p)(w.(x - m-) - 1) x   (y=+1)   |   2p(w.(x - m+) + 1) x   (y=-1)   [§4.2]
        u = w - (eta_t / nu) g
        l2:          w = u / (1 + eta_t l2)                                        [§4.3]
        elastic net: w = sign(u) max(|u| - eta_t l1 / sqrt(nu), 0) / (1 + eta_t l2)
        w_bar = mean of all iterates after each step                                [App. B]
      then the class statistics take the event                                      [App. C]
    """

    def __init__(self, n_features, penalty, l2, l1, eta0, learning_rate, average, n_warmup):
        self.w = np.zeros(n_features)
        self.w_sum = np.zeros(n_features)
        self.sum_pos = np.zeros(n_features)
        self.sum_neg = np.zeros(n_features)
        self.n_pos = self.n_neg = self.n_seen = self.n_steps = 0
        self.sq_norm_sum = 0.0
        self.penalty, self.l2, self.l1, self.eta0 = penalty, l2, l1, eta0
        self.learning_rate, self.average, self.n_warmup = learning_rate, average, n_warmup

    def served(self):
        if not self.average:
            return self.w
        return self.w_sum / self.n_steps if self.n_steps else np.zeros_like(self.w)

    def learn(self, X, y):
        scores = []
        for x, label in zip(event_rows(X), event_labels(y), strict=True):
            scores.append(float(self.served() @ x))
            self.n_seen += 1
            self.sq_norm_sum += float(x @ x)
            if self.n_seen > self.n_warmup and self.n_pos > 0 and self.n_neg > 0:
                p = self.n_pos / (self.n_pos + self.n_neg)
                m_pos = self.sum_pos / self.n_pos
                m_neg = self.sum_neg / self.n_neg
                self.n_steps += 1
                t = self.n_steps
                if self.learning_rate == "invsqrt":
                    eta = self.eta0 / math.sqrt(t)
                else:
                    eta = self.eta0 / (1 + self.eta0 * self.l2 * (t - 1))
                nu = self.sq_norm_sum / self.n_seen if self.sq_norm_sum > 0 else 1.0
                if label == 1:
                    gradient = 2 * (1 - p) * (self.w @ (x - m_neg) - 1) * x
                else:
                    gradient = 2 * p * (self.w @ (x - m_pos) + 1) * x
                u = self.w - (eta / nu) * gradient
                if self.penalty == "l2":
                    self.w = u / (1 + eta * self.l2)
                else:
                    threshold = eta * self.l1 / math.sqrt(nu)
                    self.w = np.sign(u) * np.maximum(np.abs(u) - threshold, 0) / (1 + eta * self.l2)
                self.w_sum = self.w_sum + self.w
            if label == 1:
                self.n_pos += 1
                self.sum_pos = self.sum_pos + x
            else:
                self.n_neg += 1
                self.sum_neg = self.sum_neg + x
        return np.array(scores)


class NaiveSOLAM:
    """regSOLAM (thesis Alg. 18, errata §11) run on normalised features x~ = x / sqrt(nu).

    Per event t (t counts events):
      score = w_bar . x (average) or w . x            (pre-update, served model)
      p_t = (#positives among events 1..t) / t    (includes this label, §3.4)
      nu = mean ||x||^2 so far (1 while 0); kappa = given or max ||x|| / sqrt(nu)
      R = radius or sqrt(2 / l2);  gamma_t = eta0 / sqrt(t)
      in normalised coordinates w~ = sqrt(nu) w, x~ = x / sqrt(nu) (scores unchanged):
        gradients of F_t (§2.3 with q = p_t, + l2 w~)
        w~ <- P_{||.|| <= R}(w~ - gamma dF/dw~);  a, b <- clip(. - gamma dF, +-R kappa)
        alpha <- clip(alpha + gamma dF/dalpha, +-2 R kappa)
      w_bar = sum_t gamma_t w_t / sum_t gamma_t over the PRE-update iterates w_t
    """

    def __init__(self, n_features, l2, eta0, radius, kappa, average):
        self.w = np.zeros(n_features)
        self.a = self.b = self.alpha = 0.0
        self.w_sum = np.zeros(n_features)
        self.gamma_sum = 0.0
        self.t = self.n_pos = 0
        self.sq_norm_sum = 0.0
        self.max_norm = 0.0
        self.l2, self.eta0, self.radius, self.kappa, self.average = l2, eta0, radius, kappa, average

    def served(self):
        if not self.average:
            return self.w
        return self.w_sum / self.gamma_sum if self.gamma_sum > 0 else np.zeros_like(self.w)

    def learn(self, X, y):
        scores = []
        for x, label in zip(event_rows(X), event_labels(y), strict=True):
            scores.append(float(self.served() @ x))
            self.t += 1
            self.n_pos += label == 1
            self.sq_norm_sum += float(x @ x)
            self.max_norm = max(self.max_norm, math.sqrt(float(x @ x)))
            q = self.n_pos / self.t
            nu = self.sq_norm_sum / self.t if self.sq_norm_sum > 0 else 1.0
            kappa = self.kappa if self.kappa is not None else self.max_norm / math.sqrt(nu)
            radius = self.radius if self.radius is not None else math.sqrt(2 / self.l2)
            gamma = self.eta0 / math.sqrt(self.t)
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
            grad_w = grad_w + self.l2 * w_tilde
            if self.average:
                self.w_sum = self.w_sum + gamma * self.w
                self.gamma_sum += gamma
            w_tilde = w_tilde - gamma * grad_w
            norm = float(np.linalg.norm(w_tilde))
            if norm > radius:
                w_tilde = w_tilde * (radius / norm)
            self.w = w_tilde / math.sqrt(nu)
            bound = radius * kappa
            self.a = min(max(a - gamma * grad_a, -bound), bound)
            self.b = min(max(b - gamma * grad_b, -bound), bound)
            self.alpha = min(max(alpha + gamma * grad_alpha, -2 * bound), 2 * bound)
        return np.array(scores)
