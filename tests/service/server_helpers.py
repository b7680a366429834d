"""Real servers for the tests that need one (a uvicorn process, ``aucstream serve``) and the
raw WebSocket a browser would open on a model's stream, shared by the test modules."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
from websockets.sync.client import connect

from loadtest.local import free_port, stop, wait_ready
from tests.service.conftest import live_server


@contextlib.contextmanager
def uvicorn_server(workers: int = 1, **env: str) -> Iterator[str]:
    """The server's URL, with the store ``env`` chooses (the settings' own default else)."""
    # several answers, so every worker had time to start
    with live_server(env, workers, store=None, answers=3 * workers, interval=0.1) as (url, _):
        yield url


def stream_socket(url: str, model_id: str, **options):
    """A raw WebSocket connection to the stream (the frames as a browser or an attacker would
    send them); compression off, no frame size limit on the client side."""
    address = url.replace("http://", "ws://") + f"/v1/models/{model_id}/stream"
    return connect(address, compression=None, max_size=None, open_timeout=30, **options)


def exchange(ws, frame: str | bytes) -> list[dict]:
    ws.send(frame)
    return orjson.loads(ws.recv(timeout=60))


@contextlib.contextmanager
def live_url(**env: str) -> Iterator[str]:
    """:func:`~tests.service.conftest.live_server`'s URL, the store its default."""
    with live_server(env) as (url, _):
        yield url


#: the repository's root, on the PYTHONPATH of the servers started in a subprocess
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def served(data_dir: Path, workers: int = 1) -> Iterator[tuple[str, subprocess.Popen]]:
    """``aucstream serve --data-dir <data_dir>`` in a subprocess (the store's default)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUCSTREAM_WARMUP": "false"}
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_DATA_DIR"):
        env.pop(name, None)  # the defaults: the SQLite store
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--data-dir",
               str(data_dir), "--workers", str(workers), "--log-level", "warning"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, timeout=300, answers=3 * workers, interval=0.1)
        yield url, process
    finally:
        stop(process)
