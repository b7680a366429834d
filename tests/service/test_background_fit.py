"""Background fits of ``boosted_embedded`` (service/engine/refit.py): fitted off the request
path on every store and in queue mode, swapped in atomically, the committed state the one that
learning with the recorded fit points gives again, and ``/score`` answering while a fit runs."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from core.boosted_trees import EnsembleParams
from core.learners.boosted_embedded import learn_with_fit_points
from service.engine.fit_process import NICENESS, FitProcess
from tests.core.test_boosted_embedded import xor_stream
from tests.service.conftest import create_model, events_json

PARAMS = {"first_fit": 150, "refit_every": 200, "buffer_size": 300, "n_trees": 5,
          "max_leaves": 4, "min_samples_leaf": 5}  # fmt: skip


def wait_for(condition, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def replayed_state(loaded, X, y, points):
    learner = type(loaded.learner)(**loaded.learner.get_params())
    return learn_with_fit_points(learner, X, y, points).get_state()


def post(client, X, y, start, stop, model_id="m"):
    response = client.post(f"/v1/models/{model_id}/events",
                           json=events_json(X[start:stop], y[start:stop]))  # fmt: skip
    assert response.status_code in (200, 202), response.text


def test_fits_run_in_the_background_and_replay_from_their_fit_points(client):
    X, y = xor_stream(900, d=5)
    create_model(client, learner="boosted_embedded", params=PARAMS)
    refitter = client.app.state.refitter
    repository = client.app.state.engine.repository
    for start in range(0, 900, 50):
        post(client, X, y, start, start + 50)
        time.sleep(0.02)  # a fit may land between batches, or several batches later
    wait_for(lambda: not repository.read("m").learner.fit_due())
    points = [(a, b) for model, _, a, b in refitter.fit_log if model == "m"]
    assert len(points) >= 2
    # the state as committed in the store (the cache dropped), against the replay
    repository.drop("m")
    stored = repository.read("m")
    assert stored.learner.fits_ == len(points)
    expected = replayed_state(stored, X, y, points)
    state = stored.learner.get_state()
    for key in expected:
        np.testing.assert_array_equal(state[key], expected[key], err_msg=key)


def test_scoring_answers_while_a_fit_runs(client, monkeypatch):
    X, y = xor_stream(400, seed=1, d=5)
    started, release = threading.Event(), threading.Event()
    fit = FitProcess.fit

    def held_fit(*args):
        started.set()
        assert release.wait(60)
        return fit(*args)

    monkeypatch.setattr(FitProcess, "fit", held_fit)
    create_model(client, learner="boosted_embedded", params=PARAMS)
    post(client, X, y, 0, 160)
    assert started.wait(60)
    try:
        response = client.post("/v1/models/m/score", json=events_json(X[300:310]))
        assert response.status_code == 200, response.text
        post(client, X, y, 160, 200)  # learning goes on with the old (no) ensemble too
        # both answered while the fit is held: neither waited for it
        assert not release.is_set()
        assert client.app.state.engine.repository.read("m").learner.fits_ == 0
    finally:
        release.set()
    wait_for(lambda: client.app.state.engine.repository.read("m").learner.fits_ == 1)
    assert client.app.state.engine.repository.read("m").learner.fit_points_[0] == 160


def test_queue_mode_fits_in_the_worker(make_app, make_worker):
    X, y = xor_stream(800, seed=2, d=5)
    app = make_app()
    create_model(app, learner="boosted_embedded", params=PARAMS)
    worker = make_worker()
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"until": stop.is_set})
    thread.start()
    try:

        def fitted(count):
            loaded = worker.engine.repository.cached("m")
            return loaded is not None and loaded.learner.fits_ >= count

        for start in range(0, 500, 100):
            post(app, X, y, start, start + 100)
        wait_for(lambda: fitted(1))
        post(app, X, y, 500, 800)  # the next fit falls due 200 events after the first's
        wait_for(lambda: fitted(2))
    finally:
        stop.set()
        thread.join()
    assert app.app.state.refitter.installed == 0  # the HTTP process never writes in queue mode


def test_the_fit_process_runs_at_niceness_10_exactly():
    """It ran at 19: the refitter's thread, lowered to 10, started it, and it added 10 more."""
    start = os.getpriority(os.PRIO_PROCESS, 0)  # a test run under nice keeps its own
    seen: dict[str, int] = {}

    def as_the_refitter() -> None:
        # as the refitter's thread (service/engine/refit.py), which starts the process
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(start, NICENESS))
        fitter = FitProcess()
        try:
            X, y = xor_stream(200, seed=1)
            assert fitter.fit(X, y, EnsembleParams(2, 4, 0.3, 5, 0.0, 0))  # it ran its main
            assert fitter._process is not None
            seen["child"] = os.getpriority(os.PRIO_PROCESS, fitter._process.pid)
        finally:
            fitter.close()

    worker = threading.Thread(target=as_the_refitter)
    worker.start()
    worker.join()
    assert seen["child"] == max(start, NICENESS)
