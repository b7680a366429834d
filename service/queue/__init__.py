"""Queue mode (docs/architecture.md §4 Modes): validated batches appended to a Redis Stream per
model (:mod:`.streams`, :mod:`.enqueue`), learned by ``aucstream worker`` (:mod:`.worker`,
:mod:`.apply`) with the same engine.
"""

from __future__ import annotations

from service.queue.streams import StreamQueue

__all__ = ["StreamQueue"]
