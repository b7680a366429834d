"""A model's writer lease, so that one worker writes a model at a time, and the workers'
heartbeats (docs/architecture.md §5 says how the lease generation fences a stalled worker).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from service.stores import keys
from service.stores.client import run_script, unavailable
from service.stores.lua import HEARTBEAT_SCRIPT, LEASE_SCRIPT, RELEASE_SCRIPT


@dataclass(frozen=True)
class Lease:
    """A lease held by the caller: its ``generation``, and whether :meth:`Leases.hold` just
    took it (``taken``: the caller must recover the model) or renewed it."""

    generation: int
    taken: bool


class Leases:
    """Writer leases and worker heartbeats in Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._lease = client.register_script(LEASE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._heartbeat = client.register_script(HEARTBEAT_SCRIPT)

    @unavailable
    def hold(self, model_id: str, worker: str, lease_ms: int, generation: int = 0) -> Lease | None:
        """Renew the lease the caller holds at ``generation`` (0: none), or take it when it is
        free; None when another worker holds it or the model does not exist."""
        status, current = run_script(
            self.client,
            self._lease,
            [keys.lease(model_id), keys.config(model_id), keys.queue(model_id)],
            [worker, lease_ms, generation],
            None,
        )
        if not int(status):
            return None
        return Lease(int(current), taken=int(status) == 2)

    @unavailable
    def heartbeat(self, worker: str, lifetime_ms: int) -> int:
        """Mark ``worker`` alive for ``lifetime_ms``; returns how many workers are alive."""
        args = [worker, lifetime_ms]
        return int(run_script(self.client, self._heartbeat, [keys.WORKERS], args, None))

    @unavailable
    def leave(self, worker: str) -> None:
        self.client.zrem(keys.WORKERS, worker)

    @unavailable
    def release(self, model_id: str, worker: str, generation: int) -> bool:
        lease = [keys.lease(model_id), keys.queue(model_id)]
        return bool(int(run_script(self.client, self._release, lease, [worker, generation], None)))
