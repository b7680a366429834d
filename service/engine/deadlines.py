"""When each model's next kept score falls due: one min-heap for the process, so the label
sweep visits the models with something due and nothing else (docs/architecture.md,
"Idempotency and delayed labels").  Stale heap slots are skipped when they come up; records
another process keeps later are that process's to sweep, and any process sweeps a model before
it joins labels to it.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
from collections.abc import Callable

from service.errors import ModelNotFound, ServiceError
from service.stores.base import Store

logger = logging.getLogger("aucstream")
#: how long a model whose sweep failed (its state corrupt, the store down) waits for the next try
RETRY_SECONDS = 5.0


def earliest_deadline(store: Store, model_id: str) -> float | None:
    """The earliest deadline of the records the store keeps for ``model_id`` (None: none)."""
    first = store.due_pending(model_id, math.inf, 1)
    if not first:
        return None
    record = store.get_pending(model_id, first).get(first[0])
    return None if record is None else record[1]


def stored_deadlines(store: Store) -> dict[str, float]:
    """Each model's earliest pending deadline in ``store``: one query where the store offers it
    (``pending_deadlines``), else a look at each model (once, when a process starts)."""
    listing = getattr(store, "pending_deadlines", None)
    if listing is not None:
        return dict(listing())
    found = {}
    for model_id in store.list_models():
        deadline = earliest_deadline(store, model_id)
        if deadline is not None:
            found[model_id] = deadline
    return found


class Deadlines:
    """Models by the time their next kept record falls due.  Thread-safe."""

    def __init__(self) -> None:
        #: whether the models the store kept records for were scheduled (at the first sweep)
        self.seeded = False
        self._heap: list[tuple[float, str]] = []
        #: model id -> the time it is scheduled at (the heap slot that counts)
        self._due_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._due_at)

    def schedule(self, model_id: str, deadline: float) -> None:
        """Have ``model_id`` swept at ``deadline`` (or earlier, if it already is)."""
        with self._lock:
            current = self._due_at.get(model_id)
            if current is not None and current <= deadline:
                return
            self._due_at[model_id] = deadline
            heapq.heappush(self._heap, (deadline, model_id))
            if len(self._heap) > 2 * len(self._due_at) + 1024:
                # re-scheduled models leave stale slots behind: rebuild now and then
                self._heap = [(when, model) for model, when in self._due_at.items()]
                heapq.heapify(self._heap)

    def pop_due(self, now: float) -> list[str]:
        """The models due at ``now``, earliest first, taken off the schedule (the sweep
        schedules each again at its next deadline)."""
        due = []
        with self._lock:
            heap = self._heap
            while heap and heap[0][0] <= now:
                when, model_id = heapq.heappop(heap)
                if self._due_at.get(model_id) == when:
                    del self._due_at[model_id]
                    due.append(model_id)
        return due

    def sweep_due(self, store: Store, now: float, sweep: Callable[[str], int]) -> int:
        """``sweep(model_id)`` each model due at ``now``, then schedule it at the earliest
        deadline its store still holds; returns what the sweeps handled. A failed sweep is logged
        and retried in :data:`RETRY_SECONDS`; a deleted model is dropped."""
        if not self.seeded:
            for model_id, earliest in stored_deadlines(store).items():
                self.schedule(model_id, earliest)
            self.seeded = True
        total = 0
        for model_id in self.pop_due(now):
            deadline: float | None
            try:
                total += sweep(model_id)
                deadline = earliest_deadline(store, model_id)
            except ModelNotFound:
                continue
            except ServiceError as error:
                logger.warning("sweep of model %r skipped: %s", model_id, error.detail)
                deadline = now + RETRY_SECONDS
            if deadline is not None:
                self.schedule(model_id, deadline)
        return total
