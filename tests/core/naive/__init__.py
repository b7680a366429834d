"""Deliberately naive references (plain NumPy and Python loops) that the kernels are tested
against, one module per family: ``learners`` (spam, solam), ``baselines`` (oam, opauc),
``pauc`` (pAUC / Prec@k surrogates, pmb, ftrl_pauc, svm_pauc), ``metrics`` (AUC, pAUC, ROC).
Shared helpers for reading a batch event by event live here."""

from __future__ import annotations

import numpy as np


def event_rows(X) -> list[np.ndarray]:
    """Dense float64 rows of a dense array or a scipy / CSRMatrix batch."""
    if hasattr(X, "toarray"):
        X = X.toarray()
    return [np.asarray(row, dtype=np.float64) for row in np.asarray(X, dtype=np.float64)]


def event_labels(y) -> list[int]:
    """Labels in any accepted convention as a list of -1 / +1."""
    return [1 if (v is True or v == 1) else -1 for v in np.asarray(y).tolist()]
