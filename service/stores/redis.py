"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

Layout (key names in :mod:`service.stores.keys`): each state array is its own field of the
``aucs:{m}:state`` hash, holding the array's raw little-endian bytes, with ``<dtype>|<shape>`` in
the same field of ``aucs:{m}:layout`` — so weights, class means, reservoirs, quantile estimates
and scaler statistics are visible in Redis as such, and nothing is ever pickled.  Arrays over
16 KiB (the metrics window, reservoirs, a hashed model's weights) are split into 16 KiB chunk
fields ``<name>@<i>``, all-zero chunks left out (:mod:`service.stores.fields`), and a commit
sends only the fields whose bytes changed since the version it builds on (known from this
process's last load or commit of that version, for the models it caches; otherwise it rewrites
the hashes whole).

Atomicity:

* :meth:`RedisStore.load` reads in ``MULTI`` / ``EXEC`` (first only the version and
  incarnation when the caller has a cached copy);
* :meth:`RedisStore.commit` is an optimistic transaction (``WATCH`` the version key, check
  it, then ``MULTI`` with the changed fields, the ids, the consumed pending labels, the
  checkpoint fields and ``INCR`` of the version, ``EXEC``): all or nothing.  A stale version
  or incarnation raises :class:`~service.errors.StaleVersion` (the engine reloads and
  retries), a missing model :class:`~service.errors.ModelNotFound`; a queue worker's commit
  (with a :class:`~service.stores.base.Fence`) also watches and checks the model's writer
  lease, :class:`~service.errors.LeaseLost` when it moved;
* creating, deleting and keeping pending labels are Lua scripts (:mod:`service.stores.lua`,
  each with a KEYS / ARGV block): they carry little data.

The state arrays never pass through Lua: Redis copies a script's arguments and the replies of
its calls into Lua and back, which for the ~600 KB of a 1,000-event commit tripled Redis's CPU.

All of one model's keys share the hash tag ``{<model id>}``, so the transactions and scripts
run unchanged on a Redis Cluster (a ``redis+cluster://`` URL; :mod:`service.stores.client`
sends each to the master of the model's slot).  The registry ``aucs:models`` is in another
slot: see :meth:`RedisStore.list_models` for how it is kept right without a cross-slot
script.

Lost data is noticed (:mod:`service.stores.epoch`): the epoch markers ``aucs:{epoch-N}:marker``
are checked every few seconds, when a model this process knew is missing, at every listing
and at every ``ping``; a model's version lower than one this process saw is a rollback.
Either raises an alarm (``aucs:alarms``) that makes the store, or the model, answer
:class:`~service.errors.StoreLostData` until :meth:`RedisStore.acknowledge_loss`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import redis
import redis.connection
import redis.exceptions

from service.errors import (
    LeaseLost,
    ModelChanged,
    ModelExists,
    ModelNotFound,
    ReplicasUnconfirmed,
    StaleVersion,
    StoreLostData,
    StoreUnavailable,
)
from service.stores import keys
from service.stores.base import Commit, Fence, StoredState
from service.stores.client import (
    CLUSTER_UNAVAILABLE,
    ReplicaWait,
    connect,
    is_cluster,
    round_trip,
    run_script,
    transaction,
    unavailable,
)
from service.stores.epoch import STORE, Marker, model_scope, new_epoch
from service.stores.fields import DEFAULT_KNOWN_MODELS, KnownStates, decode_fields, encode_fields
from service.stores.lua import ACKNOWLEDGE_SCRIPT, CREATE_SCRIPT, DELETE_SCRIPT, MARKER_SCRIPT
from service.stores.redis_events import RedisEventMemory

logger = logging.getLogger("aucstream.store")


@dataclass
class _Written:
    """What this process knows is in Redis at ``(incarnation, version)``: the base of a delta."""

    incarnation: str
    version: int
    fields: dict[str, bytes]
    layouts: dict[str, str]


def _flat(pairs: dict[str, Any]) -> list[Any]:
    flat: list[Any] = []
    for key, value in pairs.items():
        flat.extend((key, value))
    return flat


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(reply: list[bytes] | dict[bytes, bytes]) -> dict[str, bytes]:
    """An ``HGETALL`` reply read off the connection: a flat list (RESP2) or a map (RESP3)."""
    if isinstance(reply, dict):
        return {_text(name): value for name, value in reply.items()}
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


class RedisStore(RedisEventMemory):
    name = "redis"
    #: network round trips: the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(
        self,
        client: redis.Redis,
        wait: ReplicaWait | None = None,
        max_known_models: int = DEFAULT_KNOWN_MODELS,
    ) -> None:
        super().__init__(client, wait)  # self.client, self.watch; ids and pending records
        self._create = client.register_script(CREATE_SCRIPT)
        self._delete = client.register_script(DELETE_SCRIPT)
        self._marker = client.register_script(MARKER_SCRIPT)
        self._acknowledge = client.register_script(ACKNOWLEDGE_SCRIPT)
        self._checking = threading.Lock()
        #: the settings whose checks (:meth:`open`) wait for Redis's first answer
        self._settings: Any = None
        #: what Redis holds of the models this process uses: the bases of delta commits
        self._written: KnownStates[_Written] = KnownStates(max_known_models)

    @classmethod
    def from_url(
        cls,
        url: str,
        wait: ReplicaWait | None = None,
        max_known_models: int = DEFAULT_KNOWN_MODELS,
    ) -> RedisStore:
        return cls(connect(url), wait, max_known_models)

    @classmethod
    def open(cls, settings: Any) -> RedisStore:
        """The store of ``settings`` (``redis_url``), checked: the Redis keeps its data
        (:class:`~service.stores.redis_setup.VolatileRedis` unless volatile is allowed),
        writes wait for replicas as configured, and the epoch markers are read (written at
        first use).  A Redis that does not answer yet is checked at its first answer (the
        service answers 503 meanwhile); a cluster none of whose seeds answers is
        :class:`StoreUnavailable` at once (its slots cannot be discovered)."""
        store = cls(connect(settings.redis_url), max_known_models=settings.max_cached_models)
        store._settings = settings
        try:
            store._set_up()
        except StoreUnavailable as error:
            logger.warning("Redis did not answer at start (%s): checked when it does", error)
        except BaseException:
            store.close()
            raise
        return store

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
        """On a cluster: every master answers, and the cluster serves every slot.  Then the
        epoch markers are checked: :class:`StoreLostData` if the store, or a model, lost
        data (and no operator acknowledged it)."""
        if is_cluster(self.client):
            self.client.ping(target_nodes=self.client.PRIMARIES)
            state = self.client.cluster_info().get("cluster_state")
            if _text(state) != "ok":
                raise StoreUnavailable(f"the Redis Cluster's state is {_text(state)!r}")
        else:
            self.client.ping()
        self._check_epoch(force=True)
        self.watch.guard_any()

    # ------------------------------------------------------------------ lost data
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

    def _read_markers(self, script: Any) -> dict[str, Marker]:
        """Run ``script`` on every marker.  With replicas waited for, a marker's new clock
        counts only once they confirmed it: a failover may lose an unconfirmed tick without
        losing any acknowledged write, which must not look like a loss."""
        markers = {}
        for key in self._marker_keys():
            try:
                reply = run_script(self.client, script, [key], [new_epoch()], self.wait)
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
            cause = self.watch.judge(self._read_markers(self._marker))
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
        return ModelNotFound(f"no model with id {model_id!r}", field="model_id")

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
            self.watch.acknowledged(self._read_markers(self._acknowledge))
            self.client.delete(keys.ALARMS)
        if acknowledged:
            logger.warning("lost data acknowledged: %s", "; ".join(acknowledged.values()))
        return acknowledged

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ models
    @unavailable
    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        import orjson

        self._guard()
        model_keys = keys.all_model_keys(model_id)
        ordered = [
            keys.config(model_id),
            keys.version(model_id),
            keys.meta(model_id),
            keys.state(model_id),
            keys.layout(model_id),
        ]
        ordered += [key for key in model_keys if key not in ordered]
        fields, layouts = encode_fields(arrays)
        if replaces is None:
            # registered before it is written, so that no failure leaves a model that is not
            # listed (see list_models); a reset's model is registered already
            self.client.sadd(keys.MODELS, model_id)
        result = run_script(
            self.client,
            self._create,
            ordered,
            [replaces or ("1" if replace else "0"), orjson.dumps(config), incarnation]
            + [len(fields), *_flat(fields), len(layouts), *_flat(layouts)],
            self.wait,
        )
        if int(result) == -1:
            raise ModelExists(f"a model with id {model_id!r} already exists", field="id")
        if int(result) == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if int(result) == -3:
            raise ModelChanged(f"model {model_id!r} was re-created during the reset")
        self._remember(model_id, _Written(incarnation, 1, fields, layouts))
        self.watch.saw(model_id, incarnation, 1)
        if replaces is None:
            # again: a deletion of the previous model of this id may have unregistered it
            # between the first registration and the script
            self.client.sadd(keys.MODELS, model_id)
        return 1

    @unavailable
    def list_models(self) -> list[str]:
        """The registered ids whose model exists.

        ``aucs:models`` and a model's keys live in different slots of a Redis Cluster, so no
        script may write both: a model is registered before it is written and again after
        (:meth:`create_model`), unregistered after it is deleted and registered again if it
        was re-created meanwhile (:meth:`delete_model`).  A failure in between leaves at worst
        an id registered without a model, which is not listed (its config key is checked,
        one pipeline, one round trip per master) and costs one set member until the id is
        created or deleted.  The epoch markers are checked first: an emptied store lists no
        models, which is a loss, not an answer."""
        self._check_epoch(force=True)
        self.watch.guard()
        registered = sorted(_text(member) for member in self.client.smembers(keys.MODELS))
        with self.client.pipeline(transaction=False) as pipe:
            for model_id in registered:
                pipe.exists(keys.config(model_id))
            exists = pipe.execute() if registered else []
        return [model_id for model_id, found in zip(registered, exists, strict=True) if found]

    def _remember(self, model_id: str, written: _Written | None) -> None:
        if written is None:
            self._written.forget(model_id)
        else:
            self._written.remember(model_id, written)

    def forget_cached(self, model_id: str) -> None:
        self._written.forget(model_id)

    @unavailable
    def delete_model(self, model_id: str) -> None:
        self._guard(model_id)
        self.watch.forget(model_id)
        self._remember(model_id, None)
        deleted = self._delete(keys=keys.all_model_keys(model_id))
        self.client.srem(keys.MODELS, model_id)
        if self.client.exists(keys.config(model_id)):
            # created again between the script and SREM: it stays listed
            self.client.sadd(keys.MODELS, model_id)
        if not int(deleted):
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")

    @unavailable
    def load(self, model_id, known_version=None, known_incarnation=None) -> StoredState:
        """The model's state, read atomically (``MULTI`` ... ``EXEC``).

        With a cached ``(version, incarnation)``, only those two are read first (one small
        round trip, the common case of a process whose cache is current); the arrays are read
        only when they changed.  Plain reads, not a Lua script: a script's reply of a large
        ``HGETALL`` cost Redis 0.84 ms of CPU for 640 KB against 0.14 ms without Lua."""
        import orjson

        self._guard(model_id)
        version_key, meta_key = keys.version(model_id), keys.meta(model_id)
        if known_version is not None:
            # Two plain reads, version first: if the incarnation read after it is the cached
            # one, the model was not re-created in between, so (version, incarnation) is a
            # state that existed and the cache is current if both match.
            version, incarnation = round_trip(
                self.client, version_key, [["GET", version_key], ["HGET", meta_key, "incarnation"]]
            )
            if version is None:
                raise self._missing(model_id)
            if int(version) == known_version and _text(incarnation) == known_incarnation:
                self._saw(model_id, known_incarnation, known_version, self.wait is None)
                return StoredState(known_version, known_incarnation)
        replies = round_trip(
            self.client,
            version_key,
            [
                ["MULTI"],
                ["GET", version_key],
                ["GET", keys.config(model_id)],
                ["HGETALL", keys.state(model_id)],
                ["HGETALL", keys.layout(model_id)],
                ["HGETALL", meta_key],
                ["EXEC"],
            ],
        )
        version, config_json, raw_state, raw_layouts, raw_meta = replies[-1]
        if version is None or config_json is None:
            raise self._missing(model_id)
        raw = _pairs(raw_state)
        layouts = {name: _text(value) for name, value in _pairs(raw_layouts).items()}
        meta = {name: _text(value) for name, value in _pairs(raw_meta).items()}
        arrays = decode_fields(raw, layouts)
        incarnation = meta["incarnation"]
        # with replicas waited for, a read may see a commit no replica has yet (a failover
        # can undo it without losing an acknowledged write): only checked, not recorded
        self._saw(model_id, incarnation, int(version), self.wait is None)
        self._remember(model_id, _Written(incarnation, int(version), raw, layouts))
        return StoredState(int(version), incarnation, orjson.loads(config_json), arrays, meta)

    @unavailable
    def commit(self, model_id: str, commit: Commit) -> int:
        """Write ``commit`` atomically: an optimistic transaction on the version key.

        1. ``WATCH`` the version key, ``GET`` it and ``HGET`` the incarnation (one round trip);
           a missing model raises :class:`ModelNotFound`, another version or incarnation
           :class:`StaleVersion`.
        2. ``MULTI``; the changed state and layout fields (``HSET`` / ``HDEL``, or the whole
           hashes after a ``DEL`` when this process does not know what Redis holds at the
           expected version); the learned and expired ids (``ZADD`` with their expiry, then
           the ids past it are forgotten, and the oldest beyond ``max_remembered_ids``); the
           consumed pending labels; the checkpoint fields;
           ``INCR`` of the version; ``EXEC`` (one round trip).  Every commit, re-creation,
           reset and deletion writes the version key, so ``EXEC`` does nothing (nil) if anyone
           wrote in between: :class:`StaleVersion`, and the engine reloads and retries.
        3. A commit with a ``fence`` (a queue worker) also ``WATCH``-es the lease key and reads
           it with the lease generation in step 1: :class:`LeaseLost` unless they are the
           fence's, and ``EXEC`` does nothing if the lease is taken or expires in between.

        Why not one Lua script (one round trip fewer): Redis copies every argument of a script
        into Lua and back, which for a 1,000-event commit with the regret window (~600 KB in
        36 chunks of 16 KiB) cost Redis 0.93 ms of CPU against 0.29 ms for the same ``HSET``
        outside Lua (measured on the 2-vCPU development machine); the extra round trip on
        loopback costs ~0.05 ms.  Plain commands inside ``MULTI`` (no ``EVALSHA``) also mean
        that a flushed script cache can never apply half a transaction.

        Only the changed fields are sent when this process knows what Redis holds at the
        expected version (it loaded or wrote it): the version check guarantees that nobody
        wrote in between, or the commit is refused.
        """
        fields, layouts = encode_fields(commit.arrays)
        base = self._written.get(model_id)
        state, layout = keys.state(model_id), keys.layout(model_id)
        version_key, meta = keys.version(model_id), keys.meta(model_id)
        writes: list[list[Any]] = [["MULTI"]]
        if (
            base is not None
            and base.incarnation == commit.incarnation
            and base.version == commit.expected_version
        ):
            send = {f: data for f, data in fields.items() if base.fields.get(f) != data}
            send_layouts = {n: lay for n, lay in layouts.items() if base.layouts.get(n) != lay}
            dropped = [f for f in base.fields if f not in fields]
        else:
            writes.append(["DEL", state, layout])
            send, send_layouts, dropped = fields, layouts, []
        if send:
            writes.append(["HSET", state, *_flat(send)])
        if send_layouts:
            writes.append(["HSET", layout, *_flat(send_layouts)])
        if dropped:
            writes.append(["HDEL", state, *dropped])
        expiry, now = repr(float(commit.id_expiry)), repr(float(commit.now))
        for key, ids in ((keys.seen(model_id), commit.learned_ids),
                         (keys.expired(model_id), commit.expired_ids)):  # fmt: skip
            if ids:
                scored: list[Any] = ["ZADD", key]
                for event_id in ids:
                    scored.extend((expiry, event_id))
                writes.append(scored)
                writes.append(["ZREMRANGEBYSCORE", key, "-inf", now])
                if commit.max_remembered_ids:
                    # the oldest ids (lowest expiry) beyond the bound are forgotten early
                    writes.append(["ZREMRANGEBYRANK", key, 0, -commit.max_remembered_ids - 1])
        if commit.remove_pending:
            writes.append(["HDEL", keys.pending(model_id), *commit.remove_pending])
            writes.append(["ZREM", keys.deadlines(model_id), *commit.remove_pending])
        if commit.meta:
            writes.append(["HSET", meta, *_flat(commit.meta)])
        writes.append(["INCR", version_key])
        writes.append(["EXEC"])
        reads: list[list[Any]] = [
            ["WATCH", version_key],
            ["GET", version_key],
            ["HGET", meta, "incarnation"],
        ]
        if commit.fence is not None:
            # the lease key is watched too: a worker taking the lease over (SET) or the lease
            # expiring between this check and EXEC makes EXEC do nothing
            lease = keys.lease(model_id)
            reads += [
                ["WATCH", lease],
                ["GET", lease],
                ["HGET", keys.queue(model_id), "lease_generation"],
            ]

        def check(replies: list[Any]) -> None:
            self._check_version(model_id, commit, replies[1], replies[2])
            if commit.fence is not None:
                self._check_fence(model_id, commit.fence, replies[4], replies[5])

        self._guard(model_id)
        try:
            result = transaction(self.client, version_key, reads, check, writes, self.wait)
        except ModelNotFound:
            raise self._missing(model_id) from None
        if result is None:  # EXEC found the version key written since WATCH
            self._remember(model_id, None)
            raise StaleVersion(model_id)
        version = int(result[-1])
        self._remember(model_id, _Written(commit.incarnation, version, fields, layouts))
        self.watch.saw(model_id, commit.incarnation, version)
        return version

    def _check_version(
        self, model_id: str, commit: Commit, version: bytes | None, incarnation: bytes | None
    ) -> None:
        if version is None:
            self._remember(model_id, None)
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if int(version) != commit.expected_version or _text(incarnation) != commit.incarnation:
            self._remember(model_id, None)
            if _text(incarnation) == commit.incarnation:
                # raises if it went back
                self._saw(model_id, commit.incarnation, int(version), self.wait is None)
            raise StaleVersion(model_id)

    def _check_fence(
        self, model_id: str, fence: Fence, holder: bytes | None, generation: bytes | None
    ) -> None:
        current = int(generation or 0)
        if holder is None or _text(holder) != fence.holder or current != fence.generation:
            raise LeaseLost(
                f"model {model_id!r}: the writer lease of {fence.holder} "
                f"(generation {fence.generation}) is lost; now {_text(holder or b'nobody')} "
                f"at generation {current}"
            )
