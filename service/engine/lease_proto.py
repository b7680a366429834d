"""PROTOTYPE for a measurement only (loadtest/shared_model.py; removed in the next commit):
per-model ownership with a lease, the design the issue asked to measure against the catch-up.

With ``AUCSTREAM_PROTO_LEASE=1`` every write takes the model's lease before it loads and gives
it back after its commit, so no append is ever stale: on SQLite an exclusive ``flock`` of a file
per model next to the database (the processes of one machine; the kernel frees it when its
holder dies), on Redis ``SET NX PX`` of a key per model with a random token, polled until taken
and deleted by a compare-and-delete script (its expiry frees the lease of a dead holder)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

ENABLED = os.environ.get("AUCSTREAM_PROTO_LEASE") == "1"
LEASE_MS = 5_000
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Leases:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.waits = 0
        self._release = None
        client = getattr(store, "client", None)
        if client is not None:
            self._release = client.register_script(_RELEASE)

    @contextlib.contextmanager
    def held(self, model_id: str) -> Iterator[None]:
        if not ENABLED:
            yield
            return
        if self._release is not None:
            yield from self._redis(model_id)
        else:
            yield from self._file(model_id)

    def _file(self, model_id: str) -> Iterator[None]:
        directory = self.store.path.parent / "leases"
        directory.mkdir(exist_ok=True)
        name = hashlib.sha1(model_id.encode()).hexdigest()[:20]
        descriptor = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # frees the lock

    def _redis(self, model_id: str) -> Iterator[None]:
        client = self.store.client
        key = f"aucs:proto-lease:{{{model_id}}}"
        token = uuid.uuid4().hex
        while not client.set(key, token, nx=True, px=LEASE_MS):
            self.waits += 1
            time.sleep(0.0005)
        try:
            yield
        finally:
            assert self._release is not None
            self._release(keys=[key], args=[token])
