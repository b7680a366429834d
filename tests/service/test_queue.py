"""Queue mode in one process: the real app (TestClient, lifespan) on a private Redis, and a
:class:`~service.queue.worker.Worker` stepped by the test.  Processes and faults:
test_queue_faults."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis

from service.queue import streams
from service.queue.streams import LAST_ID
from service.settings import Settings
from service.stores import keys
from tests.service.bad_input_helpers import BAD_INPUT, BAD_INPUT_FEATURES
from tests.service.conftest import (
    ON_REDIS_AND_CLUSTER,
    create_model,
    events_json,
    make_stream,
    masters_of,
    npz_bytes,
)
from tests.service.queue_helpers import assert_same_state, drain, posts


def test_settings_queue_mode_needs_redis():
    with pytest.raises(ValueError, match="MODE=queue"):
        Settings(mode="queue")
    with pytest.raises(ValueError, match="QUEUE_MAX_BACKLOG_EVENTS"):
        Settings(redis_url="redis://x", queue_max_backlog_events=10, max_batch_events=100)
    with pytest.raises(ValueError, match="WORKER_LEASE_MS"):
        Settings(redis_url="redis://x", worker_lease_ms=1000, worker_block_ms=800)


def test_worker_command_needs_redis(monkeypatch, capsys):
    from service import cli

    monkeypatch.delenv("AUCSTREAM_REDIS_URL", raising=False)
    monkeypatch.delenv("AUCSTREAM_STORE", raising=False)
    assert cli.main(["worker"]) == 2
    assert "AUCSTREAM_REDIS_URL" in capsys.readouterr().err


@ON_REDIS_AND_CLUSTER
def test_202_with_stream_ids_and_the_worker_learns_as_sync_mode(make_app, make_worker, rclient):
    queued, sync = make_app("queue"), make_app("sync")
    create_model(queued, "q", params={"random_state": 3})
    create_model(sync, "ref", params={"random_state": 3})
    X, y = make_stream(400, seed=4)
    bodies = list(posts(X[:300], y[:300], 50))
    for body in bodies:
        response = queued.post("/v1/models/q/events", json=body)
        assert response.status_code == 202, response.text
        answer = response.json()
        assert answer["queued"] == 50 and len(answer["stream_ids"]) == 1
        assert rclient.xrange(keys.stream("q"), answer["stream_ids"][0], answer["stream_ids"][0])
        assert sync.post("/v1/models/ref/events", json=body).status_code == 200
    npz = npz_bytes(X=X[300:], y=y[300:])
    response = queued.post(
        "/v1/models/q/events", content=npz, headers={"content-type": "application/x-npz"}
    )
    assert response.status_code == 202 and response.json()["backlog_events"] == 400
    sync.post("/v1/models/ref/events", content=npz, headers={"content-type": "application/x-npz"})
    assert rclient.xlen(keys.stream("q")) == 7
    assert queued.get("/v1/models/q").json()["counts"]["events_learned"] == 0  # not yet

    drain(make_worker(), rclient, ["q"])
    counts = queued.get("/v1/models/q").json()["counts"]
    assert counts["events_learned"] == 400
    assert_same_state(rclient, "q", "ref")
    assert rclient.xlen(keys.stream("q")) == 0  # applied entries are trimmed
    assert rclient.hget(keys.meta("q"), LAST_ID).decode() == response.json()["stream_ids"][0]
    assert queued.get("/v1/models/q/metrics").json()["queue"]["events"] == 0


def test_large_batches_are_split_into_entries(make_app, make_worker, rclient):
    client = make_app(queue_entry_events=30)
    create_model(client, "m", feature_mode="hashed", n_features=64)
    events = [
        {
            "id": i,
            "x": {"amount": float(i), "country": "FR" if i % 2 else "DE"},
            "y": int(i % 7 == 0),
        }
        for i in range(100)
    ]
    response = client.post("/v1/models/m/events", json={"events": events})
    assert response.status_code == 202 and len(response.json()["stream_ids"]) == 4
    drain(make_worker(), rclient, ["m"])
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 100


@ON_REDIS_AND_CLUSTER
def test_backpressure_429_with_retry_after(make_app, make_worker, rclient):
    client = make_app(
        queue_max_backlog_events=100, max_batch_events=100, queue_retry_after_seconds=3
    )
    create_model(client, "m")
    X, y = make_stream(120)
    assert client.post("/v1/models/m/events", json=events_json(X[:60], y[:60])).status_code == 202
    full = client.post("/v1/models/m/events", json=events_json(X[60:], y[60:]))
    assert full.status_code == 429
    assert full.headers["retry-after"] == "3"
    assert full.headers["content-type"] == "application/problem+json"
    assert full.json()["title"] == "Queue full" and "60 events queued" in full.json()["detail"]
    assert rclient.xlen(keys.stream("m")) == 1  # nothing appended
    assert 'problem="queue-full"' in client.get("/metrics").text
    drain(make_worker(), rclient, ["m"])
    again = client.post("/v1/models/m/events", json=events_json(X[60:], y[60:]))
    assert again.status_code == 202


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_in_queue_mode_is_rejected_and_nothing_appended(make_app, rclient, case):
    """Every bad-input case of the sync tests gets the same status and fields in queue mode,
    and nothing reaches the stream."""
    client = make_app()
    create_model(client, "m", n_features=BAD_INPUT_FEATURES)
    request, status, fields = BAD_INPUT[case]
    response = client.post("/v1/models/m/events", **request)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    for key, value in fields.items():
        assert response.json().get(key) == value, (key, response.json())
    assert not rclient.exists(keys.stream("m"), keys.queue("m"))


def test_other_refusals_in_queue_mode_append_nothing(make_app, rclient):
    client = make_app()
    create_model(client, "m", n_features=3)
    good = {"x": [1.0, 2.0, 3.0], "y": 1}
    assert (
        client.post("/v1/models/m/events?scores=true", json={"events": [good]}).status_code == 422
    )
    assert client.post("/v1/models/nope/events", json={"events": [good]}).status_code == 404
    bad_labels = client.post("/v1/models/m/labels", json=[{"id": "a", "y": 1}, {"id": "b", "y": 3}])
    assert bad_labels.status_code == 422 and bad_labels.json()["event"] == 1
    assert client.post("/v1/models/m/labels", json=[{"y": 1}]).status_code == 422
    assert client.post("/v1/models/nope/labels", json=[{"id": "a", "y": 1}]).status_code == 404
    assert not rclient.exists(keys.stream("m"), keys.queue("m"), keys.stream("nope"))


@ON_REDIS_AND_CLUSTER
def test_labels_in_queue_mode_join_as_in_sync_mode(make_app, make_worker, rclient):
    queued, sync = make_app("queue"), make_app("sync")
    X, y = make_stream(120, seed=8)
    ids = [f"t{i}" for i in range(120)]
    for client, model in ((queued, "q"), (sync, "ref")):
        create_model(client, model)
        scored = client.post(f"/v1/models/{model}/score", json=events_json(X, ids=ids))
        assert scored.status_code == 200 and scored.json()["kept"] == 120
    labels = [{"id": ids[i], "y": int(y[i])} for i in range(120)]
    for chunk in (labels[:70], labels[70:], labels[:10]):  # the last one: duplicates
        response = queued.post("/v1/models/q/labels", json=chunk)
        assert response.status_code == 202 and response.json()["queued"] == len(chunk)
        assert sync.post("/v1/models/ref/labels", json=chunk).status_code == 200
    worker = make_worker()
    drain(worker, rclient, ["q"])
    counts = queued.get("/v1/models/q").json()["counts"]
    assert counts == sync.get("/v1/models/ref").json()["counts"]
    label_outcomes = worker.telemetry.render().decode()
    assert 'aucstream_labels_total{model="q",status="learned"} 120.0' in label_outcomes
    assert 'aucstream_labels_total{model="q",status="duplicate"} 10.0' in label_outcomes
    assert (
        'aucstream_labels_total{model="ref",status="duplicate"} 10.0' in sync.get("/metrics").text
    )
    assert counts["labels_joined"] == 120
    assert_same_state(rclient, "q", "ref")


@ON_REDIS_AND_CLUSTER
def test_lag_is_reported_in_metrics_and_prometheus(make_app, make_worker, rclient):
    client = make_app()
    create_model(client, "m")
    X, y = make_stream(90)
    for body in posts(X, y, 30):
        assert client.post("/v1/models/m/events", json=body).status_code == 202
    time.sleep(0.05)
    lag = client.get("/v1/models/m/metrics").json()["queue"]
    assert lag["entries"] == 3 and lag["events"] == 90
    assert 0.05 <= lag["seconds"] < 30 and lag["last_applied_id"] is None
    text = client.get("/metrics").text
    assert 'aucstream_queue_lag_events{model="m"} 90.0' in text
    assert 'aucstream_queue_lag_entries{model="m"} 3.0' in text
    assert 'aucstream_events_queued_total{model="m"} 90.0' in text
    worker = make_worker()
    drain(worker, rclient, ["m"])
    lag = client.get("/v1/models/m/metrics").json()["queue"]
    assert lag["entries"] == lag["events"] == 0 and lag["seconds"] == 0.0
    assert 'aucstream_queue_lag_events{model="m"} 0.0' in client.get("/metrics").text
    worker_metrics = worker.telemetry.render().decode()
    assert 'aucstream_events_learned_total{model="m"} 90.0' in worker_metrics
    assert 'aucstream_worker_entries_total{model="m",outcome="applied"} 3.0' in worker_metrics


@ON_REDIS_AND_CLUSTER
def test_retried_posts_with_the_same_ids_learn_once(make_app, make_worker, rclient):
    client = make_app()
    create_model(client, "m")
    X, y = make_stream(100)
    bodies = list(posts(X, y, 25))
    for body in bodies + bodies[1:3]:  # two requests retried after a "timeout"
        assert client.post("/v1/models/m/events", json=body).status_code == 202
    drain(make_worker(), rclient, ["m"])
    counts = client.get("/v1/models/m").json()["counts"]
    # each retry holds nothing but duplicates: as in sync mode it changes nothing, the
    # model's duplicate count included, though the worker read it with the other entries
    assert counts["events_learned"] == 100 and counts["duplicates"] == 0


@ON_REDIS_AND_CLUSTER
@pytest.mark.parametrize("stopped_in_recovery", [False, True], ids=["survivor", "sigterm"])
def test_crash_after_commit_before_ack_is_not_learned_twice(
    make_app, make_worker, rclient, stopped_in_recovery
):
    """The worker dies between its commit and XACK: the entries are redelivered (claimed by
    another worker) and skipped as at or before the checkpoint.  A SIGTERM that reaches the
    survivor once it has claimed them still has them applied and acknowledged before it
    exits: a graceful stop leaves nothing pending under its name."""
    queued, sync = make_app("queue"), make_app("sync")
    create_model(queued, "q")
    create_model(sync, "ref")
    X, y = make_stream(200, seed=5)
    for body in posts(X, y, 20, ids=False):  # no ids: only the checkpoint prevents doubles
        assert queued.post("/v1/models/q/events", json=body).status_code == 202
        sync.post("/v1/models/ref/events", json=body)
    # A minute's lease, lapsed by deleting its key below: the lease must outlast both steps on
    # a loaded machine (200 ms did not on CI: the lease lapsed between the two steps, so the
    # second step committed nothing and never reached XACK; 1.5 s is a clock too).
    first = make_worker("dies", worker_lease_ms=60_000, worker_block_ms=20)
    first.step()  # takes the lease, recovers (nothing pending), applies 4 entries
    assert int(rclient.hget(keys.meta("q"), "queue:entries")) == 4

    def crash(*args, **kwargs):
        raise SystemExit("killed between commit and XACK")

    first.queue.ack = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.step()
    assert int(rclient.hget(keys.meta("q"), "queue:entries")) == 8  # committed...
    assert rclient.xpending(keys.stream("q"), keys.WORKER_GROUP)["pending"] == 4  # ...not acked
    rclient.delete(keys.lease("q"))  # the dead worker's lease lapses (what its TTL does)
    # its entries are claimed once idle for the survivor's worker_claim_min_idle_ms (200 ms):
    # a sleep that only load can lengthen
    time.sleep(0.3)
    second = make_worker("survivor")
    if stopped_in_recovery:
        claim = second.queue.claim

        def claim_then_sigterm(*args, **kwargs):
            claim(*args, **kwargs)
            second.stop()  # what the SIGTERM handler calls

        second.queue.claim = claim_then_sigterm  # type: ignore[method-assign]
        second.run()
        assert rclient.xpending(keys.stream("q"), keys.WORKER_GROUP)["pending"] == 0
        second = make_worker("survivor")
    drain(second, rclient, ["q"])
    assert second.telemetry.entries.labels("q", "redelivered")._value.get() == (
        0 if stopped_in_recovery else 4
    )
    assert queued.get("/v1/models/q").json()["counts"]["events_learned"] == 200
    assert_same_state(rclient, "q", "ref")
    assert rclient.xpending(keys.stream("q"), keys.WORKER_GROUP)["pending"] == 0
    consumers = rclient.xinfo_consumers(keys.stream("q"), keys.WORKER_GROUP)
    assert [c["name"] for c in consumers] == [b"survivor"]  # the dead one is forgotten


def test_a_bad_entry_is_skipped_and_the_rest_learned(make_app, make_worker, rclient):
    client = make_app()
    create_model(client, "m")
    X, y = make_stream(60)
    client.post("/v1/models/m/events", json=events_json(X[:30], y[:30]))
    rclient.xadd(keys.stream("m"), {"kind": "events", "n": "2", "d": "5", "y": b"junk"})
    client.post("/v1/models/m/events", json=events_json(X[30:], y[30:]))
    worker = make_worker()
    drain(worker, rclient, ["m"])
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 60
    assert worker.telemetry.entries.labels("m", "rejected")._value.get() == 1


@ON_REDIS_AND_CLUSTER
def test_worker_follows_models_created_reset_and_deleted(make_app, make_worker, rclient):
    client = make_app()
    worker = make_worker()
    X, y = make_stream(40)
    create_model(client, "a")
    client.post("/v1/models/a/events", json=events_json(X, y))
    drain(worker, rclient, ["a"])
    assert worker.owned == {"a": True}
    create_model(client, "b")
    client.post("/v1/models/b/events", json=events_json(X, y))
    assert client.post("/v1/models/a/reset").status_code == 200
    client.post("/v1/models/a/events", json=events_json(X[:10], y[:10]))
    drain(worker, rclient, ["a", "b"])
    assert client.get("/v1/models/a").json()["counts"]["events_learned"] == 10
    assert client.get("/v1/models/b").json()["counts"]["events_learned"] == 40
    assert client.delete("/v1/models/b").status_code == 204
    for _ in range(5):
        worker.step()
    assert set(worker.owned) == {"a"}
    assert not rclient.exists(keys.stream("b"), keys.lease("b"), keys.queue("b"))


def test_json_logs_one_object_per_line(make_app, capsys):
    import logging

    import orjson

    client = make_app(log_format="json")
    create_model(client, "m")
    X, y = make_stream(10)
    response = client.post(
        "/v1/models/m/events", json=events_json(X, y), headers={"x-request-id": "req-42"}
    )
    assert response.headers["x-request-id"] == "req-42"
    lines = [orjson.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    request = next(line for line in lines if line.get("request_id") == "req-42")
    assert request["model"] == "m" and request["status"] == 202 and request["queued"] == 10
    assert request["route"] == "/v1/models/{model_id}/events" and request["duration_ms"] > 0
    logging.getLogger().handlers.clear()  # leave the other tests' logging alone


def test_queue_key_names():
    assert keys.stream("fraud-1") == "aucs:{fraud-1}:stream"
    assert keys.queue("fraud-1") == "aucs:{fraud-1}:queue"
    assert keys.lease("fraud-1") == "aucs:{fraud-1}:lease"
    assert keys.WORKER_GROUP == "aucstream-workers"
    assert keys.WORKERS == "aucs:workers"
    assert {keys.stream("m"), keys.queue("m"), keys.lease("m")} <= set(keys.all_model_keys("m"))


@ON_REDIS_AND_CLUSTER
def test_workers_share_the_models_and_take_over_from_a_stopped_one(
    make_app, make_worker, rclient, redis_kind
):
    client = make_app()
    if redis_kind == "redis_cluster":  # streams of every master read by one worker
        assert len(set(masters_of(rclient, "abcd").values())) == 3
    for model in "abcd":
        create_model(client, model)
    first = make_worker("first")
    first.step()
    assert len(first.owned) == 4  # alone: every model
    second = make_worker("second")
    for _ in range(6):
        second.step()
        first.step()
    assert len(first.owned) == len(second.owned) == 2  # one model handed over per discovery
    assert set(first.owned) | set(second.owned) == set("abcd")
    X, y = make_stream(20)
    for model in "abcd":
        client.post(f"/v1/models/{model}/events", json=events_json(X, y))
    first.release_all()  # a graceful stop gives the leases back at once
    drain(second, rclient, list("abcd"))
    assert set(second.owned) == set("abcd")
    for model in "abcd":
        assert client.get(f"/v1/models/{model}").json()["counts"]["events_learned"] == 20


class LostReplies:
    """The queue's scripts (the API's: its append) as Redis runs them, but whose first
    ``lost`` replies never reach the API (the connection drops after Redis ran it: a reset, a
    failover, a timeout)."""

    def __init__(self, lost: int) -> None:
        self.run, self.lost, self.runs = streams.run_script, lost, 0

    def __call__(self, *args, **kwargs):
        reply = self.run(*args, **kwargs)
        self.runs += 1
        if self.lost:
            self.lost -= 1
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return reply


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
def test_an_append_whose_reply_was_lost_is_acknowledged_once_not_refused(
    make_app, make_worker, rclient, ids, monkeypatch
):
    client = make_app()
    create_model(client, "m")
    lost = LostReplies(lost=2)
    monkeypatch.setattr(streams, "run_script", lost)
    X, y = make_stream(50)
    (body,) = posts(X, y, 50, ids=ids)
    response = client.post("/v1/models/m/events", json=body)
    # the batch went in at the first attempt: the answer says so, and it is queued once
    assert response.status_code == 202, response.text
    assert lost.runs == 3
    monkeypatch.undo()  # the worker's scripts answer
    (stream_id,) = response.json()["stream_ids"]
    assert [entry_id.decode() for entry_id, _ in rclient.xrange(keys.stream("m"))] == [stream_id]
    assert response.json()["backlog_events"] == 50
    drain(make_worker(), rclient, ["m"])
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 50


def test_an_append_is_not_refused_for_a_read_after_it(make_app, rclient, monkeypatch):
    """The backlog in the answer comes with the append, not from a second round trip that
    could fail after the batch went in."""
    client = make_app()
    create_model(client, "m")
    queue = client.app.state.queue

    def no_answer(model_id):
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(queue, "lag", no_answer)
    X, y = make_stream(20)
    response = client.post("/v1/models/m/events", json=next(posts(X, y, 20)))
    assert response.status_code == 202, response.text
    assert response.json()["backlog_events"] == 20
    assert rclient.xlen(keys.stream("m")) == 1


def test_an_append_redis_never_answers_is_a_503_that_says_it_may_be_queued(
    make_app, rclient, monkeypatch
):
    client = make_app()
    create_model(client, "m")
    monkeypatch.setattr(streams, "run_script", LostReplies(lost=3))
    X, y = make_stream(20)
    response = client.post("/v1/models/m/events", json=next(posts(X, y, 20)))
    assert response.status_code == 503, response.text
    assert "whether it was queued is unknown" in response.json()["detail"]
    assert rclient.xlen(keys.stream("m")) == 1  # the first attempt's, once


def test_append_reply_key_name():
    assert keys.append_reply("fraud-1", "ab12") == "aucs:{fraud-1}:append:ab12"


def test_the_worker_bounds_its_model_series_as_the_setting_says(make_app, make_worker, rclient):
    """AUCSTREAM_PROMETHEUS_MODEL_SERIES reaches the worker's metrics (it had 100 series)."""
    client = make_app()
    for model in ("a", "b"):
        create_model(client, model)
        X, y = make_stream(30, seed=len(model))
        assert client.post(f"/v1/models/{model}/events", json=events_json(X, y)).status_code == 202
    worker = make_worker(prometheus_model_series=1)
    drain(worker, rclient, ["a", "b"])
    assert worker.telemetry.model_series == 1
    text = worker.telemetry.render().decode()
    with_series = re.findall(r'^aucstream_model_has_series\{model="(\w+)"\} 1\.0$', text, re.M)
    assert len(with_series) == 1, text
    learned = re.findall(r'^aucstream_events_learned_total\{model="(\w*)"\} (\S+)$', text, re.M)
    assert {model for model, _ in learned} <= {"", *with_series}, learned


def test_the_worker_logs_under_one_logger_name():
    """The worker and the applier log as one ``aucstream.worker``, its name written once."""
    from service.queue import apply, worker

    assert worker.logger is apply.logger and apply.logger.name == "aucstream.worker"
    sources = [Path(module.__file__).read_text() for module in (apply, worker)]
    assert sum(source.count('getLogger("aucstream.worker")') for source in sources) == 1
