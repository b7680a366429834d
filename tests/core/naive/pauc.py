"""Deliberately naive references for the pAUC / Prec@k surrogates and learners.

Pair loops, exhaustive searches over subsets and total orders; slow, obvious, independent of
the kernels they check.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tests.core.naive import biased_reservoir_offer


def top_count(fraction: float, n: int) -> int:
    return int(math.ceil(fraction * n - 1e-9))


def bottom_count(fraction: float, n: int) -> int:
    return int(math.floor(fraction * n + 1e-9))


def hinge_top_negatives(pos_scores, neg_scores, n_top):
    """Kar et al. eq. (5) with the hinge: all pairs (positive, one of the n_top best negatives)."""
    top = sorted(neg_scores, reverse=True)[:n_top]
    return sum(max(0.0, 1.0 - (p - t)) for p in pos_scores for t in top)


def hinge_top_negatives_grad(Xp, Xn, w, n_top):
    """Danskin subgradient of :func:`hinge_top_negatives`, pair by pair."""
    neg_scores = Xn @ w
    top = np.argsort(-neg_scores, kind="mergesort")[:n_top]
    grad = np.zeros(len(w))
    for x_pos in Xp:
        for j in top:
            if 1.0 - (x_pos @ w - neg_scores[j]) >= 0.0:
                grad += Xn[j] - x_pos
    return grad


def tight_pauc_grad(Xp, Xn, w, j_alpha, j_beta):
    """Subgradient (unnormalised) of the tight [alpha, beta] surrogate, positive by positive.

    Z = the top j_beta negatives by score (ties by index).  Positive i ranked below the top r
    of Z gains max(0, r - j_alpha) (the negatives at ranks j_alpha+1..r above it) plus
    sum_{j <= r} (t_j - s_i); every r in 0..j_beta is evaluated directly and the best taken
    (the first best), and the gradient of that term, sum_{j <= r} (z_j - x_i), is added.
    """
    neg_scores = Xn @ w
    top = np.argsort(-neg_scores, kind="mergesort")[:j_beta]
    grad = np.zeros(len(w))
    for x_pos in Xp:
        s = float(x_pos @ w)
        values = [
            max(0, r - j_alpha) + sum(float(neg_scores[j]) - s for j in top[:r])
            for r in range(j_beta + 1)
        ]
        best = int(np.argmax(values))
        for j in top[:best]:
            grad += Xn[j] - x_pos
    return grad


def tight_constraints(Xp, Xn, j_alpha, j_beta):
    """Every constraint (Delta, g) of [J] eq. (18), unnormalised, by exhaustive enumeration:
    all subsets Z of j_beta negatives and all total orders of the m positives and Z.

    pi[i, j] = 1 when positive i is ranked below z_j; Delta counts, for each positive, the
    negatives at ranks j_alpha+1..j_beta of Z (in the order) that sit above it;
    g = sum_ij pi_ij (x_i - z_j) (so H_w = Delta - w.g).
    """
    m = len(Xp)
    constraints = {}
    for subset in itertools.combinations(range(len(Xn)), j_beta):
        items = [("p", i) for i in range(m)] + [("n", j) for j in subset]
        for order in itertools.permutations(items):
            position = {item: rank for rank, item in enumerate(order)}
            negatives_in_order = [item for item in order if item[0] == "n"]
            delta = 0
            g = np.zeros(Xp.shape[1])
            for i in range(m):
                for rank, item in enumerate(negatives_in_order):
                    above = position[item] < position[("p", i)]
                    if above:
                        g += Xp[i] - Xn[item[1]]
                        if j_alpha <= rank < j_beta:
                            delta += 1
            key = (delta, tuple(np.round(g, 12)))
            constraints[key] = (float(delta), g)
    return list(constraints.values())


def tight_value_bruteforce(Xp, Xn, w, j_alpha, j_beta):
    """max over all constraints of Delta - w.g (unnormalised)."""
    return max(delta - g @ w for delta, g in tight_constraints(Xp, Xn, j_alpha, j_beta))


def prec_at_k_bruteforce(scores, labels, n_top):
    """Kar et al. eq. (3) by enumerating every ybar with exactly n_top entries +1.

    Returns (value, coef) with coef = ybar* - y of a maximiser."""
    t = len(scores)
    best, best_coef = -np.inf, None
    for top in itertools.combinations(range(t), n_top):
        ybar = -np.ones(t)
        ybar[list(top)] = 1.0
        value = float(np.sum((ybar - labels) * scores) - np.sum(labels * ybar))
        if value > best + 1e-12:
            best, best_coef = value, ybar - labels
    # eq. (13) drops the constant sum_i y_i^2 = t from eq. (3); add it back for comparison
    return best + t, best_coef


def pauc_journal(y, scores, alpha, beta):
    """Count-based empirical pAUC of [J] eq. (2): ranks floor(n alpha)+1 .. ceil(n beta),
    strict '>' between a positive and a negative."""
    y = np.asarray(y)
    scores = np.asarray(scores, dtype=float)
    pos = scores[y > 0]
    neg = np.sort(scores[y <= 0])[::-1]
    j_alpha, j_beta = bottom_count(alpha, len(neg)), top_count(beta, len(neg))
    hits = sum(1 for p in pos for t in neg[j_alpha:j_beta] if p > t)
    return hits / (len(pos) * (j_beta - j_alpha))


def pauc_roc(y, scores, alpha=0.0, beta=0.1):
    """Area of the ROC curve (scikit-learn's, ties as diagonal segments) over FPR [alpha, beta],
    linear interpolation at the ends, divided by (beta - alpha)."""
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(np.asarray(y) > 0, scores)
    grid = np.unique(np.concatenate([[alpha, beta], fpr[(fpr > alpha) & (fpr < beta)]]))
    # np.interp on a curve with vertical jumps: take the top of each jump (right-continuous)
    heights = np.array([tpr[fpr <= x].max() if x in fpr else np.interp(x, fpr, tpr) for x in grid])
    lows = np.array([tpr[fpr >= x].min() if x in fpr else np.interp(x, fpr, tpr) for x in grid])
    area = np.sum((grid[1:] - grid[:-1]) * (lows[1:] + heights[:-1]) / 2.0)
    return float(area / (beta - alpha))


def project_annulus(w, inner, outer):
    """Euclidean projection onto W = {inner <= ||w|| <= outer}: the nearest point keeps the
    direction of w and clips its norm (w = 0 has no single nearest point and is kept)."""
    norm = float(np.linalg.norm(w))
    if norm == 0.0:
        return w
    return w * (min(max(norm, inner), outer) / norm)


def ftrl_pauc_reference(X, y, *, beta=0.1, alpha=0.0, lam=0.1, eta0=0.5, min_norm=0.25,
                        update_every=500, first_update_every=16, inner_steps=20,
                        positive_capacity=1000, negative_capacity=2000, admission=None,
                        auc_weight=10.0, random_state=None, half_life=None):  # fmt: skip
    """ftrl_pauc one event at a time, from its documented rules, with Python lists and the
    pair-loop subgradients :func:`hinge_top_negatives_grad` (alpha = 0) or
    :func:`tight_pauc_grad` (alpha > 0: j_alpha = floor(alpha N seen/admitted), at most
    j_beta - 1; normaliser P (j_beta - j_alpha)).

    Per event: score with w; a positive is offered to its reservoir (Algorithm R); a negative
    moves the Robbins-Monro tracker of the score exceeded by a fraction
    level = min(1, admission beta) (1 for admission=None) of the negatives and is offered to
    its reservoir when its score is at least the tracker's value before that move.  After 16,
    32, ... events (up to every update_every), if both reservoirs hold a row: the top
    j_beta = ceil(beta N seen/admitted) reservoir negatives, and
    inner_steps * capacity // fill steps (between inner_steps and 10 inner_steps) of
    w <- Proj_W(w - gamma_k (g / (P j_beta) + auc_weight g_all / (P N) + lam w)), with g_all
    the same pair-loop subgradient over every reservoir negative, gamma_k = eta0 / (1 + eta0 lam k),
    W = {min_norm <= ||w|| <= sqrt(2 / lam)}.

    With ``half_life = H`` (docs/algorithms/ftrl_pauc.md (ftrl_pauc.8)-(ftrl_pauc.9)): a
    reservoir offered a share ``s = offers / events`` of the stream uses n = min(capacity,
    floor(H s / ln 2)) slots, takes the event with probability n ln 2 / (H s), then replaces
    a uniform resident with probability fill / n (always when fill >= n) or appends
    (Aggarwal's biased reservoir),
    and gamma_k reads k min(1, H / t) for k, t the events seen so far.

    Returns (pre-update scores, w, quantile tracker [q, scale], counts, solver steps).
    """
    from core._kernels.random import random_below, random_unit, seed_state

    w = np.zeros(X.shape[1])
    rng_state = seed_state(random_state)
    positives, negatives = [], []
    seen = {"pos": 0, "neg": 0, "admitted": 0}
    q, spread = 0.0, 0.0
    level = 1.0 if admission is None else min(1.0, admission * beta)
    steps, updates, since, scores = 0, 0, 0, []

    def offer(buffer, capacity, key, x):  # Vitter's Algorithm R
        seen[key] += 1
        if half_life is not None:
            own_half_life = half_life * seen[key] / (seen["pos"] + seen["neg"])
            biased_reservoir_offer(
                buffer, capacity, x, own_half_life,
                lambda: random_unit(rng_state), lambda n: random_below(rng_state, n),
            )  # fmt: skip
        elif len(buffer) < capacity:
            buffer.append(x.copy())
        else:
            slot = random_below(rng_state, seen[key])
            if slot < capacity:
                buffer[slot] = x.copy()

    for x, label in zip(X, y, strict=True):
        score = float(w @ x)
        scores.append(score)
        if label > 0:
            offer(positives, positive_capacity, "pos", x)
        else:
            seen["neg"] += 1
            admit = level >= 1.0 or score >= q
            if level < 1.0:  # q <- q + 0.02 spread (1[score > q] - level), spread ~ E|score - q|
                spread += 0.01 * (abs(score - q) - spread)
                q += 0.02 * spread * ((1.0 if score > q else 0.0) - level)
            if admit:
                offer(negatives, negative_capacity, "admitted", x)
        since += 1
        if since < min(update_every, first_update_every * 2**updates):
            continue
        since = 0
        if not positives or not negatives:
            continue
        updates += 1
        P, N = np.array(positives), np.array(negatives)
        capacity = positive_capacity + negative_capacity
        n_steps = min(
            10 * inner_steps, max(inner_steps, inner_steps * capacity // (len(P) + len(N)))
        )
        effective = len(N) * seen["neg"] / seen["admitted"]
        j_beta = min(max(math.ceil(beta * effective - 1e-9), 1), len(N))
        j_alpha = min(math.floor(alpha * effective + 1e-9), j_beta - 1)
        for _ in range(n_steps):
            if alpha == 0.0:
                grad = hinge_top_negatives_grad(P, N, w, j_beta) / (len(P) * j_beta)
            else:
                grad = tight_pauc_grad(P, N, w, j_alpha, j_beta) / (len(P) * (j_beta - j_alpha))
            # the all-pairs hinge (FPR range [0, 1]) weighted by auc_weight
            grad = grad + auc_weight * hinge_top_negatives_grad(P, N, w, len(N)) / (len(P) * len(N))
            steps += 1
            events = seen["pos"] + seen["neg"]
            k = steps if half_life is None else steps * min(1.0, half_life / events)
            step = eta0 / (1.0 + eta0 * lam * k)
            w = project_annulus(w - step * (grad + lam * w), min_norm, math.sqrt(2.0 / lam))
    return np.array(scores), w, np.array([q, spread]), seen, steps
