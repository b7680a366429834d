"""Processes on loopback, shared by the load generators and the test suite: a free port, a
private ``redis-server``, a uvicorn process serving the app, waiting until it is ready, and
stopping a process; a private 3-master Redis Cluster; the command line and the latency summary
of the load generators that measure a checkout's server.  The private servers keep their data in
AOF files of a temporary directory, as the service expects of a Redis (it refuses one keeping
nothing, unless told the store may be volatile).  Only 127.0.0.1 is used; the machine's
own Redis (6379) is never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import socket
import statistics
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


#: redis-server options of each persistence choice of the private servers: ``aof`` (the
#: service's default expectation: AOF synced every second), ``none`` (keeps nothing: the
#: service refuses it unless AUCSTREAM_ALLOW_VOLATILE_REDIS), ``rdb`` (only the dumps asked
#: for with SAVE, read back at a restart)
PERSISTENCE = {
    "aof": ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
    "none": ["--appendonly", "no", "--save", ""],
    "rdb": ["--appendonly", "no", "--save", "", "--dbfilename", "dump.rdb"],
}


def _redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed (Debian package 'redis-server'); .ci/run installs it"
        )
    return binary


class PrivateRedis:
    """A ``redis-server`` on a free loopback port with its own directory, which a test can
    ``kill()`` (SIGKILL) and ``start()`` again on the same port and directory."""

    def __init__(self, persistence: str = "aof", *extra: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.directory = tempfile.mkdtemp(prefix="aucstream-redis-")
        self.options = [*PERSISTENCE[persistence], *extra]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [_redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", self.directory, "--logfile", os.path.join(self.directory, "redis.log"),
             *self.options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_port(self.port, self.process)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        if self.process is not None:
            stop(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def private_redis(persistence: str = "aof") -> Iterator[tuple[str, int]]:
    """A ``redis-server`` on a free port (AOF in a temporary directory unless
    ``persistence`` says otherwise, see :data:`PERSISTENCE`), for the ``with`` block; yields
    ``(url, pid)``.  RuntimeError when it is not installed or does not start."""
    server = PrivateRedis(persistence)
    try:
        server.start()
        assert server.process is not None
        yield server.url, server.process.pid
    finally:
        server.close()


class PrivateCluster:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, every node a
    :class:`PrivateRedis` (AOF, its own directory and ``nodes.conf``) that can be killed and
    started again: a restarted node rejoins as what the cluster made it (a killed master
    whose replica took over comes back as that replica's replica)."""

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 5000) -> None:
        if shutil.which("redis-cli") is None:
            raise RuntimeError(
                "redis-cli is not installed (Debian package 'redis-server'); .ci/run installs it"
            )
        self.masters, self.replicas = masters, replicas
        self.nodes: dict[int, PrivateRedis] = {}
        while len(self.nodes) < masters * (1 + replicas):
            port = _free_cluster_port()
            if port not in self.nodes:
                node = PrivateRedis(
                    "aof", "--cluster-enabled", "yes", "--cluster-node-timeout",
                    str(node_timeout_ms), port=port,
                )  # fmt: skip
                node.options += ["--cluster-config-file", os.path.join(node.directory, "n.conf")]
                self.nodes[port] = node

    @property
    def ports(self) -> list[int]:
        return list(self.nodes)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
        self.wait_ok()

    def info(self, port: int, *what: str) -> str:
        return subprocess.run(
            ["redis-cli", "-p", str(port), *what], capture_output=True, text=True, timeout=60
        ).stdout

    def wait_ok(self, timeout: float = 120.0) -> None:
        """Until every live node says ``cluster_state:ok`` and every master has its replicas
        connected and in sync."""
        deadline = time.monotonic() + timeout
        for port, node in self.nodes.items():
            if node.process is None or node.process.poll() is not None:
                continue
            while True:
                cluster = self.info(port, "cluster", "info")
                replication = self.info(port, "info", "replication")
                synced = (
                    "role:master" in replication
                    and (f"connected_slaves:{self.replicas}" in replication)
                    or "master_link_status:up" in replication
                )
                if "cluster_state:ok" in cluster and synced:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"private Redis Cluster not ok on port {port}: {cluster}")
                time.sleep(0.1)

    def master_ports(self) -> list[int]:
        return [
            port
            for port, node in self.nodes.items()
            if node.process is not None
            and node.process.poll() is None
            and "role:master" in self.info(port, "info", "replication")
        ]

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()


@contextlib.contextmanager
def private_redis_cluster(
    masters: int = 3, node_timeout_ms: int = 5000
) -> Iterator[tuple[str, dict[int, int]]]:
    """A :class:`PrivateCluster` of ``masters`` masters without replicas for the ``with``
    block; yields ``(url, {port: pid})``, the url a ``redis+cluster://`` one naming the first
    node (see service/settings.py).  RuntimeError when it does not start."""
    cluster = PrivateCluster(masters, node_timeout_ms=node_timeout_ms)
    try:
        cluster.start()
        pids = {port: node.process.pid for port, node in cluster.nodes.items() if node.process}
        yield cluster.url, pids
    finally:
        cluster.close()


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
    # generous: these are hang detectors, and a loaded machine starts processes slowly
    deadline = time.monotonic() + 60
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
            # a server that is up but slow to answer (a loaded machine) is waited for, not
            # polled again every 2 s forever
            if httpx.get(f"{url}/readyz", timeout=30).status_code == 200:
                ready += 1
                if ready == answers:
                    return
        except httpx.TransportError:
            pass
        time.sleep(interval)


@contextlib.contextmanager
def running_uvicorn(
    env: dict[str, str],
    workers: int = 1,
    *,
    timeout: float = 300.0,
    answers: int = 1,
    interval: float = 0.2,
    access_log: bool = True,
    **popen: Any,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """:func:`start_uvicorn` on a free port with the environment ``env``; yields ``(url,
    process)`` once :func:`wait_ready`, and stops the process on leaving, whatever happened."""
    port = free_port()
    process = start_uvicorn(port, env, workers, access_log=access_log, **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, timeout, answers=answers, interval=interval)
        yield url, process
    finally:
        stop(process)


@contextlib.contextmanager
def checkout_server(
    server_path: str, settings: dict[str, str] | None = None, **popen: Any
) -> Iterator[tuple[str, subprocess.Popen]]:
    """The service of the checkout at ``server_path`` as the load generators measure it: the
    memory store (``settings`` add to or replace it), kernels compiled before ``/readyz``, so
    that no measurement pays them.  The checkout is both ``PYTHONPATH`` and the working
    directory (``python -m`` puts the working directory first on the import path)."""
    env = {**os.environ, "PYTHONPATH": server_path, "AUCSTREAM_WARMUP": "true",
           "AUCSTREAM_STORE": "memory", **(settings or {})}  # fmt: skip
    with running_uvicorn(env, timeout=900, cwd=server_path, **popen) as served:
        yield served


def checkout_parser(doc: str) -> argparse.ArgumentParser:
    """The command line of a load generator run on :func:`checkout_server`: the first line of
    its docstring ``doc`` as description, and ``--server-path`` (this directory by default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--server-path", default=os.getcwd(), help="PYTHONPATH of the server")
    return parser


def latency_ms(seconds: list[float]) -> tuple[float, float, float]:
    """The median, 99th percentile and maximum of latencies given in seconds, in ms."""
    ordered = sorted(seconds)
    p99 = statistics.quantiles(ordered, n=100)[98] if len(ordered) > 1 else ordered[0]
    return statistics.median(ordered) * 1e3, p99 * 1e3, ordered[-1] * 1e3


def create_model(http: Any, body: dict, *, timeout: float = 900.0) -> None:
    """``POST /v1/models`` with ``body`` on the ``httpx.Client`` ``http``, as a client should:
    a 503 ``warming-up`` (the learner's kernels still compiling in the background after
    ``/readyz``) is sent again after its ``Retry-After``; anything but 201 raises."""
    deadline = time.monotonic() + timeout
    while True:
        response = http.post("/v1/models", json=body)
        if response.status_code == 201:
            return
        warming = response.status_code == 503 and "warming-up" in response.text
        if not warming or time.monotonic() > deadline:
            problem = f"{response.status_code} {response.text}"
            raise RuntimeError(f"creating model {body.get('id')!r}: {problem}")
        time.sleep(float(response.headers.get("Retry-After", "1")))


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
