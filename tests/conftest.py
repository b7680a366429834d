"""Shared fixtures: hypothesis profile, and every Redis fixture (a private redis-server and a
private 3-master Redis Cluster per test session, emptied per test; the machine's own Redis on
6379 is never touched)."""

from __future__ import annotations

import os

import pytest
import redis
from hypothesis import HealthCheck, settings

from loadtest.local import private_redis, private_redis_cluster
from service.stores.client import connect

# Kernels are JIT-compiled on the first call (or loaded from numba's disk cache), which a
# per-example deadline would charge to whichever example comes first: no deadline.
settings.register_profile(
    "aucstream", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile("ci", parent=settings.get_profile("aucstream"), max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "aucstream")


@pytest.fixture(scope="session")
def redis_server():
    """A private redis-server on a free port, for this test session only.

    Yields its URL.  The machine's own Redis on 6379 is never touched.
    """
    with private_redis() as (url, _):
        yield url


@pytest.fixture
def empty_redis(redis_server):
    """The private redis-server's URL, emptied for this test."""
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    client.close()
    return redis_server


@pytest.fixture(scope="session")
def redis_cluster_server():
    """A private Redis Cluster of 3 masters (``redis-server --cluster-enabled yes`` on free
    ports, joined by ``redis-cli --cluster create``), for this test session only.  Yields
    ``(url, ports)``: a ``redis+cluster://`` URL naming the first node, and every node's port."""
    with private_redis_cluster() as (url, pids):
        yield url, list(pids)


@pytest.fixture
def empty_redis_cluster(redis_cluster_server):
    """The private Redis Cluster's URL, every master emptied for this test."""
    url, ports = redis_cluster_server
    for port in ports:
        client = redis.Redis(port=port)
        client.flushall()
        client.close()
    return url


#: the fixture of each kind of emptied Redis, by the name tests parametrise with
EMPTY_REDIS = {"redis": "empty_redis", "redis_cluster": "empty_redis_cluster"}


@pytest.fixture
def redis_kind(request) -> str:
    """``redis`` unless a test parametrises it indirectly, e.g.
    ``@pytest.mark.parametrize("redis_kind", ["redis", "redis_cluster"], indirect=True)``."""
    return getattr(request, "param", "redis")


@pytest.fixture
def any_redis(request, redis_kind) -> str:
    """The URL of the emptied private Redis of ``redis_kind`` (a server or a cluster)."""
    return request.getfixturevalue(EMPTY_REDIS[redis_kind])


@pytest.fixture
def rclient(any_redis):
    """A client of the emptied private Redis of ``redis_kind`` (bytes replies): a
    ``redis.Redis``, or a ``RedisCluster`` routing each command by its key's slot."""
    client = connect(any_redis)
    yield client
    client.close()
