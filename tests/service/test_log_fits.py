"""Background fits are log entries (issue 36 item 3; core/logged_fits.py): the boosted fits a
live learner call installs are logged with its entry, and a replay installs those arrays at
the same position instead of fitting again.  The rebuilt model equals, array for array, the
model of a process that never stopped, on every store; a logged fit that is corrupt, out of
range or not the fit due where it is met stops the model with a 503 naming its entry."""

from __future__ import annotations

import numpy as np
import pytest

import core.boosted_fits
from core.boosted_fits import FIT_STATS
from service.engine import Engine
from service.engine.entries import decode, encode
from service.errors import StoreUnavailable
from service.ingest import Batch
from service.models import create_model
from service.schemas import ModelCreate
from service.stores.base import Commit
from tests.service.clock_helpers import TickingClock
from tests.service.log_helpers import (
    BOOSTED,
    assert_same_arrays,
    engine_without_checkpoints,
    labelled_stream,
    state_of,
)


def _feed(engine: Engine, n_events: int, sizes=(1, 3, 7, 1, 12)) -> None:
    X, y = labelled_stream(n_events, n_features=4, seed=11)
    start, step = 0, 0
    while start < n_events:
        stop = min(n_events, start + sizes[step % len(sizes)])
        engine.learn("m", Batch(X[start:stop], y[start:stop], None))
        start, step = stop, step + 1


def _boosted(store, clock: TickingClock, n_events: int) -> Engine:
    """An engine on ``store`` with model ``m`` (``boosted_embedded``, no regret window) fed
    ``n_events`` events."""
    live = engine_without_checkpoints(store, clock)
    create_model(live, ModelCreate(id="m", n_features=4, learner="boosted_embedded",
                                   params=BOOSTED, regret_window=0))  # fmt: skip
    _feed(live, n_events)
    return live


def _logged(store) -> list:
    """``(version, fit)`` of each fit the model's log carries."""
    return [(version, fit) for version, entry in store.load("m").entries for fit in entry.fits]


class CountingFits:
    """Counts the ensembles fitted in this process while entered."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        real = core.boosted_fits.FitJob.run

        def run(job):
            self.calls += 1
            return real(job)

        monkeypatch.setattr(core.boosted_fits.FitJob, "run", run)


@pytest.mark.parametrize(
    ("learner", "params", "regret_window"),
    [("boosted_embedded", BOOSTED, 0), ("boosted_embedded", BOOSTED, 50), ("auto", {}, 0)],
)
def test_a_recovery_across_logged_fits_equals_the_live_model_without_fitting(
    logging_store, monkeypatch, learner, params, regret_window
):
    n_events = 420 if learner == "boosted_embedded" else 700  # auto: its first fits at 250
    clock = TickingClock()
    live = engine_without_checkpoints(logging_store, clock)
    create_model(
        live,
        ModelCreate(
            id="m", n_features=4, learner=learner, params=params, regret_window=regret_window
        ),
    )
    _feed(live, n_events)
    expected = state_of(live, "m")
    logged = _logged(logging_store)
    # each part's fits, by its path in the learner (auto: its two boosted candidates)
    parts = {"": "learner:fits"} if learner != "auto" else {"c2:": "learner:c2:fits",
                                                              "c4:": "learner:c4:fits"}  # fmt: skip
    for part, key in parts.items():
        assert sum(fit.part == part for _, fit in logged) == int(expected[key][0]) >= 1
    assert {fit.part for _, fit in logged} == set(parts)
    counting = CountingFits(monkeypatch)
    from_log = FIT_STATS.from_log
    rebuilt = engine_without_checkpoints(
        logging_store, clock
    )  # another process, or this one restarted
    actual = state_of(rebuilt, "m")
    assert counting.calls == 0  # every fit installed from the log
    assert FIT_STATS.from_log - from_log == len(logged)
    assert_same_arrays(actual, expected)
    assert rebuilt.info("m").version == live.info("m").version


def test_a_checkpoint_truncates_logged_fits_and_later_fits_are_logged(logging_store):
    clock = TickingClock()
    live = _boosted(logging_store, clock, 200)
    assert _logged(logging_store)
    assert live.repository.checkpoints.write("m")
    assert logging_store.load("m").entries == []
    _feed(live, 200)
    assert _logged(logging_store)  # the fits after the checkpoint
    expected = state_of(live, "m")
    actual = state_of(engine_without_checkpoints(logging_store, clock), "m")
    assert_same_arrays(actual, expected)


def _corrupt(store, change) -> int:
    """Rewrite the log of model ``m`` with ``change(fit)`` applied to its first logged fit
    (a damaged store: the entries are appended again, in order, after a copy of the model
    without them); returns that fit's entry version."""
    stored = store.load("m")
    entries = stored.entries
    target = next(version for version, entry in entries if entry.fits)
    store.delete_model("m")
    store.create_model("m", stored.config, _initial_arrays(stored), stored.incarnation)
    version = store.load("m").version
    assert version == entries[0][0] - 1
    for entry_version, entry in entries:
        if entry_version == target:
            entry = decode(encode(entry))  # a copy: the memory store keeps the objects
            entry.fits[0] = change(entry.fits[0])
        version = store.commit("m", Commit(version, stored.incarnation, entry=entry))
    return target


def _initial_arrays(stored):
    from service.engine.model import from_store

    return from_store(stored).arrays()


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (
            lambda fit: {
                **fit.ensemble,
                "ens_feature_or_leaf": fit.ensemble["ens_feature_or_leaf"] + 99,
            },
            "outside",
        ),
        (
            lambda fit: {
                **fit.ensemble,
                "ens_threshold_or_value": fit.ensemble["ens_threshold_or_value"] * np.nan,
            },
            "finite",
        ),
        (lambda fit: {**fit.ensemble, "ens_left": fit.ensemble["ens_left"][:1]}, "shape"),
        (
            lambda fit: {k: v for k, v in fit.ensemble.items() if k != "ens_feature_or_leaf"},
            "arrays",
        ),
        ("inner", "inner learner"),
        ("digest", "another buffer"),
        ("part", "not due where"),
    ],
)
def test_a_corrupt_logged_fit_stops_the_model_with_a_503_naming_its_entry(
    logging_store, damage, says
):
    from dataclasses import replace

    clock = TickingClock()
    _boosted(logging_store, clock, 120)
    if damage == "inner":

        def change(fit):
            return replace(fit, inner={**fit.inner, "n_features": np.array([3])})
    elif damage == "digest":

        def change(fit):
            return replace(fit, digest="0" * 32)
    elif damage == "part":

        def change(fit):
            return replace(fit, part="learner:c9:")
    else:

        def change(fit):
            return replace(fit, ensemble=damage(fit))

    target = _corrupt(logging_store, change)
    with pytest.raises(StoreUnavailable, match=f"log entry {target} does not apply") as raised:
        engine_without_checkpoints(logging_store, clock).info("m")
    assert says in str(raised.value)


def test_entries_carry_their_fits_through_bytes_and_refuse_stray_bytes(logging_store):
    _boosted(logging_store, TickingClock(), 80)
    [(_, fit)] = _logged(logging_store)[:1]
    entry = next(entry for _, entry in logging_store.load("m").entries if entry.fits)
    back = decode(encode(entry))
    assert encode(back) == encode(entry)
    [copy] = back.fits
    assert copy.key() == fit.key() and copy.digest == fit.digest
    for name, value in fit.ensemble.items():
        np.testing.assert_array_equal(copy.ensemble[name], value, err_msg=name)
        assert copy.ensemble[name].dtype == value.dtype
    for name, value in fit.inner.items():
        np.testing.assert_array_equal(copy.inner[name], value, err_msg=name)
    with pytest.raises(ValueError, match="bytes of arrays"):
        decode(encode(entry) + b"\x00")
    with pytest.raises(ValueError):
        decode(encode(entry)[:-8])
