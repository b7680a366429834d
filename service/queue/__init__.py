"""Queue mode (docs/architecture.md §4 Modes): validated batches appended to a Redis Stream
per model (:meth:`StreamQueue.append_shared`, 202 with the stream ids), learned by
``aucstream worker`` (:mod:`service.queue.worker`) with the same engine.

Entries hold the parsed batch in :mod:`service.codec`'s format (a worker never parses a body
again); a batch over ``AUCSTREAM_QUEUE_ENTRY_EVENTS`` is split into entries appended all or
nothing.  The backlog is what ``aucs:{m}:queue`` counts appended less what the worker's
checkpoint counts applied; an append over ``AUCSTREAM_QUEUE_MAX_BACKLOG_EVENTS`` is refused (429
with ``Retry-After``), checked and appended in one Lua script.
"""

from __future__ import annotations

from service.queue.streams import StreamQueue

__all__ = ["StreamQueue"]
