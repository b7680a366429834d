"""Queue mode (docs/architecture.md §4 Modes): validated batches appended to a Redis Stream
per model.

With ``AUCSTREAM_MODE=queue`` the HTTP routes ``POST .../events`` and ``POST .../labels`` parse
and validate a batch exactly as in sync mode (bad input gets the same 4xx and nothing is
appended), then :meth:`StreamQueue.append_shared` adds it to ``aucs:{m}:stream`` (with the
appends of other requests of the same moment) and the request returns 202 with the stream
ids.  ``aucstream worker`` (:mod:`service.queue.worker`) learns the entries with the same
:class:`~service.engine.Engine`.

Stream entries hold the parsed batch (pickle-free, so a worker never parses a body again) in
the format of :mod:`service.codec`.  A batch of more than ``AUCSTREAM_QUEUE_ENTRY_EVENTS`` events
is split into several entries, appended all or nothing.

Backlog: ``aucs:{m}:queue`` counts the entries and events appended; a worker's checkpoint (the
meta fields ``queue:last_id``, ``queue:entries``, ``queue:events``, committed with the state)
counts those applied.  Their difference is the backlog: an append that would take it over
``AUCSTREAM_QUEUE_MAX_BACKLOG_EVENTS`` is refused (429 with ``Retry-After``), checked and
appended in one Lua script.  Applied entries are trimmed from the stream by the worker.

Writer lease (:mod:`service.queue.lease`): a model has one writer at a time, and every commit
of a worker is fenced by its lease (name and lease generation checked inside the commit
transaction), so a worker that stalled while another took its model over cannot write.
Entries are applied only in stream order from the checkpointed id, and entries at or before it
are skipped, so an entry is learned exactly once.  Workers: :mod:`service.queue.worker`
(``aucstream worker``).
"""

from __future__ import annotations

from service.queue.lease import Leases
from service.queue.streams import (
    APPLIED_ENTRIES,
    APPLIED_EVENTS,
    LAST_ID,
    Appended,
    Entry,
    StreamQueue,
    next_id,
    parse_id,
)

__all__ = [
    "APPLIED_ENTRIES",
    "APPLIED_EVENTS",
    "LAST_ID",
    "Appended",
    "Entry",
    "Leases",
    "StreamQueue",
    "next_id",
    "parse_id",
]
