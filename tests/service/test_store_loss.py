"""A Redis that forgets is noticed: killed and restarted empty, or from an older dump, while
the service knew a later state, every affected request is a 503 naming the cause, ``/readyz``
fails and the Prometheus gauge says so, until an operator acknowledges it.  A Redis keeping
nothing is refused at start unless volatile is allowed; a Redis Cluster URL may name several
seeds; writes wait for replicas when there are some."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import redis

from loadtest.local import PrivateRedis
from service import cli
from service.app import create_app
from service.settings import Settings
from service.stores.epoch import CHECK_SECONDS
from service.stores.redis_setup import VolatileRedis
from tests.service.conftest import create_model, events_json, make_stream, started_apps

LOST = "https://aucstream.dev/problems/store-lost-data"


@contextlib.contextmanager
def private(persistence: str, *extra: str):
    server = PrivateRedis(persistence, *extra)
    try:
        server.start()
        yield server
    finally:
        server.close()


def post_batches(client, model_id: str, batches: int, start: int = 0) -> int:
    """``batches`` batches of 20 events with ids; the model's version after them."""
    version = 0
    for batch in range(start, start + batches):
        X, y = make_stream(20, n_features=3, seed=batch)
        ids = [f"e{batch}-{i}" for i in range(20)]
        response = client.post(f"/v1/models/{model_id}/events", json=events_json(X, y, ids))
        assert response.status_code == 200, response.text
        version = client.get(f"/v1/models/{model_id}").json()["version"]
    return version


@pytest.fixture
def serve_env(monkeypatch):
    """``aucstream serve`` and ``store`` write their options into AUCSTREAM_* variables:
    restored after."""
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_WORKERS",
                 "AUCSTREAM_ALLOW_VOLATILE_REDIS", "AUCSTREAM_DATA_DIR"):  # fmt: skip
        monkeypatch.setenv(name, "")  # recorded, so that the value before comes back
        monkeypatch.delenv(name)


def assert_lost(response, *words: str) -> None:
    assert response.status_code == 503, response.text
    problem = response.json()
    assert problem["type"] == LOST
    for word in words:
        assert word in problem["detail"], problem["detail"]
    assert "acknowledge-loss" in problem["detail"]


def gauge(client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("aucstream_store_data_lost "):
            return float(line.split()[1])
    raise AssertionError("no aucstream_store_data_lost in /metrics")


def test_redis_restarted_empty_is_a_503_everywhere_until_acknowledged(caplog):
    with (
        private("none") as server,
        started_apps(redis_url=server.url, allow_volatile_redis=True) as build,
    ):
        app, other = build(), build()
        create_model(app, "m", n_features=3)
        create_model(app, "n", n_features=3)
        post_batches(app, "m", 3)
        assert other.get("/v1/models/m").status_code == 200  # the other process knew it too
        assert app.get("/readyz").status_code == 200
        assert gauge(app) == 0

        server.kill()
        server.start()  # nothing on disk: empty

        X, y = make_stream(5, n_features=3, seed=99)
        body = events_json(X, y, [f"x{i}" for i in range(5)])
        for client in (app, other):
            assert_lost(client.get("/v1/models"), "lost everything")
            assert_lost(client.get("/v1/models/m"), "lost everything")
            assert_lost(client.get("/v1/models/n/metrics"), "lost everything")
            assert_lost(client.post("/v1/models/m/events", json=body))
            assert_lost(client.post("/v1/models/n/score", json=events_json(X)))
            assert_lost(client.post("/v1/models", json={"id": "fresh", "n_features": 3}))
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["checks"]["store"] == "data lost"
            assert gauge(client) == 1
        assert any("lost everything" in record.getMessage() for record in caplog.records)
        # a process started after the loss is told by the alarm kept in Redis
        late = build()
        assert_lost(late.get("/v1/models/m"))

        acknowledged = app.post("/v1/store/acknowledge-loss")
        assert acknowledged.status_code == 200
        assert "lost everything" in acknowledged.json()["acknowledged"]["store"]
        for client in (app, other, late):
            _until(lambda client=client: client.get("/readyz").status_code == 200)
            assert client.get("/v1/models").json()["models"] == []
            assert client.get("/v1/models/m").status_code == 404
            assert gauge(client) == 0
        create_model(other, "m", n_features=3)  # serving again
        assert app.post("/v1/models/m/events", json=body).status_code == 200


def test_redis_restored_from_an_older_dump_is_noticed(capsys, serve_env):
    with (
        private("rdb") as server,
        started_apps(redis_url=server.url, allow_volatile_redis=True) as build,
    ):
        app = build()
        create_model(app, "m", n_features=3)
        old = post_batches(app, "m", 3)
        redis.Redis.from_url(server.url).save()  # the dump an operator restores later
        time.sleep(CHECK_SECONDS + 0.1)
        assert app.get("/readyz").status_code == 200  # a check: the markers' clock moves on
        new = post_batches(app, "m", 4, start=3)
        assert new > old

        server.kill()
        server.start()  # reads the older dump

        # the markers' clock or the model's version (whichever a check meets first) tell
        assert_lost(app.get("/v1/models/m"), "went back in time")
        X, y = make_stream(20, n_features=3, seed=3)  # a batch the old dump forgot
        again = events_json(X, y, [f"e3-{i}" for i in range(20)])
        assert_lost(app.post("/v1/models/m/events", json=again))
        assert app.get("/readyz").status_code == 503
        assert gauge(app) >= 1

        # the operator's side, from another process: the alarms, then the acknowledgement
        capsys.readouterr()
        assert cli.main(["store", "alarms", "--redis-url", server.url]) == 0
        alarms = capsys.readouterr().out
        assert "store: the Redis store went back in time by at least" in alarms
        assert "not acknowledged" in alarms
        assert cli.main(["store", "acknowledge-loss", "--redis-url", server.url]) == 0
        assert "(acknowledged)" in capsys.readouterr().out
        _until(lambda: app.get("/readyz").status_code == 200)
        assert app.get("/v1/models/m").json()["version"] == old
        assert app.post("/v1/models/m/events", json=again).status_code == 200


def test_a_redis_keeping_nothing_is_refused_unless_allowed(capsys, serve_env):
    with private("none") as server:
        with pytest.raises(VolatileRedis, match="allow-volatile-redis"):
            with started_apps(redis_url=server.url) as build:
                build()
        assert cli.main(["serve", "--redis-url", server.url, "--port", "1"]) == 2
        error = capsys.readouterr().err.strip()
        assert "keeps nothing across a restart" in error and "\n" not in error
        with started_apps(redis_url=server.url, allow_volatile_redis=True) as build:
            assert build().get("/readyz").status_code == 200


def test_redis_with_aof_everysec_starts_without_a_warning(caplog):
    with private("aof") as server, started_apps(redis_url=server.url) as build:
        assert build().get("/readyz").status_code == 200
    assert not [r for r in caplog.records if "a crash loses" in r.getMessage()]
    with (
        private("aof", "--appendfsync", "no") as server,
        started_apps(redis_url=server.url) as build,
    ):
        assert build().get("/readyz").status_code == 200
    assert [r for r in caplog.records if "appendfsync no" in r.getMessage()]


def test_cluster_url_with_several_seeds_starts_on_any_reachable_one(
    empty_redis_cluster, redis_cluster_server, capsys, serve_env
):
    _, ports = redis_cluster_server
    dead = PrivateRedis("none").port  # a free port nobody listens on
    seeds = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{ports[1]}"
    with started_apps(redis_url=seeds) as build:
        app = build()
        create_model(app, "m", n_features=3)
        assert app.get("/v1/models").json()["models"] == ["m"]
    nobody = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{dead + 1 if dead < 65535 else 1}"
    assert cli.main(["serve", "--redis-url", nobody, "--port", "1"]) == 2
    error = capsys.readouterr().err.strip()
    assert "no seed node of the Redis Cluster answered" in error
    assert f"127.0.0.1:{dead}" in error and "\n" not in error and "Traceback" not in error


def test_writes_wait_for_a_replica_and_a_silent_replica_is_a_503():
    with private("aof") as primary, private("aof") as replica:
        redis.Redis(port=replica.port).replicaof("127.0.0.1", primary.port)
        _until(
            lambda: redis.Redis(port=replica.port).info("replication")["master_link_status"] == "up"
        )
        # a minute's wait for the replica that confirms (300 ms was a clock a loaded machine's
        # replica could miss), 300 ms for the killed one: it never confirms, however long
        with started_apps(redis_url=primary.url, redis_wait_timeout_ms=300) as build:
            app, queue_app = build(redis_wait_timeout_ms=60_000), build(mode="queue")
            impatient = build()
            assert app.app.state.store.wait is not None  # on by default: there is a replica
            create_model(app, "m", n_features=3)
            post_batches(app, "m", 2)
            replica_client = redis.Redis(port=replica.port)
            assert (
                int(replica_client.get("aucs:{m}:version"))
                == app.get("/v1/models/m").json()["version"]
            )
            replica.kill()
            X, y = make_stream(5, n_features=3, seed=7)
            response = impatient.post("/v1/models/m/events", json=events_json(X, y))
            assert response.status_code == 503, response.text
            problem = response.json()
            assert problem["type"].endswith("/replicas-unconfirmed")
            assert "0 of the 1 replica" in problem["detail"]
            queued = queue_app.post("/v1/models/m/events", json=events_json(X, y))  # an append
            assert queued.status_code == 503, queued.text
            assert queued.json()["type"].endswith("/replicas-unconfirmed")
        with started_apps(redis_url=primary.url, redis_wait_replicas=0) as build:
            assert build().app.state.store.wait is None  # off when asked


def _until(condition, timeout: float = 120.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.1)):
        if condition():
            return
        done.wait(0.1)
    raise AssertionError("condition not met in time")


def test_create_app_refuses_volatile_redis_in_the_lifespan():
    with private("none") as server:
        app = create_app(Settings(redis_url=server.url, warmup=False))
        from fastapi.testclient import TestClient

        with pytest.raises(VolatileRedis):
            with TestClient(app):
                pass


def test_a_model_whose_version_went_back_is_a_503_naming_both_versions():
    with private("aof") as server, started_apps(redis_url=server.url) as build:
        app, other = build(), build()
        create_model(app, "m", n_features=3)
        create_model(app, "n", n_features=3)
        version = post_batches(app, "m", 3)
        # the model's keys alone go back (as when one master of a cluster is restored)
        raw = redis.Redis.from_url(server.url)
        raw.set("aucs:{m}:version", version - 2)
        assert_lost(app.get("/v1/models/m"), f"version {version - 2}", f"saw version {version}")
        assert app.get("/v1/models/n").status_code == 200  # the other model is served
        assert app.get("/readyz").status_code == 503
        # another process learns it from the alarm in Redis at its next check
        _until(lambda: other.get("/v1/models/m").status_code == 503)
        assert other.get("/v1/models/n").status_code == 200
        assert app.post("/v1/store/acknowledge-loss").json()["acknowledged"].keys() == {"model:m"}
        assert app.get("/v1/models/m").json()["version"] == version - 2
        # the log's entries past the version are of the lost history: learning goes on
        assert post_batches(app, "m", 1, start=10) == version - 1
        _until(lambda: other.get("/v1/models/m").status_code == 200)
        assert other.get("/v1/models/m").json()["version"] == version - 1


def test_an_sqlite_file_restored_from_an_older_copy_is_noticed(tmp_path, capsys, serve_env):
    import sqlite3

    data_dir = tmp_path / "data"
    backup = tmp_path / "backup.sqlite3"
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        app = build()
        create_model(app, "m", n_features=3)
        old = post_batches(app, "m", 3)
        with sqlite3.connect(data_dir / "aucstream.sqlite3") as source:
            with sqlite3.connect(backup) as copy:
                source.backup(copy)  # the backup an operator restores later
        time.sleep(CHECK_SECONDS + 0.1)
        assert app.get("/readyz").status_code == 200  # a check: the marker's clock moves on
        new = post_batches(app, "m", 3, start=3)
        assert new > old
    # a normal restart raises no alarm
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        assert build().get("/readyz").status_code == 200
    for leftover in data_dir.glob("aucstream.sqlite3*"):
        if not leftover.name.endswith(".epoch"):
            leftover.unlink()
    backup.rename(data_dir / "aucstream.sqlite3")
    with started_apps(store="sqlite", data_dir=data_dir) as build:
        app = build()
        assert_lost(app.get("/v1/models/m"), "SQLite store went back in time")
        assert_lost(app.get("/v1/models"), "went back in time")
        assert app.get("/readyz").json()["checks"]["store"] == "data lost"
        capsys.readouterr()
        assert cli.main(["store", "alarms", "--data-dir", str(data_dir)]) == 0
        assert "store: the SQLite store went back in time" in capsys.readouterr().out
        acknowledged = app.post("/v1/store/acknowledge-loss").json()["acknowledged"]
        assert "went back in time" in acknowledged["store"]
        assert app.get("/readyz").status_code == 200
        assert app.get("/v1/models/m").json()["version"] == old


def test_persistence_is_read_from_info_where_config_is_disabled(caplog):
    disabled = ("--rename-command", "CONFIG", "")
    with private("aof", *disabled) as server, started_apps(redis_url=server.url) as build:
        assert build().get("/readyz").status_code == 200  # INFO says AOF is on
    with private("none", *disabled) as server, started_apps(redis_url=server.url) as build:
        # no AOF, and whether RDB snapshots are taken cannot be read: a warning, no refusal
        assert build().get("/readyz").status_code == 200
    assert any("its RDB setting unknown" in record.getMessage() for record in caplog.records)


def test_a_cluster_seed_that_is_not_host_port_is_refused_with_the_settings():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="seed must be host:port, got 'h2:x'"):
        Settings(redis_url="redis+cluster://h1:7001,h2:x")
    assert Settings(redis_url="redis+cluster://h1:7001,h2:7002").store == "redis"
