"""The peers of the speed benchmarks as processes: Vowpal Wabbit's daemon, an ``aucstream serve``
once its warm-up has ended, and the CPU a process tree used (``/proc``).  Used by
``loadtest.vw_peer`` and the benchmarks that measure beside it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import httpx

from loadtest.local import free_port, wait_ready


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (live ones)."""
    total, pending = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while pending:
        current = pending.pop()
        with contextlib.suppress(OSError):
            with open(f"/proc/{current}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    pending.extend(int(child) for child in handle.read().split())
    return total


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process group this script started, SIGKILL after 10 s (VW's daemon
    child does not stop on SIGTERM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


VW_DAEMON = """
import sys
from vowpalwabbit import pyvw
workspace = pyvw.Workspace(sys.argv[1])
workspace.run_parser()
"""


@contextlib.contextmanager
def vw_daemon() -> Iterator[tuple[int, int]]:
    """VW's daemon loop through pylibvw: ``(port, pid)``."""
    port = free_port()
    options = (f"--daemon --foreground --port {port} --num_children 1 --quiet "
               "--loss_function logistic --link logistic")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", VW_DAEMON, options], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket_to(port) as probe:
                    probe.sendall(b"1 |f 0:1\n")  # answered: the daemon loop is running
                    if probe.recv(64):
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the VW daemon did not start") from None
                time.sleep(0.2)
        yield port, process.pid
    finally:
        _stop_group(process)


def socket_to(port: int):
    import socket

    connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    connection.settimeout(5)
    return connection


def wait_warm(url: str, timeout: float = 900.0) -> None:
    """Until the server's warm-up has run every kernel group (``/readyz``'s ``warmup``)."""
    deadline = time.monotonic() + timeout
    while True:
        warmup = httpx.get(f"{url}/readyz", timeout=10).json().get("warmup") or {}
        if warmup.get("groups_done", 0) >= warmup.get("groups_total", 0):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}: the warm-up did not end in {timeout:.0f} s: {warmup}")
        time.sleep(0.5)


@contextlib.contextmanager
def aucstream(store: str, server_path: str | None) -> Iterator[tuple[str, int]]:
    """``aucstream serve`` on ``store`` (sqlite: a temporary data directory), once its warm-up
    has ended: ``(url, pid)``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="aucstream-vw-peer-") as data_dir:
        env = {**os.environ}
        if server_path:
            env["PYTHONPATH"] = server_path
        command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port),
                   "--store", store, "--data-dir", data_dir, "--log-level", "warning"]  # fmt: skip
        log = open(os.path.join(data_dir, "server.log"), "wb")  # noqa: SIM115
        process = subprocess.Popen(
            command, env=env, cwd=server_path, start_new_session=True, stdout=log, stderr=log
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process, timeout=600)
            wait_warm(url)
            yield url, process.pid
        finally:
            _stop_group(process)
            log.close()
