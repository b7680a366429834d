"""Noticing a store that lost data: its contents vanished or went back in time while this
process knew a later state, by *epoch markers* (a random id and the store's clock, checked
every :data:`CHECK_SECONDS`) and by model versions lower than this process saw.  A loss is an
*alarm* in the store, 503 :class:`~service.errors.StoreLostData` until an operator
acknowledges it (docs/architecture.md, "Lost data").
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, replace
from typing import Literal

from service.errors import StoreLostData

logger = logging.getLogger("aucstream.store")

#: the markers are checked at most this often per process (and at each /readyz): a restore from
#: a dump taken less than this before the process's last check goes unnoticed by the clock
#: (a model this process holds is still caught by its version)
CHECK_SECONDS = 2.0

#: the scope of a store-wide alarm (a model's is :func:`model_scope`)
STORE = "store"


def model_scope(model_id: str) -> str:
    return f"model:{model_id}"


#: what an operator does about it, appended to every cause
ACKNOWLEDGE = (
    "; find out what was lost (restore a backup, re-send the events since), then acknowledge: "
    "POST /v1/store/acknowledge-loss (or aucstream store acknowledge-loss)"
)


def _refuse(causes: list[str]) -> None:
    """:class:`StoreLostData` naming ``causes``, if any."""
    if causes:
        raise StoreLostData("; ".join(causes) + ACKNOWLEDGE, headers={"Retry-After": "60"})


def new_epoch() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True)
class Marker:
    """A marker as one check read it (before advancing its clock)."""

    epoch: str
    #: the store's time (ms) of the last check before this one
    clock: int
    #: the store's time (ms) of this check (what the next check must find at least)
    now: int
    #: the marker did not exist: this check wrote it
    created: bool = False
    #: written by an operator's acknowledgement of a loss
    acknowledged: bool = False


@dataclass(frozen=True)
class Judgement:
    """What one check of the markers found (:meth:`LossWatch.judge`)."""

    #: the loss found, or None
    cause: str | None
    #: marker key -> the marker to remember once the check's write of it is in the store
    accepted: dict[str, Marker]
    #: an operator acknowledged a loss since: the versions seen before are forgotten
    adopted_acknowledgement: bool = False


class LossWatch:
    """One process's memory of a store (markers seen, model versions seen) and its alarms."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name
        self.known: dict[str, Marker] = {}
        #: model id -> (incarnation, highest version seen)
        self.versions: dict[str, tuple[str, int]] = {}
        #: scope (STORE or model_scope(model id)) -> cause
        self.alarms: dict[str, str] = {}
        self.next_check = 0.0
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ request path
    def guard(self, model_id: str | None = None) -> None:
        """Raise :class:`StoreLostData` if the store, or ``model_id``, has an alarm (naming
        both)."""
        if not self.alarms:
            return
        causes = [self.alarms.get(STORE)]
        if model_id is not None:
            causes.append(self.alarms.get(model_scope(model_id)))
        _refuse([cause for cause in causes if cause])

    def guard_any(self) -> None:
        """Raise :class:`StoreLostData` naming every alarm (the store's or any model's)."""
        _refuse(list(self.alarms.values()))

    def due(self) -> bool:
        return time.monotonic() >= self.next_check

    def postpone(self) -> None:
        """A check could not run: the next one in :data:`CHECK_SECONDS`."""
        self.next_check = time.monotonic() + CHECK_SECONDS

    def seen(self, model_id: str) -> tuple[str, int] | None:
        """``(incarnation, highest version)`` seen of ``model_id`` so far: taken before a read
        begins, the ``before`` of the :meth:`saw` that checks what it found."""
        with self.lock:
            return self.versions.get(model_id)

    def saw(
        self,
        model_id: str,
        incarnation: str,
        version: int,
        record: bool = True,
        before: tuple[str, int] | None | Literal["now"] = "now",
    ) -> str | None:
        """Check a model's version against the highest seen (the cause when it went back for
        the same incarnation) and, if ``record``, remember it.  ``before``: what was seen when
        the read that found ``version`` began (:meth:`seen`), the version to check against:
        another thread may have written or read a later version meanwhile, which its read
        could not show and is no loss."""
        with self.lock:
            previous = self.versions.get(model_id)
            judged = previous if before == "now" else before
            if judged is not None and judged[0] == incarnation and version < judged[1]:
                return (
                    f"model {model_id!r} went back in time in the {self.store_name} store: "
                    f"version {version}, while this service saw version {judged[1]}"
                )
            # the highest: a read overtaken by another thread's may be lower than ``previous``
            if record and (previous is None or previous[0] != incarnation or version > previous[1]):
                self.versions[model_id] = (incarnation, version)
        return None

    def forget(self, model_id: str) -> None:
        self.versions.pop(model_id, None)

    # ------------------------------------------------------------------ checks
    def judge(self, markers: dict[str, Marker]) -> Judgement:
        """Compare the markers just read with the ones seen: the cause of a loss, or None, and
        the markers to accept (not those showing a loss, found again until acknowledged).
        Remembers nothing: :meth:`accept` does once the check's write is in the store (a clock
        remembered before its write failed would be later than the store's: a loss)."""
        self.next_check = time.monotonic() + CHECK_SECONDS
        causes = []
        accepted = {}
        adopted = False
        for key, marker in markers.items():
            seen = self.known.get(key)
            checked = replace(marker, clock=marker.now)
            if seen is None:
                accepted[key] = checked
            elif marker.created:
                causes.append(
                    f"the {self.store_name} store lost everything it held ({key} is gone: "
                    "restarted without persistence, emptied or replaced)"
                )
            elif marker.epoch != seen.epoch:
                if marker.acknowledged and marker.clock >= seen.clock:
                    accepted[key] = checked  # an operator acknowledged a loss meanwhile
                    adopted = True
                else:
                    causes.append(
                        f"the {self.store_name} store was replaced or emptied (its epoch "
                        f"{key} is {marker.epoch}, this service knew {seen.epoch})"
                    )
            elif marker.clock < seen.clock:
                seconds = (seen.clock - marker.clock) / 1000
                causes.append(
                    f"the {self.store_name} store went back in time by at least "
                    f"{seconds:.1f} s (restored from an older dump or file: {key})"
                )
            else:
                accepted[key] = checked
        return Judgement("; ".join(causes) or None, accepted, adopted)

    def accept(self, judgement: Judgement) -> None:
        """The markers of ``judgement`` are in the store: remember them."""
        self.known.update(judgement.accepted)
        if judgement.adopted_acknowledgement:
            self.versions.clear()

    def raise_alarms(self, alarms: dict[str, str]) -> None:
        """The store's alarms become this process's (logged once each)."""
        for scope, cause in alarms.items():
            if self.alarms.get(scope) != cause:
                logger.error(
                    "%s: %s; answering 503 until acknowledged",
                    "store" if scope == STORE else scope,
                    cause,
                    extra={"fields": {"store_data_lost": scope}},
                )
        self.alarms = dict(alarms)

    def acknowledged(self, markers: dict[str, Marker]) -> None:
        """An operator acknowledged the loss here: the new epoch is this process's."""
        self.known = {key: replace(marker, clock=marker.now) for key, marker in markers.items()}
        self.versions.clear()
        self.alarms = {}
        self.next_check = 0.0
