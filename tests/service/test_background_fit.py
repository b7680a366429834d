"""Background fits of ``boosted_embedded`` (service/engine/refit.py): handed to the fitter by the
request that makes them due, installed by the request that reaches ``N + L(N)`` (waiting
if need be), so the committed state is the library's bit for bit on every store and in queue
mode; ``/score`` answering while a fit runs; the fit status in the model, its metrics and
Prometheus; the fit process at niceness 10."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from core.learners import make_learner
from service.engine.fit_process import NICENESS, FitProcess
from service.engine.refit import Refitter
from tests.core.boosted_helpers import xor_stream
from tests.service.conftest import create_model, events_json

#: fits due at 150, 300, 500, 700 (doubling, then every 200), installed L(N) = min(320, max(40,
#: N // 16)) = 40, 40, 40, 43 events later
PARAMS = {"first_fit": 150, "refit_every": 200, "buffer_size": 300, "n_trees": 5,
          "max_leaves": 4, "min_samples_leaf": 5, "fit_delay": 320,
          "refit_growth": 2.0}  # fmt: skip


def wait_for(condition, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def post(client, X, y, start, stop, model_id="m"):
    response = client.post(f"/v1/models/{model_id}/events",
                           json=events_json(X[start:stop], y[start:stop]))  # fmt: skip
    assert response.status_code in (200, 202), response.text


def library_state(loaded, X, y):
    learner = type(loaded.learner)(**loaded.learner.get_params())
    return learner.partial_fit(X, y).get_state()


def test_the_service_learns_what_the_library_learns_bit_for_bit(client):
    X, y = xor_stream(900, d=5)
    create_model(client, learner="boosted_embedded", params=PARAMS)
    post(client, X, y, 0, 160)  # due at 150: handed to the fitter
    # its result taken at the install point (190); later ones may be raced on a busy machine
    wait_for(lambda: client.get("/v1/models/m").json()["fits"][0]["fitter"] == "done")
    for start, size in zip(range(160, 880, 30), [1, 7, 29, 20, 3] * 5, strict=False):
        post(client, X, y, start, start + size)  # requests of 1 to 29 events
        post(client, X, y, start + size, start + 30)
    post(client, X, y, 880, 900)
    repository = client.app.state.engine.repository
    cached = repository.read("m").learner
    assert cached.fits_ == 4 and cached.fit_points_ == (700, 743)  # 150 + 40, 300, 500, 700
    assert cached.fit_record.in_call < cached.fits_  # the fitter computed some
    # the state as committed in the store (the cache dropped), against the library
    repository.drop("m")
    stored = repository.read("m")
    expected = library_state(stored, X, y)
    state = stored.learner.get_state()
    for key in expected:
        np.testing.assert_array_equal(state[key], expected[key], err_msg=key)


def test_an_install_point_does_not_wait_for_a_starved_fitter(client, monkeypatch):
    """The fitter holds the job (a niced process on a busy machine): the request at the
    install point computes the same fit at its own priority and goes on."""
    X, y = xor_stream(400, seed=1, d=5)
    started, release = threading.Event(), threading.Event()
    fit = FitProcess.fit

    def held_fit(*args):
        started.set()
        assert release.wait(60)
        return fit(*args)

    monkeypatch.setattr(FitProcess, "fit", held_fit)
    create_model(client, learner="boosted_embedded", params=PARAMS)
    post(client, X, y, 0, 160)  # due at 150: handed to the fitter by this request
    assert started.wait(60)
    response = client.post("/v1/models/m/score", json=events_json(X[300:310]))
    assert response.status_code == 200, response.text
    post(client, X, y, 160, 189)  # learning goes on with no ensemble up to 189
    status = client.get("/v1/models/m").json()["fits"][0]
    assert status["due"] and (status["due_from"], status["install_at"]) == (150, 190)
    assert status["fitter"] == "running" and status["fits"] == 0
    try:
        post(client, X, y, 189, 200)  # reaches 190: computes the fit itself, the fitter held
    finally:
        release.set()
    status = client.get("/v1/models/m").json()["fits"][0]
    assert status["fits"] == 1 and not status["due"] and status["fitter"] is None
    assert (status["last_fit_from"], status["last_fit_at"]) == (150, 190)
    assert status["waits"] == 1 and status["wait_seconds"] > 0
    assert status["fits_in_call"] == 1 and status["last_fit_seconds"] > 0
    metrics = client.get("/v1/models/m/metrics").json()
    assert metrics["fits"] == [status]
    exposition = client.get("/metrics").text
    assert 'aucstream_boosted_fits{stage="waits"}' in exposition
    assert 'aucstream_boosted_fits{stage="from_log"}' in exposition
    for stage in ("patient", "raced", "race_lost"):  # counted over the process: not this test's
        assert f'aucstream_boosted_fits{{stage="{stage}"}}' in exposition
    assert "aucstream_boosted_fit_race_cpu_seconds " in exposition
    assert 'aucstream_boosted_fits_pending{state="queued"} 0.0' in exposition


def test_models_without_trees_show_no_fit_status(client):
    create_model(client)
    assert client.get("/v1/models/m").json()["fits"] is None
    assert "fits" not in client.get("/v1/models/m/metrics").json()


def test_queue_mode_fits_in_the_worker(make_app, make_worker):
    X, y = xor_stream(800, seed=2, d=5)
    app = make_app()
    create_model(app, learner="boosted_embedded", params=PARAMS)
    worker = make_worker()
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, kwargs={"until": stop.is_set})
    thread.start()
    try:

        def learned(count):
            loaded = worker.engine.repository.cached("m")
            return loaded is not None and loaded.learner.events_seen_ >= count

        for start in range(0, 800, 100):
            post(app, X, y, start, start + 100)
        wait_for(lambda: learned(800))
        loaded = worker.engine.repository.cached("m")
        state = loaded.learner.get_state()
        expected = library_state(loaded, X, y)
    finally:
        stop.set()
        thread.join()
    assert loaded.learner.fits_ == 4
    for key in expected:
        np.testing.assert_array_equal(state[key], expected[key], err_msg=key)
    assert app.app.state.refitter.submitted == 0  # the HTTP process never learns in queue mode


def test_the_fit_process_runs_at_niceness_10_exactly():
    """It ran at 19: the refitter's thread, lowered to 10, started it, and it added 10 more."""
    start = os.getpriority(os.PRIO_PROCESS, 0)  # a test run under nice keeps its own
    learner = make_learner("boosted_embedded", **PARAMS)
    X, y = xor_stream(160, seed=1, d=5)
    refitter = Refitter()
    refitter.start()
    try:
        learner.partial_fit(X, y)  # due at 150: handed over
        handle = learner.fit_record.handle
        assert handle is not None
        wait_for(lambda: handle.ready)
        assert handle.state == "done" and refitter._process is not None
        child = refitter._process._process
        assert child is not None
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == max(start, NICENESS)
    finally:
        refitter.stop()


def test_the_fit_process_ends_quietly_when_the_service_is_gone():
    """A service killed during a fit leaves its child to finish the fit and find nobody to
    answer: it ends with status 0 and writes nothing to stderr (no traceback in the log)."""
    import subprocess
    import sys

    from service.engine.fit_process import _CHILD, _send

    X, y = xor_stream(2_000, seed=2, d=5)
    job = {"X": X, "y": y.astype(np.int64)}
    job.update({name: np.array([value]) for name, value in (
        ("n_trees", 5), ("max_leaves", 4), ("learning_rate", 0.1), ("min_samples_leaf", 5),
        ("l2_regularization", 0.0), ("random_state", 0))})  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    _send(child.stdin, job)
    child.stdout.close()  # the service's end of the pipe, gone before the answer
    child.stdin.close()
    assert child.wait(timeout=120) == 0
    assert child.stderr.read() == b""
