"""Deliberately naive references for ``core/metrics/operating.py``, written from the
definitions in docs/algorithms/metrics.md (metrics.9)-(metrics.12): every candidate threshold
tried by flagging each event in a Python loop, precision at k averaged over every order of
the events (all tie-breaks equally likely), exact rational arithmetic.  Slow on purpose."""

from __future__ import annotations

import itertools
from fractions import Fraction


def _rule(labels, scores, threshold):
    """(true positives, false positives) of "flag when score >= threshold"."""
    true_positives = false_positives = 0
    for label, score in zip(labels, scores, strict=True):
        if score >= threshold:
            if label == 1:
                true_positives += 1
            else:
                false_positives += 1
    return true_positives, false_positives


def naive_operating_point(labels, scores, target, by):
    """The lowest threshold (most permissive rule) whose FPR (``by="fpr"``) or alert rate
    (``by="alert_rate"``) is <= target; thresholds tried: every score, and +inf (flag none).
    The target is taken as the decimal it is written as (0.3 is 3/10)."""
    n_positive = sum(1 for label in labels if label == 1)
    n_negative = len(labels) - n_positive
    best = None
    for threshold in sorted(set(scores) | {float("inf")}):
        true_positives, false_positives = _rule(labels, scores, threshold)
        fpr = Fraction(false_positives, n_negative)
        alert_rate = Fraction(true_positives + false_positives, len(labels))
        if (fpr if by == "fpr" else alert_rate) <= Fraction(repr(target)):
            flagged = true_positives + false_positives
            best = {
                "threshold": None if threshold == float("inf") else threshold,
                "tpr": Fraction(true_positives, n_positive),
                "fpr": fpr,
                "precision": Fraction(true_positives, flagged) if flagged else None,
                "alert_rate": alert_rate,
            }
            break  # thresholds ascending: the first that qualifies is the most permissive
    return best


def naive_at_k(labels, scores, k):
    """Mean precision and recall of the top k over every ordering by decreasing score
    (ties in every possible order): exponential, for a handful of events only."""
    n_positive = sum(1 for label in labels if label == 1)
    reviewed = min(k, len(labels))
    total = Fraction(0)
    count = 0
    for order in itertools.permutations(range(len(labels))):
        ranked = sorted(order, key=lambda index: -scores[index])  # stable: ties keep `order`
        total += sum(1 for index in ranked[:reviewed] if labels[index] == 1)
        count += 1
    positives_found = total / count
    return positives_found / reviewed, positives_found / n_positive


def naive_average_precision(labels, scores):
    """Sum over the distinct thresholds, decreasing, of (recall gained) x precision."""
    n_positive = sum(1 for label in labels if label == 1)
    value = Fraction(0)
    previous_recall = Fraction(0)
    for threshold in sorted(set(scores), reverse=True):
        true_positives, false_positives = _rule(labels, scores, threshold)
        recall = Fraction(true_positives, n_positive)
        value += (recall - previous_recall) * Fraction(
            true_positives, true_positives + false_positives
        )
        previous_recall = recall
    return value
