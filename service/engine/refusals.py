"""The error path of a learner call refused as a whole: the event at fault, found by learning
the events one at a time from the stored model, and the 422 naming it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from core.csr import CSRMatrix
from core.errors import StateOverflow
from core.validation import row_range
from service.errors import InvalidInput
from service.ingest.fields import Locator

if TYPE_CHECKING:
    from service.engine.repository import ModelRepository


def first_overflowing_event(
    repository: ModelRepository, model_id: str, X: np.ndarray | CSRMatrix, y: np.ndarray
) -> int | None:
    """The first of the events ``(X, y)`` whose learning overflows the model's state
    (:class:`~core.errors.StateOverflow`), learned one at a time from the committed state:
    the error path of a batch refused as a whole, which names the event at fault."""
    loaded = repository.rebuilt(model_id)
    learner, means = loaded.learner, loaded.means
    for row in range(X.shape[0]):
        rows = row_range(X, row, row + 1)
        if means is not None:
            rows = means.fill_and_learn(rows)  # type: ignore[arg-type]
        try:
            learner.partial_fit(rows, y[row : row + 1])
        except StateOverflow:
            return row
    return None


def refusal(
    repository: ModelRepository,
    model_id: str,
    error: ValueError,
    X: np.ndarray | CSRMatrix,
    y: np.ndarray,
    locate: Locator,
    positions: np.ndarray | None = None,
) -> InvalidInput:
    """The 422 of a learner error on the events ``(X, y)``, naming the event at fault when
    there is one (found by :func:`first_overflowing_event` for an overflow of the whole
    batch); ``positions`` maps the rows of ``X`` to the request's events (None: the same)."""
    row = getattr(error, "row", None)
    if isinstance(error, StateOverflow) and row is None:
        row = first_overflowing_event(repository, model_id, X, y)
    if row is None:
        return InvalidInput(str(error))
    index = int(row if positions is None else positions[row])
    return locate.error(index, str(error))
