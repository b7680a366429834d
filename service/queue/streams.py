"""Redis Streams of queue mode: appending validated batches (API side: a batch over
``AUCSTREAM_QUEUE_ENTRY_EVENTS`` is split into entries appended all or nothing, refused with 429
over ``AUCSTREAM_QUEUE_MAX_BACKLOG_EVENTS``), reading, claiming and acknowledging entries (worker
side), and the backlog / lag of a model's stream."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np
import redis

from service import codec
from service.errors import ModelChanged, ModelNotFound, QueueFull, StoreUnavailable
from service.groups import ThreadCombiner, each_alone
from service.ingest import Batch
from service.settings import Settings
from service.stores import keys
from service.stores.client import ReplicaWait, is_cluster, round_trip, run_script, unavailable
from service.stores.lua import APPEND_SCRIPT, ENSURE_GROUP_SCRIPT

#: a request as stream entries (each ``(events, fields)``) and its number of events
Entries = tuple[list[tuple[int, dict[str, bytes]]], int]

logger = logging.getLogger("aucstream.queue")

#: how many times an append is sent when Redis does not answer it (a connection reset, a
#: failover), the pause before the second attempt (the third waits twice as long), and how long
#: Redis keeps an append's reply for a resend (ms: more than 3 socket timeouts)
APPEND_ATTEMPTS = 3
APPEND_BACKOFF_SECONDS = 0.2
APPEND_REPLY_MS = 60_000

#: checkpoint fields (in ``aucs:{m}:meta``) written by a worker with the state
LAST_ID = "queue:last_id"
APPLIED_ENTRIES = "queue:entries"
APPLIED_EVENTS = "queue:events"


def parse_id(stream_id: str | bytes) -> tuple[int, int]:
    """``"1700000000000-3"`` -> ``(1700000000000, 3)`` (stream ids compare as such pairs)."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def next_id(stream_id: str) -> str:
    """The smallest id after ``stream_id`` (``XTRIM MINID`` keeps ids >= its argument)."""
    milliseconds, sequence = parse_id(stream_id)
    return f"{milliseconds}-{sequence + 1}"


@dataclass
class Entry:
    """One stream entry as a worker sees it; ``fields`` None: trimmed while still pending
    (so applied: only entries at or before a checkpoint are trimmed)."""

    id: str
    fields: dict[bytes, bytes] | None

    @property
    def kind(self) -> str:
        assert self.fields is not None
        return self.fields.get(b"kind", b"").decode()

    @property
    def n_events(self) -> int:
        return 0 if self.fields is None else int(self.fields.get(b"n", b"0"))


# ---------------------------------------------------------------------------- the queue
@dataclass
class Appended:
    stream_ids: list[str]
    events: int
    #: events queued and not yet learned, this request included
    backlog_events: int


@dataclass(eq=False, repr=False)
class StreamQueue:
    """The Redis side of queue mode, for the API (append, lag) and for workers (read, ack,
    claim, lease).  Methods are synchronous; connection failures raise
    :class:`~service.errors.StoreUnavailable` (503)."""

    client: redis.Redis
    _: KW_ONLY
    # the settings' defaults: the library and the service share one set
    max_backlog_events: int = Settings.model_fields["queue_max_backlog_events"].default
    entry_events: int = Settings.model_fields["queue_entry_events"].default
    retry_after_seconds: int = Settings.model_fields["queue_retry_after_seconds"].default
    cluster_block_ms: int = Settings.model_fields["worker_cluster_block_ms"].default
    #: how an append waits for replicas before it is acknowledged (None: it does not);
    #: the store's setting, read per append (the store decides it at Redis's first answer)
    replica_wait: Callable[[], ReplicaWait | None] = lambda: None

    def __post_init__(self) -> None:
        client = self.client
        self._append = client.register_script(APPEND_SCRIPT)
        self._ensure_group = client.register_script(ENSURE_GROUP_SCRIPT)
        #: the appends threads make to one model at the same moment, as one script call
        self._shared: ThreadCombiner[tuple[str, Entries], Appended] = ThreadCombiner(
            self._append_requests
        )
        #: on a cluster, the slot whose streams last had entries (its read blocks when
        #: nothing was read), and the turn of the groups when it is not read any more
        self._busy_slot: int | None = None
        self._turn = 0

    # ------------------------------------------------------------------ API side
    def event_entries(self, batch: Batch) -> Entries:
        """A batch parsed labelled (as every learn is) as stream entries, and its size."""
        return codec.encode_events(batch, self.entry_events), len(batch)

    def label_entries(self, ids: Sequence[str], labels: np.ndarray) -> Entries:
        """Delayed labels as stream entries, and their number."""
        return codec.encode_labels(ids, labels, self.entry_events), len(ids)

    def append_shared(self, model_id: str, incarnation: str, request: Entries) -> Appended:
        """Append one request's entries with those other threads append to the model at the
        same moment, in one script call (:class:`~service.groups.ThreadCombiner`); a group
        refused as a whole is appended request by request (:func:`~service.groups.each_alone`)."""
        return self._shared(model_id, (incarnation, request))

    def _append_requests(
        self, model_id: str, payloads: list[tuple[str, Entries]]
    ) -> list[Appended | Exception]:
        def merged(group: list[tuple[str, Entries]]) -> list[Appended]:
            if len({incarnation for incarnation, _ in group}) > 1:
                raise ValueError("parsed for different incarnations: appended one by one")
            return self.append_group(model_id, group[0][0], [entries for _, entries in group])

        def single(payload: tuple[str, Entries]) -> Appended:
            return self.append_group(model_id, payload[0], [payload[1]])[0]

        return each_alone(merged, single, payloads)

    def append_group(
        self, model_id: str, incarnation: str, requests: Sequence[Entries]
    ) -> list[Appended]:
        """The entries of several requests appended by one script, in order, all or nothing
        (refused: raises, nothing appended): each request's :class:`Appended` (its own stream
        ids; the backlog as of its last entry)."""
        entries = [entry for request_entries, _ in requests for entry in request_entries]
        total = sum(n_events for _, n_events in requests)
        whole = self._append_entries(model_id, incarnation, entries, total)
        results = []
        start, after = 0, total
        for request_entries, n_events in requests:
            stop = start + len(request_entries)
            after -= n_events
            results.append(
                Appended(whole.stream_ids[start:stop], n_events, whole.backlog_events - after)
            )
            start = stop
        return results

    @unavailable
    def _append_entries(
        self,
        model_id: str,
        incarnation: str,
        entries: list[tuple[int, dict[str, bytes]]],
        n_events: int,
    ) -> Appended:
        """Append the entries, all or nothing, with one script, sent again (up to
        :data:`APPEND_ATTEMPTS` times) when Redis does not answer: the batch's token makes a
        script that did run answer with its first reply instead of appending twice."""
        token = uuid.uuid4().hex
        args: list[Any] = [
            incarnation,
            self.max_backlog_events,
            keys.WORKER_GROUP,
            n_events,
            len(entries),
            APPEND_REPLY_MS,
        ]
        for _, fields in entries:
            args.append(2 * len(fields))
            for name, value in fields.items():
                args.extend((name, value))
        script_keys = [
            keys.config(model_id),
            keys.meta(model_id),
            keys.stream(model_id),
            keys.queue(model_id),
            keys.append_reply(model_id, token),
        ]
        for attempt in range(1, APPEND_ATTEMPTS + 1):
            try:
                reply = run_script(
                    self.client, self._append, script_keys, args, self.replica_wait()
                )
                break
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
                logger.warning(
                    "model %r: Redis did not answer an append (attempt %d of %d): %s",
                    model_id, attempt, APPEND_ATTEMPTS, error,
                )  # fmt: skip
                if attempt == APPEND_ATTEMPTS:
                    raise StoreUnavailable(
                        f"the store (Redis) did not answer {APPEND_ATTEMPTS} attempts to queue "
                        "the batch, so whether it was queued is unknown; send it again (events "
                        "with ids already learned are skipped)"
                    ) from None
                time.sleep(APPEND_BACKOFF_SECONDS * attempt)
        if reply == -2:
            raise ModelNotFound(f"no model with id {model_id!r}", field="model_id")
        if reply == -3:
            raise ModelChanged(
                f"model {model_id!r} was re-created while the request was parsed; resend it"
            )
        if reply[0] == -1:
            backlog = int(reply[1])
            raise QueueFull(
                f"model {model_id!r} has {backlog} events queued and not yet learned; "
                f"{n_events} more would exceed the bound of {self.max_backlog_events}: "
                f"retry after {self.retry_after_seconds} s",
                headers={"Retry-After": str(self.retry_after_seconds)},
            )
        stream_ids = [value.decode() for value in reply[2:]]
        return Appended(stream_ids, n_events, int(reply[1]))

    @unavailable
    def lag(self, model_id: str) -> dict[str, Any]:
        """How far learning is behind the stream head: ``entries`` and ``events`` appended
        and not yet applied, ``seconds`` = age of the oldest entry not yet applied (0 when
        caught up; Redis's clock), ``last_applied_id``."""
        queue = keys.queue(model_id)
        appended, applied, (now_s, now_us) = round_trip(
            self.client,
            queue,  # TIME from the master of the model's slot, as the stream ids are
            [["HMGET", queue, "entries", "events"],
             ["HMGET", keys.meta(model_id), APPLIED_ENTRIES, APPLIED_EVENTS, LAST_ID],
             ["TIME"]],
        )  # fmt: skip
        now_s, now_us = int(now_s), int(now_us)
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
    @unavailable
    def ensure_group(self, model_id: str) -> bool:
        script_keys = [keys.config(model_id), keys.stream(model_id)]
        exists = run_script(self.client, self._ensure_group, script_keys, [keys.WORKER_GROUP], None)
        return bool(int(exists))

    @unavailable
    def claim(self, model_id: str, consumer: str, min_idle_ms: int) -> None:
        """Claim every pending entry idle for at least ``min_idle_ms`` (XAUTOCLAIM; entries
        trimmed meanwhile are dropped from the pending list by Redis)."""
        start = "0-0"
        for _ in range(10_000):
            reply = self.client.xautoclaim(
                keys.stream(model_id), keys.WORKER_GROUP, consumer, min_idle_ms, start, count=1000
            )
            start = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
            if start == "0-0":
                break

    @unavailable
    def pending_of_others(self, model_id: str, consumer: str, min_idle_ms: int) -> int:
        """The entries pending with the group's consumers other than ``consumer``; those that
        hold none and were idle for ``min_idle_ms`` are deleted on the way (a restarted worker
        has a new name: dead workers' names would pile up)."""
        stream, pending = keys.stream(model_id), 0
        for item in self.client.xinfo_consumers(stream, keys.WORKER_GROUP):
            name = item["name"].decode() if isinstance(item["name"], bytes) else item["name"]
            if name == consumer:
                continue
            pending += int(item["pending"])
            if not int(item["pending"]) and int(item["idle"]) >= min_idle_ms:
                self.client.xgroup_delconsumer(stream, keys.WORKER_GROUP, name)
        return pending

    @unavailable
    def read(
        self, positions: dict[str, str], consumer: str, count: int, block_ms: int | None
    ) -> dict[str, list[Entry]]:
        """XREADGROUP over the models' streams (``">"``: new entries, ``"0"``: this consumer's
        pending ones) -> ``{model: entries in stream order}``.  On a Redis Cluster (one slot a
        command) the streams are grouped by slot, every group read without blocking in one
        pipeline, and only when none had anything does one group's read block, for at most
        ``cluster_block_ms``: the one that last had entries, else each in turn
        (docs/architecture.md, "Stores")."""
        streams: dict[Any, Any] = {
            keys.stream(model): position for model, position in positions.items()
        }
        by_key = {keys.stream(model): model for model in positions}
        if not is_cluster(self.client):
            reply = self.client.xreadgroup(
                keys.WORKER_GROUP, consumer, streams, count=count, block=block_ms
            )
            return self._entries(reply, by_key)
        groups: dict[int, dict[Any, Any]] = {}
        for key, position in streams.items():
            groups.setdefault(self.client.keyslot(key), {})[key] = position
        slots = sorted(groups)
        if len(slots) > 1:
            with self.client.pipeline(transaction=False) as pipe:
                for slot in slots:
                    pipe.xreadgroup(keys.WORKER_GROUP, consumer, groups[slot], count=count)
                replies = pipe.execute()
            read: dict[str, list[Entry]] = {}
            for reply in replies:
                read.update(self._entries(reply, by_key))
            if read or block_ms is None:
                return self._remember_busy(read)
            block_ms = min(block_ms, self.cluster_block_ms)
        if self._busy_slot in groups:
            slot = self._busy_slot
        else:
            self._turn = (self._turn + 1) % len(slots)
            slot = slots[self._turn]
        reply = self.client.xreadgroup(
            keys.WORKER_GROUP, consumer, groups[slot], count=count, block=block_ms
        )
        return self._remember_busy(self._entries(reply, by_key))

    def _remember_busy(self, read: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
        if read and is_cluster(self.client):
            self._busy_slot = self.client.keyslot(keys.stream(next(iter(read))))
        return read

    @staticmethod
    def _entries(reply: Any, by_key: dict[str, str]) -> dict[str, list[Entry]]:
        """An XREADGROUP reply (RESP2 list or RESP3 map) -> ``{model: entries}``."""
        items = reply.items() if isinstance(reply, dict) else reply or []
        result: dict[str, list[Entry]] = {}
        for key, messages in items:
            model = by_key[key.decode() if isinstance(key, bytes) else key]
            entries = [
                Entry(message_id.decode(), fields or None) for message_id, fields in messages
            ]
            if entries:
                result[model] = entries
        return result

    @unavailable
    def first_gap(self, model_id: str, after: str, stream_ids: Sequence[str]) -> int | None:
        """The position of the first of ``stream_ids`` (ascending, all after ``after``) that
        another stream entry precedes, i.e. that is not the next entry after ``after`` or
        after the previous id; None when they follow each other with nothing in between.
        One round trip of ``XRANGE (a (b COUNT 1`` (empty when in order: nothing to send)."""
        if not stream_ids:
            return None
        with self.client.pipeline(transaction=False) as pipe:
            for previous, current in zip([after, *stream_ids[:-1]], stream_ids, strict=True):
                pipe.xrange(keys.stream(model_id), min=f"({previous}", max=f"({current}", count=1)
            between = pipe.execute()
        return next((position for position, found in enumerate(between) if found), None)

    @unavailable
    def ack(self, model_id: str, stream_ids: Sequence[str], applied_up_to: str | None) -> None:
        """XACK the entries; trim the stream of every entry at or before the checkpoint."""
        with self.client.pipeline(transaction=False) as pipe:
            if stream_ids:
                pipe.xack(keys.stream(model_id), keys.WORKER_GROUP, *stream_ids)
            if applied_up_to is not None:
                pipe.xtrim(keys.stream(model_id), minid=next_id(applied_up_to), approximate=False)
            pipe.execute()
