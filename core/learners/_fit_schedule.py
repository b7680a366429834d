"""When ``boosted_embedded`` fits its trees and when a fit is installed
(docs/algorithms/boosted_embedded.md, "The fits" and "Fit points"): the interval between fits
and the delay ``L(N)`` from a fit's buffer (event ``N``) to its install point.

[CHOICE] ``refit_growth`` 1.5 and ``L(N) = min(fit_delay, max(fit_delay // 8, N // 16))``: with
the events doubling between fits and a fixed delay of 256, the trees of a stream of a few
hundred to a few thousand events had learned from a third or less of it at times (a stream of
630 training events ended with trees of its first 250; one of 331 ended with none), and the held-out
ranking is that of those trees (bench/README.md, "Fits that land on short streams").  The
delay is the part of a stream's end that no fit reaches (with ``N // 8``, the fit from 563
events of that stream of 630 would land after its end; bench/README.md, "Short streams: the
install delay halved"), and a fit of a few hundred rows takes a fitter milliseconds.
A fit's cost, and so the head start its fitter needs, grows with its rows; a long stream's
delay is as before (``fit_delay`` from ``16 * fit_delay`` events on).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from core.learners._kept_params import KEPT

__all__ = ["FitSchedule", "ScheduleParams", "schedule_params"]

#: a fit of the buffer as of event ``N`` is installed at most ``N // DELAY_SHARE`` events later
#: (and at least ``fit_delay // DELAY_FLOOR``)
DELAY_SHARE = 16
DELAY_FLOOR = 8


class ScheduleParams(NamedTuple):
    """The schedule's parameters as its methods read them, kept with the learner's kernel
    parameters (:mod:`core.learners._kept_params`)."""

    first_fit: int
    refit_every: int | None
    most_between: int  # ``refit_every``, 0 for None (never read then)
    growth: float  # ``refit_growth - 1``
    fit_delay: int
    least_delay: int  # ``max(fit_delay // DELAY_FLOOR, 1)``


def schedule_params(
    first_fit: int, refit_every: int | None, refit_growth: float, fit_delay: int
) -> ScheduleParams:
    """:class:`ScheduleParams` of the learner's parameters."""
    delay = int(fit_delay)
    return ScheduleParams(
        int(first_fit), refit_every, int(refit_every or 0), float(refit_growth) - 1.0, delay,
        max(delay // DELAY_FLOOR, 1),
    )  # fmt: skip


def _between(kept: ScheduleParams, fit_from: int) -> int:
    """:meth:`FitSchedule._interval` after a fit that learned from ``fit_from`` events."""
    learned_from = max(fit_from, kept.first_fit)
    return min(kept.most_between, max(1, math.ceil(learned_from * kept.growth)))


class FitSchedule:
    """The schedule part of ``boosted_embedded`` (reads its kept parameters' ``schedule`` and
    its counters)."""

    _own_state: dict

    def _kernel_params(self) -> Any:
        raise NotImplementedError  # core.learners._kept_params.KeptParams

    def _interval(self) -> int:
        """Events from the last fit's ``fit_from`` to the next fit: ``refit_growth - 1`` times
        as many as it learned from (so a short stream's trees see most of it), at most
        ``refit_every``."""
        kept: ScheduleParams = (self.__dict__.get(KEPT) or self._kernel_params()).schedule
        return _between(kept, self._own_state["fit_from"].item())

    def _delay(self) -> int:
        """``L(N)``: events from the pending fit's ``N`` (or a fit's falling due now) to its
        install point (0 with ``fit_delay`` 0: installed where it falls due)."""
        kept: ScheduleParams = (self.__dict__.get(KEPT) or self._kernel_params()).schedule
        if not kept.fit_delay:
            return 0
        share = self._own_state["events"].item() // DELAY_SHARE
        return min(kept.fit_delay, max(kept.least_delay, share))

    def _until_counted(self) -> float:
        """Events until the schedule's count is reached (0 or less: reached; inf: never),
        the labels aside: ``boosted_embedded``'s ``_due``'s first condition, in plain integers."""
        own = self._own_state
        kept: ScheduleParams = (self.__dict__.get(KEPT) or self._kernel_params()).schedule
        if not own["ready"].item():
            return kept.first_fit - own["buffer_fill"].item()
        if kept.refit_every is None:
            return float("inf")
        return _between(kept, own["fit_from"].item()) - own["since_fit"].item()
