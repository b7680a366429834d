"""Processes on loopback, shared by the load generators and the test suite: a free port, a
private ``redis-server``, a uvicorn process serving the app, waiting until it is ready, and
stopping a process.  Only 127.0.0.1 is used; the machine's own Redis (6379) is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def private_redis() -> Iterator[tuple[str, int]]:
    """A ``redis-server`` on a free port, keeping nothing on disk, for the ``with`` block;
    yields ``(url, pid)``.  RuntimeError when it is not installed or does not start."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed (Debian package 'redis-server'); .ci/run installs it"
        )
    port = free_port()
    directory = tempfile.mkdtemp(prefix="aucstream-redis-")
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", directory,
         "--logfile", os.path.join(directory, "redis.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    message = f"private redis-server did not start on port {port}"
                    raise RuntimeError(message) from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", process.pid
    finally:
        stop(process)
        shutil.rmtree(directory, ignore_errors=True)


def start_uvicorn(
    port: int, env: dict[str, str], workers: int = 1, *, access_log: bool = True, **popen: Any
) -> subprocess.Popen:
    """``uvicorn service.app:create_app --factory`` on ``127.0.0.1:port``."""
    command = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
               "--log-level", "warning"]  # fmt: skip
    if not access_log:
        command.append("--no-access-log")
    return subprocess.Popen(command, env=env, **popen)


def wait_ready(
    url: str,
    process: subprocess.Popen,
    timeout: float,
    *,
    answers: int = 1,
    interval: float = 0.2,
) -> None:
    """Until ``GET /readyz`` has answered 200 ``answers`` times (several, for several
    workers); RuntimeError if the process exits (with its stderr when piped) or on timeout."""
    import httpx

    deadline = time.monotonic() + timeout
    ready = 0
    while ready < answers:
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"uvicorn exited: {stderr}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not ready after {timeout:.0f} s")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                ready += 1
                if ready == answers:
                    return
        except httpx.TransportError:
            pass
        time.sleep(interval)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
