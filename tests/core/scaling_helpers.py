"""The stream of the standard scaler's floor tests (rare counts and flags, a one-hot pair, a
number never 0), shared by tests/core/test_standard_floor.py and
tests/service/test_standard_floor_http.py."""

from __future__ import annotations

import numpy as np

N_EVENTS = 3000


def mixed(n: int = N_EVENTS, seed: int = 0) -> np.ndarray:
    """A rare count (1-3 in ~0.3 % of the events), a rare 0/1 flag, a one-hot pair, a number
    that is never 0 and one that is mostly 0 but common."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, 6))
    rare = rng.random(n) < 0.003
    X[rare, 0] = rng.integers(1, 4, size=rare.sum())
    X[rng.random(n) < 0.005, 1] = 1.0
    first = rng.random(n) < 0.3
    X[first, 2], X[~first, 3] = 1.0, 1.0
    X[:, 4] = rng.normal(5.0, 2.0, size=n)
    common = rng.random(n) < 0.4
    X[common, 5] = rng.normal(size=common.sum())
    return X
