"""POISE's pAUC game (Rao & Acharyya; docs/algorithms/poise.md (poise.1)-(poise.7)) as one
streaming kernel: a reservoir of negatives whose cached scores give the adversary's threshold,
a reservoir of positives the hinge subgradient runs against, Pegasos steps, the all-negatives
term of ``auc_weight`` (poise.14)-(poise.15), and the averaged iterate that is served
(poise.13)."""

from collections import namedtuple

import numpy as np

from core._kernels._config import kernel
from core._kernels.forgetting import recent_steps
from core._kernels.pauc_buffers import (
    dot_row,
    event_dot,
    project_ball,
    reservoir_offer_forgetting,
)
from core._kernels.random import random_below

#: The learned arrays, bundled (see ``core/learners/poise.py``, ``_initial_state``).
PoiseState = namedtuple(
    "PoiseState",
    ["w", "w_avg", "pos_X", "pos_fill", "pos_seen", "adversary_X", "adversary_scores",
     "adversary_fill", "adversary_seen", "n_updates", "auc_steps", "rng_state"],
)  # fmt: skip
#: ``lam``: Pegasos' L2 weight; ``radius``: its ball (0: none); ``alpha``, ``beta``: the FPR
#: range; ``half_life``: (poise.11)-(poise.12), 0.0 for none; ``average``: serve ``w_avg``
#: (poise.13) (``w_avg`` is empty when False); ``auc_weight``, ``auc_positives``: the
#: all-negatives term (poise.14)-(poise.15), 0.0 for none.
PoiseOptions = namedtuple(
    "PoiseOptions",
    ["lam", "radius", "alpha", "beta", "half_life", "average", "auc_weight", "auc_positives"],
)


@kernel
def order_statistic_rank(fraction, size):
    """``k`` with ``k / (size + 1) = fraction`` (poise.4), rounded; 0 for a zero fraction."""
    if fraction <= 0.0:
        return 0
    return max(1, min(size, int(np.floor(fraction * (size + 1) + 0.5))))


@kernel
def kth_largest(scores, fill, k):
    """The ``k``-th largest of ``scores[:fill]`` (1 <= k <= fill)."""
    return np.partition(scores[:fill], fill - k)[fill - k]


@kernel
def rescore(neg_X, fill, w, neg_scores):
    for r in range(fill):
        neg_scores[r] = dot_row(neg_X, r, w)


@kernel
def in_adversary_set(score, neg_scores, fill, alpha, beta):
    """Whether a negative scoring ``score`` is among the adversary's negatives (poise.5):
    strictly above the estimated top-``beta`` threshold and, for ``alpha > 0``, not above the
    top-``alpha`` one."""
    if fill == 0:
        return False
    k_beta = order_statistic_rank(beta, fill)
    if not score > kth_largest(neg_scores, fill, k_beta):
        return False
    k_alpha = order_statistic_rank(alpha, fill)
    return k_alpha == 0 or score <= kth_largest(neg_scores, fill, k_alpha)


@kernel
def hinge_step(X, indptr, indices, data, i, score, state, options, n_events, weight, drawn):
    """One Pegasos step on ``weight`` times the negative's hinge against the buffered
    positives (poise.6), (poise.7): every one of them, or with ``drawn`` > 0 that many drawn
    uniformly with replacement (poise.15); with forgetting its step counter is the steps of
    the last half-life (poise.12), ``n_events`` the events seen with this one."""
    w, pos_X = state.w, state.pos_X
    n_pos = state.pos_fill[0]
    d = w.shape[0]
    # g = (weight/P) sum_{j active} (x - p_j) = weight ((n_active/P) x - (1/P) sum_{j active} p_j)
    positive_sum = np.zeros(d)
    n_active = 0
    n_terms = drawn if drawn > 0 else n_pos
    for t in range(n_terms):
        j = random_below(state.rng_state, n_pos) if drawn > 0 else t
        if 1.0 + score - dot_row(pos_X, j, w) > 0.0:
            n_active += 1
            for c in range(d):
                positive_sum[c] += pos_X[j, c]
    state.n_updates[0] += 1
    # never below min(k, 2): with a counter under 1 Pegasos' shrink 1 - eta lam turns negative
    # and flips w, and at 1 it wipes w out (w = 0 ties every score, so the adversary never
    # fires again after a step without active pairs), on a stream whose steps are rarer than
    # one per half-life (e.g. the first positive long after the start); only the very first
    # step is Pegasos' own wipe-out
    k = state.n_updates[0]
    steps = max(min(k, 2.0), recent_steps(k, n_events, options.half_life))
    eta = 1.0 / (options.lam * steps)
    shrink = 1.0 - eta * options.lam
    for c in range(d):
        w[c] = shrink * w[c] + eta * weight * positive_sum[c] / n_terms
    if n_active > 0:
        coef = -eta * weight * n_active / n_terms
        if indptr.shape[0] == 0:
            for c in range(d):
                w[c] += coef * X[i, c]
        else:
            for k in range(indptr[i], indptr[i + 1]):
                w[indices[k]] += coef * data[k]
    project_ball(w, options.radius)
    if options.average:
        average_step(state.w_avg, w, steps)


@kernel
def average_step(w_avg, w, steps):
    """(poise.13): ``w_avg += 2 / (k + 1) (w - w_avg)`` after step ``k`` (the counter of
    (poise.12), so with forgetting the average covers about the last half-life's steps): the
    polynomially decaying average of Shamir & Zhang (2013), weights growing with the step, so
    the early iterates fade; the first step copies ``w``."""
    rate = 2.0 / (steps + 1.0)
    for c in range(w.shape[0]):
        w_avg[c] += rate * (w[c] - w_avg[c])


@kernel
def poise_learn(X, indptr, indices, data, y, scores, state, options):
    """Learn a batch in order; ``scores`` (when non-empty) gets each event's pre-update score.

    A positive joins the positive reservoir.  A negative first plays the game: if it is in the
    adversary's set estimated from the reservoir of earlier negatives and a positive is
    buffered, one Pegasos step is taken (on the pAUC and the all-negatives terms, against every
    buffered positive) and the reservoir re-scored; otherwise, with ``auc_weight`` > 0, one step
    on the all-negatives term alone against ``auc_positives`` drawn positives, the reservoir's
    cached scores left as they are (poise.15).  Then it is offered to the negative reservoir
    (its cached score computed with the current weights).
    """
    n_samples = indptr.shape[0] - 1 if indptr.shape[0] > 0 else X.shape[0]
    # (poise.14): the all-negatives term's share of each negative's step
    share = options.auc_weight * (options.beta - options.alpha)
    for i in range(n_samples):
        score = event_dot(X, indptr, indices, data, i, state.w)  # the game plays the iterate
        if scores.shape[0] > 0:
            served = state.w_avg if options.average else state.w
            scores[i] = event_dot(X, indptr, indices, data, i, served)
        n_events = state.pos_seen[0] + state.adversary_seen[0] + 1  # this one included
        if y[i] > 0:
            reservoir_offer_forgetting(X, indptr, indices, data, i, state.pos_X, state.pos_fill,
                                       state.pos_seen, state.rng_state, options.half_life,
                                       n_events)  # fmt: skip
            continue
        fill = state.adversary_fill[0]
        if state.pos_fill[0] > 0:
            if in_adversary_set(score, state.adversary_scores, fill, options.alpha, options.beta):
                hinge_step(X, indptr, indices, data, i, score, state, options, n_events,
                           1.0 + share, 0)  # fmt: skip
                rescore(state.adversary_X, fill, state.w, state.adversary_scores)
            elif share > 0.0:
                hinge_step(X, indptr, indices, data, i, score, state, options, n_events,
                           share, options.auc_positives)  # fmt: skip
                state.auc_steps[0] += 1
        slot = reservoir_offer_forgetting(X, indptr, indices, data, i, state.adversary_X,
                                          state.adversary_fill, state.adversary_seen,
                                          state.rng_state, options.half_life,
                                          n_events)  # fmt: skip
        if slot >= 0:  # the new row's score, cached with the current weights
            state.adversary_scores[slot] = dot_row(state.adversary_X, slot, state.w)
