"""Online feature scaling, usable by every learner (the ``scaling`` hyper-parameter).

========== =========================================================== ================
scaling    what each event becomes                                      state arrays
========== =========================================================== ================
none       unchanged                                                    —
unit_norm  x / ||x||_2 (a zero row stays zero); the thesis normalises   —
           every sample this way
standard   (x - mean) / std, running mean/variance (Welford) that       scaler_count,
           include the event itself; dense input only (centring would   scaler_mean,
           destroy sparsity); a number's std at least STANDARD_FLOOR    scaler_m2,
           times the spread of its non-zero values about the mean      scaler_present,
                                                                        scaler_magnitude
scale      x / s, s the spread of the feature's non-zero values so     scaler_nonzero,
           far, at least SCALE_FLOOR times their root mean square;      scaler_sum,
           keeps sparsity, so it is the choice for sparse and hashed    scaler_sum_sq
           input
========== =========================================================== ================

[CHOICE] ``scale`` measures a feature over the events where it is present, not over every
event: the standard deviation of a 0/1 column at rate ``p`` is ``sqrt(p (1 - p))``, so a
category seen once in ``n`` events became ``sqrt(n)`` (30 at the 1,000th event) and shrank as
it recurred: a rare category's weight took steps tens of times larger than a common one's, on a
scale that moved with its count, and hashed categorical data ranked well below batch logistic
regression on the same columns (bench/README.md, "Categorical and hashed features").  A
category's non-zero values do not vary (1, or -1 when hashed), so it is divided by
``SCALE_FLOOR`` times its size: a category is 4 (or -4) whatever its frequency, as the standard
deviation made a category present in 7 % of the events.  A number's non-zero values do vary,
and it is divided by their standard deviation, as before, while that is at least a quarter of
their root mean square (a mean up to ~3.9 standard deviations away from 0); a number further
from 0 is divided by the floor instead, so that a nearly constant feature is not blown up.

[CHOICE] The statistics are updated with an event *before* it is scaled, so the first event
of a stream becomes the zero vector under ``standard``.  This is an unsupervised transform (no
label is used), so it does not leak the label into the prequential score.  Scoring
(``decision_function``) uses the current statistics without updating them.
A feature whose variance is still 0 is divided by 1.

[CHOICE] ``standard`` divides a number that is mostly 0 by at least ``STANDARD_FLOOR`` times
the root mean square distance of its non-zero values from the mean.  A count present in a few
per cent of the events (flare_f's flares) has a standard deviation of ~``sqrt(p)`` times that
distance, so its rare values became ``~1/sqrt(p)`` standard deviations (``sqrt(n)`` at its
first) and took steps that lowered its ranking below batch logistic regression; under the
floor a value at the typical distance is ~8 (``1 / STANDARD_FLOOR``).  A feature whose
non-zero values have all had one magnitude (a 0/1 flag, a one-hot category, a fingerprint bit)
keeps its standard deviation: on hiva's 1,617 rare bits the blow-up ranks better
(bench/README.md, "One-hot categories under standard").  The kind is read from the values, so
the same columns are scaled the same way by the library and the service.  A feature that is
never 0 has that distance equal to its standard deviation and is scaled as without the floor.
"""

from __future__ import annotations

import operator

import numpy as np

from core._kernels import scaling as kernels
from core.csr import CSRMatrix

SCALINGS = ("none", "unit_norm", "standard", "scale")
#: [CHOICE] ``scale`` divides by at least this share of a feature's root mean square (module
#: docstring): a category (constant non-zero values) becomes +-4, and a number keeps its
#: standard deviation as divisor while its mean is within ~3.9 standard deviations of 0 (on
#: hashed categorical sets, 0.1 and 0.5 measured beside it: bench/README.md)
SCALE_FLOOR = 0.25
#: [CHOICE] ``standard`` divides a number by at least this share of its non-zero values' root
#: mean square distance from the mean: a value at that distance is then ~8 (module docstring;
#: 0.25 and 0.5 measured beside it: bench/README.md, "CAT")
STANDARD_FLOOR = 0.125


def initial_scaler_state(scaling: str, n_features: int) -> dict[str, np.ndarray]:
    if scaling == "standard":
        return {
            "scaler_count": np.zeros(1, dtype=np.int64),
            "scaler_mean": np.zeros(n_features),
            "scaler_m2": np.zeros(n_features),
            "scaler_present": np.zeros(n_features, dtype=np.int64),
            "scaler_magnitude": np.zeros(n_features),
        }
    if scaling == "scale":
        return {
            "scaler_nonzero": np.zeros(n_features, dtype=np.int64),
            "scaler_sum": np.zeros(n_features),
            "scaler_sum_sq": np.zeros(n_features),
        }
    return {}


#: the ``standard`` scaler's arrays of a state, in the order its kernels take them (one C call:
#: the boosted candidates' fused call reads them at every event)
standard_arrays = operator.itemgetter(
    "scaler_count", "scaler_mean", "scaler_m2", "scaler_present", "scaler_magnitude"
)


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
    if scaling == "standard":
        if isinstance(X, CSRMatrix):
            raise ValueError(
                "scaling='standard' centres features and so cannot keep them sparse; "
                "use scaling='scale' for sparse or hashed features"
            )
        out = np.empty_like(X)
        step = kernels.standard_learn_dense if learn else kernels.standard_transform_dense
        step(X, out, *standard_arrays(state), STANDARD_FLOOR)
        return out
    sums = (state["scaler_nonzero"], state["scaler_sum"], state["scaler_sum_sq"])
    if isinstance(X, CSRMatrix):
        out_data = np.empty_like(X.data)
        step = kernels.scale_learn_csr if learn else kernels.scale_transform_csr
        step(X.indptr, X.indices, X.data, out_data, *sums, SCALE_FLOOR)
        return CSRMatrix(X.indptr, X.indices, out_data, X.n_features)
    out = np.empty_like(X)
    step = kernels.scale_learn_dense if learn else kernels.scale_transform_dense
    step(X, out, *sums, SCALE_FLOOR)
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
    ``sqrt(m2 / n)``, a number's at least ``STANDARD_FLOOR`` times its non-zero values' spread
    about the mean (by 1 while it is 0), ``scale`` by ``_scale_of`` (the spread of the
    non-zero values, floored, 1 before any); ``tests/core/test_raw_weights.py`` checks
    that the two agree bit for bit.  Raises ValueError for a per-event scaling (``unit_norm``).
    """
    if scaling in NOT_FOLDABLE:
        raise ValueError(NOT_FOLDABLE[scaling])
    n_features = int(state["n_features"][0])
    if scaling == "none":
        return np.ones(n_features), np.zeros(n_features)
    if scaling == "standard":
        count = int(state["scaler_count"][0])
        if count == 0:
            return np.ones(n_features), state["scaler_mean"].copy()
        mean, m2, present = state["scaler_mean"], state["scaler_m2"], state["scaler_present"]
        std = np.sqrt(m2 / count)
        # the kernels' test, squared: the floor's share of the non-zero values' distance wins
        distances = m2 - (count - present) * mean * mean
        number = (state["scaler_magnitude"] < 0.0) & (present > 0)
        floored = number & (STANDARD_FLOOR * STANDARD_FLOOR * distances * count > m2 * present)
        spread = np.sqrt(np.divide(distances, present, out=np.zeros(n_features), where=floored))
        std = np.where(floored, STANDARD_FLOOR * spread, std)
        return np.where(std > 0.0, std, 1.0), mean.copy()
    nonzero = state["scaler_nonzero"]
    present = nonzero > 0
    mean = np.divide(state["scaler_sum"], nonzero, out=np.zeros(n_features), where=present)
    mean_square = np.divide(
        state["scaler_sum_sq"], nonzero, out=np.zeros(n_features), where=present
    )
    spread = np.sqrt(np.maximum(mean_square - mean * mean, 0.0))
    scale = np.maximum(spread, SCALE_FLOOR * np.sqrt(mean_square))
    return np.where(scale > 0.0, scale, 1.0), np.zeros(n_features)


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
    ...          "scaler_mean": np.array([3.0]), "scaler_m2": np.array([8.0]),
    ...          "scaler_present": np.array([2]), "scaler_magnitude": np.array([-1.0])}
    >>> fold_scaling("standard", state, np.array([2.0]), 1.0)
    (array([1.]), -2.0)
    """
    if scaling in NOT_FOLDABLE:
        return None
    divisors, offsets = scaler_affine(scaling, state)
    raw_coef = coef / divisors
    return raw_coef, float(intercept - np.dot(raw_coef, offsets))
