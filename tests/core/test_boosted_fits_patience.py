"""An install point that finds the background fitter running its very job waits for it for
about the fit's own time before computing the fit too (core/boosted_fits.py, ``obtain``): a
fit computed once, not twice, when the fitter is nearly done; raced as before when it is
starved (or no fit was timed here yet).  The learning is the library's either way."""

from __future__ import annotations

import threading
import time

import numpy as np

from core.boosted_fits import FIT_STATS, FitHandle, FitJob, FitRecord, obtain
from core.boosted_trees import EnsembleParams
from core.learners import make_learner
from tests.core.boosted_helpers import DELAYED, fitting, xor_stream
from tests.core.cases import states_equal


def _job() -> FitJob:
    params = EnsembleParams(2, 3, 0.1, 1, 0.0, 0)
    return FitJob(np.zeros((4, 2)), np.array([0, 1, 0, 1]), params, 0, 0, 0)


def _running(job: FitJob) -> FitHandle:
    handle = FitHandle(job, lambda ensemble, job, leaves: None)
    assert handle.begin()
    return handle


FITTERS = ({"trees": np.ones(1)}, "fitter's")
HERE = ({"trees": np.zeros(1)}, "here")


def _obtain(record: FitRecord, job: FitJob, finish_after: float | None) -> tuple[object, list]:
    """``obtain`` with the fitter's handle running ``job``, finished ``finish_after`` seconds
    later (never: None); and the calls of the computation here."""
    handle = record.handle = _running(job)
    computed: list[float] = []

    def compute():
        computed.append(time.perf_counter())
        return HERE

    if finish_after is not None:
        timer = threading.Timer(finish_after, handle.finish, (*FITTERS, finish_after))
        timer.start()
    try:
        return obtain(record, job, compute), computed
    finally:
        if finish_after is not None:
            timer.join()


def test_a_running_fit_that_ends_within_the_fits_own_time_is_not_computed_again():
    record, job = FitRecord(own_seconds=5.0), _job()
    patient = FIT_STATS.patient
    result, computed = _obtain(record, job, finish_after=0.1)
    assert result == FITTERS and computed == []
    assert (record.waits, record.in_call) == (1, 0) and 0.05 < record.wait_seconds < 5.0
    assert record.own_seconds == 5.0 and record.last_seconds == 0.1
    assert FIT_STATS.patient == patient + 1


def test_a_starved_fitter_is_raced_once_the_fits_own_time_is_past():
    record, job = FitRecord(own_seconds=0.2), _job()
    started = time.perf_counter()
    result, computed = _obtain(record, job, finish_after=None)
    assert result == HERE and len(computed) == 1
    assert computed[0] - started >= 0.2  # waited its own time first
    assert (record.waits, record.in_call) == (1, 1)
    assert record.own_seconds is not None and record.own_seconds < 0.2  # the compute's time


def test_without_a_fit_timed_here_the_fitter_is_raced_at_once():
    record, job = FitRecord(), _job()
    started = time.perf_counter()
    result, computed = _obtain(record, job, finish_after=None)
    assert result == HERE and len(computed) == 1 and computed[0] - started < 0.2
    assert (record.waits, record.in_call) == (1, 1) and record.own_seconds is not None


def test_a_fit_the_learner_waited_for_gives_the_librarys_state_bit_for_bit():
    """A fitter that begins each job and is let go only once the install point waits for
    it: the fits installed are the fitter's, waited for, and the state the library's."""
    X, y = xor_stream(700, seed=5)
    library = make_learner("boosted_embedded", **DELAYED).partial_fit(X, y)
    served = make_learner("boosted_embedded", **DELAYED)
    record = served.fit_record
    served.partial_fit(X[:130], y[:130])  # the first fit (due at 120), timed here
    assert served.fits_ == 0 and served.fit_due()
    time.sleep(1.0)  # a stream slower than its fits: the next one is handed over
    served.partial_fit(X[130:140], y[130:140])  # installed at 135, computed here
    assert served.fits_ == 1 and record.in_call == 1 and record.own_seconds is not None
    assert record.in_time
    record.own_seconds = 30.0  # room for a loaded machine: the fitter is let go at once
    hold = threading.Event()
    with fitting(hold, begun=True) as fitter:
        served.partial_fit(X[140:245], y[140:245])  # due at 240: handed over, begun, held
        assert len(fitter.submitted) == 1
        deadline = time.monotonic() + 30  # the fitter's thread begins it when scheduled
        while fitter.submitted[0].state == "queued" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fitter.submitted[0].state == "running"
        threading.Timer(0.2, hold.set).start()
        served.partial_fit(X[245:300], y[245:300])  # install point 255: waits, takes it
        assert served.fits_ == 2 and record.in_call == 1 and record.waits == 1
        assert fitter.submitted[0].state == "done" and record.wait_seconds >= 0.1
        served.partial_fit(X[300:], y[300:])
    states_equal(library.get_state(), served.get_state())
