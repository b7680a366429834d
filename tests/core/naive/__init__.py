"""Deliberately naive references (plain NumPy and Python loops) that the kernels are tested
against, one module per learner or per family: ``learners`` (spam, solam), ``baselines`` (oam,
opauc), ``pauc`` (pAUC / Prec@k surrogates, pmb, ftrl_pauc, svm_pauc), ``logistic``, ``poise``,
``spdam``, ``tree_embedding`` (the tree-path router), ``metrics`` (AUC, pAUC, ROC),
``operating`` (operating points), ``calibration`` (Platt scaling), ``drift`` (Page-Hinkley).
Shared helpers for reading a batch event by event live here."""

from __future__ import annotations

import math

import numpy as np


def event_rows(X) -> list[np.ndarray]:
    """Dense float64 rows of a dense array or a scipy / CSRMatrix batch."""
    if hasattr(X, "toarray"):
        X = X.toarray()
    return [np.asarray(row, dtype=np.float64) for row in np.asarray(X, dtype=np.float64)]


def event_labels(y) -> list[int]:
    """Labels in any accepted convention as a list of -1 / +1."""
    return [1 if (v is True or v == 1) else -1 for v in np.asarray(y).tolist()]


class PerEventReference:
    """A reference that learns one event at a time: :meth:`learn` scores each event with the
    served weights (its prequential score), then hands it to :meth:`step`."""

    w: np.ndarray

    def served(self) -> np.ndarray:
        """The weights that score events: the last iterate (a reference that averages
        overrides this)."""
        return self.w

    def step(self, x: np.ndarray, label: int) -> None:
        """Learn one event: a dense float64 row and its label, -1 or +1."""
        raise NotImplementedError

    def learn(self, X, y) -> np.ndarray:
        """Learn a batch in order; returns the prequential scores."""
        scores = []
        for x, label in zip(event_rows(X), event_labels(y), strict=True):
            scores.append(float(self.served() @ x))
            self.step(x, label)
        return np.array(scores)


def biased_reservoir_offer(buffer: list, capacity: int, x, half_life: float, unit, below) -> None:
    """Aggarwal's biased reservoir, filled first (docs/algorithms/forgetting.md
    (forgetting.4)), plainly: n = min(capacity, floor(H / ln 2)) slots are used; until they are
    full ``x`` is appended; then it is inserted with probability n ln 2 / H (``unit()``: a
    uniform draw in [0, 1)) in place of a uniform resident (``below(fill)``)."""
    used = min(capacity, max(1, int(half_life / math.log(2.0))))
    if len(buffer) < used:
        buffer.append(x.copy())
        return
    p_in = used * math.log(2.0) / half_life
    if p_in < 1.0 and unit() >= p_in:
        return
    buffer[below(len(buffer))] = x.copy()
