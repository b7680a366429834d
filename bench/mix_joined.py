"""(auto.15) for ``mix_replay.py``: a candidate that joined the mix at its first fit (auto.14)
is judged on its events since (docs/algorithms/auto.md, after (auto.14)).

The pair test of (auto.13) and the leave-one-positive-out check of an undecided evaluation are
the library's own (:mod:`core.learners._mix_fallback`): the replay restates which events each
candidate is judged on, not DeLong's error.
"""

from __future__ import annotations

import numpy as np

from core.learners._mix_fallback import (
    DROP_UNCERTAINTY,
    auc_difference_se,
    behind_without_each_positive,
)
from core.metrics import auc, pauc


def columns(joins: np.ndarray, low: int) -> np.ndarray | None:
    """Each candidate's first compared column when the compared events start at event ``low``:
    a candidate that joined after ``low`` from its join, the others from 0; None when none
    did (core.learners._tree_admission.joined_columns)."""
    firsts = np.maximum(joins - low, 0)
    return firsts if firsts.any() else None


def metrics(labels, window) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's pAUC(0, 0.1) and AUC on the events ``labels`` / ``window``."""
    paucs = np.array([pauc(labels, row, 0.0, 0.1) for row in window])
    return paucs, np.array([auc(labels, row) for row in window])


def judge(paucs: np.ndarray, aucs: np.ndarray, labels, window, firsts) -> None:
    """In a deciding evaluation, the pAUC and AUC (in place) of each candidate that joined
    inside the compared events taken on its events since, when they hold both classes."""
    for k, first in enumerate([] if firsts is None else firsts.tolist()):
        since = labels[first:]
        if first and 0 < int(since.sum()) < since.size:
            paucs[k] = pauc(since, window[k, first:], 0.0, 0.1)
            aucs[k] = auc(since, window[k, first:])


def _behind(labels, best, other, loo: bool) -> bool:
    """(auto.13)'s test of a pair on these events alone: never without two of each class."""
    positives = int(labels.sum())
    if positives < 2 or labels.size - positives < 2:
        return False
    gap = auc(labels, best) - auc(labels, other)
    if not gap > DROP_UNCERTAINTY * auc_difference_se(labels, best, other):
        return False
    return not loo or behind_without_each_positive(labels, best, other)


def drop(weights, paucs, aucs, labels, window, firsts, errors: float, loo) -> np.ndarray:
    """(auto.13) with (auto.15): the candidates with a share behind the best of them (by
    ``paucs`` then ``aucs``) by more than ``errors`` standard errors lose it; a pair of which
    one joined inside the events is compared on the events since the later join alone;
    ``loo``: the gap must hold with each positive left out (an undecided evaluation)."""
    held = np.flatnonzero(weights)
    best = held[np.lexsort((held, -aucs[held], -paucs[held]))[0]]
    weights = weights.copy()
    for other in held:
        since = 0 if firsts is None else int(max(firsts[best], firsts[other]))
        if since:
            behind = _behind(labels[since:], window[best, since:], window[other, since:], loo)
        else:
            gap = aucs[best] - aucs[other]
            behind = bool(
                gap > 0
                and gap > errors * auc_difference_se(labels, window[best], window[other])
                and (not loo or behind_without_each_positive(labels, window[best], window[other]))
            )
        if behind:
            weights[other] = 0.0
    return weights / weights.sum()
