"""Several label requests joined as one (issue 38): one function,
:func:`service.ingest.joined_labels`, for the ``/labels`` requests of a coalesced group, a
stream's run of label messages and a worker's run of label entries."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import service.engine.delayed
import service.ingest
import service.queue.apply
import service.stream.session
from service.ingest import joined_labels, label_items
from tests.service.conftest import create_model, events_json, make_stream, started_apps


def digest(ids: list[str], labels: np.ndarray) -> str:
    return hashlib.sha256(
        "\n".join(ids).encode() + labels.dtype.str.encode() + labels.tobytes()
    ).hexdigest()


@pytest.mark.parametrize("negative", [0, -1], ids=["zero-one", "plus-minus-one"])
def test_joined_requests_equal_one_request_of_all_their_labels(negative):
    """Requests read apart and joined give what one request of all their items gives, with
    labels sent as {0, 1} or as {-1, +1}."""
    values = [1, negative, negative, 1, 1, negative, 1]
    items = [{"id": f"e{k}", "y": value} for k, value in enumerate(values)]
    parts = [label_items(items[:2], 100), label_items(items[2:3], 100), label_items(items[3:], 100)]
    ids, labels = joined_labels(parts)
    assert ids == [f"e{k}" for k in range(len(values))]
    assert labels.tolist() == [1, -1, -1, 1, 1, -1, 1]
    assert digest(ids, labels) == digest(*label_items(items, 100))


def test_each_path_joins_with_the_one_function():
    """The stream and the worker call the function of service.ingest, not a copy of it."""
    assert service.stream.session.joined_labels is service.ingest.joined_labels
    assert service.queue.apply.joined_labels is service.ingest.joined_labels


def test_a_group_of_label_requests_is_joined_by_it(monkeypatch):
    """``labels_group`` (the coalescer's group of ``/labels`` requests; here one sent as
    {0, 1}, one as {-1, +1}) joins through it: each request's statuses as if posted one after
    the other."""
    calls = []

    def spy(parts):
        calls.append(len(parts))
        return joined_labels(parts)

    monkeypatch.setattr(service.engine.delayed, "joined_labels", spy)
    X, y = make_stream(6, seed=3)
    ids = [f"s{k}" for k in range(6)]
    with started_apps(store="memory") as build:
        client = build()
        create_model(client)
        assert client.post("/v1/models/m/score", json=events_json(X, ids=ids)).status_code == 200
        requests = [
            label_items([{"id": i, "y": int(v)} for i, v in zip(ids[:4], y[:4], strict=True)], 10)
        ]
        requests.append(label_items([{"id": ids[3], "y": 1}, {"id": ids[5], "y": -1}], 10))
        results = client.app.state.engine.delayed.labels_group("m", requests)
    assert calls == [2]
    assert [result.statuses for result in results] == [
        [(i, "learned") for i in ids[:4]],
        [(ids[3], "duplicate"), (ids[5], "learned")],
    ]
    assert [result.learned for result in results] == [4, 1]
