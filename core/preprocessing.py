"""Online feature scaling, usable by every learner (the ``scaling`` hyper-parameter).

========== =========================================================== ===============
scaling    what each event becomes                                      state arrays
========== =========================================================== ===============
none       unchanged                                                    —
unit_norm  x / ||x||_2 (a zero row stays zero); the thesis normalises   —
           every sample this way
standard   (x - mean) / std, running mean/variance (Welford) that       scaler_count,
           include the event itself; dense input only (centring would   scaler_mean,
           destroy sparsity)                                            scaler_m2
scale      x / std, running variance counting implicit zeros; keeps     scaler_count,
           sparsity, so it is the choice for sparse and hashed input    scaler_sum,
                                                                        scaler_sum_sq
========== =========================================================== ===============

[CHOICE] The statistics are updated with an event *before* it is scaled, so the first event
of a stream becomes the zero vector under ``standard``.  This is an unsupervised transform (no
label is used), so it does not leak the label into the prequential score.  Scoring
(``decision_function``) uses the current statistics without updating them.
A feature whose variance is still 0 is divided by 1.
"""

from __future__ import annotations

import numpy as np

from core._kernels import scaling as kernels
from core.csr import CSRMatrix

SCALINGS = ("none", "unit_norm", "standard", "scale")


def initial_scaler_state(scaling: str, n_features: int) -> dict[str, np.ndarray]:
    if scaling == "standard":
        return {
            "scaler_count": np.zeros(1, dtype=np.int64),
            "scaler_mean": np.zeros(n_features),
            "scaler_m2": np.zeros(n_features),
        }
    if scaling == "scale":
        return {
            "scaler_count": np.zeros(1, dtype=np.int64),
            "scaler_sum": np.zeros(n_features),
            "scaler_sum_sq": np.zeros(n_features),
        }
    return {}


def _unit_norm(X):
    if isinstance(X, CSRMatrix):
        squares = np.zeros(X.shape[0])
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        np.add.at(squares, rows, X.data * X.data)
        norms = np.sqrt(squares)
        norms[norms == 0.0] = 1.0
        return CSRMatrix(X.indptr, X.indices, X.data / norms[rows], X.n_features)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    norms[norms == 0.0] = 1.0
    return X / norms[:, None]


def scale_batch(scaling: str, state: dict[str, np.ndarray], X, *, learn: bool):
    """Return the scaled batch (a new array; ``X`` is not modified).

    With ``learn=True`` the statistics in ``state`` are updated in place, event by event.
    """
    if scaling == "none":
        return X
    if scaling == "unit_norm":
        return _unit_norm(X)
    count = state["scaler_count"]
    if scaling == "standard":
        if isinstance(X, CSRMatrix):
            raise ValueError(
                "scaling='standard' centres features and so cannot keep them sparse; "
                "use scaling='scale' for sparse or hashed features"
            )
        out = np.empty_like(X)
        step = kernels.standard_learn_dense if learn else kernels.standard_transform_dense
        step(X, out, count, state["scaler_mean"], state["scaler_m2"])
        return out
    total, total_sq = state["scaler_sum"], state["scaler_sum_sq"]
    if isinstance(X, CSRMatrix):
        out_data = np.empty_like(X.data)
        step = kernels.scale_learn_csr if learn else kernels.scale_transform_csr
        step(X.indptr, X.indices, X.data, out_data, count, total, total_sq)
        return CSRMatrix(X.indptr, X.indices, out_data, X.n_features)
    out = np.empty_like(X)
    step = kernels.scale_learn_dense if learn else kernels.scale_transform_dense
    step(X, out, count, total, total_sq)
    return out


#: what :func:`fold_scaling` cannot do, and why (shown to users beside the missing weights)
NOT_FOLDABLE = {
    "unit_norm": (
        "scaling 'unit_norm' divides each event by its own norm, so the score is not a linear "
        "function of the raw features: there are no raw-space weights; apply x / ||x||_2 to an "
        "event, then the internal coef and intercept"
    ),
}


def scaler_affine(scaling: str, state: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(divisors, offsets)`` such that scoring-time scaling is ``(x - offsets) / divisors``
    feature by feature, from the current statistics (as ``scale_batch(..., learn=False)``).

    Mirrors the transform kernels of ``core/_kernels/scaling.py``: ``standard`` divides by
    ``sqrt(m2 / n)`` (by 1 while it is 0), ``scale`` by ``_scale_of`` (1 before any event and
    below its relative variance floor of 1e-10); ``tests/core/test_preprocessing.py`` checks
    that the two agree bit for bit.  Raises ValueError for a per-event scaling (``unit_norm``).
    """
    if scaling in NOT_FOLDABLE:
        raise ValueError(NOT_FOLDABLE[scaling])
    n_features = int(state["n_features"][0])
    if scaling == "none":
        return np.ones(n_features), np.zeros(n_features)
    count = int(state["scaler_count"][0])
    if scaling == "standard":
        mean = state["scaler_mean"]
        std = np.sqrt(state["scaler_m2"] / count) if count > 0 else np.zeros(n_features)
        return np.where(std > 0.0, std, 1.0), mean.copy()
    if count == 0:
        return np.ones(n_features), np.zeros(n_features)
    mean = state["scaler_sum"] / count
    mean_square = state["scaler_sum_sq"] / count
    variance = mean_square - mean * mean
    divisors = np.where(variance <= 1e-10 * mean_square, 1.0, np.sqrt(np.maximum(variance, 0.0)))
    return divisors, np.zeros(n_features)


def fold_scaling(
    scaling: str, state: dict[str, np.ndarray], coef: np.ndarray, intercept: float
) -> tuple[np.ndarray, float] | None:
    """Weights of the raw feature space: the linear score ``coef . scaled(x) + intercept``
    rewritten as ``raw_coef . x + raw_intercept``, or None when the scaling is not a fixed
    affine map of each feature (``unit_norm``, see :data:`NOT_FOLDABLE`).

    With ``scaled(x)_j = (x_j - m_j) / d_j`` (:func:`scaler_affine`)::

        raw_coef_j    = coef_j / d_j
        raw_intercept = intercept - sum_j coef_j * m_j / d_j

    The statistics keep moving as the model learns: the folded weights hold for the state
    they were read from (the version a response reports).

    >>> state = {"n_features": np.array([1]), "scaler_count": np.array([2]),
    ...          "scaler_mean": np.array([3.0]), "scaler_m2": np.array([8.0])}
    >>> fold_scaling("standard", state, np.array([2.0]), 1.0)
    (array([1.]), -2.0)
    """
    if scaling in NOT_FOLDABLE:
        return None
    divisors, offsets = scaler_affine(scaling, state)
    raw_coef = coef / divisors
    return raw_coef, float(intercept - np.dot(raw_coef, offsets))
