"""A model's writer lease: one worker writes a model at a time.

A worker holds ``aucs:{m}:lease`` (its name, with a TTL it renews) and announces itself in
``aucs:workers`` (a heartbeat), so that each takes at most its fair share of the models (models
/ live workers, rounded up).  The lease is an optimisation, not the guard of correctness: the
engine's version check keeps even a worker that lost its lease without knowing it from losing
or repeating an update.
"""

from __future__ import annotations

import redis

from service.stores import keys
from service.stores.client import unavailable
from service.stores.lua import HEARTBEAT_SCRIPT, LEASE_SCRIPT, RELEASE_SCRIPT


class Leases:
    """Writer leases and worker heartbeats in Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._lease = client.register_script(LEASE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._heartbeat = client.register_script(HEARTBEAT_SCRIPT)

    @unavailable
    def hold(self, model_id: str, worker: str, lease_ms: int) -> bool:
        """Take or renew the model's writer lease; False when another worker holds it."""
        return bool(
            int(
                self._lease(
                    keys=[keys.lease(model_id), keys.config(model_id)], args=[worker, lease_ms]
                )
            )
        )

    @unavailable
    def heartbeat(self, worker: str, lifetime_ms: int) -> int:
        """Mark ``worker`` alive for ``lifetime_ms``; returns how many workers are alive."""
        return int(self._heartbeat(keys=[keys.WORKERS], args=[worker, lifetime_ms]))

    @unavailable
    def leave(self, worker: str) -> None:
        self.client.zrem(keys.WORKERS, worker)

    @unavailable
    def release(self, model_id: str, worker: str) -> bool:
        return bool(int(self._release(keys=[keys.lease(model_id)], args=[worker])))
