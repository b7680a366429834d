"""Request bodies the tests build by hand (libsvm text, JSON events with missing values) and
the model the missing-value tests send them to; shared by the content-type, learner and
missing-value tests."""

from __future__ import annotations

import numpy as np

from tests.service.conftest import events_json, make_stream


def libsvm_text(X, y, ids=None, zero_based=False) -> bytes:
    """``X``, ``y`` as libsvm lines (the nonzero features; ``# id`` comments if ``ids``)."""
    lines = []
    for row in range(len(X)):
        pairs = " ".join(
            f"{column + (0 if zero_based else 1)}:{float(X[row, column])!r}"
            for column in np.flatnonzero(X[row])
        )
        comment = f" # {ids[row]}" if ids is not None else ""
        lines.append(f"{'+1' if y[row] == 1 else '-1'} {pairs}{comment}")
    return ("\n".join(lines) + "\n").encode()


#: a linear learner on unscaled features: a missing value's 0 shows in its scores
LINEAR = {"learner": "spam", "scaling": "none", "regret_window": 0}


def with_holes(n_events: int, seed: int = 3):
    """A stream with about one value in six missing: the events as JSON (null where missing)
    and the same events with 0 there."""
    X, y = make_stream(n_events, seed=seed)
    holes = np.random.default_rng(seed).random(X.shape) < 1 / 6
    zeros = np.where(holes, 0.0, X)
    body = events_json(zeros, y, ids=[f"e{i}" for i in range(n_events)])
    for event, row in zip(body["events"], holes, strict=True):
        event["x"] = [None if hole else value for value, hole in zip(event["x"], row, strict=True)]
    return body, zeros, y, holes
