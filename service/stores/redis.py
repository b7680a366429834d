"""The Redis store: state shared by every process and machine (``AUCSTREAM_REDIS_URL``).

Layout (key names in :mod:`service.stores.keys`): each state array is its own field of the
``aucs:{m}:state`` hash, holding the array's raw little-endian bytes, with ``<dtype>|<shape>`` in
the same field of ``aucs:{m}:layout`` — so weights, class means, reservoirs, quantile estimates
and scaler statistics are visible in Redis as such, and nothing is ever pickled.

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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import redis
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
-- then four counted lists, each as <count> followed by its items:
--   arrays          (name, raw bytes, layout) triples
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
local chunk = 500
local position = 5
local function each(count, width, apply)
  local i = 0
  while i < count do
    local n = math.min(chunk, count - i)
    local items = {}
    for j = 1, n * width do items[j] = ARGV[position + i * width + j - 1] end
    apply(items, n)
    i = i + n
  end
  position = position + count * width
end
local count = tonumber(ARGV[position]); position = position + 1
local values, layouts = {}, {}
each(count, 3, function(items, n)
  local v, l = {}, {}
  for k = 0, n - 1 do
    v[#v + 1] = items[k * 3 + 1]; v[#v + 1] = items[k * 3 + 2]
    l[#l + 1] = items[k * 3 + 1]; l[#l + 1] = items[k * 3 + 3]
  end
  redis.call('HSET', KEYS[3], unpack(v))
  redis.call('HSET', KEYS[4], unpack(l))
end)
local expiry = ARGV[4]
local function zadd_all(key)
  local n_ids = tonumber(ARGV[position]); position = position + 1
  if n_ids > 0 then
    each(n_ids, 1, function(items, n)
      local args = {}
      for k = 1, n do args[#args + 1] = expiry; args[#args + 1] = items[k] end
      redis.call('ZADD', key, unpack(args))
    end)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[3])
  end
end
zadd_all(KEYS[5])
local n_consumed = tonumber(ARGV[position]); position = position + 1
each(n_consumed, 1, function(items, n)
  redis.call('HDEL', KEYS[7], unpack(items))
  redis.call('ZREM', KEYS[8], unpack(items))
end)
zadd_all(KEYS[6])
local n_meta = tonumber(ARGV[position]); position = position + 1
each(n_meta, 2, function(items, n) redis.call('HSET', KEYS[2], unpack(items)) end)
return redis.call('INCR', KEYS[1])
"""

CREATE_SCRIPT = """
-- KEYS[1] config  KEYS[2] version  KEYS[3] meta  KEYS[4] state  KEYS[5] layout
-- KEYS[6..] the model's other keys (seen, expired, pending, deadlines), wiped on replace
-- ARGV[1] '1' to replace an existing model, '0' to refuse   ARGV[2] config JSON
-- ARGV[3] incarnation   ARGV[4] number of arrays, then (name, raw bytes, layout) triples
-- Returns 1 (the new version), or -1 if the model exists and ARGV[1] is '0'.
if ARGV[1] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('DEL', unpack(KEYS))
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], 1)
redis.call('HSET', KEYS[3], 'incarnation', ARGV[3])
local count = tonumber(ARGV[4])
for i = 0, count - 1 do
  local base = 5 + i * 3
  redis.call('HSET', KEYS[4], ARGV[base], ARGV[base + 1])
  redis.call('HSET', KEYS[5], ARGV[base], ARGV[base + 2])
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


def _array_args(arrays: dict[str, np.ndarray]) -> list[Any]:
    args: list[Any] = []
    for name, array in arrays.items():
        array = to_little_endian(array)
        args.extend((name, array.tobytes(), encode_layout(array)))
    return args


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: list[bytes]) -> dict[str, bytes]:
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


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

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        # Timeouts turn a hung Redis into 503 responses instead of requests that never end.
        client = redis.Redis.from_url(
            url,
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
        result = self._create(
            keys=ordered,
            args=["1" if replace else "0", orjson.dumps(config), incarnation, len(arrays)]
            + _array_args(arrays),
        )
        if int(result) == -1:
            raise ModelExists(f"a model with id {model_id!r} already exists", field="id")
        self.client.sadd(keys.MODELS, model_id)
        return 1

    @_unavailable
    def list_models(self) -> list[str]:
        return sorted(_text(member) for member in self.client.smembers(keys.MODELS))

    @_unavailable
    def delete_model(self, model_id: str) -> None:
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
        arrays = {name: decode_array(raw[name], layouts[name]) for name in raw}
        return StoredState(version, incarnation, config, arrays, meta)

    @_unavailable
    def commit(self, model_id: str, commit: Commit) -> int:
        args: list[Any] = [
            str(commit.expected_version),
            commit.incarnation,
            repr(float(commit.now)),
            repr(float(commit.id_expiry)),
            len(commit.arrays),
            *_array_args(commit.arrays),
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
        if result == -1:
            raise StaleVersion(model_id)
        if result == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
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
