"""The log tests' pieces (service.engine.entries): an engine that writes no checkpoint on its
own, its state arrays and the check that two are the same bit for bit, a stream of labels and
the boosted parameters whose fits are log entries; shared by test_log.py, test_log_fits.py,
test_replay_regret.py and test_group_commit_kill.py."""

from __future__ import annotations

import numpy as np

from core.validation import as_labels
from service.engine import Engine
from service.engine.entries import Entry
from tests.service.clock_helpers import TickingClock
from tests.service.conftest import make_stream as make_raw_stream


def labelled_stream(n_events: int, n_features: int, seed: int):
    """:func:`~tests.service.conftest.make_stream` with its labels in -1/+1."""
    X, y = make_raw_stream(n_events, n_features, seed)
    return X, as_labels(y)


def engine_without_checkpoints(store, clock: TickingClock) -> Engine:
    # no background checkpoint: the test decides when one is written
    return Engine(store, clock=clock, checkpoint_events=10**9, checkpoint_seconds=1e9)


def state_of(engine: Engine, model_id: str) -> dict[str, np.ndarray]:
    """The state arrays of ``model_id`` as ``engine`` holds it."""
    return engine.state_arrays(model_id)[2]


def assert_same_arrays(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """The same arrays under the same names, bit for bit."""
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


#: small trees fitted often: a few hundred events cross several install points
BOOSTED = {"first_fit": 40, "refit_every": 60, "buffer_size": 120, "n_trees": 4,
           "max_leaves": 4, "min_samples_leaf": 3, "fit_delay": 9}  # fmt: skip


def distinct_entry(k: int) -> Entry:
    """An entry told apart from every other by its label count and features."""
    return Entry(float(k), np.full((1 + k % 3, 2), float(k)), np.ones(1 + k % 3, dtype=np.int64))
