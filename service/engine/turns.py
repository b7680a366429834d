"""Write turns: the processes writing one hot model take turns instead of one starving.

Several processes appending to one model (``--workers N`` on one SQLite file, several API
processes on one Redis) are replicas of its log (:mod:`.repository`): each reads the model's
version, applies its change and appends it only if the version is still the one it read.
Without more, that race is not fair: the process that has just appended is at the head and
applies its next group at once, while the one whose append was stale must first go back to its
undo point and catch up on the other's entries, so its next attempt takes longer, finds the
version moved again, and so on: one process got 53 acknowledgements in 60 s while the other
took the rest (loadtest/README.md, "A: two writers of one hot model").

So a stale append takes the model's *write turn* (:meth:`Store.take_turn`: a key with a TTL on
Redis, a row with a time on SQLite): until that process's next append of the model ends it, or
it lapses after :data:`TURN_SECONDS`, the appends of the other processes are refused
(:class:`~service.errors.TurnTaken`, written nothing, in the same atomic step as the version
check) and they wait for the turn to end (:meth:`Turns.wait`: jittered exponential pauses,
asking the store), then take the next turn, catch up and append.  While a model is contended
its writes ask for the turn before they learn, so the processes alternate without learning
changes that a turn would refuse (each refused change costs a return to the undo point); a
pass leaves such a model out (:meth:`Turns.held_elsewhere`) and applies it alone once the turn
allows, so that the pass's other models are not held behind it.  A
turn is never needed for correctness -- the version check alone keeps every acknowledged event
exactly once -- so a process killed holding one only delays the others by :data:`TURN_SECONDS`
at most, and a model written by one process never meets one (the turn is taken only after a
stale append).
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
#: holder runs free for as long as the waiter oversleeps the turn's end (with 50 ms, the
#: fairness ratio of loadtest/two_writers.py was 0.34-0.89 on a machine at load 20-26)
FIRST_PAUSE = 0.001
LONGEST_PAUSE = 0.01


class Turns:
    """The write turns of one repository's models (module docstring)."""

    def __init__(
        self,
        store: Any,
        *,
        seconds: float = TURN_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.seconds = seconds
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
        """After an append of ``model_id`` found stale (``refused_by_turn``: refused because
        another process holds its turn): whether this process holds the turn now, taken at
        once or, when another process held it, once that turn ended (so that the processes
        alternate while they contend)."""
        self._alternating[model_id] = self._monotonic() + ALTERNATING_SECONDS
        if not refused_by_turn and self._take(model_id):
            return True
        self.wait(model_id)
        return self._take(model_id)

    def stale_in_pass(self, model_id: str, refused_by_turn: bool) -> None:
        """An append of ``model_id`` in a pass was found stale (``refused_by_turn``: another
        process holds its turn).  The turn is taken at once when it is free, before this
        process goes back to its undo point, catches up and applies the group again alone, so
        that the other processes' appends are refused meanwhile instead of running free;
        otherwise that write waits for the turn first (:meth:`before_write`)."""
        self._alternating[model_id] = self._monotonic() + ALTERNATING_SECONDS
        try:
            taken = not refused_by_turn and self._take(model_id)
        except ServiceError:  # the store is failing: the write again finds out for itself
            taken = False
        if not taken:
            self.refused.add(model_id)

    def held_elsewhere(self, model_id: str) -> bool:
        """Whether a pass leaves ``model_id`` out: it is contended (as :meth:`before_write`
        reads it) and another process holds its turn now, so that its learning would be
        refused at the commit and its group would hold the pass's other models back.  Its
        write alone then waits for the turn first (:meth:`before_write`).  A model never
        contended asks the store nothing."""
        until = self._alternating.get(model_id)
        if model_id not in self.refused and (until is None or until < self._monotonic()):
            return False
        try:
            taken = self.store.turn_taken(model_id)
        except ServiceError:  # the store is failing: the pass finds out for itself
            return False
        if taken:
            self.refused.add(model_id)
        return taken

    def before_write(self, model_id: str) -> None:
        """A write of ``model_id`` begins.  While the model is contended (a turn taken or
        waited for in the last :data:`ALTERNATING_SECONDS`, or a pass's append refused by a
        turn), it asks whether another process holds the turn before it learns: if one does,
        it waits for that turn's end and takes the next, rather than learn, be refused and go
        back to its undo point."""
        refused = model_id in self.refused
        self.refused.discard(model_id)
        until = self._alternating.get(model_id)
        if not refused and (until is None or until < self._monotonic()):
            self._alternating.pop(model_id, None)
            return
        if self.store.turn_taken(model_id):
            self._alternating[model_id] = self._monotonic() + ALTERNATING_SECONDS
            self.wait(model_id)
            self._take(model_id)

    def _take(self, model_id: str) -> bool:
        if not self.store.take_turn(model_id, self.seconds):
            return False
        self.taken += 1
        self.held.add(model_id)
        return True

    def appended(self, model_id: str) -> None:
        """An append of ``model_id`` returned: it ended this process's turn, if held."""
        self.held.discard(model_id)

    def wait(self, model_id: str) -> None:
        """Until no other process holds ``model_id``'s turn, at most :attr:`seconds` (a turn
        taken again meanwhile is waited for by the next refused append)."""
        self.waited += 1
        pause = FIRST_PAUSE
        deadline = self._monotonic() + self.seconds
        while self.store.turn_taken(model_id) and self._monotonic() < deadline:
            self._sleep(pause * random.uniform(0.5, 1.5))  # noqa: S311 - jitter, not a secret
            pause = min(2 * pause, LONGEST_PAUSE)

    def release(self, model_id: str) -> None:
        """A write of ``model_id`` ended: a turn it took and did not end by an append (it
        failed, or appended nothing) is given back."""
        if model_id in self.held:
            self.held.discard(model_id)
            self.store.release_turn(model_id)
