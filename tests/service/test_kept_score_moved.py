"""A kept score whose model moves between its scoring and the write of its record: the
record holds the score that was answered, once, whichever way the move came (a write of this
process, or of another process on the same store, whose head the cached model has not seen).

On SQLite the record of a cached model is written only at the head that scored
(``put_pending_at``); a head that moved refuses the write, which writes nothing, and the
request is scored again by the model as it is now (service/engine/coalesce.py,
``_score_kept``): scored twice, answered and kept once, with the second score.  Elsewhere the
record is written with the score given before the move, which is the one answered.

A reset (a new incarnation) between the score and the write refuses the write on every store
(``put_pending``'s ``incarnation``), and the request is scored again by the reset model: a
record is never kept for a model that did not give its score."""

from __future__ import annotations

import numpy as np
import pytest

from service import models
from service.codec import decode_pending
from service.ingest import Batch
from tests.service.conftest import STORES, create_model, events_json, make_stream

#: the stores and who moves the model (a memory store has no other process)
MOVES = [
    *((store, "this process") for store in STORES),
    *((store, "another process") for store in STORES if store != "memory"),
    *((store, "a reset") for store in STORES),
]


@pytest.mark.parametrize(("store_kind", "mover"), MOVES, indirect=["store_kind"])
def test_a_kept_score_is_kept_as_answered_when_its_model_moves(
    make_client, store_kind, monkeypatch, mover
):
    client = make_client()
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(60, seed=9)
    assert client.post("/v1/models/m/events", json=events_json(X[:20], y[:20])).status_code == 200
    other = make_client() if mover == "another process" else client
    engine, moving = client.app.state.engine, other.app.state.engine
    delayed = engine.delayed
    real_keep = delayed.keep
    writes: list[int] = []

    def keep_after_a_move(*args, **kwargs):
        if not writes:  # the model moves on once, after the score, before its record
            if mover == "a reset":
                models.reset_model(moving, "m")
            else:
                moving.learn("m", Batch(X[20:40], y[20:40], None))
        writes.append(1)
        return real_keep(*args, **kwargs)

    monkeypatch.setattr(delayed, "keep", keep_after_a_move)
    answer = client.post("/v1/models/m/score", json=events_json(X[40:41], ids=["k"]))
    assert answer.status_code == 200, answer.text
    monkeypatch.setattr(delayed, "keep", real_keep)
    body = answer.json()
    assert body["kept"] == 1
    # the answer names the version whose score it gives: the score of that version
    now = client.post("/v1/models/m/score?keep=false", json=events_json(X[40:41])).json()
    # a reset model keeps no score of the model it replaced: its write is refused and the
    # request scored again; so is SQLite's write at a head (``put_pending_at``) that moved
    again = mover == "a reset" or store_kind == "sqlite"
    if again:
        assert writes == [1, 1]
        assert (body["version"], body["scores"]) == (now["version"], now["scores"])
    else:  # kept with the score given before the move, the one answered
        assert writes == [1]
        assert body["version"] < now["version"]

    records = engine.store.get_pending("m", ["k"])
    features, recorded = decode_pending([records["k"][0]], 5, dense=True)
    assert recorded.tolist() == body["scores"]
    np.testing.assert_array_equal(features, X[40:41])

    before = client.get("/v1/models/m").json()["counts"]
    first = client.post("/v1/models/m/labels", json=[{"id": "k", "y": 1}]).json()
    second = client.post("/v1/models/m/labels", json=[{"id": "k", "y": 1}]).json()
    after = client.get("/v1/models/m").json()["counts"]
    assert [r["status"] for r in first["results"] + second["results"]] == ["learned", "duplicate"]
    assert after["labels_joined"] - before["labels_joined"] == 1
    assert after["events_learned"] - before["events_learned"] == 1
