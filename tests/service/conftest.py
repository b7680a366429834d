"""Service fixtures: the real ASGI app over the memory store, a private Redis and an SQLite
file in the test's temporary directory."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from loadtest.browser import find_chromium, headless_chromium
from loadtest.local import PrivateRedis, running_uvicorn
from service.app import create_app
from service.engine import Engine
from service.queue.worker import Worker
from service.settings import Settings
from service.stores.memory import MemoryStore
from service.stores.redis import RedisStore
from service.stores.sqlite import SQLiteStore
from tests.conftest import EMPTY_REDIS

STORES = ["memory", "redis", "redis_cluster", "sqlite"]

#: the AUCSTREAM_STORE of each store kind that is not its own name
STORE_SETTING = {"redis_cluster": "redis"}

#: the content type of every problem response (RFC 9457)
PROBLEM = "application/problem+json"

#: wall-clock throughput counters, drift times and the metrics history (whose points are
#: written at minute boundaries of the wall clock): the only state that differs between two runs
CLOCK_ARRAYS = {
    "stats:times",
    "stats:rate",
    "stats:drift_times",
    "history:minute",
    "history:hour",
    "history:points",
}


@pytest.fixture(autouse=True)
def _checkpoint_threads_stopped(monkeypatch) -> Iterator[None]:
    """The background checkpoint threads of the engines a test made stop when it ends (without
    the shutdown's flush, which a test that killed its store would wait on): one left running
    wakes in a later test, finds the shared private Redis emptied for that test, takes it for
    a lost store and writes an alarm there, and that test's server answers 503."""
    made: list[Engine] = []
    init = Engine.__init__

    def tracked(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Engine, "__init__", tracked)
    yield
    for engine in made:
        engine.repository.checkpoints.stop()


@pytest.fixture(params=STORES)
def store_kind(request) -> str:
    return request.param


@pytest.fixture
def redis_url(request, store_kind):
    """The emptied private Redis (server or cluster) of a Redis store kind, else None."""
    fixture = EMPTY_REDIS.get(store_kind)
    return request.getfixturevalue(fixture) if fixture else None


@pytest.fixture
def store(store_kind, redis_url, data_dir):
    """A store of each kind, empty (over the private Redis of a Redis kind)."""
    if store_kind == "memory":
        yield MemoryStore()
    elif store_kind == "sqlite":
        store = SQLiteStore.open(data_dir)
        yield store
        store.close()
    else:
        store = RedisStore.from_url(redis_url)
        yield store
        store.close()


@contextlib.contextmanager
def started_apps(**defaults) -> Iterator[Callable[..., TestClient]]:
    """``build(**settings)`` -> a started TestClient (lifespan runs) with ``defaults`` under
    ``settings``; every app built is stopped at the end."""
    clients: list[TestClient] = []

    def build(**overrides) -> TestClient:
        # kernels compile on first use in tests; the history's catch-up timer writes points
        # (new versions) when a test moves the engine's clock on a minute, so it is slowed
        # down unless a test turns it on (tests/service/test_history_catch_up.py)
        values = {"warmup": False, "history_catch_up_seconds": 3600.0, **defaults, **overrides}
        settings = Settings(**values)
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return client

    try:
        yield build
    finally:
        for client in clients:
            client.__exit__(None, None, None)


@pytest.fixture
def data_dir(store_kind, tmp_path):
    """The SQLite store's data directory (this test's own) for ``sqlite``; unused otherwise."""
    return tmp_path / "aucstream-data"


@pytest.fixture
def make_client(store_kind, redis_url, data_dir):
    """``make_client(**settings)`` -> a started app on the store (apps built by one test share
    it, but for ``memory``)."""
    with started_apps(
        store=STORE_SETTING.get(store_kind, store_kind), redis_url=redis_url, data_dir=data_dir
    ) as build:
        yield build


@pytest.fixture
def client(make_client) -> TestClient:
    return make_client()


@pytest.fixture
def make_app(any_redis):
    """``make_app(mode, **settings)`` -> a started app on the emptied private Redis of
    ``redis_kind`` (a server unless the test parametrises it)."""
    with started_apps(redis_url=any_redis) as build:
        yield lambda mode="queue", **overrides: build(mode=mode, **overrides)


@pytest.fixture
def make_worker(any_redis):
    """``make_worker(name, **settings)`` -> a queue worker the test steps, fast timings."""
    workers = []

    def build(name: str = "w1", **overrides) -> Worker:
        values = {
            "worker_block_ms": 20,
            "worker_discover_seconds": 0.01,
            "worker_lease_ms": 2000,
            "worker_claim_min_idle_ms": 200,
            "worker_batch_entries": 4,
            "history_catch_up_seconds": 3600.0,
            **overrides,
        }
        worker = Worker(Settings(redis_url=any_redis, worker_name=name, **values))
        workers.append(worker)
        return worker

    yield build
    for worker in workers:
        worker.release_all()
        worker.store.close()


#: a queue-mode test parametrised with this runs on the private Redis and on the private
#: Redis Cluster (the ``redis_kind`` of ``make_app``, ``make_worker`` and ``rclient``)
ON_REDIS_AND_CLUSTER = pytest.mark.parametrize(
    "redis_kind", ["redis", "redis_cluster"], indirect=True
)


def masters_of(client, model_ids) -> dict[str, int]:
    """On a Redis Cluster: model id -> the port of the master holding its keys' slot."""
    from service.stores import keys

    return {model: client.get_node_from_key(keys.config(model)).port for model in model_ids}


def make_stream(n_events: int, n_features: int = 5, seed: int = 0):
    """A separable-ish stream: positives shifted along the first features."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n_events) < 0.3).astype(np.int64)
    X = rng.normal(size=(n_events, n_features)) + 1.5 * y[:, None] * (np.arange(n_features) < 2)
    return X, y


def events_json(X, y=None, ids=None) -> dict:
    events = []
    for row in range(len(X)):
        event = {"x": X[row].tolist()}
        if y is not None:
            event["y"] = int(y[row])
        if ids is not None:
            event["id"] = ids[row]
        events.append(event)
    return {"events": events}


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def create_model(client: TestClient, model_id: str = "m", n_features: int = 5, **extra):
    """Create a model; the service tests were written against one ``spam`` learner (the API's
    default is ``auto``, tested in test_auto_model.py), so that stays the helper's default."""
    body = {"id": model_id, "n_features": n_features, "learner": "spam", **extra}
    response = client.post("/v1/models", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def stored_arrays(client: TestClient, model_id: str = "m") -> dict[str, np.ndarray]:
    """The model's state as the store holds it: its checkpoint and the log entries after it,
    rebuilt afresh (not the process's cached model)."""
    return client.app.state.engine.repository.rebuilt(model_id).arrays()


def read_snapshot(body: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """The manifest and the arrays of an exported snapshot."""
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        arrays = {
            name: np.load(io.BytesIO(archive.read(entry["file"])), allow_pickle=False)
            for name, entry in manifest["arrays"].items()
        }
    return manifest, arrays


def write_snapshot(manifest: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """A snapshot whose manifest entries describe ``arrays`` as they are (so only the values,
    not the manifest, are at fault)."""
    manifest = {**manifest, "arrays": {}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            payload = io.BytesIO()
            np.save(payload, array, allow_pickle=False)
            archive.writestr(f"arrays/{name}.npy", payload.getvalue())
            manifest["arrays"][name] = {
                "file": f"arrays/{name}.npy",
                "dtype": array.dtype.str,
                "shape": list(array.shape),
            }
        archive.writestr("manifest.json", orjson.dumps(manifest))
    return buffer.getvalue()


def put_snapshot(client, model_id: str, body: bytes, replace: bool = True):
    return client.put(
        f"/v1/models/{model_id}/snapshot",
        content=body,
        params={"replace": str(replace).lower()},
        headers={"content-type": "application/zip"},
    )


#: settings of the worker processes the queue fault and stall tests start (short leases,
#: small reads, no warm-up: the kernels are already cached)
WORKER_ENV = {
    "AUCSTREAM_WARMUP": "false",
    "AUCSTREAM_WORKER_BLOCK_MS": "50",
    "AUCSTREAM_WORKER_LEASE_MS": "1000",
    "AUCSTREAM_WORKER_CLAIM_MIN_IDLE_MS": "500",
    "AUCSTREAM_WORKER_DISCOVER_SECONDS": "0.2",
    "AUCSTREAM_WORKER_BATCH_ENTRIES": "3",
    "AUCSTREAM_LOG_FORMAT": "json",
    "AUCSTREAM_HISTORY_CATCH_UP_SECONDS": "3600",  # as live_server's
}


@pytest.fixture
def workers(tmp_path):
    """``start(url, name, **env)`` -> a running ``aucstream worker`` process; every one is
    resumed and killed at the end."""
    started: list[subprocess.Popen] = []

    def start(url: str, name: str, **env: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--name", name],
            env={**os.environ, **WORKER_ENV, **env, "AUCSTREAM_REDIS_URL": url},
            stdout=log,
            stderr=log,
        )
        log.close()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(timeout=10)


@pytest.fixture
def synced_redis():
    """A private redis-server whose AOF is synced on every write."""
    redis = PrivateRedis("aof", "--appendfsync", "always")
    redis.start()
    yield redis
    redis.close()


#: the stores that keep a log (every one), for :func:`logging_store`
LOGGING_STORES = ["memory", "sqlite", "redis", "redis_cluster"]


@pytest.fixture(params=LOGGING_STORES)
def logging_store(request, tmp_path):
    """An empty store of each kind, opened directly (no app): the log tests' engines run on it."""
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param in EMPTY_REDIS:
        store = RedisStore.from_url(request.getfixturevalue(EMPTY_REDIS[request.param]))
    else:
        store = SQLiteStore.open(tmp_path / "data")
    yield store
    store.close()


MISSING_BROWSER = (
    "the dashboard tests need Debian's chromium and chromium-driver on the PATH "
    "(apt-get install chromium chromium-driver; .ci/run installs them)"
)
#: set by .ci/run, which installs the browser: there a missing one fails the tests
REQUIRE_BROWSER = os.environ.get("AUCSTREAM_REQUIRE_BROWSER") == "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Without Chromium the browser tests (those asking for ``chromium``) are skipped, not
    errors (the rest of the suite still runs), except with ``AUCSTREAM_REQUIRE_BROWSER=1``.
    A mark, not a skip in the fixture: it holds before any fixture is set up (a session's
    Redis would be started first, and fail without its binary where the browser is missing
    too, test_browser_requirement.py)."""
    if REQUIRE_BROWSER or find_chromium() is not None:
        return
    reason = f"{MISSING_BROWSER}; AUCSTREAM_REQUIRE_BROWSER=1 makes this a failure"
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium a module (the dashboard's browser tests); without one (only
    ``AUCSTREAM_REQUIRE_BROWSER=1`` gets here then) their tests fail."""
    if find_chromium() is None:
        pytest.fail(f"AUCSTREAM_REQUIRE_BROWSER=1 and no browser: {MISSING_BROWSER}")
    with headless_chromium(width=1400, height=1400) as driver:
        yield driver


@pytest.fixture
def browser(chromium):
    """The module's browser on a blank page with an empty console; blank again afterwards, so
    that the last page stops talking to a server that is gone."""
    chromium.get("about:blank")
    chromium.get_log("browser")
    yield chromium
    chromium.get("about:blank")


@contextlib.contextmanager
def live_server(
    settings: dict[str, str] | None = None,
    workers: int = 1,
    *,
    store: str | None = "memory",
    **options: Any,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """A real uvicorn serving this checkout, as ``(url, process)`` once ready, stopped on
    leaving (loadtest.local.running_uvicorn): no warm-up, ``store`` (None: the settings' own
    choice) and ``settings``; its output discarded and its errors kept in a file (a failed
    start reports them; a pipe nobody reads would stop the server once full) unless
    ``options`` redirect them."""
    # the history's catch-up timer slowed down as in started_apps: its commits would change a
    # model's version while a test waits for the one its last batch got
    env = {**os.environ, "AUCSTREAM_WARMUP": "false", "AUCSTREAM_HISTORY_CATCH_UP_SECONDS": "3600"}
    if store is not None:
        env["AUCSTREAM_STORE"] = store
    with tempfile.TemporaryFile() as errors:
        started = False
        try:
            with running_uvicorn(
                {**env, **(settings or {})},
                workers,
                **{"stdout": subprocess.DEVNULL, "stderr": errors, **options},
            ) as served:
                started = True
                yield served
        except RuntimeError as error:
            if started:
                raise
            errors.seek(0)
            output = errors.read()[-8000:].decode(errors="replace")
            raise RuntimeError(f"{error}; the server's errors:\n{output}") from error
