"""Processes on loopback, shared by the load generators and the test suite: a free port, a
private ``redis-server``, a uvicorn process serving the app, waiting until it is ready, and
stopping a process; a private 3-master Redis Cluster.  Only 127.0.0.1 is used; the machine's
own Redis (6379) is never touched.
"""

from __future__ import annotations

import contextlib
import os
import random
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
        _wait_port(port, process)
        yield f"redis://127.0.0.1:{port}/0", process.pid
    finally:
        stop(process)
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def private_redis_cluster(masters: int = 3) -> Iterator[tuple[str, dict[int, int]]]:
    """A Redis Cluster of ``masters`` ``redis-server --cluster-enabled yes`` processes on free
    ports (no replicas, nothing kept on disk), created with ``redis-cli --cluster create``, for
    the ``with`` block; yields ``(url, {port: pid})``, the url a ``redis+cluster://`` one
    naming the first node (see service/settings.py).  RuntimeError when it does not start."""
    binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if binary is None or cli is None:
        raise RuntimeError(
            "redis-server / redis-cli are not installed (Debian package 'redis-server'); "
            ".ci/run installs it"
        )
    directory = tempfile.mkdtemp(prefix="aucstream-redis-cluster-")
    ports: list[int] = []
    while len(ports) < masters:
        port = _free_cluster_port()
        if port not in ports:
            ports.append(port)
    processes = [
        subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                os.path.join(directory, f"nodes-{port}.conf"),
                "--cluster-node-timeout",
                "5000",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                directory,
                "--logfile",
                os.path.join(directory, f"redis-{port}.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for port in ports
    ]
    try:
        for port, process in zip(ports, processes, strict=True):
            _wait_port(port, process)
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        for port in ports:
            while True:
                info = subprocess.run(
                    [cli, "-p", str(port), "cluster", "info"], capture_output=True, text=True
                ).stdout
                if "cluster_state:ok" in info:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"private Redis Cluster not ok on port {port}: {info}")
                time.sleep(0.1)
        pids = {port: process.pid for port, process in zip(ports, processes, strict=True)}
        yield f"redis+cluster://127.0.0.1:{ports[0]}", pids
    finally:
        for process in processes:
            stop(process)
        shutil.rmtree(directory, ignore_errors=True)


def _free_cluster_port() -> int:
    """A free port under 55,536 whose cluster bus port (the port + 10,000) is free too."""
    while True:
        port = random.randint(20_000, 55_535)
        try:
            with socket.socket() as probe, socket.socket() as bus:
                probe.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port


def _wait_port(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"private redis-server did not start on port {port}") from None
            time.sleep(0.05)


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
