"""Served scales for ``mix_replay.py``: how each candidate's prequential score is put on a
common scale before ``auto``'s mix weighs it (docs/algorithms/auto.md (auto.9) is one of them).

Each scale is built from one recorded run's candidate scores ``s`` (K x n, prequential, in
event order) and answers three questions, always with the statistics of the events *before*
the one scored (as auto has them when it serves it):

* :meth:`served`: every event's scaled candidate scores (K x n);
* :meth:`mix`: the mix of a window's scores under given weights, scaled with the statistics as
  of event count ``point`` (what the fallback compares with its best candidate);
* :meth:`at`: scores of new rows scaled with the statistics as of ``point`` (held-out scoring
  uses ``point = n``).

A scale with :attr:`affine` true maps each candidate's score by ``(s - m_k) / sd_k`` (``coef_``
and reason codes stay linear); a rank scale does not.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

import numpy as np
from scipy.signal import lfilter
from scipy.special import ndtri


class Affine:
    """``z_k = (s_k - mean_k) / spread_k`` with statistics arrays ``mean`` and ``spread``
    (K x (n + 1): column ``i`` the statistics of the events before event ``i``); ``z = 0``
    where the spread is 0."""

    affine = True

    def __init__(self, scores: np.ndarray, mean: np.ndarray, spread: np.ndarray):
        self.scores, self.mean, self.spread = scores, mean, spread

    def served(self) -> np.ndarray:
        n = self.scores.shape[1]
        sd = self.spread[:, :n]
        return np.divide(self.scores - self.mean[:, :n], sd, out=np.zeros_like(sd), where=sd > 0)

    def mix(self, weights: np.ndarray, point: int, window: np.ndarray) -> np.ndarray:
        # the means are constants of the window: the ranking is that of weight / spread
        sd = self.spread[:, point]
        return np.divide(weights, sd, out=np.zeros_like(sd), where=sd > 0) @ window

    def at(self, point: int, rows: np.ndarray) -> np.ndarray:
        sd = self.spread[:, point][:, None]
        return np.divide(rows - self.mean[:, point][:, None], sd, out=np.zeros_like(rows),
                         where=sd > 0)  # fmt: skip


def _moments(sums: np.ndarray, squares: np.ndarray, count: np.ndarray, shift: np.ndarray):
    """Mean and population spread from sums of shifted scores (shifted by each candidate's
    first score, so the squares do not cancel), 0 where fewer than two events."""
    safe = np.maximum(count, 1)
    centred = sums / safe
    spread = np.sqrt(np.maximum(squares / safe - centred * centred, 0.0))
    spread = np.where(count >= 2, spread, 0.0)
    return centred + shift, spread


def _cumulative(scores: np.ndarray):
    shift = scores[:, :1]
    shifted = scores - shift
    zero = np.zeros((scores.shape[0], 1))
    sums = np.concatenate([zero, np.cumsum(shifted, axis=1)], axis=1)
    squares = np.concatenate([zero, np.cumsum(shifted * shifted, axis=1)], axis=1)
    return sums, squares, shift


def running(scores: np.ndarray, points=None, labels=None) -> Affine:
    """(auto.9): the statistics of all events before this one."""
    k, n = scores.shape
    sums, squares, shift = _cumulative(scores)
    mean, spread = _moments(sums, squares, np.arange(n + 1)[None, :], shift)
    return Affine(scores, mean, spread)


def sliding(events: int):
    """The statistics of the last ``events`` events before this one."""

    def build(scores: np.ndarray, points=None, labels=None) -> Affine:
        k, n = scores.shape
        sums, squares, shift = _cumulative(scores)
        end = np.arange(n + 1)
        start = np.maximum(0, end - events)
        mean, spread = _moments(sums[:, end] - sums[:, start], squares[:, end] - squares[:, start],
                                (end - start)[None, :], shift)  # fmt: skip
        return Affine(scores, mean, spread)

    return build


def later_half(window: int):
    """The statistics of the events auto's evaluation would compare now (auto.3): the later
    half of those seen, at most the last ``window``."""

    def build(scores: np.ndarray, points=None, labels=None) -> Affine:
        k, n = scores.shape
        sums, squares, shift = _cumulative(scores)
        end = np.arange(n + 1)
        start = np.maximum(end // 2, end - window)
        mean, spread = _moments(sums[:, end] - sums[:, start], squares[:, end] - squares[:, start],
                                (end - start)[None, :], shift)  # fmt: skip
        return Affine(scores, mean, spread)

    return build


def exponential(half_life: float):
    """Exponentially weighted mean and population spread of the events before this one, the
    weights normalised (so the first events weigh as in (auto.9)): an event ``a`` events back
    weighs ``2^(-a / half_life)``."""
    decay = 2.0 ** (-1.0 / half_life)

    def build(scores: np.ndarray, points=None, labels=None) -> Affine:
        k, n = scores.shape
        shift = scores[:, :1]
        shifted = scores - shift
        weight = lfilter([1.0], [1.0, -decay], np.ones(n))
        sums = lfilter([1.0], [1.0, -decay], shifted, axis=1)
        squares = lfilter([1.0], [1.0, -decay], shifted * shifted, axis=1)
        zero = np.zeros((k, 1))
        count = np.concatenate([[0.0], weight])[None, :]
        mean, spread = _moments(np.concatenate([zero, sums], axis=1),
                                np.concatenate([zero, squares], axis=1), count, shift)  # fmt: skip
        spread[:, :2] = 0.0  # fewer than two events
        return Affine(scores, mean, spread)

    return build


def frozen(inner):
    """``inner``'s statistics as they were at the last evaluation point (auto.2) at or before
    this event, ``inner``'s own before the first: a candidate's scale changes only when the
    mix's weights may."""

    def build(scores: np.ndarray, points, labels=None) -> Affine:
        base = inner(scores)
        n = scores.shape[1]
        anchor = np.arange(n + 1)
        marks = np.array(sorted(p for p in points if p <= n), dtype=np.int64)
        if marks.size:
            last = np.searchsorted(marks, anchor, side="right") - 1
            anchor = np.where(last >= 0, marks[np.maximum(last, 0)], anchor)
        return Affine(scores, base.mean[:, anchor], base.spread[:, anchor])

    return build


def shrunk(inner, events: float):
    """``inner``'s scale with every candidate's spread inflated by ``(n + events) / n`` after
    ``n`` events: the served score pulled toward the running means while the statistics rest on
    few events (a factor common to all candidates: the mix's ranking of any one event's rows,
    so the fallback and held-out scores, do not change)."""

    def build(scores: np.ndarray, points=None, labels=None) -> Affine:
        base = inner(scores, points)
        count = np.arange(scores.shape[1] + 1)[None, :]
        return Affine(scores, base.mean, base.spread * (count + events) / np.maximum(count, 1))

    return build


def ramped(inner, events: int):
    """``inner``'s scale with the served scores multiplied by ``min(1, n / events)`` after
    ``n`` events (the spread divided by it): :func:`shrunk`, exactly ``inner`` from ``events``
    events on."""

    def build(scores: np.ndarray, points=None, labels=None) -> Affine:
        base = inner(scores, points)
        count = np.arange(scores.shape[1] + 1)[None, :]
        return Affine(scores, base.mean, base.spread / np.minimum(1.0, count / events))

    return build


def shrunk_by_positives(inner, positives: float):
    """:func:`shrunk` by the positives seen instead of the events: the spread inflated by
    ``(p + positives) / p`` after ``p`` positive labels (a candidate learns from its
    positives; a rare class's model stays unsure longer)."""

    def build(scores: np.ndarray, points=None, labels=None) -> Affine:
        base = inner(scores, points)
        seen = np.concatenate([[0], np.cumsum(labels > 0)])[None, :]
        return Affine(scores, base.mean, base.spread * (seen + positives) / np.maximum(seen, 1))

    return build


class Rank:
    """Each candidate's score mapped to its mid-rank quantile among its last ``events`` scores
    before this one (0.5 while there are none), or with ``normal`` to the standard normal
    quantile of that (clipped half an event from 0 and 1)."""

    affine = False

    def __init__(self, scores: np.ndarray, events: int, normal: bool):
        self.scores, self.events, self.normal = scores, events, normal
        k, n = scores.shape
        self.quantiles = np.empty((k, n))
        for c in range(k):
            recent: list[float] = []
            row = scores[c].tolist()
            for i, score in enumerate(row):
                self.quantiles[c, i] = self._quantile(recent, score)
                insort(recent, score)
                if i >= events:
                    del recent[bisect_left(recent, row[i - events])]

    def _quantile(self, recent: list[float], score: float) -> float:
        size = len(recent)
        if size == 0:
            return 0.0
        below = bisect_left(recent, score) + bisect_right(recent, score)
        q = below / (2.0 * size)
        if not self.normal:
            return q - 0.5
        edge = 0.5 / size
        return float(ndtri(min(max(q, edge), 1.0 - edge)))

    def served(self) -> np.ndarray:
        return self.quantiles

    def at(self, point: int, rows: np.ndarray) -> np.ndarray:
        out = np.empty_like(rows, dtype=float)
        for c in range(rows.shape[0]):
            recent = np.sort(self.scores[c, max(0, point - self.events) : point])
            size = recent.size
            if size == 0:
                out[c] = 0.0
                continue
            below = np.searchsorted(recent, rows[c], "left")
            q = (below + np.searchsorted(recent, rows[c], "right")) / (2.0 * size)
            if self.normal:
                edge = 0.5 / size
                out[c] = ndtri(np.clip(q, edge, 1.0 - edge))
            else:
                out[c] = q - 0.5
        return out

    def mix(self, weights: np.ndarray, point: int, window: np.ndarray) -> np.ndarray:
        return weights @ self.at(point, window)


def rank(events: int, normal: bool = False):
    def build(scores: np.ndarray, points=None, labels=None) -> Rank:
        return Rank(scores, events, normal)

    return build


#: name -> builder(scores, evaluation points); the first is auto's (auto.9)
SCALES = {
    "running (auto.9)": running,
    "sliding 1,000": sliding(1_000),
    "sliding 5,000": sliding(5_000),
    "later half (auto.3's events)": later_half(5_000),
    "exponential, half-life 300": exponential(300),
    "exponential, half-life 1,000": exponential(1_000),
    "exponential, half-life 3,000": exponential(3_000),
    "running, frozen between evaluations": frozen(running),
    "later half, frozen between evaluations": frozen(later_half(5_000)),
    "running, shrunk by n / (n + 20)": shrunk(running, 20),
    "running, shrunk by n / (n + 50)": shrunk(running, 50),
    "running, shrunk by n / (n + 100)": shrunk(running, 100),
    "running, shrunk by n / (n + 200)": shrunk(running, 200),
    "running, shrunk by n / (n + 500)": shrunk(running, 500),
    "running, ramped by min(1, n / 100)": ramped(running, 100),
    "running, ramped by min(1, n / 200)": ramped(running, 200),
    "running, ramped by min(1, n / 400)": ramped(running, 400),
    "running, shrunk by p / (p + 2), p positives seen": shrunk_by_positives(running, 2),
    "running, shrunk by p / (p + 5)": shrunk_by_positives(running, 5),
    "running, shrunk by p / (p + 10)": shrunk_by_positives(running, 10),
    "rank among the last 500": rank(500),
    "rank among the last 2,000": rank(2_000),
    "normal score of the rank among the last 2,000": rank(2_000, normal=True),
}
