"""The two views of a row in ``boosted_embedded`` (docs/algorithms/boosted_embedded.md, "Rows as
posted"): its trees are fitted on and route the rows as posted, so that a split point means the
same value whenever a row came, while its inner learner reads ``x`` scaled by the model's
online scaling, as every linear learner does.

When a fit falls due the scaling's affine map as of that event is kept in the state
(``fit_divisors``, ``fit_offsets``): the inner learner that the fit brings relearns the buffer
and the events held for it scaled by that map, so the state and the events after it determine
the relearning wherever it runs (a background fitter, a replay).
"""

from __future__ import annotations

import numpy as np

from core.csr import CSRMatrix
from core.errors import InvalidState
from core.learners._state import Finite, StateInvariant
from core.learners._stateful import scaler_invariants
from core.preprocessing import scale_batch, scaler_affine

__all__ = ["check", "initial", "invariants", "joined_rows", "keep", "of_job", "scaled"]

#: the scalings that are a fixed affine map of each feature (the others: ``none``, the
#: identity; ``unit_norm``, each row by its own norm)
_AFFINE = ("standard", "scale")


def initial(n_features: int) -> dict[str, np.ndarray]:
    """The identity map: ``(x - offsets) / divisors``."""
    return {"fit_divisors": np.ones(n_features), "fit_offsets": np.zeros(n_features)}


def invariants(scaling: str) -> dict[str, StateInvariant]:
    """The map's arrays and the learner's own scaler arrays (declared under its prefix when it
    is a candidate of ``auto``, which gives it auto's scaling)."""
    return {
        "fit_divisors": Finite(0.0),  # > 0: check
        "fit_offsets": Finite(),
        **scaler_invariants(scaling),
    }


def check(state: dict[str, np.ndarray]) -> None:
    if (state["fit_divisors"] <= 0.0).any():
        raise InvalidState(
            "state array 'fit_divisors' holds a divisor of 0 or less (a scaling divides by a "
            "positive spread)",
            field="fit_divisors",
        )


def keep(scaling: str, own: dict[str, np.ndarray], state: dict[str, np.ndarray]):
    """The scaling as of now (``state``'s statistics) becomes the pending fit's, in ``own``."""
    if scaling in _AFFINE:
        own["fit_divisors"][:], own["fit_offsets"][:] = scaler_affine(scaling, state)


def of_job(own: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies of the pending fit's map, for its job (:func:`scaled` reads them there)."""
    return {key: own[key].copy() for key in ("fit_divisors", "fit_offsets")}


def scaled(scaling: str, own: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Dense rows as posted (the buffer's, the held ones) scaled as of the pending fit's event
    (each row by its norm under ``unit_norm``): ``own`` is the learner's state or its job's
    ``x_scaling``."""
    if scaling == "unit_norm":
        return scale_batch(scaling, own, rows, learn=False)
    return (rows - own["fit_offsets"]) / own["fit_divisors"]


def joined_rows(parts: list, X) -> np.ndarray:
    """The scaled segments of a batch as one array of its rows (dense), as a recording of the
    rows learned wants them (one array per call); ``X`` itself when nothing was learned."""
    if not parts:
        return X
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p.toarray() if isinstance(p, CSRMatrix) else p for p in parts])
