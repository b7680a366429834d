"""Failover without loss: with ``WAIT`` for a replica (on by default when there is one), a
write the replica does not have is never acknowledged, so promoting the replica after a
``kill -9`` of the primary loses no acknowledged event.  The loadtest's kill-during-load
measurement (loadtest/failover.py) runs here in small."""

from __future__ import annotations

import argparse
import contextlib
import time

import redis

from loadtest.failover import run
from loadtest.local import PrivateRedis
from tests.service.conftest import create_model, events_json, make_stream, started_apps


@contextlib.contextmanager
def primary_and_replica():
    primary, replica = PrivateRedis("aof"), PrivateRedis("aof")
    try:
        primary.start()
        replica.start()
        redis.Redis(port=replica.port).replicaof("127.0.0.1", primary.port)
        deadline = time.monotonic() + 120
        while redis.Redis(port=replica.port).info("replication")["master_link_status"] != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.05)
        yield primary, replica
    finally:
        primary.close()
        replica.close()


def batch(number: int) -> dict:
    X, y = make_stream(25, n_features=3, seed=number)
    return events_json(X, y, [f"b{number}-{i}" for i in range(25)])


def test_an_event_the_replica_lacks_is_never_acknowledged_so_promotion_loses_none():
    with primary_and_replica() as (primary, replica):
        acknowledged = 0
        with started_apps(redis_url=primary.url) as build:
            # A write waits a minute for the replica it must reach (300 ms was a clock a loaded
            # machine's replica could miss), and 300 ms for the one that cannot: a detached
            # replica never confirms, however long the wait
            app, impatient = build(redis_wait_timeout_ms=60_000), build(redis_wait_timeout_ms=300)
            create_model(app, "m", n_features=3)
            for number in range(3):
                assert app.post("/v1/models/m/events", json=batch(number)).status_code == 200
                acknowledged += 25
            # the replica is cut off from the primary (here it detaches, keeping what it has;
            # in production: a network partition, or a replica far behind)
            redis.Redis(port=replica.port).replicaof("NO", "ONE")
            for number in range(3, 6):
                response = impatient.post("/v1/models/m/events", json=batch(number))
                assert response.status_code == 503, response.text
                assert response.json()["type"].endswith("/replicas-unconfirmed")
        primary.kill()  # the primary dies with writes its replica never got
        with started_apps(redis_url=replica.url) as build:
            app = build()
            counts = app.get("/v1/models/m/metrics").json()["counts"]
            assert counts["events_learned"] == acknowledged
            # the unacknowledged batches are sent again and learned once
            for number in range(3, 6):
                assert app.post("/v1/models/m/events", json=batch(number)).status_code == 200
            counts = app.get("/v1/models/m/metrics").json()["counts"]
            assert counts["events_learned"] == acknowledged + 75


def test_masters_killed_during_load_lose_no_acknowledged_event():
    args = argparse.Namespace(
        failovers=2, steady=2.0, between=0.5, clients=2, batch=20, features=3, wait_timeout_ms=500
    )
    row = run("sync", "on", args)
    assert row.failovers == 2
    assert row.acked > 0 and row.steady_rate > 0
    assert row.lost == 0, row
    assert row.alarms == 0, row  # no false alarm of lost data after a clean failover
