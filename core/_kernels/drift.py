"""Page-Hinkley on the per-event pairwise loss (docs/algorithms/drift.md (drift.1)-(drift.3)).

Kernels take arrays and scalars only, validate nothing and read no globals.
"""

import math

from core._kernels._config import kernel


@kernel
def pairwise_loss(score, positive, recent, fill):
    """(drift.1): the share of the other class's recent scores ``recent[:fill]`` the event is
    ranked on the wrong side of (ties count half)."""
    wrong = 0.0
    for k in range(fill):
        other = recent[k]
        if other == score:
            wrong += 0.5
        elif (other > score) == positive:
            wrong += 1.0
    return wrong / fill


@kernel
def page_hinkley(scores, labels, recent, recent_fill, recent_next, statistics, counters,
                 delta, threshold, min_losses, detected_at):  # fmt: skip
    """Feed the events in order; write the index (in this batch) of every detection into
    ``detected_at`` and return how many there were.

    ``recent`` (2, K): the latest scores of each class (row 0 negatives, row 1 positives) as
    rings (``recent_fill``, ``recent_next``); ``statistics`` = [mean loss, cumulative sum U,
    its minimum M] since the last reset; ``counters`` = [events fed, losses since the reset,
    detections, last detection's event index (-1: none)].

    Per event: its loss (drift.1) against the other class's ring (none while that holds fewer
    than ``min(K, ceil(1 / delta))`` scores);
    (drift.2) the running mean, ``U += loss - mean - delta``, ``M = min(M, U)``; (drift.3) a
    detection when ``U - M > threshold`` after at least ``min_losses`` losses, which resets
    the mean, U, M and the rings.  Then the score joins its class's ring.
    """
    capacity = recent.shape[1]
    # a loss counts only against this many scores of the other class (docs/algorithms/drift.md,
    # "A rare class"): then one score of it moves the loss of every later event by at most
    # delta, the walk's tolerance, so no single event (a rare class's one positive, whose score
    # every event for hundreds after it is compared with) can by itself make the walk rise
    needed = capacity
    if delta > 0.0 and 1.0 / delta < capacity:
        needed = max(1, int(math.ceil(1.0 / delta)))
    found = 0
    for i in range(scores.shape[0]):
        score = scores[i]
        own = 1 if labels[i] > 0 else 0
        other = 1 - own
        if recent_fill[other] >= needed:
            loss = pairwise_loss(score, own == 1, recent[other], recent_fill[other])
            counters[1] += 1
            n = counters[1]
            statistics[0] += (loss - statistics[0]) / n
            statistics[1] += loss - statistics[0] - delta
            if statistics[1] < statistics[2]:
                statistics[2] = statistics[1]
            if n >= min_losses and statistics[1] - statistics[2] > threshold:
                counters[2] += 1
                counters[3] = counters[0]
                detected_at[found] = i
                found += 1
                counters[1] = 0
                statistics[0] = 0.0
                statistics[1] = 0.0
                statistics[2] = 0.0
                # the rings hold scores from before the change: start them afresh
                recent_fill[0] = 0
                recent_fill[1] = 0
                recent_next[0] = 0
                recent_next[1] = 0
        slot = recent_next[own]
        recent[own, slot] = score
        recent_next[own] = (slot + 1) % capacity
        if recent_fill[own] < capacity:
            recent_fill[own] += 1
        counters[0] += 1
    return found
