"""The fit points of ``boosted_embedded`` (docs/algorithms/boosted_embedded.md, "Fit points"):
a fit from the buffer as of event ``N`` installed after event ``N + fit_delay``, against a plain
loop that does just that; the same state whatever the batches, across a checkpoint taken while
a fit is pending, and when a background fitter computes the fits (core/boosted_fits.py)."""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from core._kernels import boosted_embedding as kernels
from core.boosted_fits import FitHandle, FitJob, background_fits, fits_in_call
from core.boosted_trees import ENSEMBLE_KEYS, fit_ensemble
from core.learners import make_learner
from core.learners._event_rows import event_arrays
from core.learners.boosted_embedded import BoostedEmbedded
from tests.core.boosted_helpers import DELAYED, ThreadFitter, fitting, xor_stream
from tests.core.cases import states_equal
from tests.core.naive.boosted_embedding import embed_row

#: ``DELAYED`` with fits ~50x slower than learning ``L(N)`` events (6 small trees take about as
#: long as those events, so a busy machine's preemption decided which came first): the tests
#: that judge the stream's pace against the fits' take it
SLOW_FITS = {**DELAYED, "n_trees": 60}


def install_delay(n: int, fit_delay: int) -> int:
    """``L(N)``: ``min(fit_delay, max(fit_delay // 8, N // 16))`` (0 with ``fit_delay`` 0)."""
    return 0 if fit_delay == 0 else min(fit_delay, max(fit_delay // 8, n // 16, 1))


def naive_fit_points(X, y, params):
    """Event by event: a deque of the last ``buffer_size`` events; a fit falls due (not while
    one is pending) when the deque holds ``first_fit`` events, or when the events since the
    last fit's ``N`` reach ``min(refit_every, ceil((refit_growth - 1) max(N, first_fit)))``,
    and two of each class are in the deque; its buffer is copied then, and ``L(N)`` events
    later a fresh inner learner learns the copy and the events since, embedded by the new
    trees.  Returns the pre-update scores and the fit points."""
    growth = params.get("refit_growth", 1.5)
    learner = BoostedEmbedded(**params)
    inner = learner._build_inner().initialize(X.shape[1] + 1 + params["n_trees"] * 5)
    ensemble = {"ens_trees": np.zeros(1, dtype=np.int64)}
    buffer: deque = deque(maxlen=params["buffer_size"])
    last_from, ready, pending, points, scores = 0, False, None, [], []

    def embed(rows):
        return np.array([embed_row(ensemble, x, params["n_trees"], 5) for x in rows])

    def install_if_due(events):
        nonlocal ensemble, inner, last_from, ready, pending
        if pending is None or events - pending[0] != install_delay(pending[0], params["fit_delay"]):
            return
        fit_from, copied = pending
        ensemble = fit_ensemble(X[copied], y[copied], learner._ensemble_params())
        inner = learner._build_inner().initialize(inner.n_features_in_)
        inner.partial_fit(embed(X[copied]), y[copied])
        if events > fit_from:
            inner.partial_fit(embed(X[fit_from:events]), y[fit_from:events])
        points.append((fit_from, events))
        last_from, ready, pending = fit_from, True, None

    for i in range(len(y)):
        z = embed(X[i : i + 1])
        scores.append(inner.decision_function(z)[0])
        inner.partial_fit(z, y[i : i + 1])
        buffer.append(i)
        events = i + 1
        install_if_due(events)
        labels = y[list(buffer)]
        counted = (
            events - last_from
            >= min(
                params["refit_every"], math.ceil((growth - 1) * max(last_from, params["first_fit"]))
            )
            if ready
            else len(buffer) >= params["first_fit"]
        )
        if pending is None and counted and min((labels > 0).sum(), (labels <= 0).sum()) >= 2:
            pending = (events, list(buffer))
            install_if_due(events)  # at once when fit_delay is 0
    return np.array(scores), points


@pytest.mark.parametrize("delay, growth", [(0, 1.5), (37, 1.5), (260, 1.5), (37, 2.0)])
def test_fits_land_at_n_plus_l_n_as_the_naive_loop(delay, growth):
    X, y = xor_stream(1000, seed=5)
    params = {**DELAYED, "fit_delay": delay, "refit_growth": growth}
    expected, points = naive_fit_points(X, y, params)
    assert len(points) >= 3 and all(at == start + install_delay(start, delay)
                                    for start, at in points)  # fmt: skip
    learner = make_learner("boosted_embedded", **params)
    served, seen = [], []
    for start in range(0, 1000, 61):  # batches that span the fit points
        served.append(learner.prequential_step(X[start : start + 61], y[start : start + 61]))
        if learner.fits_ and learner.fit_points_ not in seen:
            seen.append(learner.fit_points_)
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-12)
    assert learner.fits_ == len(points) and learner.fit_points_ == points[-1]
    assert set(seen) <= set(points)


def test_the_state_does_not_depend_on_the_batches_nor_on_a_checkpoint_while_pending():
    X, y = xor_stream(900, seed=2)
    whole = make_learner("boosted_embedded", **DELAYED).partial_fit(X, y)
    one_by_one = make_learner("boosted_embedded", **DELAYED)
    for i in range(900):
        one_by_one.partial_fit(X[i : i + 1], y[i : i + 1])
    states_equal(whole.get_state(), one_by_one.get_state())
    # a checkpoint between N and N + L(N): the state holds the buffer as of N and the
    # events since, so the restored learner installs the same fit (computing it itself)
    first = make_learner("boosted_embedded", **DELAYED).partial_fit(X[:130], y[:130])
    assert first.fit_due() and first.fits_ == 0
    restored = BoostedEmbedded.from_state(first.get_params(), first.get_state())
    assert restored.fit_due() and restored.events_seen_ == 130
    restored.partial_fit(X[130:], y[130:])
    states_equal(whole.get_state(), restored.get_state())
    assert restored.fit_record.in_call == restored.fits_ - first.fits_  # no fitter: all here


def same_as_library(learner, X, y):
    """``learner``'s state is the one the library learns on ``X, y`` without a fitter."""
    library = make_learner("boosted_embedded", **DELAYED).partial_fit(X, y)
    states_equal(library.get_state(), learner.get_state())


@pytest.mark.parametrize("learner", ["boosted_embedded", "auto"])
def test_a_background_fitter_gives_the_librarys_state_bit_for_bit(learner):
    X, y = xor_stream(1500, seed=7)
    params = DELAYED if learner == "boosted_embedded" else {
        "candidates": [{"learner": "logistic", "params": {}},
                       {"learner": "boosted_embedded", "params": DELAYED}],
        "scaling": "none", "track_drift": True,
    }  # fmt: skip
    library = make_learner(learner, **params).partial_fit(X, y)
    served = make_learner(learner, **params)
    part = served if learner == "boosted_embedded" else None
    with fitting() as fitter:
        for start in range(0, 1500, 13):
            served.partial_fit(X[start : start + 13], y[start : start + 13])
            part = part or served._candidates[1]
            if part.fit_record.handle is not None:  # a stream slower than its fits
                assert finished(part.fit_record.handle)
    states_equal(library.get_state(), served.get_state())
    assert part.fits_ >= 3 and part.fit_record.in_call == 0
    # every fit handed over, the last one's install point maybe past the stream's end
    assert len(fitter.submitted) == part.fits_ + part.fit_due() and part.fit_record.in_time


def finished(handle: FitHandle, seconds: float = 60.0) -> bool:
    done = threading.Event()
    handle.notify(done)
    return done.wait(seconds)


def pad_fits(monkeypatch) -> None:
    """Every fit takes 0.3 s more than its trees, so that a stream meant to be faster than
    its fits is on a loaded machine too: there a 0.03 s fit was slower than the stream's 37
    events between its falling due and its install point, and an install meant to be late was
    judged in time.  Results are unchanged."""
    real_run = FitJob.run

    def slow_run(job: FitJob) -> dict[str, np.ndarray]:
        time.sleep(0.3)
        return real_run(job)

    monkeypatch.setattr(FitJob, "run", slow_run)


def test_a_call_that_reaches_the_install_point_hands_nothing_over(monkeypatch):
    """A batch holding the ``L(N)`` events after a fit falls due installs the fit itself:
    a fitter given the job would fit it a second time for nothing."""
    pad_fits(monkeypatch)
    X, y = xor_stream(700, seed=3)
    fitter = ThreadFitter()
    learner = make_learner("boosted_embedded", **SLOW_FITS)
    try:
        with background_fits(fitter.submit):
            learner.partial_fit(X[:600], y[:600])  # due at 120, 240, 390, 540 (DELAYED)
            assert learner.fits_ == 4 and fitter.submitted == []
            assert learner.fit_record.in_call == learner.fits_
            learner.partial_fit(X[600:], y[600:])
    finally:
        fitter.close()
    # due at 690, in the last 43 events of the call, but the call before installed its fits
    # faster than they were computed: the stream goes faster than the fits
    assert learner.fit_due() and fitter.submitted == [] and learner.fit_record.in_time is False
    library = make_learner("boosted_embedded", **SLOW_FITS).partial_fit(X, y)
    states_equal(library.get_state(), learner.get_state())


def test_a_stream_faster_than_its_fits_stops_handing_them_over_until_it_slows_down(monkeypatch):
    pad_fits(monkeypatch)
    X, y = xor_stream(1200, seed=4)
    hold = threading.Event()
    fitter = ThreadFitter(hold, begun=True)  # begins each job, then is starved
    learner = make_learner("boosted_embedded", **SLOW_FITS)
    record = learner.fit_record
    try:
        with background_fits(fitter.submit):
            learner.partial_fit(X[:130], y[:130])  # due at 120: handed over
            assert len(fitter.submitted) == 1 and record.in_time is None
            learner.partial_fit(X[130:157], y[130:157])  # installed before the fitter was done
            assert learner.fits_ == 1 and record.in_time is False
            learner.partial_fit(X[157:250], y[157:250])  # due at 240: not handed over
            assert learner.fit_due() and len(fitter.submitted) == 1
            # the stream slows down: past this fit's time, which is measured in the call
            # below (0.3 s and its trees: 4 times the last one's leaves a loaded machine room)
            time.sleep(max(1.5, 4 * (record.last_seconds or 0)))
            learner.partial_fit(X[250:280], y[250:280])  # installed at 255, fitted here
            assert learner.fits_ == 2 and record.in_time is True
            assert record.in_call == 2 and len(fitter.submitted) == 1
            hold.set()
            learner.partial_fit(X[280:400], y[280:400])  # due at 390: handed over
            assert len(fitter.submitted) == 2 and fitter.submitted[1].job.fit_from == 390
    finally:
        hold.set()
        fitter.close()
    learner.partial_fit(X[400:], y[400:])
    library = make_learner("boosted_embedded", **SLOW_FITS).partial_fit(X, y)
    states_equal(library.get_state(), learner.get_state())


def test_an_install_point_waits_for_a_running_fit_and_takes_back_a_queued_one():
    X, y = xor_stream(400, seed=1)
    learner = make_learner("boosted_embedded", **DELAYED)
    with fitting(threading.Event()):
        learner.partial_fit(X[:130], y[:130])
        handle = learner.fit_record.handle
        assert handle is not None and handle.state == "queued"
        # the fitter has not begun when the install point comes: the call fits itself
        learner.partial_fit(X[130:157], y[130:157])
        assert handle.state == "taken" and learner.fits_ == 1
        assert (learner.fit_record.waits, learner.fit_record.in_call) == (1, 1)
    same_as_library(learner, X[:157], y[:157])


def test_an_install_point_computes_a_fit_the_fitter_holds_and_takes_the_first_result():
    X, y = xor_stream(400, seed=1)
    learner = make_learner("boosted_embedded", **DELAYED)
    with fitting(threading.Event(), begun=True):  # begins each job, then is starved
        learner.partial_fit(X[:130], y[:130])  # due at 120: handed over
        learner.partial_fit(X[130:157], y[130:157])
        assert learner.fits_ == 1 and learner.fit_points_ == (120, 135)
        assert (learner.fit_record.waits, learner.fit_record.in_call) == (1, 1)
    same_as_library(learner, X[:157], y[:157])


def test_inside_fits_in_call_nothing_is_handed_over_and_a_pending_fit_is_after():
    X, y = xor_stream(700, seed=3)
    library = make_learner("boosted_embedded", **DELAYED).partial_fit(X, y)
    fitter = ThreadFitter()
    submitted = []

    def submit(job, prepare):
        submitted.append(job)
        return fitter.submit(job, prepare)

    served = make_learner("boosted_embedded", **DELAYED)
    try:
        with background_fits(submit):
            with fits_in_call():  # a replay: every fit computed in the call
                served.partial_fit(X[:560], y[:560])  # fits due at 120, 240, 390 and 540
            assert submitted == [] and served.fit_record.in_call == served.fits_ == 3
            assert served.fit_due()  # 540's is pending at the exit (installed at 577)
            assert served.fit_record.in_time is None  # a replay's pace judges no fitter
            served.partial_fit(X[560:570], y[560:570])  # short of 577: handed over now
            assert len(submitted) == 1 and submitted[0].fit_from == 540
            served.partial_fit(X[570:], y[570:])
    finally:
        fitter.close()
    states_equal(library.get_state(), served.get_state())


def test_a_fit_is_scikit_learns_booster_without_importing_scikit_learn():
    """The kernel grows scikit-learn's trees (50 x 15 leaves on rows with more distinct values
    than bins, a constant column, a column of few values), and a process that fits imports no
    scikit-learn (its import alone cost 1.4 s of CPU at the first fit)."""
    script = """
import sys
import numpy as np
from core.boosted_trees import EnsembleParams, fit_ensemble
rng = np.random.default_rng(5)
X = rng.normal(size=(3000, 4))
X[:, 2] = 1.0
X[:, 3] = rng.integers(0, 7, 3000)
y = (X[:, 0] * X[:, 1] + 0.2 * X[:, 3] + 0.3 * rng.normal(size=3000) > 0.4).astype(int)
ensemble = fit_ensemble(X, y, EnsembleParams(50, 15, 0.1, 20, 0.0, 0))
assert "sklearn" not in sys.modules
np.savez(sys.argv[1], X=X, y=y, **ensemble)
"""
    root = pathlib.Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as folder:
        out = str(pathlib.Path(folder) / "fit.npz")
        subprocess.run([sys.executable, "-c", script, out], check=True, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
        saved = dict(np.load(out, allow_pickle=False))
    X, y = saved.pop("X"), saved.pop("y")
    booster = HistGradientBoostingClassifier(
        max_iter=50, max_leaf_nodes=15, early_stopping=False, random_state=0
    ).fit(X, y)
    arrays = kernels.Ensemble(*(saved[key] for key in ENSEMBLE_KEYS[:-1]))
    margin = kernels.margin(*event_arrays(X), arrays, 50, X.shape[1])
    np.testing.assert_allclose(margin, booster.decision_function(X), rtol=0, atol=1e-12)
