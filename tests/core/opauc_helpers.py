"""The stream, the comparison and the plain reference (``tests.core.naive.baselines``) shared
by the opauc tests (test_opauc.py, test_opauc_sketch.py)."""

from __future__ import annotations

import numpy as np

from core.learners.opauc import DEFAULT_ADAPTIVE_ETA, DEFAULT_ETA_SCALE
from tests.core.naive.baselines import NaiveOPAUC

N_FEATURES = 6


def stream(seed, n=300, positive_rate=0.3, n_features=N_FEATURES, density=1.0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + 0.8 * y[:, None] * np.linspace(1, -1, n_features)
    X += 0.5  # non-zero means, so the centring terms matter
    if density < 1.0:
        X[rng.random(X.shape) >= density] = 0.0
    return X, y


def assert_close(actual, expected, rtol=1e-12):
    """Relative agreement, entries near zero judged against the array's scale."""
    scale = max(np.abs(expected).max(), 1e-300)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def reference_for(params, n_features):
    adaptive = params.get("adaptive", False)
    eta = params.get("eta")
    auto = eta is None and not adaptive
    if eta is None:
        eta = DEFAULT_ADAPTIVE_ETA if adaptive else DEFAULT_ETA_SCALE
    return NaiveOPAUC(
        n_features,
        lam=params.get("lam", 1e-4),
        eta=eta,
        auto_eta=auto,
        adaptive=adaptive,
        delta=params.get("delta", 1e-8),
        rank=params.get("rank"),
        half_life=params.get("half_life"),
    )
