"""The pmb learner written the plain way (Kar et al. Alg. 1 / 2, one event at a time, with
naive gradients), the reference of test_pmb.py and test_pmb_sparse.py."""

from __future__ import annotations

import numpy as np

from core._kernels.random import random_below, random_unit, seed_state
from tests.core.naive import biased_reservoir_offer
from tests.core.naive import pauc as naive


def naive_gradient(X, y, w, loss, alpha, beta, k, auc_weight):
    """Normalised surrogate subgradient on one buffer by pair loops / exhaustive search; the
    pAUC loss adds ``auc_weight`` times the all-pairs hinge subgradient (FPR range [0, 1])."""
    pos, neg = X[y > 0], X[y <= 0]
    if loss == "pauc":
        if len(pos) == 0 or len(neg) == 0:
            return None
        j_alpha = naive.bottom_count(alpha, len(neg))
        j_beta = min(naive.top_count(beta, len(neg)), len(neg))
        if j_alpha == 0:
            grad = naive.hinge_top_negatives_grad(pos, neg, w, j_beta)
        else:
            constraints = naive.tight_constraints(pos, neg, j_alpha, j_beta)
            _, g = max(constraints, key=lambda c: c[0] - c[1] @ w)
            grad = -g
        all_pairs = naive.hinge_top_negatives_grad(pos, neg, w, len(neg)) / (len(pos) * len(neg))
        return grad / (len(pos) * (j_beta - j_alpha)) + auc_weight * all_pairs
    n_top = int(np.sum(y > 0)) if loss == "prbep" else naive.top_count(k, len(y))
    if n_top == 0:
        return None
    _, coef = naive.prec_at_k_bruteforce(X @ w, np.where(y > 0, 1.0, -1.0), n_top)
    return coef @ X / n_top


def reference_pmb(
    X,
    y,
    *,
    loss="pauc",
    passes=1,
    buffer_size,
    beta=0.1,
    alpha=0.0,
    k=0.05,
    eta=0.5,
    radius=100.0,
    first_buffer_size=16,
    auc_weight=1.0,
    random_state=None,
    half_life=None,
):
    """Kar et al. Alg. 1 / 2 (streaming 2PMB), one event at a time, with naive gradients; with
    ``half_life`` (docs/algorithms/pmb.md (pmb.7)-(pmb.9)) the step counter stops at
    ``max(1, half_life / buffer_size)``, an iterate's weight in the average is at least
    ``1 - 2^(-length / half_life)`` and positives go to Aggarwal's biased reservoir."""
    w = np.zeros(X.shape[1])
    average = np.zeros(X.shape[1])
    steps = events = 0
    buffer, labels, reservoir, seen = [], [], [], 0
    rng_state = seed_state(random_state)
    scores = []
    for x, label in zip(X, np.where(y > 0, 1, -1), strict=True):
        scores.append(average @ x)
        if passes == 2 and label > 0 and half_life is not None:
            biased_reservoir_offer(
                reservoir, buffer_size, x, half_life,
                lambda: random_unit(rng_state), lambda n: random_below(rng_state, n),
            )  # fmt: skip
            continue
        if passes == 2 and label > 0:
            seen += 1
            if len(reservoir) < buffer_size:
                reservoir.append(x.copy())
            else:
                slot = random_below(rng_state, seen)
                if slot < buffer_size:
                    reservoir[slot] = x.copy()
            continue
        buffer.append(x.copy())
        labels.append(label)
        if len(buffer) < min(buffer_size, first_buffer_size * 2**steps):
            continue
        if passes == 1:
            rows, row_labels = np.array(buffer), np.array(labels)
        else:
            rows = np.array(reservoir + buffer).reshape(-1, X.shape[1])
            row_labels = np.array([1] * len(reservoir) + [-1] * len(buffer))
        buffer, labels = [], []
        grad = naive_gradient(rows, row_labels, w, loss, alpha, beta, k, auc_weight)
        if grad is None:
            continue
        steps += 1
        length = len(rows) - (len(reservoir) if passes == 2 else 0)
        events += length
        counted = steps if half_life is None else min(steps, max(1.0, half_life / buffer_size))
        w = w - eta * (length / buffer_size) / np.sqrt(counted) * grad
        norm = np.linalg.norm(w)
        if radius > 0 and norm > radius:
            w = w * (radius / norm)
        weight = length / events
        if half_life is not None:
            weight = max(weight, 1.0 - 2.0 ** (-length / half_life))
        average = average + (w - average) * weight
    return np.array(scores), w, average, steps
