"""``boosted_embedded``'s small settings (trees fitted within a few hundred events), its XOR
stream, the run of the fused segment against the general path and a background fitter in a
thread, shared by the boosted tests
(test_boosted_embedded.py, test_boosted_fits.py, test_boosted_fused.py, test_logged_fits.py,
test_boosted_fits_patience.py, test_standard_floor.py, tests/service/test_background_fit.py)."""

from __future__ import annotations

import contextlib
import queue
import threading

import numpy as np

from core.boosted_fits import FitHandle, background_fits
from core.learners import _boosted_learning, make_learner
from core.learners._boosted_fused import learn_fused, learn_whole

#: trees fitted early and often: a few hundred events cross several fits
SMALL_EMBEDDED = {"first_fit": 120, "refit_every": 150, "buffer_size": 200, "n_trees": 6,
                  "max_leaves": 5, "min_samples_leaf": 5, "fit_delay": 0}  # fmt: skip


def xor_stream(n, seed=0, d=6):
    """Labels by the sign of ``x0 * x1`` (noisy): what a linear model cannot learn, trees can."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=n) > 0.4).astype(np.int64)
    return X, y


#: the fused segment's settings: a buffer that wraps and samples, fits held and installed
SMALL_FUSED = {"first_fit": 60, "refit_every": 90, "buffer_size": 120, "n_trees": 5,
               "max_leaves": 4, "min_samples_leaf": 5, "fit_delay": 24,
               "negatives_per_positive": 2.0, "scaling": "standard", "random_state": 3,
               "params": {"solver": "ftrl", "base_rate_offset": True}}  # fmt: skip


def learned_by_path(name, params, X, y, sizes, fused: bool, monkeypatch, rounds: int = 0) -> tuple:
    """The state and scores of ``name`` learning the stream in batches of ``sizes`` (in turn;
    with ``rounds``, ``learn_rounds`` of that many one-event rounds and a long one), with the
    fused path on or off, the served weights of the rounds, and which segments it took."""
    taken = []

    def counted(*args):
        taken.append(fused and learn_fused(*args))
        return taken[-1]

    def counted_whole(*args):  # the one-piece call's own way to the kernel
        scaled = learn_whole(*args) if fused else None
        taken.append(scaled is not None)
        return scaled

    monkeypatch.setattr(_boosted_learning, "learn_fused", counted)
    monkeypatch.setattr(_boosted_learning, "learn_whole", counted_whole)
    model = make_learner(name, **params)
    scores, served, start, turn = [], [], 0, 0
    while start < len(y):
        stop = min(len(y), start + sizes[turn % len(sizes)])
        if rounds and start:  # a first call initialises the model
            stops = [*range(1, rounds + 1), stop - start]
            result = model.learn_rounds(X[start:stop], y[start:stop], stops)
            scores.append(result.scores)
            served.append(result.served)
        else:
            scores.append(model.prequential_step(X[start:stop], y[start:stop]))
        start, turn = stop, turn + 1
    monkeypatch.undo()
    return model.get_state(), np.concatenate(scores), taken, served


#: fits due at 120, 240, 390, 540, 690 (doubling, then every 150), installed L(N) = 15, 15, 24, 33,
#: 43 events later
DELAYED = {**SMALL_EMBEDDED, "fit_delay": 120, "scaling": "none", "refit_growth": 2.0}


class ThreadFitter:
    """A background fitter in a thread: handles in a queue, fitted in order."""

    def __init__(self, hold: threading.Event | None = None, begun: bool = False):
        self.jobs: queue.Queue = queue.Queue()
        self.submitted: list[FitHandle] = []
        self.hold, self.begun = hold, begun
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def submit(self, job, prepare):
        handle = FitHandle(job, prepare)
        self.submitted.append(handle)
        self.jobs.put(handle)
        return handle

    def run(self):
        while (handle := self.jobs.get()) is not None:
            began = handle.begin() if self.begun else None
            if self.hold is not None:
                self.hold.wait()
            if began or (began is None and handle.begin()):
                handle.run()

    def close(self):
        self.jobs.put(None)
        self.thread.join()


@contextlib.contextmanager
def fitting(hold: threading.Event | None = None, begun: bool = False):
    """Fits by a :class:`ThreadFitter` within the block (``hold`` released on the way out)."""
    fitter = ThreadFitter(hold, begun)
    try:
        with background_fits(fitter.submit):
            yield fitter
    finally:
        if hold is not None:
            hold.set()
        fitter.close()
