"""The Redis store's memory of events: the ids learned or expired (``aucs:{m}:seen``,
``aucs:{m}:expired``: sorted sets scored by expiry) and the records ``/score`` keeps for a
later label (``aucs:{m}:pending`` with their deadlines in ``aucs:{m}:deadlines``).  Ids are
written by the commit of the state that learned them (:meth:`RedisStore.commit
<service.stores.redis.RedisStore.commit>`); this is the reading side, and keeping records."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from service.errors import InsufficientStorage, StaleVersion
from service.stores import keys
from service.stores.base import chunks, no_model, pending_full
from service.stores.client import ReplicaWait, atomic_read, flat_pairs, run_script, unavailable
from service.stores.epoch import LossWatch
from service.stores.lua import PENDING_SCRIPT


class RedisEventMemory:
    """Event ids and pending records of the Redis store (its base class)."""

    def __init__(self, client: Any, wait: ReplicaWait | None = None) -> None:
        self.client = client
        #: acknowledged writes wait for this many replicas (None: they do not)
        self.wait = wait
        self.watch = LossWatch("Redis")
        self._pending = client.register_script(PENDING_SCRIPT)

    def _guard(self, model_id: str | None = None) -> None:
        """503 when the store or the model lost data (:class:`RedisStore` checks the markers)."""
        self.watch.guard(model_id)

    @unavailable
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._remembered(keys.seen, model_id, ids, now)

    @unavailable
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        return self._remembered(keys.expired, model_id, ids, now)

    def _remembered(
        self, key: Callable[[str], str], model_id: str, ids: Sequence[str], now: float
    ) -> np.ndarray:
        """Which ``ids`` the model's set ``key`` (learned or expired) holds past ``now``."""
        self._guard(model_id)
        return np.array(
            [score is not None and score > now
             for part in chunks(ids) for score in self.client.zmscore(key(model_id), part)],
            dtype=bool,
        )  # fmt: skip

    @unavailable
    def put_pending(self, model_id, records, deadline, max_records=None, incarnation=None) -> None:
        self._guard(model_id)
        if not records:
            return
        args = [repr(float(deadline)), max_records or 0, incarnation or "", *flat_pairs(records)]
        script_keys = keys.of(model_id, "config", "pending", "deadlines", "meta")
        kept = run_script(self.client, self._pending, script_keys, args, self.wait)
        if int(kept) == -2:
            raise no_model(model_id)
        if int(kept) == -3:
            assert max_records is not None
            raise InsufficientStorage(pending_full(model_id, max_records))
        if int(kept) == -4:
            raise StaleVersion(f"model {model_id!r} was replaced since its scores were given")

    @unavailable
    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
        self._guard(model_id)
        if not ids:
            return {}
        pending = keys.pending(model_id)
        records, deadlines = atomic_read(
            self.client,
            pending,
            [["HMGET", pending, *ids], ["ZMSCORE", keys.deadlines(model_id), *ids]],
        )
        return {
            event_id: (record, float(deadline))
            for event_id, record, deadline in zip(ids, records, deadlines, strict=True)
            if record is not None and deadline is not None
        }

    @unavailable
    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        self._guard(model_id)
        due = self.client.zrangebyscore(keys.deadlines(model_id), "-inf", now, start=0, num=limit)
        return [event_id.decode() if isinstance(event_id, bytes) else event_id for event_id in due]
