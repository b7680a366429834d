"""A private stack on loopback for the queue-mode load tests: redis-server, one uvicorn API
process (sync or queue mode) and, in queue mode, ``aucstream worker`` processes.

Everything is started here and stopped on exit; only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from loadtest.local import free_port, private_redis, start_uvicorn, stop, wait_ready
from loadtest.run import process_cpu_seconds


@dataclass
class Stack:
    url: str
    redis_url: str
    pids: dict[str, int] = field(default_factory=dict)

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each process of the stack."""
        return {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}


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
        api = start_uvicorn(port, environment, access_log=False)
        workers: list[subprocess.Popen] = []
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, api, timeout=180)
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
                stop(worker)
            stop(api)
