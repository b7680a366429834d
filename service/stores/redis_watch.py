"""The base of the Redis store: its connection, the watch for lost data
(:mod:`service.stores.epoch`: markers ``aucs:{epoch-N}:marker``, alarms ``aucs:alarms``), and
the start-up checks of :meth:`RedisStore.open <service.stores.redis.RedisStore.open>`
(:mod:`.redis_setup`), run here when a Redis that did not answer at start does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis.exceptions

from service.errors import ModelNotFound, ReplicasUnconfirmed, StoreLostData, StoreUnavailable
from service.stores import keys
from service.stores.base import no_model
from service.stores.client import (
    CLUSTER_UNAVAILABLE,
    ReplicaWait,
    is_cluster,
    run_script,
    unavailable,
)
from service.stores.epoch import STORE, LossWatch, Marker, model_scope, new_epoch
from service.stores.lua import MARKER_SCRIPT
from service.stores.redis_setup import _text

logger = logging.getLogger("aucstream.store")


class RedisWatch:
    """Lost data and the deferred start-up checks of the Redis store (its base class)."""

    def __init__(self, client: Any, wait: ReplicaWait | None = None) -> None:
        self.client = client
        #: acknowledged writes wait for this many replicas (None: they do not)
        self.wait = wait
        self.watch = LossWatch("Redis")
        #: the Lua script reading (and at an acknowledgement renewing) the epoch markers
        self._marker = client.register_script(MARKER_SCRIPT)
        #: one marker check at a time
        self._checking = threading.Lock()
        #: the settings whose checks (:meth:`_set_up`) wait for Redis's first answer (None
        #: once done)
        self._settings: Any = None

    def _set_up(self) -> None:
        """The checks of :meth:`open`, once: persistence, replicas, markers."""
        from service.stores.redis_setup import check_persistence, replica_wait

        settings = self._settings
        if settings is None:
            return
        unavailable(check_persistence)(self.client, settings.allow_volatile_redis)
        self.wait = unavailable(replica_wait)(
            self.client, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
        )
        self._settings = None
        self._check_epoch(force=True)

    @unavailable
    def ping(self) -> None:
        """On a cluster every master answers and every slot is served; then the epoch markers are
        checked (:class:`StoreLostData` on an unacknowledged loss)."""
        if is_cluster(self.client):
            self.client.ping(target_nodes=self.client.PRIMARIES)
            state = self.client.cluster_info().get("cluster_state")
            if _text(state) != "ok":
                raise StoreUnavailable(f"the Redis Cluster's state is {_text(state)!r}")
        else:
            self.client.ping()
        self._check_epoch(force=True)
        self.watch.guard_any()

    def _marker_keys(self) -> list[str]:
        """The epoch markers: one on a server; on a cluster one per master (the lowest N
        whose ``aucs:{epoch-N}:marker`` is in a slot of that master), and every marker seen
        before (a resharding moves a marker with its slot: it is still checked)."""
        if not is_cluster(self.client):
            return [keys.marker(0)]
        primaries = {node.name for node in self.client.get_primaries()}
        slots = self.client.nodes_manager.slots_cache
        found: dict[str, str] = {}
        number = 0
        while len(found) < len(primaries) and number < 100_000:
            key = keys.marker(number)
            owners = slots.get(self.client.keyslot(key))
            if owners and owners[0].name in primaries:
                found.setdefault(owners[0].name, key)
            number += 1
        return sorted(set(found.values()) | set(self.watch.known))

    def _read_markers(self, acknowledge: bool = False) -> dict[str, Marker]:
        """Read (or, to ``acknowledge``, renew) every marker. With replicas waited for, a new
        clock counts only once they confirmed it: a failover may lose an unconfirmed tick, and no
        acknowledged write, which is no loss."""
        markers = {}
        for key in self._marker_keys():
            try:
                args = [new_epoch(), "1" if acknowledge else "0"]
                reply = run_script(self.client, self._marker, [key], args, self.wait)
                confirmed = True
            except ReplicasUnconfirmed as unconfirmed:
                reply, confirmed = unconfirmed.reply, False
            epoch, clock, created, acknowledged, now = reply
            markers[key] = Marker(
                _text(epoch),
                int(clock),
                int(now) if confirmed else int(clock),
                bool(created),
                bool(acknowledged),
            )
        return markers

    def _check_epoch(self, force: bool = False) -> None:
        """Check the markers and read the alarms (when due, or ``force``); a loss found is
        written as the store's alarm.  One check at a time: a thread that finds one under
        way goes on, unless ``force``."""
        if not (force or self.watch.due()):
            return
        if self._settings is not None:
            self._set_up_or_refuse()
            return
        if not self._checking.acquire(blocking=force):
            return
        try:
            judgement = self.watch.judge(self._read_markers())
            self.watch.accept(judgement)  # the script moved the markers' clocks already
            cause = judgement.cause
            if cause:
                self.client.hsetnx(keys.ALARMS, STORE, cause)  # the first cause noticed stands
            alarms = self.client.hgetall(keys.ALARMS)
            self.watch.raise_alarms({_text(k): _text(v) for k, v in alarms.items()})
        finally:
            self._checking.release()

    def _set_up_or_refuse(self) -> None:
        """Redis answers at last: the checks of :meth:`open`; a Redis keeping nothing is
        refused request by request (503) until it is configured to keep its data."""
        from service.stores.redis_setup import VolatileRedis

        try:
            self._set_up()
        except VolatileRedis as error:
            raise StoreUnavailable(str(error)) from None

    def _guard(self, model_id: str | None = None) -> None:
        """Before a call: 503 if the store or the model lost data (a check when due; a
        check that cannot reach a master, e.g. of a cluster failing over, is left to the
        next one rather than failing a request that does not need that master)."""
        if self.watch.due():
            try:
                self._check_epoch()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    *CLUSTER_UNAVAILABLE):  # fmt: skip
                self.watch.postpone()
        self.watch.guard(model_id)

    def _missing(self, model_id: str) -> ModelNotFound:
        """A model is missing: deleted, or lost with the store's data (then this raises)."""
        self._check_epoch(force=True)
        self.watch.guard(model_id)
        self.watch.forget(model_id)
        return no_model(model_id)

    def _saw(self, model_id: str, incarnation: str, version: int, record: bool = True) -> None:
        """Record a version read or written; a rollback raises the model's alarm (and checks
        the markers: the whole store has probably gone back)."""
        cause = self.watch.saw(model_id, incarnation, version, record)
        if cause is None:
            return
        self.client.hsetnx(keys.ALARMS, model_scope(model_id), cause)
        self._check_epoch(force=True)
        self.watch.guard(model_id)
        raise StoreLostData(cause)  # the alarm was acknowledged meanwhile: this answer stands

    @unavailable
    def alarms(self) -> dict[str, str]:
        """The alarms of lost data not yet acknowledged (``store`` or ``model:<id>``)."""
        self._check_epoch(force=True)
        return dict(self.watch.alarms)

    @unavailable
    def acknowledge_loss(self) -> dict[str, str]:
        """An operator knows what was lost: clear the alarms and start a new epoch that every
        process adopts at its next check.  Returns the alarms acknowledged."""
        self._check_epoch(force=True)
        with self._checking:
            acknowledged = dict(self.watch.alarms)
            self.watch.acknowledged(self._read_markers(acknowledge=True))
            self.client.delete(keys.ALARMS)
        if acknowledged:
            logger.warning("lost data acknowledged: %s", "; ".join(acknowledged.values()))
        return acknowledged

    def close(self) -> None:
        self.client.close()
