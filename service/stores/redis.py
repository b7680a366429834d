"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

Layout (key names in :mod:`service.stores.keys`): each state array is its own field of the
``aucs:{m}:state`` hash, holding the array's raw little-endian bytes, with ``<dtype>|<shape>`` in
the same field of ``aucs:{m}:layout`` — so weights, class means, reservoirs, quantile estimates
and scaler statistics are visible in Redis as such, and nothing is ever pickled.  Arrays over
1 KiB (the metrics window, reservoirs, a hashed model's weights) are split into 1 KiB chunk
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
its calls into Lua and back, which for a large commit costs Redis several times the CPU of the
same commands outside Lua (loadtest/README.md has the measurements).

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

The class is built in layers, one module each: the ids and pending records
(:mod:`service.stores.redis_events`), the watch for lost data
(:mod:`service.stores.redis_watch`), the model lifecycle (:mod:`service.stores.redis_models`),
and here the connection, loads and commits.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
import redis.connection
import redis.exceptions

from service.errors import LeaseLost, ModelNotFound, StaleVersion, StoreUnavailable
from service.stores import keys
from service.stores.base import Commit, Fence, StoredState
from service.stores.client import ReplicaWait, connect, round_trip, transaction, unavailable
from service.stores.fields import (
    DEFAULT_KNOWN_MODELS,
    Encoded,
    KnownStates,
    decode_fields,
    encode_changes,
)
from service.stores.lua import ACKNOWLEDGE_SCRIPT, CREATE_SCRIPT, DELETE_SCRIPT, MARKER_SCRIPT
from service.stores.redis_models import RedisModels, _flat, _Written
from service.stores.redis_setup import _text

logger = logging.getLogger("aucstream.store")


def _pairs(reply: list[bytes] | dict[bytes, bytes]) -> dict[str, bytes]:
    """An ``HGETALL`` reply read off the connection: a flat list (RESP2) or a map (RESP3)."""
    if isinstance(reply, dict):
        return {_text(name): value for name, value in reply.items()}
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


class RedisStore(RedisModels):
    name = "redis"
    #: network round trips: the HTTP layer calls it from the thread pool
    blocking = True
    #: every commit writes the changed chunks of the state (no log yet: the model's stream,
    #: with AOF and WAIT, is the planned one)
    logs = False

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
        self._remember(model_id, _Written(incarnation, int(version), Encoded.of(arrays)))
        return StoredState(int(version), incarnation, orjson.loads(config_json), arrays, meta)

    def checkpoint(self, model_id, incarnation, version, arrays) -> bool:
        return False  # every commit wrote the state: there is nothing to catch up

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
        if commit.arrays is None:
            raise ValueError("the Redis store writes states, not log entries (logs = False)")
        base = self._written.take(model_id)
        known = None
        if (
            base is not None
            and base.incarnation == commit.incarnation
            and base.version == commit.expected_version
        ):
            known = base.encoded
        changes, encoded = encode_changes(commit.arrays, known)
        state, layout = keys.state(model_id), keys.layout(model_id)
        version_key, meta = keys.version(model_id), keys.meta(model_id)
        writes: list[list[Any]] = [["MULTI"]]
        if known is None:
            writes.append(["DEL", state, layout])
        if changes.fields:
            writes.append(["HSET", state, *_flat(changes.fields)])
        if changes.layouts:
            writes.append(["HSET", layout, *_flat(changes.layouts)])
        if changes.dropped_fields:
            writes.append(["HDEL", state, *changes.dropped_fields])
        if changes.dropped_layouts:
            writes.append(["HDEL", layout, *changes.dropped_layouts])
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
        self._remember(model_id, _Written(commit.incarnation, version, encoded))
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
