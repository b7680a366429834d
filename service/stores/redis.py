"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

Layout (key names in :mod:`service.stores.keys`): each state array is its own field of the
``aucs:{m}:state`` hash, holding the array's raw little-endian bytes, with ``<dtype>|<shape>`` in
the same field of ``aucs:{m}:layout`` — so weights, class means, reservoirs, quantile estimates
and scaler statistics are visible in Redis as such, and nothing is ever pickled.  Arrays over
16 KiB (the metrics window, reservoirs, a hashed model's weights) are split into 16 KiB chunk
fields ``<name>@<i>``, and a commit sends only the fields whose bytes changed since the version
it builds on (known from this process's last load or commit of that version; otherwise it
rewrites the hashes whole).

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
run unchanged on a Redis Cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
import redis.connection
import redis.exceptions

from service.errors import (
    InsufficientStorage,
    LeaseLost,
    ModelChanged,
    ModelExists,
    ModelNotFound,
    StaleVersion,
)
from service.stores import keys
from service.stores.base import (
    Commit,
    Fence,
    StoredState,
    decode_array,
    encode_layout,
    pending_full,
    to_little_endian,
)
from service.stores.client import connect, round_trip, transaction, unavailable
from service.stores.lua import CREATE_SCRIPT, DELETE_SCRIPT, PENDING_SCRIPT

# Lua's unpack() is limited by the C stack: pass long argument lists in chunks of this size.
_CHUNK = 500

#: arrays larger than this are stored as several fields ``<name>@0``, ``<name>@1``, ... so that
#: a commit rewrites only the chunks that changed (a window ring buffer, a reservoir or a
#: hashed model's 2**20 weights change in a few places per batch).  Measured with the default
#: window and reservoirs: 16 KiB sends 28 KB per single-event commit (64 KiB: 106 KB; whole
#: arrays: 315 KB) and 207 KB per 1,000-event commit (285 KB), for less CPU on both sides.
CHUNK_BYTES = 16 * 1024


@dataclass
class _Written:
    """What this process knows is in Redis at ``(incarnation, version)``: the base of a delta."""

    incarnation: str
    version: int
    fields: dict[str, bytes]
    layouts: dict[str, str]


def encode_fields(arrays: dict[str, np.ndarray]) -> tuple[dict[str, bytes], dict[str, str]]:
    """State arrays -> (hash fields, layouts).  A layout is ``<dtype>|<shape>`` for an array in
    one field, ``<dtype>|<shape>|<n chunks>`` for one split into ``<name>@<i>`` fields.

    Each byte is copied once, from the array into its field (no intermediate ``tobytes``)."""
    fields: dict[str, bytes] = {}
    layouts: dict[str, str] = {}
    for name, array in arrays.items():
        array = to_little_endian(array)
        layout = encode_layout(array)
        if array.nbytes <= CHUNK_BYTES:
            fields[name] = array.tobytes()
        else:
            view = array.reshape(-1).view(np.uint8).data
            n_chunks = -(-array.nbytes // CHUNK_BYTES)
            for index in range(n_chunks):
                fields[f"{name}@{index}"] = bytes(
                    view[index * CHUNK_BYTES : (index + 1) * CHUNK_BYTES]
                )
            layout += f"|{n_chunks}"
        layouts[name] = layout
    return fields, layouts


def decode_fields(raw: dict[str, bytes], layouts: dict[str, str]) -> dict[str, np.ndarray]:
    arrays = {}
    for name, layout in layouts.items():
        parts = layout.split("|")
        if len(parts) == 3:
            data = b"".join(raw[f"{name}@{index}"] for index in range(int(parts[2])))
        else:
            data = raw[name]
        arrays[name] = decode_array(data, "|".join(parts[:2]))
    return arrays


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


class RedisStore:
    name = "redis"
    #: network round trips: the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._create = client.register_script(CREATE_SCRIPT)
        self._delete = client.register_script(DELETE_SCRIPT)
        self._pending = client.register_script(PENDING_SCRIPT)
        self._written: dict[str, _Written] = {}
        self._written_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        return cls(connect(url))

    @unavailable
    def ping(self) -> None:
        self.client.ping()

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ models
    @unavailable
    def create_model(
        self, model_id, config, arrays, incarnation, *, replace=False, replaces=None
    ) -> int:
        import orjson

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
        result = self._create(
            keys=ordered,
            args=[replaces or ("1" if replace else "0"), orjson.dumps(config), incarnation]
            + [len(fields), *_flat(fields), len(layouts), *_flat(layouts)],
        )
        if int(result) == -1:
            raise ModelExists(f"a model with id {model_id!r} already exists", field="id")
        if int(result) == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if int(result) == -3:
            raise ModelChanged(f"model {model_id!r} was re-created during the reset")
        self._remember(model_id, _Written(incarnation, 1, fields, layouts))
        if replaces is None:
            # a reset's model is registered already; registering it again could list a model
            # deleted between the script and this command
            self.client.sadd(keys.MODELS, model_id)
        return 1

    @unavailable
    def list_models(self) -> list[str]:
        return sorted(_text(member) for member in self.client.smembers(keys.MODELS))

    def _remember(self, model_id: str, written: _Written | None) -> None:
        with self._written_lock:
            if written is None:
                self._written.pop(model_id, None)
            else:
                self._written[model_id] = written

    @unavailable
    def delete_model(self, model_id: str) -> None:
        self._remember(model_id, None)
        deleted = self._delete(keys=keys.all_model_keys(model_id))
        self.client.srem(keys.MODELS, model_id)
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

        version_key, meta_key = keys.version(model_id), keys.meta(model_id)
        if known_version is not None:
            # Two plain reads, version first: if the incarnation read after it is the cached
            # one, the model was not re-created in between, so (version, incarnation) is a
            # state that existed and the cache is current if both match.
            version, incarnation = round_trip(
                self.client, [["GET", version_key], ["HGET", meta_key, "incarnation"]]
            )
            if version is None:
                raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
            if int(version) == known_version and _text(incarnation) == known_incarnation:
                return StoredState(known_version, known_incarnation)
        replies = round_trip(
            self.client,
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
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        raw = _pairs(raw_state)
        layouts = {name: _text(value) for name, value in _pairs(raw_layouts).items()}
        meta = {name: _text(value) for name, value in _pairs(raw_meta).items()}
        arrays = decode_fields(raw, layouts)
        incarnation = meta["incarnation"]
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
           the ids past it are forgotten); the consumed pending labels; the checkpoint fields;
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
        with self._written_lock:
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

        result = transaction(self.client, reads, check, writes)
        if result is None:  # EXEC found the version key written since WATCH
            self._remember(model_id, None)
            raise StaleVersion(model_id)
        version = int(result[-1])
        self._remember(model_id, _Written(commit.incarnation, version, fields, layouts))
        return version

    def _check_version(
        self, model_id: str, commit: Commit, version: bytes | None, incarnation: bytes | None
    ) -> None:
        if version is None:
            self._remember(model_id, None)
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if int(version) != commit.expected_version or _text(incarnation) != commit.incarnation:
            self._remember(model_id, None)
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

    # ------------------------------------------------------------------ ids and pending labels
    def _alive(self, key: str, ids: Sequence[str], now: float) -> np.ndarray:
        mask = np.zeros(len(ids), dtype=bool)
        for start in range(0, len(ids), _CHUNK):
            part = list(ids[start : start + _CHUNK])
            scores = self.client.zmscore(key, part)
            mask[start : start + len(part)] = [
                score is not None and score > now for score in scores
            ]
        return mask

    @unavailable
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        if not ids:
            return np.zeros(0, dtype=bool)
        return self._alive(keys.seen(model_id), ids, now)

    @unavailable
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        if not ids:
            return np.zeros(0, dtype=bool)
        return self._alive(keys.expired(model_id), ids, now)

    @unavailable
    def put_pending(
        self,
        model_id: str,
        records: dict[str, bytes],
        deadline: float,
        max_records: int | None = None,
    ) -> None:
        if not records:
            return
        args: list[Any] = [repr(float(deadline)), max_records or 0]
        for event_id, record in records.items():
            args.extend((event_id, record))
        kept = self._pending(
            keys=[keys.config(model_id), keys.pending(model_id), keys.deadlines(model_id)],
            args=args,
        )
        if int(kept) == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if int(kept) == -3:
            assert max_records is not None
            raise InsufficientStorage(pending_full(model_id, max_records))

    @unavailable
    def get_pending(self, model_id: str, ids: Sequence[str]) -> dict[str, tuple[bytes, float]]:
        if not ids:
            return {}
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hmget(keys.pending(model_id), list(ids))
            pipe.zmscore(keys.deadlines(model_id), list(ids))
            records, deadlines = pipe.execute()
        return {
            event_id: (record, float(deadline))
            for event_id, record, deadline in zip(ids, records, deadlines, strict=True)
            if record is not None and deadline is not None
        }

    @unavailable
    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        due = self.client.zrangebyscore(keys.deadlines(model_id), "-inf", now, start=0, num=limit)
        return [_text(event_id) for event_id in due]
