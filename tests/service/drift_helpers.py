"""The drifting stream of the drift tests (a logistic model whose weights flip sign) and the
small steps around it, shared by test_drift.py, test_stream.py, test_probabilities.py and the
dashboard's browser tests."""

from __future__ import annotations

import numpy as np

from tests.service.conftest import events_json

DRIFT_FEATURES = 6

#: the event at which :func:`flipping_stream` flips by default
CHANGE = 3000


def flipping_stream(n=6000, seed=0, changes=(CHANGE,)):
    """20 % positives from a logistic model whose weights flip sign on half the features at
    each of ``changes`` (event indices: flipped after an odd number of them)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, DRIFT_FEATURES))
    weights = np.array([1.5, -1.0, 1.0, 0.5, -1.5, 1.0])
    flipped = weights * np.array([-1, 1, -1, 1, -1, 1])
    odd = np.searchsorted(np.asarray(changes), np.arange(n), side="right") % 2 == 1
    logits = np.where(odd, X @ flipped, X @ weights) - 1.8
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return X, y


def post_stream(client, X, y, batch):
    for start in range(0, len(y), batch):
        body = events_json(X[start : start + batch], y[start : start + batch])
        response = client.post("/v1/models/m/events", json=body)
        assert response.status_code == 200, response.text


def prometheus_value(text, name, model):
    """The value of the Prometheus sample ``name`` of ``model`` in ``text`` (None if absent)."""
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None
