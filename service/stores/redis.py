"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

Layout (key names in :mod:`service.stores.keys`): each state array is its own field of the
``aucs:{m}:state`` hash, holding the array's raw little-endian bytes, with ``<dtype>|<shape>`` in
the same field of ``aucs:{m}:layout`` — so weights, class means, reservoirs, quantile estimates
and scaler statistics are visible in Redis as such, and nothing is ever pickled.  Arrays over
16 KiB (the metrics window, reservoirs, a hashed model's weights) are split into 16 KiB chunk
fields ``<name>@<i>``, and a commit sends only the fields whose bytes changed since the version
it builds on (known from this process's last load or commit of that version; otherwise it
rewrites the hashes whole).

Reads and writes that must be atomic are Lua scripts (below, each with a KEYS / ARGV block):

* ``LOAD`` returns only the version when the caller's cached ``(incarnation, version)`` is
  current, else everything: one round trip either way;
* ``COMMIT`` checks the expected version and incarnation, writes the arrays, bumps the version,
  records learned / expired ids and consumes pending labels — all or nothing.  A stale version
  returns ``-1``, mapped to :class:`~service.errors.StaleVersion` (the engine reloads and
  retries); a missing model returns ``-2`` (:class:`~service.errors.ModelNotFound`).

All of one model's keys share the hash tag ``{<model id>}``, so the scripts run unchanged on a
Redis Cluster.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import redis
import redis.connection
import redis.exceptions

from service.errors import ModelExists, ModelNotFound, StaleVersion, StoreUnavailable
from service.stores import keys
from service.stores.base import (
    Commit,
    StoredState,
    decode_array,
    encode_layout,
    to_little_endian,
)

# Lua's unpack() is limited by the C stack: pass long argument lists in chunks of this size.
_CHUNK = 500

LOAD_SCRIPT = """
-- KEYS[1] aucs:{m}:version   KEYS[2] aucs:{m}:meta   KEYS[3] aucs:{m}:config
-- KEYS[4] aucs:{m}:state     KEYS[5] aucs:{m}:layout
-- ARGV[1] cached version ('' for none)   ARGV[2] cached incarnation ('' for none)
-- Returns 0 when the model does not exist; {version} when the cache is current;
-- else {version, incarnation, config, HGETALL state, HGETALL layout, HGETALL meta}.
local version = redis.call('GET', KEYS[1])
if not version then return 0 end
local incarnation = redis.call('HGET', KEYS[2], 'incarnation')
if version == ARGV[1] and incarnation == ARGV[2] then return {version} end
return {version, incarnation, redis.call('GET', KEYS[3]), redis.call('HGETALL', KEYS[4]),
        redis.call('HGETALL', KEYS[5]), redis.call('HGETALL', KEYS[2])}
"""

COMMIT_SCRIPT = """
-- KEYS[1] version  KEYS[2] meta  KEYS[3] state  KEYS[4] layout  KEYS[5] seen  KEYS[6] expired
-- KEYS[7] pending  KEYS[8] deadlines                      (all aucs:{m}:...)
-- ARGV[1] expected version   ARGV[2] incarnation   ARGV[3] now (unix s)
-- ARGV[4] expiry of the ids written here (unix s)
-- ARGV[5] '1': the state and layout hashes are replaced whole; '0': only the fields sent change
-- then counted lists, each as <count> followed by its items:
--   state fields    (field, raw bytes) pairs -> HSET state
--   layouts         (array name, layout) pairs -> HSET layout
--   dropped fields  -> HDEL state (chunks of an array that shrank)
--   learned ids     -> ZADD seen <expiry> <id>
--   consumed ids    -> HDEL pending, ZREM deadlines
--   expired ids     -> ZADD expired <expiry> <id>
--   meta fields     (field, value) pairs -> HSET meta
-- Returns the new version; -1 if the version or incarnation is stale; -2 if no model.
local version = redis.call('GET', KEYS[1])
if not version then return -2 end
if version ~= ARGV[1] or redis.call('HGET', KEYS[2], 'incarnation') ~= ARGV[2] then
  return -1
end
if ARGV[5] == '1' then redis.call('DEL', KEYS[3], KEYS[4]) end
local chunk = 500
local position = 6
local function each(width, apply)
  local count = tonumber(ARGV[position]); position = position + 1
  local i = 0
  while i < count do
    local n = math.min(chunk, count - i)
    local items = {}
    for j = 1, n * width do items[j] = ARGV[position + i * width + j - 1] end
    apply(items, n)
    i = i + n
  end
  position = position + count * width
  return count
end
each(2, function(items, n) redis.call('HSET', KEYS[3], unpack(items)) end)
each(2, function(items, n) redis.call('HSET', KEYS[4], unpack(items)) end)
each(1, function(items, n) redis.call('HDEL', KEYS[3], unpack(items)) end)
local expiry = ARGV[4]
local function zadd_all(key)
  local added = each(1, function(items, n)
    local args = {}
    for k = 1, n do args[#args + 1] = expiry; args[#args + 1] = items[k] end
    redis.call('ZADD', key, unpack(args))
  end)
  if added > 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[3]) end
end
zadd_all(KEYS[5])
each(1, function(items, n)
  redis.call('HDEL', KEYS[7], unpack(items))
  redis.call('ZREM', KEYS[8], unpack(items))
end)
zadd_all(KEYS[6])
each(2, function(items, n) redis.call('HSET', KEYS[2], unpack(items)) end)
return redis.call('INCR', KEYS[1])
"""

CREATE_SCRIPT = """
-- KEYS[1] config  KEYS[2] version  KEYS[3] meta  KEYS[4] state  KEYS[5] layout
-- KEYS[6..] the model's other keys (seen, expired, pending, deadlines), wiped on replace
-- ARGV[1] '1' to replace an existing model, '0' to refuse   ARGV[2] config JSON
-- ARGV[3] incarnation   ARGV[4] number of state fields, then (field, raw bytes) pairs,
-- then the number of layouts and (array name, layout) pairs
-- Returns 1 (the new version), or -1 if the model exists and ARGV[1] is '0'.
if ARGV[1] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('DEL', unpack(KEYS))
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], 1)
redis.call('HSET', KEYS[3], 'incarnation', ARGV[3])
local position = 4
for _, key in ipairs({KEYS[4], KEYS[5]}) do
  local count = tonumber(ARGV[position])
  for i = 0, count - 1 do
    redis.call('HSET', key, ARGV[position + 1 + 2 * i], ARGV[position + 2 + 2 * i])
  end
  position = position + 1 + 2 * count
end
return 1
"""

PENDING_SCRIPT = """
-- KEYS[1] aucs:{m}:config   KEYS[2] aucs:{m}:pending   KEYS[3] aucs:{m}:deadlines
-- ARGV[1] deadline (unix s), then (event id, record) pairs
-- Keeps scored events' records until the deadline.  Returns the number kept, or -2 (no model).
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[i])
end
return (#ARGV - 1) / 2
"""

DELETE_SCRIPT = """
-- KEYS: every key of one model (aucs:{m}:...), KEYS[1] being its config
-- Returns 1 when deleted, 0 when the model did not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
"""

T = TypeVar("T")


def _unavailable(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            raise StoreUnavailable(f"Redis did not answer: {error}") from None

    return wrapper


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
    one field, ``<dtype>|<shape>|<n chunks>`` for one split into ``<name>@<i>`` fields."""
    fields: dict[str, bytes] = {}
    layouts: dict[str, str] = {}
    for name, array in arrays.items():
        array = to_little_endian(array)
        data = array.tobytes()
        layout = encode_layout(array)
        if len(data) <= CHUNK_BYTES:
            fields[name] = data
        else:
            n_chunks = -(-len(data) // CHUNK_BYTES)
            view = memoryview(data)
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


def _pairs(flat: list[bytes]) -> dict[str, bytes]:
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


class _OneWriteConnection(redis.connection.Connection):
    """A TCP connection that writes a packed command with one ``sendall``: redis-py sends every
    argument over 6,000 bytes with its own ``sendall``, i.e. ~80 system calls (and as many
    wake-ups of Redis) for a commit of 1,000 events with the regret window's 16 KiB chunks;
    joining them first costs one memory copy of the command."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if isinstance(command, list) and len(command) > 1:
            command = [b"".join(command)]
        super().send_packed_command(command, check_health)


class RedisStore:
    name = "redis"
    #: network round trips: the HTTP layer calls it from the thread pool
    blocking = True

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._load = client.register_script(LOAD_SCRIPT)
        self._commit = client.register_script(COMMIT_SCRIPT)
        self._create = client.register_script(CREATE_SCRIPT)
        self._delete = client.register_script(DELETE_SCRIPT)
        self._pending = client.register_script(PENDING_SCRIPT)
        self._written: dict[str, _Written] = {}
        self._written_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        # Timeouts turn a hung Redis into 503 responses instead of requests that never end.
        # unix:// and rediss:// URLs pick their own connection class; plain TCP gets ours
        tcp = "connection_class" not in redis.connection.parse_url(url)
        client = redis.Redis.from_url(
            url,
            **({"connection_class": _OneWriteConnection} if tcp else {}),
            decode_responses=False,
            health_check_interval=30,
            socket_timeout=10.0,
            socket_connect_timeout=5.0,
        )
        return cls(client)

    @_unavailable
    def ping(self) -> None:
        self.client.ping()

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ models
    @_unavailable
    def create_model(self, model_id, config, arrays, incarnation, *, replace=False) -> int:
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
            args=["1" if replace else "0", orjson.dumps(config), incarnation]
            + [len(fields), *_flat(fields), len(layouts), *_flat(layouts)],
        )
        if int(result) == -1:
            raise ModelExists(f"a model with id {model_id!r} already exists", field="id")
        self._remember(model_id, _Written(incarnation, 1, fields, layouts))
        self.client.sadd(keys.MODELS, model_id)
        return 1

    @_unavailable
    def list_models(self) -> list[str]:
        return sorted(_text(member) for member in self.client.smembers(keys.MODELS))

    def _remember(self, model_id: str, written: _Written | None) -> None:
        with self._written_lock:
            if written is None:
                self._written.pop(model_id, None)
            else:
                self._written[model_id] = written

    @_unavailable
    def delete_model(self, model_id: str) -> None:
        self._remember(model_id, None)
        deleted = self._delete(keys=keys.all_model_keys(model_id))
        self.client.srem(keys.MODELS, model_id)
        if not int(deleted):
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")

    @_unavailable
    def load(self, model_id, known_version=None, known_incarnation=None) -> StoredState:
        import orjson

        reply = self._load(
            keys=[
                keys.version(model_id),
                keys.meta(model_id),
                keys.config(model_id),
                keys.state(model_id),
                keys.layout(model_id),
            ],
            args=[
                "" if known_version is None else str(known_version),
                known_incarnation or "",
            ],
        )
        if reply == 0 or not isinstance(reply, list):
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        version = int(reply[0])
        if len(reply) == 1:
            return StoredState(version, known_incarnation or "")
        incarnation = reply[1].decode()
        config = orjson.loads(reply[2])
        raw = _pairs(reply[3])
        layouts = {name: value.decode() for name, value in _pairs(reply[4]).items()}
        meta = {name: value.decode() for name, value in _pairs(reply[5]).items()}
        arrays = decode_fields(raw, layouts)
        self._remember(model_id, _Written(incarnation, version, raw, layouts))
        return StoredState(version, incarnation, config, arrays, meta)

    @_unavailable
    def commit(self, model_id: str, commit: Commit) -> int:
        """Write ``commit`` atomically.  When this process knows what Redis holds at the
        expected version (it loaded or wrote it), only the changed fields are sent: the
        version check guarantees that nobody wrote in between, or the commit is refused."""
        fields, layouts = encode_fields(commit.arrays)
        with self._written_lock:
            base = self._written.get(model_id)
        if (
            base is not None
            and base.incarnation == commit.incarnation
            and base.version == commit.expected_version
        ):
            full = "0"
            send = {f: data for f, data in fields.items() if base.fields.get(f) != data}
            send_layouts = {n: lay for n, lay in layouts.items() if base.layouts.get(n) != lay}
            dropped = [f for f in base.fields if f not in fields]
        else:
            full, send, send_layouts, dropped = "1", fields, layouts, []
        args: list[Any] = [
            str(commit.expected_version),
            commit.incarnation,
            repr(float(commit.now)),
            repr(float(commit.id_expiry)),
            full,
            len(send),
            *_flat(send),
            len(send_layouts),
            *_flat(send_layouts),
            len(dropped),
            *dropped,
            len(commit.learned_ids),
            *commit.learned_ids,
            len(commit.remove_pending),
            *commit.remove_pending,
            len(commit.expired_ids),
            *commit.expired_ids,
            len(commit.meta),
        ]
        for field, value in commit.meta.items():
            args.extend((field, value))
        result = int(
            self._commit(
                keys=[
                    keys.version(model_id),
                    keys.meta(model_id),
                    keys.state(model_id),
                    keys.layout(model_id),
                    keys.seen(model_id),
                    keys.expired(model_id),
                    keys.pending(model_id),
                    keys.deadlines(model_id),
                ],
                args=args,
            )
        )
        if result < 0:
            self._remember(model_id, None)
            if result == -1:
                raise StaleVersion(model_id)
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        self._remember(model_id, _Written(commit.incarnation, result, fields, layouts))
        return result

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

    @_unavailable
    def seen(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        if not ids:
            return np.zeros(0, dtype=bool)
        return self._alive(keys.seen(model_id), ids, now)

    @_unavailable
    def expired(self, model_id: str, ids: Sequence[str], now: float) -> np.ndarray:
        if not ids:
            return np.zeros(0, dtype=bool)
        return self._alive(keys.expired(model_id), ids, now)

    @_unavailable
    def put_pending(self, model_id: str, records: dict[str, bytes], deadline: float) -> None:
        if not records:
            return
        args: list[Any] = [repr(float(deadline))]
        for event_id, record in records.items():
            args.extend((event_id, record))
        kept = self._pending(
            keys=[keys.config(model_id), keys.pending(model_id), keys.deadlines(model_id)],
            args=args,
        )
        if int(kept) == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")

    @_unavailable
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

    @_unavailable
    def due_pending(self, model_id: str, now: float, limit: int) -> list[str]:
        due = self.client.zrangebyscore(keys.deadlines(model_id), "-inf", now, start=0, num=limit)
        return [_text(event_id) for event_id in due]
