"""``missing_values: "mean"``: a dense model reads a missing value as the feature's mean over
the values present in the events learned before it (0 while there is none), as of the event's
own position, so that one batch and the same events one at a time learn the same state bit
for bit; scoring fills with the current mean and changes nothing; the means and the counts
behind them are committed with the model (every store, snapshots, the queue worker)."""

from __future__ import annotations

import httpx
import numpy as np
import orjson
import pytest

from core.validation import FEATURE_BOUND
from service.stream.protocol import encode_binary_rows
from tests.service.body_helpers import LINEAR, with_holes
from tests.service.conftest import (
    CLOCK_ARRAYS,
    ON_REDIS_AND_CLUSTER,
    create_model,
    events_json,
    make_stream,
    npz_bytes,
    put_snapshot,
    read_snapshot,
    write_snapshot,
)
from tests.service.queue_helpers import assert_same_state, drain, posts
from tests.service.server_helpers import exchange, stream_socket, uvicorn_server

#: arrays that hold wall-clock times (the rate counters): they differ between two models


def naive_fill(X_with_nan: np.ndarray, means=None, counts=None):
    """The reference, one event and one feature at a time in plain Python: each missing
    value is the running mean of the values present before it (0 when none is), each present
    value moving it by ``(value - mean) / count`` within the feature bound; returns the
    filled events and the final means and counts."""
    n_features = X_with_nan.shape[1]
    means = [0.0] * n_features if means is None else list(means)
    counts = [0] * n_features if counts is None else list(counts)
    filled = []
    for row in X_with_nan.tolist():
        out = []
        for column, value in enumerate(row):
            if value != value:  # NaN: missing
                out.append(means[column])
            else:
                out.append(value)
                counts[column] += 1
                mean = means[column] + (value - means[column]) / counts[column]
                means[column] = min(max(mean, -FEATURE_BOUND), FEATURE_BOUND)
        filled.append(out)
    return np.array(filled), np.array(means), np.array(counts, dtype=np.int64)


def _snapshot_arrays(client, model_id: str) -> dict[str, np.ndarray]:
    return read_snapshot(client.get(f"/v1/models/{model_id}/snapshot").content)[1]


def _scores(client, model_id: str, X) -> list[float]:
    response = client.post(f"/v1/models/{model_id}/score", json=events_json(X))
    assert response.status_code == 200, response.text
    return response.json()["scores"]


def _holes_as_nan(n_events: int, seed: int = 3):
    body, zeros, y, holes = with_holes(n_events, seed=seed)
    # the first feature is missing in the first events: its mean is 0 until one is seen
    for event in body["events"][:3]:
        event["x"][0] = None
    holes[:3, 0] = True
    return body, np.where(holes, np.nan, zeros), y


def test_mean_policy_learns_what_a_naive_per_event_fill_gives(client):
    body, with_nan, y = _holes_as_nan(120)
    filled, means, counts = naive_fill(with_nan)
    create_model(client, "mean", missing_values="mean", **LINEAR)
    create_model(client, "filled", **LINEAR)
    learned = client.post("/v1/models/mean/events", json=body)
    assert learned.status_code == 200 and learned.json()["learned"] == 120, learned.text
    client.post("/v1/models/filled/events", json=events_json(filled, y))
    probe = make_stream(20, seed=9)[0]
    assert _scores(client, "mean", probe) == _scores(client, "filled", probe)
    arrays = _snapshot_arrays(client, "mean")
    assert arrays["missing:means"].tobytes() == means.tobytes()
    assert arrays["missing:counts"].tobytes() == counts.tobytes()
    assert "missing:means" not in _snapshot_arrays(client, "filled")  # only under mean


def test_one_batch_equals_the_same_events_one_at_a_time_and_in_uneven_requests(client):
    body, with_nan, y = _holes_as_nan(90, seed=5)
    for model_id in ("batch", "single", "uneven", "npz"):
        create_model(client, model_id, missing_values="mean", **LINEAR)
    client.post("/v1/models/batch/events", json=body)
    for event in body["events"]:
        client.post("/v1/models/single/events", json={"events": [event]})
    for start, stop in ((0, 7), (7, 8), (8, 50), (50, 90)):
        lines = b"\n".join(orjson.dumps(e) for e in body["events"][start:stop])
        client.post("/v1/models/uneven/events", content=lines,
                    headers={"content-type": "application/x-ndjson"})  # fmt: skip
    npz = npz_bytes(X=with_nan, y=y, ids=np.array([f"e{i}" for i in range(90)]))
    sent = client.post("/v1/models/npz/events", content=npz,
                       headers={"content-type": "application/x-npz"})  # fmt: skip
    assert sent.status_code == 200, sent.text
    reference = _snapshot_arrays(client, "batch")
    for model_id in ("single", "uneven", "npz"):
        arrays = _snapshot_arrays(client, model_id)
        assert arrays.keys() == reference.keys()
        for name in reference.keys() - CLOCK_ARRAYS:
            assert arrays[name].tobytes() == reference[name].tobytes(), (model_id, name)


def test_scoring_fills_with_the_current_mean_and_changes_nothing(client):
    body, with_nan, y = _holes_as_nan(60)
    create_model(client, "mean", missing_values="mean", **LINEAR)
    client.post("/v1/models/mean/events", json=body)
    _, means, _ = naive_fill(with_nan)
    before = client.get("/v1/models/mean").json()["version"]
    snapshot = _snapshot_arrays(client, "mean")
    probe = make_stream(4, seed=11)[0]
    asked = [[None if column == row else value for column, value in enumerate(x)]
             for row, x in enumerate(probe.tolist())]  # fmt: skip
    scored = client.post("/v1/models/mean/score", json={"events": [{"x": x} for x in asked]})
    assert scored.status_code == 200, scored.text
    explicit = probe.copy()
    for row in range(4):
        explicit[row, row] = means[row]
    assert scored.json()["scores"] == _scores(client, "mean", explicit)
    assert client.get("/v1/models/mean").json()["version"] == before
    after = _snapshot_arrays(client, "mean")
    assert all(after[n].tobytes() == snapshot[n].tobytes() for n in snapshot.keys() - CLOCK_ARRAYS)


def test_the_means_round_trip_through_a_snapshot_and_corrupt_ones_are_refused(client):
    body, _, _ = _holes_as_nan(50)
    create_model(client, "mean", missing_values="mean", **LINEAR)
    client.post("/v1/models/mean/events", json=body)
    exported = client.get("/v1/models/mean/snapshot").content
    assert put_snapshot(client, "copy", exported, replace=False).status_code == 201
    manifest, arrays = read_snapshot(exported)
    copied = _snapshot_arrays(client, "copy")
    for name in ("missing:means", "missing:counts"):
        assert copied[name].tobytes() == arrays[name].tobytes()
    more, _, _ = _holes_as_nan(30, seed=8)
    for event in more["events"]:
        event["id"] = "more-" + event["id"]
    for model_id in ("mean", "copy"):
        client.post(f"/v1/models/{model_id}/events", json=more)
    probe = make_stream(10, seed=2)[0]
    assert _scores(client, "mean", probe) == _scores(client, "copy", probe)

    counts = arrays["missing:counts"]
    corrupt = {
        "missing:counts": counts + 10**6,  # more than the events learned
        "missing:means": np.full(5, np.nan),
    }
    beyond = np.where(np.arange(5) == 1, 2 * FEATURE_BOUND, arrays["missing:means"])
    no_count = np.where(np.arange(5) == 2, 0, counts)  # a mean of no value is 0
    cases = [*corrupt.items(), ("missing:means", beyond)]
    for name, value in cases:
        bad = write_snapshot(manifest, {**arrays, name: value})
        response = put_snapshot(client, "bad", bad, replace=False)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == name
    response = put_snapshot(client, "bad", write_snapshot(manifest, {**arrays,
                            "missing:counts": no_count}), replace=False)  # fmt: skip
    assert response.status_code == 422 and response.json()["field"] == "missing:means"
    assert client.get("/v1/models/bad").status_code == 404


def test_a_state_with_sums_for_means_is_refused_naming_it(client):
    """Sums (``missing:sums``, of a state format before 1: refused by its version first) could
    round past the feature bound times the count; a state holding them is refused, not read
    as fresh means."""
    body, with_nan, _ = _holes_as_nan(40)
    create_model(client, "mean", missing_values="mean", **LINEAR)
    client.post("/v1/models/mean/events", json=body)
    manifest, arrays = read_snapshot(client.get("/v1/models/mean/snapshot").content)
    _, means, counts = naive_fill(with_nan)
    earlier = {name: value for name, value in arrays.items() if name != "missing:means"}
    earlier["missing:sums"] = means * counts
    response = put_snapshot(client, "old", write_snapshot(manifest, earlier), replace=False)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == "missing:sums"
    assert "not part of a model's running means" in problem["detail"]
    without = {name: value for name, value in arrays.items() if name != "missing:means"}
    response = put_snapshot(client, "old", write_snapshot(manifest, without), replace=False)
    assert response.status_code == 422 and response.json()["field"] == "missing:means"
    assert client.get("/v1/models/old").status_code == 404


def test_a_mean_of_values_at_the_bound_stays_within_it_and_the_model_goes_on(client):
    """200 events whose first feature is the bound itself, then one where it is missing: a
    sum divided by the count rounded past the bound (the score and the learn were refused,
    then every load of the model failed); a running mean stays at the bound, the null is
    filled with it, and the model answers everything, its snapshot included, on every
    store."""
    create_model(client, "edge", n_features=2, missing_values="mean", **LINEAR)
    create_model(client, "given", n_features=2, **LINEAR)
    at_bound = [{"x": [FEATURE_BOUND, float(i % 3)], "y": i % 2} for i in range(200)]
    for model_id in ("edge", "given"):
        assert (
            client.post(f"/v1/models/{model_id}/events", json={"events": at_bound}).status_code
            == 200
        )
    scored = client.post("/v1/models/edge/score", json={"events": [{"x": [None, 1.0]}]})
    assert scored.status_code == 200, scored.text
    assert scored.json()["scores"] == _scores(client, "given", np.array([[FEATURE_BOUND, 1.0]]))
    learned = client.post("/v1/models/edge/events", json={"events": [{"x": [None, 1.0], "y": 1}]})
    assert learned.status_code == 200, learned.text
    for path in ("", "/metrics", "/snapshot"):
        assert client.get(f"/v1/models/edge{path}").status_code == 200, path
    arrays = _snapshot_arrays(client, "edge")
    assert arrays["missing:means"][0] == FEATURE_BOUND
    assert arrays["missing:counts"].tolist() == [200, 201]
    exported = client.get("/v1/models/edge/snapshot").content
    assert put_snapshot(client, "edge-copy", exported, replace=False).status_code == 201
    probe = make_stream(5, n_features=2, seed=1)[0]
    assert _scores(client, "edge-copy", probe) == _scores(client, "edge", probe)


def test_mean_on_a_sparse_model_leaves_the_feature_out_and_libsvm_is_refused(client):
    create_model(client, "sparse", n_features=4, feature_mode="sparse", missing_values="mean",
                 **LINEAR)  # fmt: skip
    create_model(client, "sparse-zeros", n_features=4, feature_mode="sparse", **LINEAR)
    events = [{"x": {"indices": [0, 2], "values": [1.5, None]}, "y": 1},
              {"x": {"indices": [1, 2], "values": [2.0, 3.0]}, "y": 0}]  # fmt: skip
    assert client.post("/v1/models/sparse/events", json={"events": events}).json()["learned"] == 2
    without = [{"x": {"indices": [0], "values": [1.5]}, "y": 1}, events[1]]
    client.post("/v1/models/sparse-zeros/events", json={"events": without})
    probe = {"events": [{"x": {"indices": [0, 1, 2, 3], "values": [1.0, 2.0, 3.0, 4.0]}}]}
    sparse_scores = client.post("/v1/models/sparse/score", json=probe).json()["scores"]
    assert (
        sparse_scores == client.post("/v1/models/sparse-zeros/score", json=probe).json()["scores"]
    )

    create_model(client, "dense", n_features=3, missing_values="mean", **LINEAR)
    refused = client.post("/v1/models/dense/events", content=b"1 1:0.5 2:nan 3:1\n",
                          headers={"content-type": "text/x-libsvm"})  # fmt: skip
    assert refused.status_code == 422
    assert "missing_values 'mean'" in refused.json()["detail"]
    assert client.get("/v1/models/dense").json()["counts"]["events_learned"] == 0


def test_a_delayed_label_learns_with_the_mean_as_of_its_learning(client):
    create_model(client, "mean", missing_values="mean", **LINEAR)
    create_model(client, "filled", **LINEAR)
    X, y = make_stream(40, seed=6)
    client.post("/v1/models/mean/events", json=events_json(X, y))
    client.post("/v1/models/filled/events", json=events_json(X, y))
    late = {"events": [{"id": "late", "x": [None, 1.0, 2.0, 3.0, 4.0]}]}
    scored = client.post("/v1/models/mean/score", json=late)
    assert scored.status_code == 200 and scored.json()["kept"] == 1, scored.text
    more = events_json(X[:10] + 1.0, y[:10], ids=[f"n{i}" for i in range(10)])
    client.post("/v1/models/mean/events", json=more)
    client.post("/v1/models/filled/events", json=more)
    label = client.post("/v1/models/mean/labels", json={"labels": [{"id": "late", "y": 1}]})
    assert label.status_code == 200, label.text
    # the mean of feature 0 over the 50 events learned before the label came
    mean_now = naive_fill(np.vstack([X, X[:10] + 1.0, [[np.nan, 0, 0, 0, 0]]]))[0][-1, 0]
    client.post("/v1/models/filled/events",
                json={"events": [{"x": [mean_now, 1.0, 2.0, 3.0, 4.0], "y": 1}]})  # fmt: skip
    probe = make_stream(5, seed=12)[0]
    assert _scores(client, "mean", probe) == _scores(client, "filled", probe)


@ON_REDIS_AND_CLUSTER
def test_queue_worker_merging_requests_learns_what_sync_mode_learns(make_app, make_worker,
                                                                    rclient):  # fmt: skip
    queued, sync = make_app("queue"), make_app("sync")
    create_model(queued, "q", missing_values="mean", **LINEAR)
    create_model(sync, "ref", missing_values="mean", **LINEAR)
    body, with_nan, y = _holes_as_nan(150, seed=7)
    nan_free = np.nan_to_num(with_nan)
    for start, request in zip(range(0, 150, 25), posts(nan_free, y, 25), strict=True):
        request["events"] = body["events"][start : start + 25]
        assert queued.post("/v1/models/q/events", json=request).status_code == 202
        assert sync.post("/v1/models/ref/events", json=request).status_code == 200
    drain(make_worker(), rclient, ["q"])
    assert queued.get("/v1/models/q").json()["counts"]["events_learned"] == 150
    assert_same_state(rclient, "q", "ref")


@pytest.fixture(scope="module")
def server():
    with uvicorn_server(AUCSTREAM_STORE="memory") as url:
        yield url


def test_stream_learn_and_score_messages_fill_with_the_mean(server):
    body, with_nan, y = _holes_as_nan(30)
    filled, _, _ = naive_fill(with_nan)
    with httpx.Client(base_url=server, timeout=60) as http:
        for model_id, policy in (("mean", "mean"), ("filled", "refuse")):
            model = {"id": model_id, "n_features": 5, "missing_values": policy, **LINEAR}
            assert http.post("/v1/models", json=model).status_code == 201
        http.post("/v1/models/filled/events", json=events_json(filled, y))
        with stream_socket(server, "mean") as ws:
            [reply] = exchange(
                ws, orjson.dumps({"seq": 1, "op": "learn", "events": body["events"]}).decode()
            )
            assert reply.get("learned") == 30, reply
            asked = {"seq": 2, "op": "score", "events": [{"x": [None, 1, 2, 3, 4]}]}
            [scored] = exchange(ws, orjson.dumps(asked).decode())
        _, means, _ = naive_fill(with_nan)
        with_the_mean = {"events": [{"x": [means[0], 1, 2, 3, 4]}]}
        explicit = http.post("/v1/models/mean/score", json=with_the_mean)
        assert scored["scores"] == explicit.json()["scores"], scored
        # binary frames carry NaN: one message per event, learned as one batch by the session
        create = {"id": "binary", "n_features": 5, "missing_values": "mean", **LINEAR}
        assert http.post("/v1/models", json=create).status_code == 201
        with stream_socket(server, "binary") as ws:
            replies = exchange(ws, encode_binary_rows("learn", 1, with_nan, y))
            assert sum(reply.get("learned", 0) for reply in replies) == 30, replies
        probe = events_json(make_stream(5, seed=4)[0])
        expected = http.post("/v1/models/filled/score", json=probe).json()["scores"]
        for model_id in ("mean", "binary"):
            scores = http.post(f"/v1/models/{model_id}/score", json=probe).json()["scores"]
            assert scores == expected, model_id


def test_an_absent_name_of_a_named_dense_model_is_filled_with_the_mean(client):
    names = ["amount", "n_items", "hour"]
    create_model(client, "named", n_features=3, feature_names=names, missing_values="mean",
                 **LINEAR)  # fmt: skip
    create_model(client, "filled", n_features=3, **LINEAR)
    events = [
        {"x": {"amount": 12.5, "n_items": 2, "hour": 3}, "y": 1},
        {"x": {"amount": 4.0, "n_items": None, "hour": 22}, "y": 0},
        {"x": {"amount": 7.0, "hour": 9}, "y": 1},  # n_items absent: missing
        {"x": {"n_items": 4, "hour": 1}, "y": 0},
    ]
    learned = client.post("/v1/models/named/events", json={"events": events})
    assert learned.status_code == 200 and learned.json()["learned"] == 4, learned.text
    filled = naive_fill(np.array([[12.5, 2, 3], [4.0, np.nan, 22], [7.0, np.nan, 9],
                                  [np.nan, 4, 1]]))[0]  # fmt: skip
    client.post("/v1/models/filled/events", json=events_json(np.array(filled), [1, 0, 1, 0]))
    probe = np.array([[1.0, 2.0, 3.0], [5.0, 0.5, 12.0]])
    assert _scores(client, "named", probe) == _scores(client, "filled", probe)
