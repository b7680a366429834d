"""Replay of logged entries (:mod:`service.engine.entries`): a checkpoint brought up to the
store's head through the same calls as live, bit for bit, with as few learner calls as stay
exact (docs/architecture.md, "The log and checkpoints", "Recovery").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from core import logged_fits
from core.csr import CSRMatrix
from core.logged_fits import LoggedFitRefused
from core.validation import check_labelled_scores
from service.engine.entries import Entry, ReplayFailed
from service.engine.history import first_point
from service.engine.history import record as record_history
from service.engine.learning import (
    _finish,
    _learn_call,
    apply,
    feed_metrics,
    learn_rows,
    one_call_is_exact,
)
from service.engine.model import Loaded
from service.ingest import Batch, concatenate


def _plain(loaded: Loaded, entry: Entry) -> bool:
    """Whether ``entry`` learns events and nothing else that reads the model between its
    neighbours' (rows of the model's width, no restart on a drift): the metrics take a run of
    such entries at once, and their learner calls may be merged (:func:`_one_call`); a run's
    entries all have recorded scores (labels) or none."""
    return (
        entry.n_events > 0
        and not entry.history  # a history point of its own, read at its place
        # one that does not fit is applied alone, so its failure names it
        and entry.X is not None
        and entry.X.shape[1] == loaded.config.n_features
        and loaded.config.on_drift != "reset"  # a restart falls between two entries
    )


def _one_call(loaded: Loaded, quiet: bool) -> bool:
    """Whether plain entries' rows learned in one learner call give the same learner state
    and scores as one call per round; ``quiet``: the regret window keeps nothing of their
    rounds but their sizes (:func:`_quiet_before`)."""
    return one_call_is_exact(loaded) or (
        quiet and not getattr(type(loaded.learner), "streams_on_window", False)
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
        if entry.y is not None and not entry.rounds:  # most entries: one round
            events += len(entry.y)
            rounds += int(len(entry.y) > 0)
        elif entry.n_events:
            for start, stop in entry.bounds():
                events += stop - start
                rounds += int(stop > start)
        if events >= regret.capacity and rounds >= regret.capacity:
            return index
    return 0


def replay(loaded: Loaded, entries: Sequence[tuple[int, Entry]]) -> None:
    """Apply logged ``(version, entry)`` pairs in order, runs of plain entries merged (module
    docstring).  Raises :class:`ReplayFailed` naming the entry at fault."""
    quiet_before = _quiet_before(loaded, entries)
    position = 0
    while position < len(entries):
        version, entry = entries[position]
        stop = position + 1
        quiet = position < quiet_before
        end = quiet_before if quiet else len(entries)
        plain = _plain(loaded, entry)
        if plain:
            kind = (isinstance(entry.X, CSRMatrix), entry.recorded is None)
            while (
                stop < end
                and _plain(loaded, entries[stop][1])
                and (isinstance(entries[stop][1].X, CSRMatrix), entries[stop][1].recorded is None)
                == kind
            ):
                stop += 1
        # the fits the live calls installed, installed again from their arrays (by part and
        # fit, wherever they fall in a merged call) instead of fitted again
        logged = [
            replace(fit, version=v) for v, e in entries[position:stop] if e.fits for fit in e.fits
        ]
        try:
            with logged_fits.fit_log(loaded.learner, logged) as log:
                if plain:
                    _apply_run(loaded, entries[position:stop], quiet)
                else:
                    apply(loaded, entry)
            log.finish()
        except ReplayFailed:
            raise
        except LoggedFitRefused as error:  # the entry that carried the fit, in a merged call
            raise ReplayFailed(error.version or version, error) from error
        except Exception as error:
            raise ReplayFailed(version, error) from error
        position = stop
        loaded.version = entries[stop - 1][0]


def _apply_run(loaded: Loaded, run: Sequence[tuple[int, Entry]], quiet: bool) -> None:
    """A run of plain entries: one learner call (plain, or cut at their rounds), then their
    metrics and counters."""
    group = [entry for _, entry in run]
    recorded = None
    if group[0].recorded is not None:  # labels: the scores given at scoring time
        recorded = np.concatenate([e.recorded for e in group if e.recorded is not None])
    X, labels = _stacked(group)
    if _one_call(loaded, quiet):
        if quiet and loaded.regret is not None:
            scores = _learn_quiet(loaded, group, X, labels, recorded)
        else:
            scores = learn_rows(loaded, X, labels, recorded, [(0, len(labels))])
    else:
        # one learn_rounds call cut at every round of every entry: what one call per round
        # gives, bit for bit (core/learners/_rounds.py), so what the live calls gave
        bounds = []
        offset = 0
        for entry in group:
            bounds += [(offset + start, offset + stop) for start, stop in entry.bounds()]
            offset += entry.n_events
        try:
            scores = learn_rows(loaded, X, labels, recorded, bounds)
        except LoggedFitRefused:
            raise  # it names the entry that carried the fit
        except Exception as error:
            raise ReplayFailed(_at_fault(run, error), error) from error
    _after_run(loaded, group, scores, labels)


def _at_fault(run: Sequence[tuple[int, Entry]], error: Exception) -> int:
    """The version of the entry of ``run`` whose event a merged learner call refused (the
    row an :class:`~core.errors.InvalidFeatures` names), else the run's first."""
    row = getattr(error, "row", None)
    if isinstance(row, int):
        for version, entry in run:
            if row < entry.n_events:
                return version
            row -= entry.n_events
    return run[0][0]


def _stacked(group: list[Entry]) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """The rows and labels of ``group``'s entries, one after another. Labels sent as {0, 1}
    beside the sweep's default label (-1) are stacked as +-1, as every learner and counter reads
    them: one call refuses a mix of 0 and -1."""
    if len(group) == 1:
        return group[0].X, group[0].y  # type: ignore[return-value]
    X: np.ndarray | CSRMatrix
    if isinstance(group[0].X, np.ndarray):  # no Batch per entry
        X, y = np.concatenate([e.X for e in group]), np.concatenate([e.y for e in group])  # type: ignore[misc]
    else:
        merged = concatenate([Batch(e.X, e.y, None) for e in group])  # type: ignore[arg-type]
        assert merged.y is not None
        X, y = merged.X, merged.y
    if (y == 0).any() and (y == -1).any():
        y = np.where(y > 0, 1, -1).astype(y.dtype)
    return X, y


def _learn_quiet(
    loaded: Loaded,
    group: list[Entry],
    X: np.ndarray | CSRMatrix,
    y: np.ndarray,
    recorded: np.ndarray | None,
) -> np.ndarray:
    """One learner call over entries whose rounds the regret window keeps only the sizes,
    labels and scores of: their rows and weights go into ring slots later rounds overwrite."""
    assert loaded.regret is not None
    X = X if loaded.means is None else loaded.means.fill_and_learn(X)  # type: ignore[arg-type]
    scores = _learn_call(loaded, X, y, recorded)
    sizes = [stop - start for entry in group for start, stop in entry.bounds()]
    width = loaded.regret.n_features
    loaded.regret.update_rounds(
        np.broadcast_to(0.0, (len(y), width)),
        y,
        scores,
        np.broadcast_to(0.0, (len(sizes), width)),
        sizes,
    )
    return scores


def _after_run(loaded: Loaded, group: list[Entry], scores: np.ndarray, labels: np.ndarray) -> None:
    """:func:`~service.engine.learning.after_learning` and the counts of ``group``'s entries in
    turn: the metrics fed once up to each entry where the history writes a point (which then sees
    them as live), each entry's ``now`` kept for the throughput and drifts."""
    signs, scores = check_labelled_scores(labels, scores)
    times = [entry.now for entry in group]
    sizes = [len(entry.y) for entry in group]  # type: ignore[arg-type]
    first = start = 0
    while first < len(group):
        last = min(first_point(loaded.history, times, first), len(group) - 1)
        stop = start + sum(sizes[first : last + 1])
        feed_metrics(
            loaded, scores[start:stop], signs[start:stop], labels[start:stop],
            times[first : last + 1], sizes[first : last + 1],
        )  # fmt: skip
        for entry in group[first:last]:
            if entry.counts:
                _finish(loaded, entry)
        record_history(loaded.history, loaded, times[last])
        _finish(loaded, group[last])
        first, start = last + 1, stop
