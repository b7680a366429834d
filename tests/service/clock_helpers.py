"""The clocks tests give an engine (``Engine(clock=...)``) so that times are known: one that
stands where the test puts it, one that ticks a quarter second a reading."""

from __future__ import annotations


class FixedClock:
    """Reads ``now``, which only the test moves."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class TickingClock:
    """A quarter second later at every reading, from 1,000,000."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


#: an hour boundary, so that the minutes and hours below are easy to follow
HOUR_START = 1_800_000_000.0 - 1_800_000_000.0 % 3600
