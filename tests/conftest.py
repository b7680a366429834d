"""Shared fixtures: hypothesis profile, a private redis-server per test session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings

# Kernels are JIT-compiled on first call: no per-example deadline (STYLE.md, numba libraries).
settings.register_profile(
    "aucstream", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile("ci", parent=settings.get_profile("aucstream"), max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "aucstream")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def redis_server():
    """A private redis-server on a free port, for this test session only.

    Yields its URL.  The machine's own Redis on 6379 is never touched.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed (Debian package 'redis-server'); .ci/run installs it"
        )
    port = free_port()
    directory = tempfile.mkdtemp(prefix="aucstream-redis-")
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
            "--logfile",
            os.path.join(directory, "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                pytest.fail(f"private redis-server did not start on port {port}")
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(timeout=10)
    shutil.rmtree(directory, ignore_errors=True)
