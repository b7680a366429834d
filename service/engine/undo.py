"""Undo points: a copy of a cached model's arrays at a version, which a stale append goes back
to before catching up, instead of rebuilding the model; kept before each write of a contended
model and as a standing point of the latest models loaded (docs/architecture.md, "The log and
checkpoints").
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from service.engine.model import Loaded

if TYPE_CHECKING:
    from service.engine.repository import ModelRepository

#: how long a model stays contended (a point taken before each write) after a stale append
CONTENDED_SECONDS = 60.0
#: most standing points kept in a process (of the models loaded or created last)
STANDING_POINTS = 16
#: versions a standing point may lag its model's cache before it is taken again or dropped
STANDING_AGE = 32
#: a model's undo point: its version, incarnation and a copy of its arrays
UndoPoint = tuple[int, str, dict[str, Any]]


def copy_of(loaded: Loaded) -> UndoPoint:
    """``loaded``'s undo point (its arrays copied: the cache changes them in place)."""
    arrays = {name: value.copy() for name, value in loaded.arrays().items()}
    return loaded.version, loaded.incarnation, arrays


def load_with_point(repository: ModelRepository, model_id: str) -> tuple[Loaded, UndoPoint | None]:
    """The model a write changes (``repository.load``, under its lock) and the undo point its
    append goes back to if stale: asked before the load reads the version (a copy after it
    would widen the race with the append), and again only when the load moved the model."""
    cached = repository.cached(model_id)
    was = None if cached is None else (cached.version, cached.incarnation)
    undo = None if cached is None else repository.undo_point(model_id)
    loaded = repository.load(model_id)
    if undo is None and (loaded.version, loaded.incarnation) != was:
        undo = repository.undo_point(model_id)
    return loaded, undo


class UndoPoints:
    """The undo points of one process's cached models (module docstring).  Called under the
    model's lock, for that model (a point is evicted by others: every removal tolerates it)."""

    def __init__(self) -> None:
        #: model id -> until when (time.monotonic) it is contended
        self._contended: dict[str, float] = {}
        #: model id -> its standing point, least recently taken first
        self._standing: OrderedDict[str, UndoPoint] = OrderedDict()
        #: model id -> when (time.monotonic) its cache last caught up on another's entries
        self._shared: dict[str, float] = {}
        self._guard = threading.Lock()

    def point(self, model_id: str, cached: Loaded | None) -> UndoPoint | None:
        """The undo point a write of ``cached`` goes back to if its append is stale."""
        if cached is None:
            return None
        until = self._contended.get(model_id)
        now = time.monotonic()
        if until is not None:
            if until >= now:
                return copy_of(cached)
            self._contended.pop(model_id, None)
            return self.stand(model_id, cached)  # contention over: the first stale append again
        point = self._standing.get(model_id)
        if point is None or point[1] != cached.incarnation:
            self._standing.pop(model_id, None)
            return None
        if cached.version - point[0] <= STANDING_AGE:
            return point
        if self._shared.get(model_id, -math.inf) >= now - CONTENDED_SECONDS:
            return self.stand(model_id, cached)
        self._standing.pop(model_id, None)
        return None

    def stand(self, model_id: str, loaded: Loaded) -> UndoPoint:
        """A standing point of ``loaded`` (loaded whole, created, or no longer contended)."""
        point = copy_of(loaded)
        with self._guard:  # other models' threads take and evict points too
            self._standing[model_id] = point
            self._standing.move_to_end(model_id)
            while len(self._standing) > STANDING_POINTS:
                self._standing.popitem(last=False)
        return point

    def caught_up(self, model_id: str) -> bool:
        """``model_id``'s cache applied another process's entries; True when no other process
        had written it within :data:`CONTENDED_SECONDS` (the caller then takes a standing
        point: a stale append may come; later catch-ups only keep that point fresh)."""
        now = time.monotonic()
        first = self._shared.get(model_id, -math.inf) < now - CONTENDED_SECONDS
        self._shared[model_id] = now
        return first

    def stale(self, model_id: str) -> None:
        """An append of ``model_id`` was found stale: contended from now on."""
        self._contended[model_id] = time.monotonic() + CONTENDED_SECONDS

    def used(self, model_id: str, point: UndoPoint) -> None:
        """``point`` was restored: the model's cache owns its arrays now."""
        if self._standing.get(model_id) is point:
            self._standing.pop(model_id, None)

    def forget(self, model_id: str) -> None:
        """``model_id`` left this process's cache (its points are of no use)."""
        self._contended.pop(model_id, None)
        self._standing.pop(model_id, None)
        self._shared.pop(model_id, None)

    def dropped(self, model_id: str) -> None:
        """``model_id``'s cache was dropped: its next load is whole and takes a point."""
        self._standing.pop(model_id, None)
