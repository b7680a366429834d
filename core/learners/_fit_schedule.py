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

__all__ = ["FitSchedule"]

#: a fit of the buffer as of event ``N`` is installed at most ``N // DELAY_SHARE`` events later
#: (and at least ``fit_delay // DELAY_FLOOR``)
DELAY_SHARE = 16
DELAY_FLOOR = 8


class FitSchedule:
    """The schedule part of ``boosted_embedded`` (reads its parameters and counters)."""

    first_fit: int
    refit_every: int | None
    refit_growth: float
    fit_delay: int
    _own_state: dict

    def _interval(self) -> int:
        """Events from the last fit's ``fit_from`` to the next fit: ``refit_growth - 1`` times
        as many as it learned from (so a short stream's trees see most of it), at most
        ``refit_every``."""
        learned_from = max(int(self._own_state["fit_from"][0]), self.first_fit)
        grown = max(1, math.ceil(learned_from * (float(self.refit_growth) - 1.0)))
        return min(int(self.refit_every or 0), grown)

    def _delay(self) -> int:
        """``L(N)``: events from the pending fit's ``N`` (or a fit's falling due now) to its
        install point (0 with ``fit_delay`` 0: installed where it falls due)."""
        if not self.fit_delay:
            return 0
        share = int(self._own_state["events"][0]) // DELAY_SHARE
        return min(int(self.fit_delay), max(self.fit_delay // DELAY_FLOOR, share, 1))
