"""Write turns: the processes writing one hot model take turns instead of one starving.  They
bring fairness, never correctness (the version check keeps every event exactly once);
docs/architecture.md ("The log and checkpoints") has the race they fix and its figures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from service.errors import ServiceError

#: how long a turn lasts at most (its holder's append ends it first): long enough for the
#: holder to go back to its undo point, catch up and learn its group on a loaded machine
TURN_SECONDS = 2.0
#: how long after a turn taken or waited for a process's writes of the model ask for the turn
#: before they learn (:meth:`Turns.before_write`): one round trip per write while contended
ALTERNATING_SECONDS = 1.0
#: the first pause of a process waiting for another's turn, and the longest: short, since the
#: holder runs free for as long as the waiter oversleeps the turn's end
FIRST_PAUSE = 0.001
LONGEST_PAUSE = 0.01


class Turns:
    """The write turns of one repository's models (module docstring)."""

    def __init__(
        self,
        store: Any,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._sleep = sleep
        self._monotonic = monotonic
        #: turns taken after a stale append, and waits for another process's turn
        self.taken = 0
        self.waited = 0
        #: the models whose turn this process holds (its next append ends it)
        self.held: set[str] = set()
        #: the models whose stale append in a pass did not get the turn (another process
        #: holds it): the write that applies them again waits for it first (:meth:`before_write`)
        self.refused: set[str] = set()
        #: model id -> until when (monotonic) its writes ask for the turn before learning
        self._alternating: dict[str, float] = {}

    def after_stale(self, model_id: str, refused_by_turn: bool) -> bool:
        """After a stale append of ``model_id`` (``refused_by_turn``: by another's turn):
        whether this process holds the turn now, taken at once or after the other's ends."""
        self._alternating[model_id] = self._monotonic() + ALTERNATING_SECONDS
        if not refused_by_turn and self._take(model_id):
            return True
        self.wait(model_id)
        return self._take(model_id)

    def stale_in_pass(self, model_id: str, refused_by_turn: bool) -> None:
        """A stale append of ``model_id`` in a pass: the turn taken at once when free (the
        others wait while this process catches up), else its write waits first
        (:meth:`before_write`)."""
        self._alternating[model_id] = self._monotonic() + ALTERNATING_SECONDS
        try:
            taken = not refused_by_turn and self._take(model_id)
        except ServiceError:  # the store is failing: the write again finds out for itself
            taken = False
        if not taken:
            self.refused.add(model_id)

    def held_elsewhere(self, model_id: str) -> bool:
        """Whether a pass leaves ``model_id`` out: contended and another process holds its
        turn (its learning would be refused); a model never contended asks the store nothing."""
        if model_id not in self.refused and not self._alternating_now(model_id):
            return False
        try:
            taken = self.store.turn_taken(model_id)
        except ServiceError:  # the store is failing: the pass finds out for itself
            return False
        if taken:
            self.refused.add(model_id)
        return taken

    def before_write(self, model_id: str) -> None:
        """A write of ``model_id`` begins: while contended (a turn within
        :data:`ALTERNATING_SECONDS`, or refused in a pass) it waits for another's turn and
        takes the next before learning, rather than learn and be refused."""
        refused = model_id in self.refused
        self.refused.discard(model_id)
        if not refused and not self._alternating_now(model_id):
            self._alternating.pop(model_id, None)
            return
        if self.store.turn_taken(model_id):
            self._alternating[model_id] = self._monotonic() + ALTERNATING_SECONDS
            self.wait(model_id)
            self._take(model_id)

    def _alternating_now(self, model_id: str) -> bool:
        until = self._alternating.get(model_id)
        return until is not None and until >= self._monotonic()

    def _take(self, model_id: str) -> bool:
        if not self.store.take_turn(model_id, TURN_SECONDS):
            return False
        self.taken += 1
        self.held.add(model_id)
        return True

    def appended(self, model_id: str) -> None:
        """An append of ``model_id`` returned: it ended this process's turn, if held."""
        self.held.discard(model_id)

    def wait(self, model_id: str) -> None:
        """Until no other process holds ``model_id``'s turn, at most :data:`TURN_SECONDS` (a turn
        taken again meanwhile is waited for by the next refused append)."""
        self.waited += 1
        pause = FIRST_PAUSE
        deadline = self._monotonic() + TURN_SECONDS
        while self.store.turn_taken(model_id) and self._monotonic() < deadline:
            self._sleep(pause * random.uniform(0.5, 1.5))  # noqa: S311 - jitter, not a secret
            pause = min(2 * pause, LONGEST_PAUSE)

    def release(self, model_id: str) -> None:
        """A write of ``model_id`` ended: a turn it took and did not end by an append is given
        back."""
        if model_id in self.held:
            self.held.discard(model_id)
            self.store.release_turn(model_id)
