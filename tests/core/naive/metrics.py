"""Deliberately naive reference implementations of the metrics in ``core/metrics/``.

Written from the definitions, not from the kernels: pair counting, the plain ROC algorithm of
Fawcett (2006, Algorithm 1) and a shoelace polygon area, all in exact rational arithmetic
(``fractions.Fraction``) so that the only rounding is in the code under test.  Slow on purpose.
"""

from __future__ import annotations

import math
from fractions import Fraction


def _classes(labels, scores):
    positives = [Fraction(float(s)) for y, s in zip(labels, scores, strict=True) if y == 1]
    negatives = [Fraction(float(s)) for y, s in zip(labels, scores, strict=True) if y != 1]
    return positives, negatives


def naive_auc(labels, scores) -> Fraction:
    """Fraction of (positive, negative) pairs ranked correctly; a tie counts 1/2."""
    positives, negatives = _classes(labels, scores)
    correct = Fraction(0)
    for positive in positives:
        for negative in negatives:
            if positive > negative:
                correct += 1
            elif positive == negative:
                correct += Fraction(1, 2)
    return correct / (len(positives) * len(negatives))


def naive_roc_points(labels, scores) -> list[tuple[Fraction, Fraction]]:
    """Fawcett's Algorithm 1: walk the events by decreasing score, emit a point whenever the
    score changes (so a group of tied scores becomes one diagonal step)."""
    n_positive = sum(1 for y in labels if y == 1)
    n_negative = len(labels) - n_positive
    events = sorted(zip(scores, labels, strict=True), key=lambda pair: -pair[0])
    points = []
    false_positives = true_positives = 0
    previous_score = None
    for score, label in events:
        if score != previous_score:
            points.append(
                (Fraction(false_positives, n_negative), Fraction(true_positives, n_positive))
            )
            previous_score = score
        if label == 1:
            true_positives += 1
        else:
            false_positives += 1
    points.append((Fraction(false_positives, n_negative), Fraction(true_positives, n_positive)))
    return points


def _height_at(points, x) -> Fraction:
    """TPR of the piecewise-linear curve at FPR ``x`` (for x inside a non-vertical segment)."""
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 < x < x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise AssertionError("x is a vertex; call only for x strictly inside a segment")


def naive_partial_area(points, alpha, beta) -> Fraction:
    """Area under the ROC polygon between FPR alpha and beta, by the shoelace formula.

    The region is the polygon (alpha, 0) -> up the left edge -> along the curve -> down the right
    edge -> (beta, 0).  Curve vertices at exactly x = alpha or x = beta lie on the vertical
    edges, where the shoelace formula counts them correctly.
    """
    alpha, beta = Fraction(alpha), Fraction(beta)
    xs = [x for x, _ in points]
    boundary = [(alpha, Fraction(0))]
    if alpha not in xs:
        boundary.append((alpha, _height_at(points, alpha)))
    boundary += [(x, y) for x, y in points if alpha <= x <= beta]
    if beta not in xs:
        boundary.append((beta, _height_at(points, beta)))
    boundary.append((beta, Fraction(0)))
    twice_signed_area = sum(
        x0 * y1 - x1 * y0
        for (x0, y0), (x1, y1) in zip(boundary, boundary[1:] + boundary[:1], strict=True)
    )
    # Counter-clockwise order is (alpha,0) -> (beta,0) -> up -> back; we walked clockwise.
    return -twice_signed_area / 2


def naive_pauc(labels, scores, alpha, beta, standardized=False) -> Fraction:
    area = naive_partial_area(naive_roc_points(labels, scores), alpha, beta)
    alpha, beta = Fraction(alpha), Fraction(beta)
    if standardized:
        min_area = (beta * beta - alpha * alpha) / 2
        max_area = beta - alpha
        return (1 + (area - min_area) / (max_area - min_area)) / 2
    return area / (beta - alpha)


def _descending_negatives(labels, scores):
    return sorted((s for y, s in zip(labels, scores, strict=True) if y != 1), reverse=True)


def naive_pauc_narasimhan_agarwal(labels, scores, alpha, beta) -> Fraction:
    """[J] eq. 2 as printed, with alpha and beta read as the decimals they were written as."""
    positives = [s for y, s in zip(labels, scores, strict=True) if y == 1]
    negatives = _descending_negatives(labels, scores)
    n = len(negatives)
    j_alpha = math.floor(n * Fraction(str(alpha)))
    j_beta = math.ceil(n * Fraction(str(beta)))
    count = 0
    for positive in positives:
        for rank in range(j_alpha + 1, j_beta + 1):  # ranks are 1-based in the paper
            if positive > negatives[rank - 1]:
                count += 1
    return Fraction(count, len(positives) * (j_beta - j_alpha))


def naive_pauc_kar_top_negatives(labels, scores, beta) -> Fraction:
    """Kar et al. eq. (4) over the top ceil(beta n-) negatives, normalised; ties correct."""
    positives = [s for y, s in zip(labels, scores, strict=True) if y == 1]
    negatives = _descending_negatives(labels, scores)
    n_top = math.ceil(len(negatives) * Fraction(str(beta)))
    count = 0
    for positive in positives:
        for negative in negatives[:n_top]:
            if positive >= negative:
                count += 1
    return Fraction(count, len(positives) * n_top)


def naive_auc_difference_se(labels, first, second):
    """DeLong's standard error of AUC(first) - AUC(second) on the same events, pair by pair in
    Python loops (``labels`` > 0 a positive; a tie counts one half), with the placements of the
    positives under ``first`` and ``second``, whose means are the two AUCs."""
    positives = [i for i in range(len(labels)) if labels[i] > 0]
    negatives = [j for j in range(len(labels)) if labels[j] <= 0]

    def kernel(scores, i, j):
        return 1.0 if scores[i] > scores[j] else 0.5 if scores[i] == scores[j] else 0.0

    def placements(scores):
        of_positives = [sum(kernel(scores, i, j) for j in negatives) / len(negatives)
                        for i in positives]  # fmt: skip
        of_negatives = [sum(kernel(scores, i, j) for i in positives) / len(positives)
                        for j in negatives]  # fmt: skip
        return of_positives, of_negatives

    (a10, a01), (b10, b01) = placements(first), placements(second)

    def variance(values):
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values) / (len(values) - 1)

    d10 = [a - b for a, b in zip(a10, b10, strict=True)]
    d01 = [a - b for a, b in zip(a01, b01, strict=True)]
    return (variance(d10) / len(d10) + variance(d01) / len(d01)) ** 0.5, a10, b10
