"""A private stack on loopback for the queue-mode load tests: redis-server, one uvicorn API
process (sync or queue mode) and, in queue mode, ``aucstream worker`` processes.

Everything is started here and stopped on exit; only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from loadtest.run import free_port, private_redis, process_cpu_seconds


@dataclass
class Stack:
    url: str
    redis_url: str
    pids: dict[str, int] = field(default_factory=dict)

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each process of the stack."""
        return {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}


def _wait_ready(url: str, process: subprocess.Popen, timeout: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit("loadtest: uvicorn exited")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"loadtest: server not ready after {timeout:.0f} s")
        time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def stack(mode: str, n_workers: int = 1, **env: str) -> Iterator[Stack]:
    """Redis + API in ``mode`` (+ ``n_workers`` queue workers in queue mode)."""
    with private_redis() as (redis_url, redis_pid):
        environment = {
            **os.environ,
            "AUCSTREAM_LOG_LEVEL": "warning",
            "AUCSTREAM_REDIS_URL": redis_url,
            "AUCSTREAM_MODE": mode,
            **env,
        }
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
             "--log-level", "warning", "--no-access-log"],
            env=environment,
        )  # fmt: skip
        workers: list[subprocess.Popen] = []
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, api)
            result = Stack(url, redis_url, {"api": api.pid, "redis": redis_pid})
            if mode == "queue":
                for number in range(n_workers):
                    worker = subprocess.Popen(
                        [sys.executable, "-m", "service.cli", "worker", "--name", f"lt-{number}"],
                        env={"AUCSTREAM_LOG_LEVEL": "warning", **environment},
                    )
                    workers.append(worker)
                    result.pids[f"worker-{number}"] = worker.pid
            yield result
        finally:
            for worker in workers:
                _stop(worker)
            _stop(api)
