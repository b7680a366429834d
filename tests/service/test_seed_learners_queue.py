"""``poise`` and ``spdam`` in queue mode: the worker learns what a sync-mode model learns.

``poise`` is an online learner, so the queued model's state equals the sync one's bit for bit
whatever the worker's batching; ``spdam`` learns each batch on its window, so its weights depend
on the batching: the worker's model must have learned every event, keep a full window and rank
held-out events as well as the sync model does."""

from __future__ import annotations

import numpy as np

from core.metrics import auc
from tests.service.conftest import create_model, events_json, make_stream
from tests.service.queue_helpers import assert_same_state, drain


def _post_all(client, model, X, y, status):
    for start in range(0, len(y), 50):
        body = events_json(X[start : start + 50], y[start : start + 50])
        response = client.post(f"/v1/models/{model}/events", json=body)
        assert response.status_code == status, response.text


def test_poise_in_queue_mode_learns_as_sync_mode(make_app, make_worker, rclient):
    queued, sync = make_app("queue"), make_app("sync")
    for client, model in ((queued, "q"), (sync, "ref")):
        create_model(client, model, learner="poise", pauc_range=[0.0, 0.2],
                     params={"random_state": 3})  # fmt: skip
    X, y = make_stream(300, seed=4)
    _post_all(queued, "q", X, y, 202)
    _post_all(sync, "ref", X, y, 200)
    drain(make_worker(), rclient, ["q"])
    assert queued.get("/v1/models/q").json()["counts"]["events_learned"] == 300
    assert_same_state(rclient, "q", "ref")


def test_spdam_in_queue_mode_learns_every_event(make_app, make_worker, rclient):
    queued, sync = make_app("queue"), make_app("sync")
    for client, model in ((queued, "q"), (sync, "ref")):
        create_model(client, model, learner="spdam", params={"window": 200})
    X, y = make_stream(400, seed=5)
    _post_all(queued, "q", X[:300], y[:300], 202)
    _post_all(sync, "ref", X[:300], y[:300], 200)
    drain(make_worker(), rclient, ["q"])
    assert queued.get("/v1/models/q").json()["counts"]["events_learned"] == 300
    held_out = events_json(X[300:])
    aucs = {}
    for client, model in ((queued, "q"), (sync, "ref")):
        scores = client.post(f"/v1/models/{model}/score", json=held_out).json()["scores"]
        aucs[model] = auc(y[300:], np.array(scores))
    # the best direction (the shift) (x0 + x1) ranks these 100 held-out events at 0.874
    assert aucs["ref"] > 0.85 and abs(aucs["q"] - aucs["ref"]) < 0.01, aucs
