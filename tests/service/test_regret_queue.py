"""Regret in queue mode: the worker (merging entries into one engine call) ends with the same
regret window and reports the same regret as sync mode."""

from __future__ import annotations

import numpy as np

from tests.service.conftest import create_model, events_json, make_stream
from tests.service.queue_helpers import assert_same_state, drain


def test_queue_mode_reports_the_regret_of_sync_mode(make_app, make_worker, rclient):
    queued, sync = make_app("queue"), make_app("sync")
    create_model(queued, "q", regret_window=120, learner="pmb")
    create_model(sync, "ref", regret_window=120, learner="pmb")
    X, y = make_stream(180, seed=11)
    sizes = (1, 9, 50, 3, 37, 20, 7, 13, 10, 30)
    for start, size in zip(np.cumsum((0, *sizes[:-1])), sizes, strict=True):
        body = events_json(X[start : start + size], y[start : start + size])
        assert queued.post("/v1/models/q/events", json=body).status_code == 202
        assert sync.post("/v1/models/ref/events", json=body).status_code == 200
    drain(make_worker(), rclient, ["q"])
    assert_same_state(rclient, "q", "ref")  # regret:* arrays included, byte for byte
    ours = queued.get("/v1/models/q/metrics").json()["regret"]
    theirs = sync.get("/v1/models/ref/metrics").json()["regret"]
    for section in (ours, theirs):
        section.pop("solve_seconds"), section.pop("version")  # the worker commits less often
    # trimmed at request boundaries: 30 + 10 + 13 + 7 + 20 + 37 + 3 = 120 (the 50 left)
    assert ours == theirs and (ours["rounds"], ours["n_events"]) == (7, 120)
