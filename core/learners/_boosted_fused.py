"""``boosted_embedded``'s segment in one kernel call (issue 36's request path, issue 39's Elec2
cost): scaling, embedding, the inner learner's step and the fit buffer's keep
(:func:`core._kernels.boosted_embedding.learn_segment`), the same kernels in the same order as
the general path of :mod:`core.learners._boosted_learning`, so the same state and scores bit for
bit, for ~5 us of dispatch where the general path spends ~30 us of Python per one-event call.

It takes the common case only: dense C-ordered rows under the ``standard`` scaling, an inner
FTRL ``logistic`` (not the Laplace solver) and arrays that need neither growth nor the pool's
detach for this segment; anything else returns None and goes the general way.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from core._kernels import boosted_embedding as kernels
from core.boosted_trees import ENSEMBLE_KEYS
from core.learners._row_pool import pooled_rows
from core.learners.logistic import Logistic

if TYPE_CHECKING:
    from core.learners.boosted_embedded import BoostedEmbedded

__all__ = ["learn_fused"]

_NONE_F = np.empty(0)


def _contiguous(array: np.ndarray, dtype: type) -> bool:
    return array.dtype == dtype and array.flags.c_contiguous


def learn_fused(
    learner: BoostedEmbedded, X, y: np.ndarray, scores: np.ndarray
) -> np.ndarray | None:
    """Learn the segment ``(X, y)`` (``scores``: where its inner pre-update scores go, or
    empty) in one kernel call and return its scaled rows; None, nothing changed, when the
    segment is not the common case (module docstring)."""
    if learner.scaling != "standard" or type(X) is not np.ndarray or X.ndim != 2:
        return None
    if not (_contiguous(X, np.float64) and _contiguous(y, np.int64)):
        return None
    if len(scores) and not _contiguous(scores, np.float64):
        return None
    inner = learner._inner
    if type(inner) is not Logistic or "covariance" in inner.state_:
        return None
    own = learner._own_state
    n_events = len(y)
    pooled = pooled_rows(learner._rows_link)
    holding = bool(own["pending"][0])
    if holding:
        fill, capacity = own["pending_fill"], int(learner.fit_delay)
        rows, labels, weights = own["pending_X"], own["pending_y"], _NONE_F
        needed = min(int(fill[0]) + n_events, capacity)
    else:
        fill, capacity = own["buffer_fill"], int(learner.buffer_size)
        rows, labels, weights = own["buffer_X"], own["buffer_y"], own["buffer_w"]
        needed = min(int(fill[0]) + n_events, capacity)
        if pooled and int(fill[0]) + n_events > capacity:  # it would leave the pool here
            return None
    if len(labels) < needed or (not pooled and len(rows) < needed):
        return None  # the arrays grow first: the general path
    scaler = learner._scaler_arrays
    scaled = np.empty_like(X)
    kernels.learn_segment(
        X, y, scores, scaled, scaler["scaler_count"], scaler["scaler_mean"], scaler["scaler_m2"],
        *map(own.__getitem__, ENSEMBLE_KEYS[:-1]), int(own["ens_trees"][0]),
        int(learner.max_leaves), bool(learner.append_features), bool(learner.append_margin),
        1.0 / math.sqrt(learner.n_trees), *inner._accumulators(), holding, pooled,
        own["buffer_rng"], own["buffer_seen"], fill, own["buffer_next"], own["buffer_written"],
        capacity, float(learner.negatives_per_positive), rows, labels, weights,
    )  # fmt: skip
    if not holding:  # as _remember counts them
        own["events"][0] += n_events
        own["since_fit"][0] += n_events
    return scaled
