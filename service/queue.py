"""Queue mode (DESIGN §4 *Modes*): validated batches appended to a Redis Stream per model.

With ``AUCSTREAM_MODE=queue`` the HTTP routes ``POST .../events`` and ``POST .../labels`` parse
and validate a batch exactly as in sync mode (bad input gets the same 4xx and nothing is
appended), then :meth:`StreamQueue.append_events` / :meth:`StreamQueue.append_labels` add it to
``aucs:{m}:stream`` and the request returns 202 with the stream ids.  ``aucstream worker``
(:mod:`service.worker`) learns the entries with the same :class:`~service.engine.Engine`.

Stream entry encoding (pickle-free; the parsed batch, so a worker never parses a body again).
A batch of more than ``AUCSTREAM_QUEUE_ENTRY_EVENTS`` events is split into several entries,
appended all or nothing.  Fields of one entry:

========== ==========================================================================
``kind``   ``events`` (labelled events) or ``labels`` (delayed labels for scored ids)
``n``      number of events in the entry (decimal)
``y``      labels in {-1, +1}: raw little-endian int64 bytes
``ids``    JSON list, one string or ``null`` per event; absent when no event has an id
``d``      ``events`` only: n_features (decimal)
``X``      ``events``, dense models: raw little-endian float64 bytes, row-major ``n x d``
``indptr`` ``events``, sparse / hashed models (CSR, already hashed): int64 bytes,
``indices`` with ``indices`` (int64) and ``data`` (float64)
``data``
========== ==========================================================================

Backlog: ``aucs:{m}:queue`` counts the entries and events appended; a worker's checkpoint (the
meta fields ``queue:last_id``, ``queue:entries``, ``queue:events``, committed with the state)
counts those applied.  Their difference is the backlog: an append that would take it over
``AUCSTREAM_QUEUE_MAX_BACKLOG_EVENTS`` is refused (429 with ``Retry-After``), checked and
appended in one Lua script.  Applied entries are trimmed from the stream by the worker.

Writer lease: a model has one writer at a time.  A worker holds ``aucs:{m}:lease`` (its name,
with a TTL it renews) and takes at most its fair share of the models (models / live workers,
rounded up; workers announce themselves in ``aucs:workers``).  The engine's version check
keeps even a worker that lost its lease without knowing it from losing or repeating an update,
and entries at or before the checkpointed id are skipped, so an entry is never learned twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import redis

from core.validation import CSRMatrix
from service.errors import InvalidInput, ModelChanged, ModelNotFound, QueueFull
from service.ingest import Batch
from service.stores import keys
from service.stores.redis import _unavailable

#: checkpoint fields (in ``aucs:{m}:meta``) written by a worker with the state
LAST_ID = "queue:last_id"
APPLIED_ENTRIES = "queue:entries"
APPLIED_EVENTS = "queue:events"

APPEND_SCRIPT = """
-- KEYS[1] aucs:{m}:config  KEYS[2] aucs:{m}:meta  KEYS[3] aucs:{m}:stream  KEYS[4] aucs:{m}:queue
-- ARGV[1] incarnation the batch was validated against   ARGV[2] most events in the backlog
-- ARGV[3] consumer group name   ARGV[4] events in this request   ARGV[5] number of entries
-- then per entry: the number of its field/value arguments, then those arguments.
-- Returns the list of new stream ids; -2 when there is no model; -3 when the model was
-- re-created since the batch was validated; {-1, backlog} when the backlog is full.
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if redis.call('HGET', KEYS[2], 'incarnation') ~= ARGV[1] then return -3 end
local appended = tonumber(redis.call('HGET', KEYS[4], 'events') or '0')
local applied = tonumber(redis.call('HGET', KEYS[2], 'queue:events') or '0')
local backlog = appended - applied
if backlog + tonumber(ARGV[4]) > tonumber(ARGV[2]) then return {-1, backlog} end
local fresh = redis.call('EXISTS', KEYS[3]) == 0
local ids = {}
local position = 6
for entry = 1, tonumber(ARGV[5]) do
  local count = tonumber(ARGV[position])
  local fields = {}
  for j = 1, count do fields[j] = ARGV[position + j] end
  ids[entry] = redis.call('XADD', KEYS[3], '*', unpack(fields))
  position = position + count + 1
end
if fresh then redis.pcall('XGROUP', 'CREATE', KEYS[3], ARGV[3], '0') end
redis.call('HINCRBY', KEYS[4], 'events', ARGV[4])
redis.call('HINCRBY', KEYS[4], 'entries', ARGV[5])
return ids
"""

ENSURE_GROUP_SCRIPT = """
-- KEYS[1] aucs:{m}:config   KEYS[2] aucs:{m}:stream   ARGV[1] consumer group name
-- Creates the stream and its consumer group (reading from the start) if they are missing.
-- Returns 1 when the model exists, 0 when it does not (nothing is created then).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
return 1
"""

LEASE_SCRIPT = """
-- KEYS[1] aucs:{m}:lease   KEYS[2] aucs:{m}:config
-- ARGV[1] worker name   ARGV[2] lease duration (milliseconds)
-- Takes the lease when free, renews it when the caller holds it.
-- Returns 1 when the caller holds the lease, 0 when another worker does or there is no model.
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

HEARTBEAT_SCRIPT = """
-- KEYS[1] aucs:workers   ARGV[1] worker name   ARGV[2] heartbeat lifetime (milliseconds)
-- Marks the worker alive until now + lifetime (Redis's clock), forgets expired workers.
-- Returns the number of live workers.
local now = redis.call('TIME')
local milliseconds = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], milliseconds + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', milliseconds)
return redis.call('ZCARD', KEYS[1])
"""

RELEASE_SCRIPT = """
-- KEYS[1] aucs:{m}:lease   ARGV[1] worker name
-- Returns 1 when the caller held the lease (now released), else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


def parse_id(stream_id: str | bytes) -> tuple[int, int]:
    """``"1700000000000-3"`` -> ``(1700000000000, 3)`` (stream ids compare as such pairs)."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def next_id(stream_id: str) -> str:
    """The smallest id after ``stream_id`` (``XTRIM MINID`` keeps ids >= its argument)."""
    milliseconds, sequence = parse_id(stream_id)
    return f"{milliseconds}-{sequence + 1}"


# ---------------------------------------------------------------------------- encoding
def _le(array: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def encode_events(batch: Batch, entry_events: int) -> list[tuple[int, dict[str, bytes]]]:
    """A validated labelled batch -> ``[(n_events, stream fields)]``, one per entry."""
    assert batch.y is not None
    entries = []
    for start in range(0, max(len(batch), 1), entry_events):
        rows = np.arange(start, min(start + entry_events, len(batch)), dtype=np.int64)
        part = batch if len(rows) == len(batch) else batch.take(rows)
        assert part.y is not None
        fields: dict[str, bytes] = {
            "kind": b"events",
            "n": str(len(part)).encode(),
            "d": str(int(part.X.shape[1])).encode(),
            "y": _le(part.y, "<i8"),
        }
        if isinstance(part.X, CSRMatrix):
            fields["indptr"] = _le(part.X.indptr, "<i8")
            fields["indices"] = _le(part.X.indices, "<i8")
            fields["data"] = _le(part.X.data, "<f8")
        else:
            fields["X"] = _le(part.X, "<f8")
        if part.ids is not None:
            fields["ids"] = orjson.dumps(part.ids)
        entries.append((len(part), fields))
    return entries


def encode_labels(
    ids: Sequence[str], labels: np.ndarray, entry_events: int
) -> list[tuple[int, dict[str, bytes]]]:
    entries = []
    for start in range(0, max(len(ids), 1), entry_events):
        part = list(ids[start : start + entry_events])
        fields = {
            "kind": b"labels",
            "n": str(len(part)).encode(),
            "y": _le(labels[start : start + entry_events], "<i8"),
            "ids": orjson.dumps(part),
        }
        entries.append((len(part), fields))
    return entries


@dataclass
class Entry:
    """One stream entry as a worker sees it.  ``fields`` is None for an entry that was
    trimmed while still pending (it was applied: only ids at or before a checkpoint are
    trimmed)."""

    id: str
    fields: dict[bytes, bytes] | None

    @property
    def kind(self) -> str:
        assert self.fields is not None
        return self.fields.get(b"kind", b"").decode()

    @property
    def n_events(self) -> int:
        return 0 if self.fields is None else int(self.fields.get(b"n", b"0"))


def _array(fields: dict[bytes, bytes], name: str, dtype: str, count: int | None = None):
    raw = fields[name.encode()]
    array = np.frombuffer(raw, dtype=dtype).copy()
    if count is not None and len(array) != count:
        raise ValueError(f"field {name!r} holds {len(array)} values, expected {count}")
    return array


def _ids(fields: dict[bytes, bytes], n_events: int) -> list[str | None] | None:
    raw = fields.get(b"ids")
    if raw is None:
        return None
    ids = orjson.loads(raw)
    if type(ids) is not list or len(ids) != n_events:
        raise ValueError(f"field 'ids' is not a list of {n_events} ids")
    return [None if value is None else str(value) for value in ids]


def decode_events(entry: Entry) -> Batch:
    """An ``events`` entry -> the batch that was validated by the API (ValueError if corrupt)."""
    fields = entry.fields
    assert fields is not None
    n_events = int(fields[b"n"])
    n_features = int(fields[b"d"])
    y = _array(fields, "y", "<i8", n_events)
    X: np.ndarray | CSRMatrix
    if b"X" in fields:
        X = _array(fields, "X", "<f8", n_events * n_features).reshape(n_events, n_features)
    else:
        indptr = _array(fields, "indptr", "<i8", n_events + 1)
        indices = _array(fields, "indices", "<i8", int(indptr[-1]))
        data = _array(fields, "data", "<f8", int(indptr[-1]))
        X = CSRMatrix(indptr, indices, data, n_features)
    return Batch(X, y, _ids(fields, n_events))


def decode_labels(entry: Entry) -> tuple[list[str], np.ndarray]:
    fields = entry.fields
    assert fields is not None
    n_events = int(fields[b"n"])
    ids = _ids(fields, n_events)
    if ids is None or any(event_id is None for event_id in ids):
        raise ValueError("a labels entry needs an id per label")
    return [str(event_id) for event_id in ids], _array(fields, "y", "<i8", n_events)


def concatenate(batches: Sequence[Batch]) -> Batch:
    """Consecutive batches of one model as one (learned in one engine call: the learners give
    the same state bit for bit whether a sequence is learned at once or in parts)."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0].X
    X: np.ndarray | CSRMatrix
    if isinstance(first, CSRMatrix):
        parts: list[CSRMatrix] = [b.X for b in batches]  # type: ignore[misc]
        pieces = [parts[0].indptr[:1]]
        offset = 0
        for part in parts:
            pieces.append(part.indptr[1:] + offset)
            offset += part.nnz
        X = CSRMatrix(
            np.concatenate(pieces).astype(np.int64),
            np.concatenate([p.indices for p in parts]),
            np.concatenate([p.data for p in parts]),
            first.n_features,
        )
    else:
        X = np.concatenate([b.X for b in batches])  # type: ignore[misc]
    y = np.concatenate([b.y for b in batches])  # type: ignore[misc]
    ids: list[str | None] | None = None
    if any(b.ids is not None for b in batches):
        ids = []
        for b in batches:
            ids.extend(b.ids if b.ids is not None else [None] * len(b))
    return Batch(X, y, ids)


# ---------------------------------------------------------------------------- the queue
@dataclass
class Appended:
    stream_ids: list[str]
    events: int
    #: events queued and not yet learned, this request included
    backlog_events: int


class StreamQueue:
    """The Redis side of queue mode, for the API (append, lag) and for workers (read, ack,
    claim, lease).  Methods are synchronous; connection failures raise
    :class:`~service.errors.StoreUnavailable` (503)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        max_backlog_events: int = 1_000_000,
        entry_events: int = 10_000,
        retry_after_seconds: int = 1,
        group: str = keys.WORKER_GROUP,
    ) -> None:
        self.client = client
        self.max_backlog_events = max_backlog_events
        self.entry_events = entry_events
        self.retry_after_seconds = retry_after_seconds
        self.group = group
        self._append = client.register_script(APPEND_SCRIPT)
        self._ensure_group = client.register_script(ENSURE_GROUP_SCRIPT)
        self._lease = client.register_script(LEASE_SCRIPT)
        self._release = client.register_script(RELEASE_SCRIPT)
        self._heartbeat = client.register_script(HEARTBEAT_SCRIPT)

    # ------------------------------------------------------------------ API side
    def append_events(self, model_id: str, incarnation: str, batch: Batch) -> Appended:
        if batch.y is None:
            raise InvalidInput("events need labels 'y' to be learned", field="y")
        return self._append_entries(
            model_id, incarnation, encode_events(batch, self.entry_events), len(batch)
        )

    def append_labels(
        self, model_id: str, incarnation: str, ids: Sequence[str], labels: np.ndarray
    ) -> Appended:
        return self._append_entries(
            model_id, incarnation, encode_labels(ids, labels, self.entry_events), len(ids)
        )

    @_unavailable
    def _append_entries(
        self,
        model_id: str,
        incarnation: str,
        entries: list[tuple[int, dict[str, bytes]]],
        n_events: int,
    ) -> Appended:
        args: list[Any] = [
            incarnation,
            self.max_backlog_events,
            self.group,
            n_events,
            len(entries),
        ]
        for _, fields in entries:
            args.append(2 * len(fields))
            for name, value in fields.items():
                args.extend((name, value))
        reply = self._append(
            keys=[
                keys.config(model_id),
                keys.meta(model_id),
                keys.stream(model_id),
                keys.queue(model_id),
            ],
            args=args,
        )
        if reply == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if reply == -3:
            raise ModelChanged(
                f"model {model_id!r} was re-created while the request was parsed; resend it"
            )
        if isinstance(reply, list) and reply and reply[0] == -1:
            backlog = int(reply[1])
            raise QueueFull(
                f"model {model_id!r} has {backlog} events queued and not yet learned; "
                f"{n_events} more would exceed the bound of {self.max_backlog_events}: "
                f"retry after {self.retry_after_seconds} s",
                headers={"Retry-After": str(self.retry_after_seconds)},
            )
        stream_ids = [value.decode() for value in reply]
        backlog = self.lag(model_id)["events"]
        return Appended(stream_ids, n_events, int(backlog))

    @_unavailable
    def lag(self, model_id: str) -> dict[str, Any]:
        """How far learning is behind the stream head: ``entries`` and ``events`` appended
        and not yet applied, ``seconds`` = age of the oldest entry not yet applied (0 when
        caught up; Redis's clock), ``last_applied_id``."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.queue(model_id), ["entries", "events"])
            pipe.hmget(keys.meta(model_id), [APPLIED_ENTRIES, APPLIED_EVENTS, LAST_ID])
            pipe.time()
            appended, applied, (now_s, now_us) = pipe.execute()
        entries = int(appended[0] or 0) - int(applied[0] or 0)
        events = int(appended[1] or 0) - int(applied[1] or 0)
        last_id: str | None = applied[2].decode() if applied[2] else None
        seconds = 0.0
        if entries > 0:
            first = self.client.xrange(
                keys.stream(model_id), min=f"({last_id or '0-0'}", max="+", count=1
            )
            if first:
                milliseconds, _ = parse_id(first[0][0])  # type: ignore[index, arg-type]
                seconds = max(now_s + now_us / 1e6 - milliseconds / 1000.0, 0.0)
        return {
            "entries": max(entries, 0),
            "events": max(events, 0),
            "seconds": seconds,
            "last_applied_id": last_id,
        }

    # ------------------------------------------------------------------ worker side
    @_unavailable
    def ensure_group(self, model_id: str) -> bool:
        return bool(
            int(
                self._ensure_group(
                    keys=[keys.config(model_id), keys.stream(model_id)], args=[self.group]
                )
            )
        )

    @_unavailable
    def hold_lease(self, model_id: str, worker: str, lease_ms: int) -> bool:
        """Take or renew the model's writer lease; False when another worker holds it."""
        return bool(
            int(
                self._lease(
                    keys=[keys.lease(model_id), keys.config(model_id)], args=[worker, lease_ms]
                )
            )
        )

    @_unavailable
    def heartbeat(self, worker: str, lifetime_ms: int) -> int:
        """Mark ``worker`` alive for ``lifetime_ms``; returns how many workers are alive."""
        return int(self._heartbeat(keys=[keys.WORKERS], args=[worker, lifetime_ms]))

    @_unavailable
    def leave(self, worker: str) -> None:
        self.client.zrem(keys.WORKERS, worker)

    @_unavailable
    def release_lease(self, model_id: str, worker: str) -> bool:
        return bool(int(self._release(keys=[keys.lease(model_id)], args=[worker])))

    @_unavailable
    def claim(self, model_id: str, consumer: str, min_idle_ms: int) -> int:
        """Claim every pending entry idle for at least ``min_idle_ms`` (XAUTOCLAIM); returns
        how many were claimed (entries trimmed meanwhile are dropped from the pending list
        by Redis)."""
        start, claimed = "0-0", 0
        for _ in range(10_000):
            reply = self.client.xautoclaim(
                keys.stream(model_id), self.group, consumer, min_idle_ms, start, count=1000
            )
            start = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
            claimed += len(reply[1])
            if start == "0-0":
                break
        return claimed

    @_unavailable
    def forget_consumers(self, model_id: str, consumer: str, min_idle_ms: int) -> int:
        """Delete the group's consumers other than ``consumer`` that hold no pending entry and
        were idle for ``min_idle_ms`` (dead workers' names pile up otherwise: a restarted
        worker has a new one).  Returns how many."""
        stream = keys.stream(model_id)
        forgotten = 0
        for item in self.client.xinfo_consumers(stream, self.group):
            name = item["name"].decode() if isinstance(item["name"], bytes) else item["name"]
            if name != consumer and not int(item["pending"]) and int(item["idle"]) >= min_idle_ms:
                self.client.xgroup_delconsumer(stream, self.group, name)
                forgotten += 1
        return forgotten

    @_unavailable
    def pending_of_others(self, model_id: str, consumer: str) -> int:
        summary = self.client.xpending(keys.stream(model_id), self.group)
        total = 0
        for item in summary.get("consumers") or []:
            name = item["name"].decode() if isinstance(item["name"], bytes) else item["name"]
            if name != consumer:
                total += int(item["pending"])
        return total

    @_unavailable
    def read(
        self, positions: dict[str, str], consumer: str, count: int, block_ms: int | None
    ) -> dict[str, list[Entry]]:
        """XREADGROUP over the models' streams: ``">"`` for new entries, ``"0"`` for this
        consumer's own pending ones.  Returns ``{model: entries in stream order}``."""
        streams: dict[Any, Any] = {
            keys.stream(model): position for model, position in positions.items()
        }
        by_key = {keys.stream(model): model for model in positions}
        reply: Any = self.client.xreadgroup(
            self.group, consumer, streams, count=count, block=block_ms
        )
        result: dict[str, list[Entry]] = {}
        for key, messages in reply or []:
            model = by_key[key.decode() if isinstance(key, bytes) else key]
            entries = [
                Entry(message_id.decode(), fields or None) for message_id, fields in messages
            ]
            if entries:
                result[model] = entries
        return result

    @_unavailable
    def ack(self, model_id: str, stream_ids: Sequence[str], applied_up_to: str | None) -> None:
        """XACK the entries; trim the stream of every entry at or before the checkpoint."""
        with self.client.pipeline(transaction=False) as pipe:
            if stream_ids:
                pipe.xack(keys.stream(model_id), self.group, *stream_ids)
            if applied_up_to is not None:
                pipe.xtrim(keys.stream(model_id), minid=next_id(applied_up_to), approximate=False)
            pipe.execute()
