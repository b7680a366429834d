"""``auto``'s served mix falls back to its best candidate when clearly behind it on the
evaluation window (docs/algorithms/auto.md (auto.12)), and sheds the candidates clearly behind
the best (auto.13); and which of the window's ring-buffer events an evaluation compares
(its later half, the whole window, the events extended back to the guard's positives).

A softmax of the candidates' windowed pAUCs can blur a clearly better candidate with weaker
ones: on a wide sparse set of rare positives the mix ranked below its own ``logistic`` run
alone.  After the mix's weights are set from an evaluation, the mix those weights give is scored
on the same window; when the best candidate is no worse there on the pAUC and ahead on the AUC
by more than :data:`UNCERTAINTY` standard errors of the two AUCs' difference, it is served
alone (its weight 1).  Before that, a candidate whose windowed AUC is behind the best
candidate's by more than :data:`DROP_UNCERTAINTY` standard errors of their difference loses its
share (:func:`drop_clearly_behind`): the softmax weighs by the pAUC, which on a window of few
positives can tie candidates whose rankings are far apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core._kernels import auto as kernels
from core.learners._served_scale import mix_factors

__all__ = [
    "DROP_UNCERTAINTY",
    "UNCERTAINTY",
    "auc_difference_se",
    "behind_without_each_positive",
    "best_candidate",
    "placements",
    "SortedWindow",
    "drop_clearly_behind",
    "extended_columns",
    "fall_back_to_best",
    "later_half_if_deciding",
    "passes_guard",
    "shed_undecided",
    "whole_window",
    "window_metrics",
]

#: [CHOICE] the best candidate replaces the mix only when its windowed AUC leads the mix's by
#: more than this many standard errors of the paired difference (:func:`auc_difference_se`):
#: on a short stream's window of a few dozen positives a lead of a pair or two is noise, and the
#: mix, which hedges between the candidates, served the rest of such streams better
#: (bench/README.md, "The mix's fallback within the window's noise")
UNCERTAINTY = 0.5

#: [CHOICE] a candidate loses its share of the mix when its windowed AUC is behind the best
#: candidate's by more than this many standard errors of their paired difference
#: (:func:`drop_clearly_behind`): the pAUC softmax gave a hashed stream's FTRL ``logistic``, at
#: a windowed AUC of 0.39-0.72, a third of the mix (bench/README.md, "The mix against its best
#: candidate (branch h-P)")
DROP_UNCERTAINTY = 3.0


def placements(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's placements: each positive's share of the negatives scored below it, each
    negative's share of the positives scored above it (a tie counts one half)."""
    positive = labels > 0
    positives, negatives = scores[positive], scores[~positive]
    positive_order = np.argsort(positives)
    negative_order = np.argsort(negatives)
    return _placements_in_order(
        positives[positive_order], positive_order, negatives[negative_order], negative_order
    )


def _placements_in_order(above, positive_order, below, negative_order):
    """:func:`placements` from each class's scores sorted (``above``: the positives', ``below``:
    the negatives') and the orders that sort them."""
    # each class looked up in the other in its sorted order, the counts then put back in the
    # events' order (tied scores get the same counts, so any sort order gives the same
    # placements): numpy's binary search starts where the last key's ended when the keys
    # increase, ~2x faster on a window of 5,000 than looking them up in the events' order
    of_positives = np.empty(above.size)
    of_positives[positive_order] = (
        np.searchsorted(below, above, "left") + np.searchsorted(below, above, "right")
    ) / (2.0 * below.size)
    of_negatives = np.empty(below.size)
    of_negatives[negative_order] = 1.0 - (
        np.searchsorted(above, below, "left") + np.searchsorted(above, below, "right")
    ) / (2.0 * above.size)
    return of_positives, of_negatives


class SortedWindow:
    """An evaluation's window (``scores`` (K, W), ``labels`` (W,), > 0 a positive) with each
    candidate's scores of each class sorted once: its exact metrics (:meth:`metrics`) read
    them all sorted, and DeLong's placements (:meth:`placements`, kept per candidate) look
    each class up in the other, for the best candidate and each one behind it, then the best
    again against the mix (the same numbers as sorting at each use: only ties may be ordered
    otherwise, and they give the same counts)."""

    def __init__(self, scores: np.ndarray, labels: np.ndarray) -> None:
        self.scores, self.labels = scores, labels
        positive = labels > 0
        positives, negatives = _by_class(scores, positive)
        self._positive_order = np.argsort(positives, axis=1)
        self._negative_order = np.argsort(negatives, axis=1)
        self._positives = np.take_along_axis(positives, self._positive_order, axis=1)
        self._negatives = np.take_along_axis(negatives, self._negative_order, axis=1)
        self._placements: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def metrics(self, alpha: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """:func:`window_metrics` of the window (both classes present)."""
        paucs, aucs = np.zeros(self.scores.shape[0]), np.zeros(self.scores.shape[0])
        kernels.window_metrics(self._positives, self._negatives, alpha, beta, paucs, aucs)
        return paucs, aucs

    def placements(self, candidate: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`placements` of the candidate's window scores."""
        kept = self._placements.get(candidate)
        if kept is None:
            kept = self._placements[candidate] = _placements_in_order(
                self._positives[candidate], self._positive_order[candidate],
                self._negatives[candidate], self._negative_order[candidate],
            )  # fmt: skip
        return kept


def auc_difference_se(labels: np.ndarray, first: np.ndarray, second: np.ndarray) -> float:
    """The standard error of ``AUC(first) - AUC(second)`` on the same events (DeLong, DeLong
    and Clarke-Pearson 1988: the variances of the paired placements' differences over the
    positives and over the negatives); ``labels`` > 0 marks a positive.  Infinite with fewer than
    two events of either class (no estimate: the mix is kept)."""
    if np.count_nonzero(labels > 0) < 2 or np.count_nonzero(labels <= 0) < 2:
        return float("inf")
    return _placements_difference_se(placements(labels, first), placements(labels, second))


def _placements_difference_se(first, second) -> float:
    """:func:`auc_difference_se` from the two score vectors' :func:`placements`."""
    first_positives, first_negatives = first
    second_positives, second_negatives = second
    over_positives = first_positives - second_positives
    over_negatives = first_negatives - second_negatives
    variance = (
        np.var(over_positives, ddof=1) / over_positives.size
        + np.var(over_negatives, ddof=1) / over_negatives.size
    )
    return float(np.sqrt(variance))


def best_candidate(paucs: np.ndarray, aucs: np.ndarray) -> int:
    """The window's best candidate: the highest pAUC, then AUC, then the lowest index."""
    return int(np.lexsort((np.arange(len(paucs)), -aucs, -paucs))[0])


def drop_clearly_behind(
    weights: np.ndarray,
    paucs: np.ndarray,
    aucs: np.ndarray,
    window_scores: np.ndarray,
    labels: np.ndarray,
    *,
    without_each_positive: bool = False,
    window: SortedWindow | None = None,
    joined: np.ndarray | None = None,
) -> None:
    """(auto.13): zero the share in ``weights`` of every candidate whose windowed AUC
    (``aucs``) is below that of the best candidate with a share (:func:`best_candidate` among
    them) by more than :data:`DROP_UNCERTAINTY` standard errors of the two's difference on the
    window (``window_scores`` (K, W), ``labels`` (W,)), then renormalise; the best keeps its
    share.  ``without_each_positive``: the gap must also exceed that with any one positive of
    the window left out (:func:`behind_without_each_positive`).  ``window``: the same window
    sorted (:class:`SortedWindow`), when the caller has it.  ``joined``: each candidate's first
    column on which it is judged (docs/algorithms/auto.md (auto.15)): a pair of which one
    joined inside the window is compared on the columns since the later join alone."""
    window = SortedWindow(window_scores, labels) if window is None else window
    held = np.flatnonzero(weights > 0.0)
    best = int(held[best_candidate(paucs[held], aucs[held])])
    enough = np.count_nonzero(labels > 0) >= 2 and np.count_nonzero(labels <= 0) >= 2
    for other in held.tolist():
        since = 0 if joined is None else int(max(joined[best], joined[other]))
        if since:
            rest, first = labels[since:], window_scores[best, since:]
            second = window_scores[other, since:]
            if _behind(rest, first, second) and (
                not without_each_positive or behind_without_each_positive(rest, first, second)
            ):
                weights[other] = 0.0
            continue
        gap = aucs[best] - aucs[other]
        if gap > 0.0:
            se = float("inf")  # no estimate with fewer than two events of a class
            if enough:
                se = _placements_difference_se(window.placements(best), window.placements(other))
            if gap > DROP_UNCERTAINTY * se and (
                not without_each_positive
                or behind_without_each_positive(labels, window_scores[best], window_scores[other])
            ):
                weights[other] = 0.0
    weights /= np.sum(weights)


def behind_without_each_positive(labels: np.ndarray, best: np.ndarray, other: np.ndarray) -> bool:
    """Whether ``other``'s AUC stays behind ``best``'s by more than :data:`DROP_UNCERTAINTY`
    standard errors of their difference (:func:`auc_difference_se`) on the events with any one
    positive left out, each in turn: a drop that one positive makes is not taken."""
    for left_out in np.flatnonzero(labels > 0):
        kept = np.arange(labels.shape[0]) != left_out
        rest = labels[kept]
        best_positives, _ = placements(rest, best[kept])
        other_positives, _ = placements(rest, other[kept])
        gap = float(np.mean(best_positives) - np.mean(other_positives))
        if not gap > DROP_UNCERTAINTY * auc_difference_se(rest, best[kept], other[kept]):
            return False
    return True


def _behind(labels: np.ndarray, best: np.ndarray, other: np.ndarray) -> bool:
    """Whether ``other``'s AUC is behind ``best``'s by more than :data:`DROP_UNCERTAINTY`
    standard errors of their difference; never without two events of each class."""
    if np.count_nonzero(labels > 0) < 2 or np.count_nonzero(labels <= 0) < 2:
        return False
    best_positives, _ = placements(labels, best)
    other_positives, _ = placements(labels, other)
    gap = float(np.mean(best_positives) - np.mean(other_positives))
    return gap > DROP_UNCERTAINTY * auc_difference_se(labels, best, other)


def window_metrics(
    window_scores: np.ndarray, labels: np.ndarray, alpha: float, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's exact pAUC over ``[alpha, beta]`` and AUC on the window (both classes
    present), as (auto.1)-(auto.2) compute them."""
    positives, negatives = _by_class(window_scores, labels > 0)
    paucs, aucs = np.zeros(window_scores.shape[0]), np.zeros(window_scores.shape[0])
    kernels.window_metrics(np.sort(positives, axis=1), np.sort(negatives, axis=1),
                           alpha, beta, paucs, aucs)  # fmt: skip
    return paucs, aucs


def _by_class(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window's scores of each class, C-ordered: a boolean mask of columns gives an
    F-ordered copy, but a C-ordered one when it keeps one column, and each layout is a numba
    compilation of its own (the warm-up would miss the rarer one, compiled in a request)."""
    return np.ascontiguousarray(scores[:, positive]), np.ascontiguousarray(scores[:, ~positive])


def shed_undecided(
    weights: np.ndarray,
    window_scores: np.ndarray,
    labels: np.ndarray,
    alpha: float,
    beta: float,
    joined: np.ndarray | None = None,
) -> None:
    """An evaluation whose window has too few positives to set the weights (the guard after
    (auto.3)) still takes from the current mix the candidates clearly behind its best
    (:func:`drop_clearly_behind`) on ``window_scores`` / ``labels``: the compared events
    extended back until they hold the guard's positives (or the whole window); nothing with
    fewer than two events of either class.  ``joined``: as :func:`drop_clearly_behind`'s."""
    positives = int(np.count_nonzero(labels > 0))
    if positives < 2 or labels.shape[0] - positives < 2:
        return
    window = SortedWindow(window_scores, labels)
    paucs, aucs = window.metrics(alpha, beta)
    # [CHOICE] on the few positives of an undecided window DeLong's variance rests on a handful
    # of placements, and one positive ranked apart made a 3-SE gap: a rare stream's mix went to
    # one candidate whose pAUC there was 0 (bench/README.md, "Drift alarms on rare positives
    # (branch h-T)"); a drop must hold without each positive
    drop_clearly_behind(weights, paucs, aucs, window_scores, labels, without_each_positive=True,
                        window=window, joined=joined)  # fmt: skip


def whole_window(own: dict[str, np.ndarray], earliest: int, first: int):
    """The scores and labels of the window's events from ``earliest`` to ``n_seen``, when the
    events compared start later (at ``first``: the later half); None when they are those."""
    if first <= earliest:
        return None
    columns = np.arange(earliest, int(own["n_seen"][0])) % own["window_labels"].shape[0]
    return own["window_scores"][:, columns], own["window_labels"][columns].astype(np.int64)


def extended_columns(
    own: dict[str, np.ndarray], earliest: int, first: int, needed: int
) -> np.ndarray:
    """The ring buffer's columns of the events from ``first`` to ``n_seen``, extended back (not
    before ``earliest``) until they hold ``needed`` more positives, or from ``earliest``."""
    seen, capacity = int(own["n_seen"][0]), own["window_labels"].shape[0]
    first = max(first, earliest)
    before = np.flatnonzero(own["window_labels"][np.arange(earliest, first) % capacity] > 0)
    if needed <= 0:
        start = first
    elif needed <= before.size:
        start = earliest + int(before[-needed])
    else:
        start = earliest
    return np.arange(start, seen) % capacity


def later_half_if_deciding(
    own: dict[str, np.ndarray], first: int, min_positives: int, min_negatives: int, width: float
) -> int:
    """``first`` when the window's events from it to ``n_seen`` pass the guard after (auto.3)
    (``width``: the FPR range's), 0 when they do not (the events compared are then as before
    the window filled)."""
    seen, capacity = int(own["n_seen"][0]), own["window_labels"].shape[0]
    labels = own["window_labels"][np.arange(first, seen) % capacity]
    positives = int(np.count_nonzero(labels > 0))
    passes = passes_guard(positives, seen - first, min_positives, min_negatives, width)
    return first if passes else 0


def passes_guard(
    n_positive: int, n_events: int, min_positives: int, min_negatives: int, width: float
) -> bool:
    """The guard (auto.3): whether ``n_events`` events holding ``n_positive`` positives may
    decide, ``width`` the FPR range's width (the negatives the pAUC reads)."""
    return n_positive >= min_positives and width * (n_events - n_positive) >= min_negatives


def fall_back_to_best(
    own: dict[str, np.ndarray],
    window_scores: np.ndarray,
    labels: np.ndarray,
    alpha: float,
    beta: float,
    window: SortedWindow | None = None,
    whole_window: tuple[np.ndarray, np.ndarray] | None = None,
    steady: Sequence[bool] | None = None,
) -> None:
    """Set ``own["served_weights"]`` to the best candidate alone (highest windowed pAUC, then
    AUC, then the lowest index, from ``own["window_pauc"]`` / ``own["window_auc"]``) when the
    mix of the current weights is no better on the window's pAUC and behind on its AUC by more
    than :data:`UNCERTAINTY` standard errors of the difference (``window_scores`` (K, W) and
    ``labels`` (W,), both classes present).  Given ``whole_window`` (the scores and labels of
    every event of the window, where ``window_scores`` holds its later half), a best candidate
    that is steady (``steady[k]``, every one when None: it neither grows trees nor forgets)
    must be ahead of the mix there too, by the same test.  The mix's window scores are each
    candidate's scores times its factor in the served mix (its mean, a constant, does not
    change the ranking).  ``window``: the same window sorted (:class:`SortedWindow`), when the
    caller has it."""
    weights = own["served_weights"]
    paucs, aucs = own["window_pauc"], own["window_auc"]
    best = best_candidate(paucs, aucs)
    if weights[best] == 1.0:
        return
    factors = mix_factors(own)
    best_placements = None if window is None else window.placements(best)
    if not _mix_behind(factors, best, window_scores, labels, alpha, beta, paucs[best], aucs[best],
                       best_placements):  # fmt: skip
        return
    # [CHOICE] on a stream shorter than twice the window the weights are set on its later half,
    # a few dozen positives on a short stream: a steady candidate replaces the mix only if all
    # of the window's events, twice the evidence, say so too.  Not a tree candidate (before its
    # first fit it ranked as its inner learner) nor a forgetting one (made to follow the recent
    # events): the whole window would hold them back for scores of what they no longer are
    # (bench/README.md, "M: the served mix's misses, set by set")
    if whole_window is not None and (steady is None or steady[best]):
        scores, whole_labels = whole_window
        best_pauc, best_auc = window_metrics(scores[best : best + 1], whole_labels, alpha, beta)
        if not _mix_behind(factors, best, scores, whole_labels, alpha, beta, best_pauc[0],
                           best_auc[0]):  # fmt: skip
            return
    weights[:] = 0.0
    weights[best] = 1.0


def _mix_behind(
    factors: np.ndarray,
    best: int,
    window_scores: np.ndarray,
    labels: np.ndarray,
    alpha: float,
    beta: float,
    best_pauc: float,
    best_auc: float,
    best_placements: tuple[np.ndarray, np.ndarray] | None = None,
) -> bool:
    """Whether the mix of ``factors`` (:func:`~core.learners._served_scale.mix_factors`) is no
    better than candidate ``best`` (its metrics ``best_pauc`` / ``best_auc`` on the window) on
    the window's pAUC and behind on its AUC by more than :data:`UNCERTAINTY` standard errors
    of the difference; never without two events of each class (no estimate of the error).
    ``best_placements``: the best candidate's placements, when the caller has them."""
    mix = (factors @ window_scores)[None, :]
    mix_pauc, mix_auc = window_metrics(mix, labels, alpha, beta)
    # [CHOICE] the best candidate alone replaces the mix only when it is at least as good on
    # the pAUC and ahead on the AUC beyond the window's noise: on the few positives of a short
    # stream's window, pAUC(0, 0.1) rests on the top tenth of the negatives, and comparing
    # (pAUC, AUC) in that order let a pAUC tie or a one-pair lead there overrule the AUC
    # (bench/README.md, "The served mix against its best candidate")
    if mix_pauc[0] > best_pauc:
        return False
    if np.count_nonzero(labels > 0) < 2 or np.count_nonzero(labels <= 0) < 2:
        return False  # no estimate of the difference's error (auc_difference_se)
    if best_placements is None:
        best_placements = placements(labels, window_scores[best])
    margin = UNCERTAINTY * _placements_difference_se(best_placements, placements(labels, mix[0]))
    return bool(mix_auc[0] <= best_auc - margin)
