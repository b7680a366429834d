"""Shared fixtures: hypothesis profile, and every Redis fixture (a private redis-server per test
session, emptied per test; the machine's own Redis on 6379 is never touched)."""

from __future__ import annotations

import os

import pytest
import redis
from hypothesis import HealthCheck, settings

from loadtest.local import private_redis

# Kernels are JIT-compiled on first call: no per-example deadline (STYLE.md, numba libraries).
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


@pytest.fixture
def rclient(empty_redis):
    """A client of the emptied private redis-server (bytes replies)."""
    client = redis.Redis.from_url(empty_redis)
    yield client
    client.close()
