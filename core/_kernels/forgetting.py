"""Shared pieces of the ``half_life`` option: learners that forget (docs/algorithms/forgetting.md).

A learner built with ``half_life = H`` (events) weighs an event seen ``k`` events ago by
``2 ** (-k / H)`` (forgetting.1): its step sizes stop decaying once it has taken about ``H``
steps (forgetting.2), its class statistics are exponentially weighted averages (forgetting.3)
and its reservoirs keep recent events preferentially (forgetting.4).  ``half_life = 0.0`` is
how kernels are told "off": every helper below then returns what the learner computed before
the option existed, bit for bit.

Kernels take arrays and scalars only, validate nothing and read no globals.
"""

import numpy as np

from core._kernels._config import kernel
from core._kernels.random import random_below, random_unit, reservoir_slot


@kernel
def decay_over(elapsed, half_life):
    """(forgetting.1): the weight ``2 ** (-elapsed / H)`` of something ``elapsed`` events old;
    exactly 1.0 when nothing elapsed or forgetting is off (``half_life = 0``)."""
    if half_life <= 0.0 or elapsed <= 0:
        return 1.0
    return np.exp2(-elapsed / half_life)


@kernel
def step_count(t, half_life):
    """(forgetting.2): the step counter a decaying schedule ``eta0 / sqrt(t)`` (or ``1 / t``)
    reads: ``min(t, H)``, so the step stops shrinking at its value for ``t = H``; ``t`` itself
    when forgetting is off."""
    if half_life > 0.0 and t > half_life:
        return half_life
    return float(t)


@kernel
def recent_steps(k, t, half_life):
    """(forgetting.2) for a learner whose steps per event vary (FTRL-pAUC's solver takes more
    of them while its reservoirs fill): the step counter ``k`` scaled to the last half-life,
    ``k min(1, H / t)`` after ``t`` events.  It equals ``k`` up to ``t = H`` and tends to the
    steps of ``H`` events at the stream's rate, where a cap on ``k`` itself would be reached
    early by the burst of steps at the start; ``k`` itself when forgetting is off."""
    if half_life > 0.0 and t > half_life:
        return k * (half_life / t)
    return float(k)


#: [CHOICE] weighted sums are kept un-decayed and new events enter them with the growing weight
#: ``2 ** ((clock - epoch) / H)`` (forgetting.3), which keeps an event O(nnz); every
#: ``RENORMALISE_AFTER`` half-lives (a weight of 2**32) the sums are divided by it and the
#: epoch restarts, far from overflow (2**1023) and from losing the old terms' digits.
RENORMALISE_AFTER = 32.0


@kernel
def inflation(clock, epoch, half_life):
    """(forgetting.3): the weight the event at ``clock[0]`` enters the weighted sums with,
    relative to the epoch; exactly 1.0 when forgetting is off (the arrays are not read)."""
    if half_life <= 0.0:
        return 1.0
    return np.exp2((clock[0] - epoch[0]) / half_life)


@kernel
def advance(clock, epoch, half_life):
    """One event learned: the clock moves on (when forgetting).  Returns the factor every
    weighted sum must be multiplied by now (1.0 unless a renormalisation is due, which then
    restarts the epoch)."""
    if half_life <= 0.0:
        return 1.0
    clock[0] += 1
    elapsed = clock[0] - epoch[0]
    if elapsed < RENORMALISE_AFTER * half_life:
        return 1.0
    epoch[0] = clock[0]
    return np.exp2(-elapsed / half_life)


@kernel
def class_share(n_pos, n_neg, class_weight, half_life):
    """p, the positives' share: of the counts, or of the weights (forgetting.3)
    ``class_weight = [negatives, positives]`` when forgetting."""
    if half_life <= 0.0:
        return n_pos / (n_pos + n_neg)
    return class_weight[1] / (class_weight[0] + class_weight[1])


@kernel
def class_total(positive, n_pos, n_neg, class_weight, half_life):
    """The divisor of a class mean: the class's count, or its weight when forgetting."""
    if half_life <= 0.0:
        return float(n_pos) if positive else float(n_neg)
    return class_weight[1] if positive else class_weight[0]


@kernel
def scale_in_place(values, factor):
    for j in range(values.shape[0]):
        values[j] *= factor


@kernel
def biased_reservoir_slot(rng_state, fill, capacity, half_life):
    """(forgetting.4): Aggarwal's biased reservoir sampling (VLDB 2006, §3) for the bias rate
    ``lambda = ln 2 / H``, filled first.  Algorithm 3.1 keeps ``n = 1 / lambda`` slots; a
    reservoir of that size or more uses ``n = min(capacity, floor(H / ln 2))`` of them.  Until
    those ``n`` slots are full every event takes the next one; from then on an event is
    inserted with probability ``p_in = n lambda`` (1 unless the reservoir is smaller than
    ``1 / lambda``, §3.1) and replaces a uniformly chosen resident.  A resident then survives
    ``k`` more events with probability about ``exp(-lambda k) = 2 ** (-k / H)``: a sample
    biased towards the last ``H`` events.

    [CHOICE] Filled first: Aggarwal's algorithm already replaces residents (with probability
    ``fill / n``) and thins insertions (``p_in``) while the reservoir is filling, which gives
    the same sample once it is full but an almost empty one before: a class seen 80 times with
    ``p_in = 0.05`` kept 4 events, and the one-pass AUC on the small sets of the real-data
    suite dropped by up to 0.24 (bench/README.md, "Drifting streams").  A reservoir that has
    not filled yet has nothing to forget.  Returns the slot, or -1 when not inserted."""
    used = min(capacity, max(1, np.int64(half_life / np.log(2.0))))
    if fill < used:
        return fill
    p_in = used * np.log(2.0) / half_life
    if p_in < 1.0 and random_unit(rng_state) >= p_in:
        return -1
    return random_below(rng_state, fill)


@kernel
def class_half_life(half_life, count_own, count_total):
    """A class reservoir is offered only its class's events: ``H`` events of the stream hold
    about ``H * count_own / count_total`` of them, the half-life (forgetting.4) is counted in."""
    return half_life * count_own / max(count_total, 1)


@kernel
def class_reservoir_slot(rng_state, count_own, fill_own, capacity, half_life, count_total):
    """The slot of a class reservoir the event (already counted in ``count_own``) goes to, or
    -1: Vitter's Algorithm R when forgetting is off, else Aggarwal's biased reservoir with the
    class's half-life (:func:`class_half_life`).  The caller sets the fill with
    :func:`filled_after`."""
    if half_life <= 0.0:
        return reservoir_slot(rng_state, count_own, capacity)
    own_half_life = class_half_life(half_life, count_own, count_total)
    return biased_reservoir_slot(rng_state, fill_own, capacity, own_half_life)


@kernel
def filled_after(slot, fill, count_own, capacity, half_life):
    """The reservoir's fill once the event went to ``slot``."""
    if half_life <= 0.0:
        return min(count_own, capacity)
    return fill + 1 if slot == fill else fill


@kernel
def represented(count, count_total, half_life):
    """How many of its class's events a reservoir stands for: all of them, or with forgetting
    at most the class's events in ``1 / lambda = H / ln 2`` stream events (forgetting.4)."""
    if half_life <= 0.0:
        return float(count)
    return min(float(count), class_half_life(half_life, count, count_total) / np.log(2.0))
