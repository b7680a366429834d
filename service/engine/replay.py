"""Replay of logged entries (:mod:`service.engine.entries`): a checkpoint brought up to the
store's head through the same calls as live, bit for bit, with as few learner calls as stay
exact.

Consecutive plain learn entries share one learner call when that gives what one call per
entry gives (:func:`~service.engine.learning.one_call_is_exact`).  With the regret window on,
each round needs its own call (the window records the weights served before it and the rows
the learner saw), but only for the rounds the window still holds at the end, or whose ring
slots no later round overwrites: the entries before those are merged as with the window off,
and the window takes their rounds' sizes, labels and scores, with rows and weights that the
later rounds overwrite (:func:`_quiet_before`).  A replay of 100,000 one-event entries then
makes ~1,000 calls with recording, not 100,000 (loadtest/README.md, "Recovery").

The boosted fits an entry's live call installed are in the entry (:mod:`core.logged_fits`):
the replay installs their arrays where it meets their install points instead of fitting
again, and refuses a logged fit that does not match the fit due there, or that it never meets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from core import logged_fits
from core.csr import CSRMatrix
from core.logged_fits import LoggedFitRefused
from service.engine.entries import Entry, ReplayFailed
from service.engine.learning import (
    _finish,
    _learn_call,
    after_learning,
    apply,
    learn_rows,
    one_call_is_exact,
)
from service.engine.model import Loaded
from service.ingest import Batch, concatenate


def _mergeable(loaded: Loaded, entry: Entry, quiet: bool) -> bool:
    """Whether ``entry``'s learner call may be merged with its neighbours' (its rows learned
    in one call with theirs gives the same learner state and scores); ``quiet``: the regret
    window keeps nothing of its rounds but their sizes (:func:`_quiet_before`)."""
    exact = one_call_is_exact(loaded) or (
        quiet and not getattr(type(loaded.learner), "streams_on_window", False)
    )
    return (
        entry.n_events > 0
        and entry.recorded is None
        # one that does not fit is applied alone, so its failure names it
        and entry.X is not None
        and entry.X.shape[1] == loaded.config.n_features
        and exact
        and loaded.config.on_drift != "reset"  # a restart falls between two entries
    )


def _quiet_before(loaded: Loaded, entries: Sequence[tuple[int, Entry]]) -> int:
    """How many leading entries the regret window keeps nothing of but their rounds' sizes:
    the later entries hold ``capacity`` events and ``capacity`` rounds, so they overwrite
    every slot of its rings (events and rounds live at their position modulo the capacity)
    and the earlier rows and served weights need not be computed."""
    regret = loaded.regret
    if regret is None:
        return 0
    events = rounds = 0
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index][1]
        if entry.n_events:
            for start, stop in entry.bounds():
                events += stop - start
                rounds += int(stop > start)
        if events >= regret.capacity and rounds >= regret.capacity:
            return index
    return 0


def replay(loaded: Loaded, entries: Sequence[tuple[int, Entry]]) -> None:
    """Apply logged ``(version, entry)`` pairs in order; consecutive plain learn entries share
    one learner call (exact: :func:`_mergeable`), the metrics and counters still take each
    entry at its own ``now``.  With the regret window on, the entries whose rounds later ones
    push out of it are merged too (:func:`_quiet_before`).  Raises :class:`ReplayFailed`
    naming the entry at fault."""
    quiet_before = _quiet_before(loaded, entries)
    position = 0
    while position < len(entries):
        version, entry = entries[position]
        stop = position + 1
        quiet = position < quiet_before
        end = quiet_before if quiet else len(entries)
        mergeable = _mergeable(loaded, entry, quiet)
        if mergeable:
            kind = isinstance(entry.X, CSRMatrix)
            while (
                stop < end
                and _mergeable(loaded, entries[stop][1], quiet)
                and isinstance(entries[stop][1].X, CSRMatrix) == kind
            ):
                stop += 1
        # the fits the live calls installed, installed again from their arrays (by part and
        # fit, wherever they fall in a merged call) instead of fitted again
        logged = [replace(fit, version=v) for v, e in entries[position:stop] for fit in e.fits]
        try:
            with logged_fits.fit_log(loaded.learner, logged) as log:
                if stop == position + 1 and not (quiet and mergeable and loaded.regret is not None):
                    apply(loaded, entry)
                else:
                    _apply_merged(loaded, [e for _, e in entries[position:stop]], quiet)
            log.finish()
        except LoggedFitRefused as error:  # the entry that carried the fit, in a merged call
            raise ReplayFailed(error.version or version, error) from error
        except Exception as error:
            raise ReplayFailed(version, error) from error
        position = stop
        loaded.version = entries[stop - 1][0]


def _apply_merged(loaded: Loaded, group: list[Entry], quiet: bool) -> None:
    merged = concatenate([Batch(e.X, e.y, None) for e in group])  # type: ignore[arg-type]
    assert merged.y is not None
    if quiet and loaded.regret is not None:
        X = merged.X if loaded.means is None else loaded.means.fill_and_learn(merged.X)  # type: ignore[arg-type]
        scores = _learn_call(loaded, X, merged.y, None)
        # each entry's rounds, of rows and weights that later rounds overwrite
        sizes = [stop - start for entry in group for start, stop in entry.bounds()]
        width = loaded.regret.n_features
        loaded.regret.update_rounds(
            np.broadcast_to(0.0, (len(merged.y), width)),
            merged.y,
            scores,
            np.broadcast_to(0.0, (len(sizes), width)),
            sizes,
        )
    else:
        scores = learn_rows(loaded, merged.X, merged.y, None, [(0, len(merged.y))])
    start = 0
    for entry in group:
        stop = start + entry.n_events
        after_learning(loaded, scores[start:stop], entry.y, entry.now)  # type: ignore[arg-type]
        _finish(loaded, entry)
        start = stop
