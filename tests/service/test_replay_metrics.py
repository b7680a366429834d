"""A replay feeds the metrics of a run of entries at once (service/engine/replay.py,
``_after_run``): the window, drift detector, calibrator, counters, throughput, drift log and
history points of the rebuilt model equal, bit for bit, those of the process that learned the
entries one request at a time, and so do the metrics it answers."""

from __future__ import annotations

import numpy as np
import pytest

import service.engine.replay
from core.csr import CSRMatrix
from service.engine import Engine
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore
from service.stores.sqlite import SQLiteStore


class SteppedClock:
    """Seven seconds a call, so that a minute (a history point) falls every few entries."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.step = 7.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _engine(store, clock: SteppedClock) -> Engine:
    return Engine(store, clock=clock, checkpoint_events=10**9, checkpoint_seconds=1e9)


def _events(X, sparse: bool):
    return CSRMatrix.from_dense(X) if sparse else X


def _traffic(engine: Engine, clock: SteppedClock, sparse: bool) -> None:
    """One-class entries first, then one-event entries and batches whose labels turn over
    two thirds of the way (the drift detector fires inside runs of entries), ties, a
    duplicate, kept scores and their labels (entries of recorded scores: runs of their own)."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(680, 4))
    margin = X @ np.array([2.0, -1.0, 1.0, 0.5]) - 1.0
    # the ranking turns over: a drift.  At 450, not 200: turned over at 200, the default auto
    # took its boosted candidate into the mix at its first fit (~314 events,
    # docs/algorithms/auto.md (auto.14)) and ranked the new concept (AUC 0.98 over events
    # 344-450) before the detector fired
    margin[450:] = -margin[450:]
    y = np.where(margin > 0, 1, -1)
    y[:12] = -1  # the window and the calibrator see one class only at first
    X[300:310] = X[300]  # equal rows: tied scores
    for k in range(0, 180):
        engine.learn("m", Batch(_events(X[k : k + 1], sparse), y[k : k + 1], [f"e{k}"]))
    engine.learn("m", Batch(_events(X[179:181], sparse), y[179:181], ["e179", "e180"]))
    engine.learning.learn_group(
        "m",
        [Batch(_events(X[181:184], sparse), y[181:184], None)]
        + [Batch(_events(X[184:190], sparse), y[184:190], None)],
        [False, False],
    )
    kept = [f"s{k}" for k in range(6)]
    engine.score("m", Batch(_events(X[190:196], sparse), None, list[str | None](kept)))
    engine.labels("m", kept, y[190:196])
    for k in range(196, 580):
        engine.learn("m", Batch(_events(X[k : k + 1], sparse), y[k : k + 1], None))
    engine.learn("m", Batch(_events(X[580:600], sparse), y[580:600], None))
    later = [f"t{k}" for k in range(600, 660)]
    engine.score("m", Batch(_events(X[600:660], sparse), None, list[str | None](later)))
    for k in range(600, 660):  # labels one at a time: a run of entries of recorded scores
        engine.labels("m", [later[k - 600]], y[k : k + 1])
    for k in range(660, 680):
        engine.learn("m", Batch(_events(X[k : k + 1], sparse), y[k : k + 1], None))


#: what the answering process did and how long it took, not the model: a replay installs the
#: logged fits instead of fitting (core/logged_fits.py)
PROCESS_FIELDS = {"solve_seconds", "last_fit_seconds", "fits_in_call", "waits", "wait_seconds",
                  "fitter"}  # fmt: skip


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in PROCESS_FIELDS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    ("learner", "regret_window", "sparse"),
    [("solam", 0, False), ("solam", 40, False), ("auto", 40, False), ("spdam", 0, False),
     ("oam", 0, True), ("oam", 40, True)],
)  # fmt: skip
def test_a_replay_feeds_the_metrics_as_the_live_requests_did(
    tmp_path, monkeypatch, store_kind, learner, regret_window, sparse
):
    store = MemoryStore() if store_kind == "memory" else SQLiteStore.open(tmp_path / "data")
    clock = SteppedClock()
    live = _engine(store, clock)
    create_model(
        live,
        ModelCreate(
            id="m",
            n_features=4,
            learner=learner,
            regret_window=regret_window,
            feature_mode="sparse" if sparse else "dense",
        ),
    )
    _traffic(live, clock, sparse)
    clock.step = 0.0  # the metrics' throughput is read at one time for both
    expected = live.state_arrays("m")[2]
    expected_metrics = _without_timings(live.metrics("m"))
    expected_history = live.history("m", "minute", None)
    # what the comparison covers: drifts in runs of entries, points between them
    assert int(expected["stats:drifts_logged"][0]) >= 1
    assert int(expected["history:points"][0]) >= 20
    fed = []
    original = service.engine.replay.feed_metrics

    def counted(loaded, scores, signs, y, times, sizes):
        fed.append(len(sizes))
        return original(loaded, scores, signs, y, times, sizes)

    monkeypatch.setattr(service.engine.replay, "feed_metrics", counted)
    rebuilt = _engine(store, clock)
    actual = rebuilt.state_arrays("m")[2]
    assert max(fed) > 1  # several entries fed at once
    assert actual.keys() == expected.keys()
    for name in expected:
        assert actual[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    assert _without_timings(rebuilt.metrics("m")) == expected_metrics
    assert rebuilt.history("m", "minute", None) == expected_history
    store.close()
