"""One rule for requests applied as a group (service.groups), in each of its three paths: the
coalescer, the stream and the queue worker.  A request the engine refuses inside a merged
group fails alone and its neighbours are learned; a server error is every request's answer and
no event reaches the learner twice."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

import service.engine.learning
from core.csr import CSRMatrix
from service.engine import Engine
from service.errors import (
    Contention,
    InsufficientStorage,
    InvalidInput,
    ModelChanged,
    ModelNotFound,
    QueueFull,
    StoreUnavailable,
)
from service.groups import each_alone, refused_alone
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.memory import MemoryStore
from tests.service.conftest import started_apps

N_FEATURES = 4
#: the first feature of the event the injected learner refuses
MARK = 999.0
N_REQUESTS = 6
BAD = 2


def rows() -> np.ndarray:
    X = np.random.default_rng(3).normal(size=(N_REQUESTS, N_FEATURES))
    X[BAD, 0] = MARK
    return X


@pytest.fixture
def learner_calls(monkeypatch):
    """The engine's learning step, made to refuse the marked event (a client error) or, with
    ``calls.down = True``, to fail as the store would (a server error); ``calls`` lists the
    events each call was given."""
    original = service.engine.learning.learn_rows

    class Calls(list):
        down = False

    calls = Calls()

    def injected(loaded, X, y, *args):
        calls.append(X.shape[0])
        if calls.down:
            raise StoreUnavailable("the store went away")
        values = X.data if isinstance(X, CSRMatrix) else X[:, 0]
        if (values == MARK).any():
            raise ValueError("this event is refused")
        return original(loaded, X, y, *args)

    monkeypatch.setattr(service.engine.learning, "learn_rows", injected)
    return calls


def coalescer_path(request) -> tuple[list[int], int]:
    engine = Engine(MemoryStore(), clock=lambda: 1_000_000.0)
    create_model(engine, ModelCreate(id="m", n_features=N_FEATURES))
    X = rows()
    batches = [Batch(X[k : k + 1], np.array([1 - 2 * (k % 2)]), [f"e{k}"]) for k in range(len(X))]

    async def run():
        return await asyncio.gather(
            *(engine.coalesce.learn("m", b) for b in batches), return_exceptions=True
        )

    results = asyncio.run(run())
    assert engine.coalesce.groups < engine.coalesce.requests  # requests were merged
    statuses = [getattr(r, "status", 200) for r in results]
    return statuses, engine.info("m").counts.events_learned


def stream_path(request) -> tuple[list[int], int]:
    X = rows()
    messages = [
        {"seq": k, "op": "learn", "x": X[k].tolist(), "y": 1 - 2 * (k % 2), "id": f"e{k}"}
        for k in range(len(X))
    ]
    with started_apps(store="memory") as build:
        client: TestClient = build()
        create = {"id": "m", "n_features": N_FEATURES}
        assert client.post("/v1/models", json=create).status_code == 201
        with client.websocket_connect("/v1/models/m/stream") as socket:
            socket.send_text(orjson.dumps(messages).decode())  # one frame: one run
            replies = orjson.loads(socket.receive_text())
        learned = client.get("/v1/models/m").json()["counts"]["events_learned"]
    return [reply["status"] for reply in replies], learned


def queue_path(request) -> tuple[list[int], int]:
    """The worker's answer to each entry: 200 learned, the problem's status when rejected
    (its log), the server error's when the read stopped."""
    from service.stores import keys

    client = request.getfixturevalue("make_app")()
    worker = request.getfixturevalue("make_worker")(worker_batch_entries=16)
    rclient = request.getfixturevalue("rclient")
    assert client.post("/v1/models", json={"id": "m", "n_features": N_FEATURES}).status_code
    X = rows()
    for k in range(len(X)):
        event = {"x": X[k].tolist(), "y": 1 - 2 * (k % 2), "id": f"e{k}"}
        assert client.post("/v1/models/m/events", json={"events": [event]}).status_code == 202
    rejected: list[str] = []
    worker.applier._reject = lambda model, entry, fields, error, reject=worker.applier._reject: (
        rejected.append((entry.id, error.status)) or reject(model, entry, fields, error)
    )
    ids = [entry_id.decode() for entry_id, _ in rclient.xrange(keys.stream("m"))]
    deadline = time.monotonic() + 120
    stopped = None
    while worker.queue.lag("m")["entries"] and stopped is None:
        assert time.monotonic() < deadline
        try:
            worker.step()
        except StoreUnavailable as error:
            stopped = error
    if stopped is not None:
        assert worker.queue.lag("m")["entries"] == len(X)  # nothing acknowledged, nor skipped
        return [stopped.status] * len(X), 0
    statuses = dict(rejected)
    learned = client.get("/v1/models/m").json()["counts"]["events_learned"]
    return [statuses.get(entry_id, 200) for entry_id in ids], learned


PATHS = {"coalescer": coalescer_path, "stream": stream_path, "queue": queue_path}


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_request_in_a_merged_group_fails_alone(path, learner_calls, request):
    statuses, learned = PATHS[path](request)
    assert statuses == [422 if k == BAD else 200 for k in range(N_REQUESTS)]
    assert learned == N_REQUESTS - 1
    assert max(learner_calls) > 1  # a merged call was refused, then each request alone


@pytest.mark.parametrize("path", PATHS)
def test_a_server_error_is_every_request_answer_and_never_reapplied(path, learner_calls, request):
    learner_calls.down = True
    statuses, learned = PATHS[path](request)
    assert statuses == [503] * N_REQUESTS and learned == 0
    assert sum(learner_calls) == N_REQUESTS  # each event given to the learner once


# ---------------------------------------------------------------------------- the rule alone
@pytest.mark.parametrize(
    ("error", "alone"),
    [
        (InvalidInput("bad event"), True),
        (ModelChanged("another layout"), True),
        (QueueFull("full"), True),
        (ValueError("core refused it"), True),
        (ModelNotFound("gone"), False),  # the group's: every request's answer
        (StoreUnavailable("down"), False),
        (InsufficientStorage("disk full"), False),  # a queue entry was once skipped for it
        (Contention("busy"), False),
        (RuntimeError("a bug"), False),
        (KeyError("field"), False),
    ],
)
def test_what_a_client_error_is(error, alone):
    assert refused_alone(error) is alone


def rule_calls(payloads, fault):
    """(outcomes, what was applied) of each_alone over ``payloads``; ``fault(p)`` is the
    error a payload raises, or None."""
    applied: list[int] = []

    def merged(group):
        errors = [fault(p) for p in group if fault(p) is not None]
        if errors:
            raise errors[0]
        applied.extend(group)
        return [p * 10 for p in group]

    return each_alone(merged, lambda p: merged([p])[0], payloads), applied


def test_one_by_one_stops_at_a_server_error_and_keeps_order():
    down = StoreUnavailable("down")
    faults = {2: InvalidInput("bad"), 4: down}
    outcomes, applied = rule_calls([0, 1, 2, 3, 4, 5, 6], faults.get)
    assert outcomes[:2] == [0, 10] and isinstance(outcomes[2], InvalidInput)
    assert outcomes[3] == 30 and outcomes[4:] == [down] * 3
    assert applied == [0, 1, 3]  # nothing after the server error


def test_a_group_of_one_is_applied_alone_and_a_good_group_whole():
    assert rule_calls([7], lambda p: None) == ([70], [7])
    assert rule_calls([1, 2, 3], lambda p: None) == ([10, 20, 30], [1, 2, 3])
