"""Fits of ``boosted_embedded``'s ensembles handed to a background fitter
(docs/algorithms/boosted_embedded.md, "Fit points").

A fit taken from the buffer as of event ``N`` is installed after event ``N + L(N)``,
whoever computes it.  In a library the learner computes it itself when it gets there.  While a
fitter is registered (:class:`background_fits`, as :mod:`service.engine.refit` does), the learner
call that makes the fit due hands the job to it at once (:class:`FitHandle`) and the call that
reaches ``N + L(N)`` takes the result if it is ready, and otherwise computes the fit
itself (:func:`obtain`: a job the fitter has not begun is taken back; one it is running is
waited for up to the fit's own time in a call, then raced, the first result taken).  The
result is the same either way (the fit is deterministic), so only the time it costs depends
on who fits.

A job is handed over only when the fitter can be in time: not when the call that makes it due
reaches the install point itself (a batch of ``L(N)`` events or more after it), nor while
the learner's last ``L(N)`` events came faster than its last fit was computed (the time
its calls spent at install points of any learner left out: a stream faster than the fits, for
which the fitter's result would come after the install point, which then computes the same fit
again, and the fitter's whole fit is thrown away).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from core import logged_fits
from core.boosted_trees import EnsembleParams, fit_with_leaves

__all__ = ["FIT_STATS", "FitHandle", "FitJob", "FitRecord", "HandsOverFits", "background_fits",
           "fits_in_call", "obtain", "submitter"]  # fmt: skip


@dataclass(frozen=True)
class FitJob:
    """A due fit: copies of the learner's buffer (rows, labels and the weights of its sampled
    negatives) as of event count ``fit_from`` and what the install checks it against (the
    learner's restarts and fits so far).  The trees are fitted on ``X`` (rows as posted); the
    inner learner relearns them scaled by ``x_scaling`` (the learner's ``fit_divisors`` and
    ``fit_offsets`` as of ``fit_from``: core.learners._fit_scaling), chunk by chunk."""

    X: np.ndarray
    y: np.ndarray
    params: EnsembleParams
    generation: int
    fits: int
    fit_from: int
    sample_weight: np.ndarray | None = None
    x_scaling: dict[str, np.ndarray] = field(default_factory=dict)

    def run(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The fitted ensemble's arrays and the leaf each of ``X``'s rows reaches in each tree
        (:func:`core.boosted_trees.fit_with_leaves`; the slow part; needs no lock)."""
        return fit_with_leaves(self.X, self.y, self.params, self.sample_weight)

    def same(self, other: FitJob) -> bool:
        """The same fit: the same counts and the same buffer (a learner whose state was put
        back may reach the same counts with other events)."""
        return (
            (self.generation, self.fits, self.fit_from, self.params)
            == (other.generation, other.fits, other.fit_from, other.params)
            and np.array_equal(self.y, other.y)
            and np.array_equal(self.X, other.X)
            and self.x_scaling.keys() == other.x_scaling.keys()
            and all(np.array_equal(v, other.x_scaling[k]) for k, v in self.x_scaling.items())
            and np.array_equal(
                np.ones(0) if self.sample_weight is None else self.sample_weight,
                np.ones(0) if other.sample_weight is None else other.sample_weight,
            )
        )


Prepare = Callable[[dict[str, np.ndarray], FitJob, np.ndarray], Any]


class FitHandle:
    """A job handed to a background fitter, and its result once fitted: the ensemble's arrays
    and the inner learner that relearned the job's buffer embedded by them (``prepare``).

    States: ``queued`` -> ``running`` -> ``done`` (or ``failed``); ``queued`` -> ``taken`` when
    the learner needs the result before the fitter began it."""

    def __init__(self, job: FitJob, prepare: Prepare) -> None:
        self.job = job
        self.prepare = prepare
        self.state = "queued"
        self.result: tuple[dict[str, np.ndarray], Any] | None = None
        #: seconds the fitter took (fit and relearning), once done
        self.seconds: float | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._waiters: list[threading.Event] = []

    def begin(self) -> bool:
        """The fitter's: False when the learner took the job back first."""
        with self._lock:
            if self.state != "queued":
                return False
            self.state = "running"
            return True

    def run(self) -> None:
        """The fitter's: fit, relearn, and hand the result over (once :meth:`begin` said so)."""
        started = time.perf_counter()
        try:
            ensemble, row_leaves = self.job.run()
            prepared = self.prepare(ensemble, self.job, row_leaves)
        except Exception:
            self.fail()
            raise
        self.finish(ensemble, prepared, time.perf_counter() - started)

    def finish(self, ensemble: dict[str, np.ndarray], prepared: Any, seconds: float) -> None:
        """The fitter's: the result is ready."""
        self.result, self.seconds = (ensemble, prepared), seconds
        self._settle("done")

    def fail(self) -> None:
        self._settle("failed")

    def _settle(self, state: str) -> None:
        with self._lock:
            self.state = state
            self._done.set()
            for waiter in self._waiters:
                waiter.set()

    def cancel(self) -> bool:
        """Take the job back if the fitter has not begun it (True): it skips it then."""
        with self._lock:
            if self.state == "queued":
                self.state = "taken"
                return True
            return False

    def notify(self, event: threading.Event) -> None:
        """Set ``event`` when the fitter is done with the job (at once if it is)."""
        with self._lock:
            if self._done.is_set():
                event.set()
            else:
                self._waiters.append(event)

    @property
    def ready(self) -> bool:
        return self._done.is_set()


@dataclass
class FitRecord:
    """What one learner object saw of its fits since it was built or loaded in this process
    (not state: timings differ from run to run, the state must not)."""

    #: installs that waited for the fitter, and the seconds they waited
    waits: int = 0
    wait_seconds: float = 0.0
    #: fits the learner computed in its own call (no result handed in, or taken back)
    in_call: int = 0
    #: seconds the last installed fit took to compute (wherever it ran)
    last_seconds: float | None = None
    #: seconds the last fit computed in this object's own call took (at the requests'
    #: priority): how long an install point waits for a running fitter before racing it
    own_seconds: float | None = None
    #: the handle of the pending fit, when a fitter has it
    handle: FitHandle | None = field(default=None, repr=False)
    #: when the pending fit fell due in this object: ``time.perf_counter()`` and
    #: ``FIT_STATS.install_seconds`` then (None: it fell due before the object was loaded)
    due_at: tuple[float, float] | None = None
    #: whether the last fit's install point came after the fit's own seconds: a fitter handed
    #: the job when it fell due would have been done in time (None: no fit seen yet)
    in_time: bool | None = None


@dataclass
class FitStats:
    """Process-wide counts of the same, for Prometheus (updated under a lock)."""

    installed: int = 0
    waits: int = 0
    wait_seconds: float = 0.0
    in_call: int = 0
    fit_seconds: float = 0.0
    #: seconds the learner calls spent at install points (fitting, or waiting for the fitter)
    install_seconds: float = 0.0
    #: fits installed from a log entry's arrays (a replay: :mod:`core.logged_fits`)
    from_log: int = 0
    #: waits the fitter ended within, so that the fit was not computed a second time
    patient: int = 0
    #: fits computed here while the fitter ran them too (:func:`_race`), those of them whose
    #: result the fitter's beat (computed twice), and the CPU seconds of all of them
    raced: int = 0
    race_lost: int = 0
    race_cpu_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_logged(self) -> None:
        with self._lock:
            self.installed += 1
            self.from_log += 1

    def add_patient(self) -> None:
        with self._lock:
            self.patient += 1

    def add_race(self, *, lost: bool, cpu: float) -> None:
        with self._lock:
            self.raced += 1
            self.race_lost += int(lost)
            self.race_cpu_seconds += cpu

    def add(self, *, waited: float | None, in_call: bool, seconds: float, spent: float) -> None:
        with self._lock:
            self.installed += 1
            self.in_call += int(in_call)
            self.fit_seconds += seconds
            self.install_seconds += spent
            if waited is not None:
                self.waits += 1
                self.wait_seconds += waited


FIT_STATS = FitStats()


Result = tuple[dict[str, np.ndarray], Any]


def obtain(record: FitRecord, job: FitJob, compute: Callable[[], Result]) -> Result:
    """The pending fit's ensemble and prepared inner learner at its install point: the
    fitter's (``record.handle``) when it holds this very job and is done; else ``compute()``
    here, and when the fitter is still running the job, its result if it ends within the
    fit's own time here (``record.own_seconds``), else whichever of the two ends first (the
    fit is deterministic: both give the same).  A wait is an install point the fitter had not
    finished by; ``record`` and :data:`FIT_STATS` count them."""
    handle, record.handle = record.handle, None
    started = time.perf_counter()
    late = False
    own = _Timed(compute)
    if handle is not None and handle.job.same(job):
        late = not handle.ready
        result, in_call = _race(handle, own, record.own_seconds) if late else (handle.result, False)
    else:
        if handle is not None:
            handle.cancel()
        result, in_call = None, True
    if result is None:  # no fitter, another job, or the fitter failed
        result, in_call = own(), True
    if in_call and own.seconds is not None:
        seconds = record.own_seconds = own.seconds
    else:
        seconds = time.perf_counter() - started if handle is None else handle.seconds or 0.0
    waited = time.perf_counter() - started if late else None
    if waited is not None:
        record.waits += 1
        record.wait_seconds += waited
    record.in_call += int(in_call)
    record.last_seconds = seconds
    spent = time.perf_counter() - started
    FIT_STATS.add(waited=waited, in_call=in_call, seconds=seconds, spent=spent)
    return result


class _Timed:
    """``compute`` and the seconds it took, once it returned."""

    def __init__(self, compute: Callable[[], Result]) -> None:
        self.compute = compute
        self.seconds: float | None = None

    def __call__(self) -> Result:
        started = time.perf_counter()
        result = self.compute()
        self.seconds = time.perf_counter() - started
        return result


def _race(
    handle: FitHandle, compute: Callable[[], Result], patience: float | None
) -> tuple[Result | None, bool]:
    """``(result, computed here)``: the job taken back when the fitter has not begun it;
    while it runs, its result if it ends within ``patience`` seconds (the fit's own time
    when it was last computed here: a running fit is usually nearer its end than that, and
    computing it here too would cost a whole fit of CPU for the few milliseconds saved);
    past that, the same fit computed in a thread of this process's priority, the first of
    the two taken (a niced fitter on a saturated machine would hold the install point for as
    long as the machine stays busy; the loser's work is lost)."""
    if handle.cancel():
        return compute(), True
    first, own_done = threading.Event(), threading.Event()
    handle.notify(first)
    if patience and first.wait(patience) and handle.state == "done":
        FIT_STATS.add_patient()
        return handle.result, False
    own: dict[str, Any] = {}

    def run() -> None:
        cpu = time.thread_time()
        try:
            own["result"] = compute()
        except Exception as error:  # raised in the learner's call below
            own["error"] = error
        finally:
            FIT_STATS.add_race(lost=handle.state == "done", cpu=time.thread_time() - cpu)
            own_done.set()
            first.set()

    threading.Thread(target=run, name="aucstream-fit-race", daemon=True).start()
    first.wait()
    if handle.state == "done":
        return handle.result, False
    own_done.wait()
    if "error" in own:
        raise own["error"]
    return own["result"], True


Submit = Callable[[FitJob, Prepare], FitHandle]
_submitters: list[Submit] = []
_submitters_lock = threading.Lock()


class background_fits:  # noqa: N801 - used as a context manager, like a function
    """While entered, due fits of this process are handed to ``submit`` (which queues the
    handle it returns for a fitter) as soon as they fall due."""

    def __init__(self, submit: Submit) -> None:
        self.submit = submit

    def __enter__(self) -> background_fits:
        with _submitters_lock:
            _submitters.append(self.submit)
        return self

    def __exit__(self, *_: object) -> None:
        with _submitters_lock:
            _submitters.remove(self.submit)


_fitting_here = threading.local()


class fits_in_call:  # noqa: N801 - used as a context manager, like a function
    """While entered, due fits of this thread are not handed to a background fitter: a replay
    of logged events reaches each install point milliseconds after the fit fell due, so it
    computes every fit itself (:func:`obtain`) and a fitter's copy would be lost work.  A fit
    still pending when it exits is handed over by the learner's next call."""

    def __enter__(self) -> fits_in_call:
        self._was = getattr(_fitting_here, "on", False)
        _fitting_here.on = True
        return self

    def __exit__(self, *_: object) -> None:
        _fitting_here.on = self._was


def replaying() -> bool:
    """Whether this thread is inside :class:`fits_in_call`."""
    return getattr(_fitting_here, "on", False)


def submitter() -> Submit | None:
    """The fitter due fits go to (the last entered), or None: the learner fits itself (also
    inside :class:`fits_in_call`)."""
    if replaying():
        return None
    return _submitters[-1] if _submitters else None


class HandsOverFits:
    """The part of ``boosted_embedded`` that hands its pending fit to a background fitter and
    takes the result at the install point (:func:`obtain`); the learner gives ``fit_job``,
    ``prepare`` and ``install``."""

    if TYPE_CHECKING:  # the learner's (annotations would be taken for hyper-parameters)

        def fit_job(self) -> FitJob: ...
        def prepare(
            self, ensemble: dict[str, np.ndarray], job: FitJob, row_leaves: np.ndarray
        ) -> Any: ...
        def install(self, ensemble: dict[str, np.ndarray], job: FitJob, prepared: Any) -> bool: ...

    @property
    def fit_record(self) -> FitRecord:
        """What this object saw of its fits in this process (waits, fits computed in its own
        calls, the last one's seconds): not state."""
        record = self.__dict__.get("_fit_record")
        if record is None:
            record = self.__dict__["_fit_record"] = FitRecord()
        return record

    def _hand_over(self, to_install: int, in_call: int) -> None:
        """Hand the pending fit to the background fitter when one runs, does not hold it (it
        fell due in this object, or the state was loaded with the fit pending) and can be in
        time (module docstring): not when this call learns ``in_call`` more events, reaching
        the install point ``to_install`` events ahead itself, nor when the last install point
        came before its fit could be done."""
        submit = submitter()
        record = self.fit_record
        if submit is None or (record.handle is not None and record.handle.state != "taken"):
            return
        if in_call >= to_install or record.in_time is False:
            return
        record.handle = submit(self.fit_job(), self.prepare)

    def _mark_due(self) -> None:
        """The pending fit fell due now, in this object."""
        self.fit_record.due_at = (time.perf_counter(), FIT_STATS.install_seconds)

    def _install_pending(self) -> None:
        """Install the pending fit: the fitter's result when it holds the same job, else
        computed here (a library, a state loaded with the fit pending, a job taken back, a
        job not handed over)."""
        job = self.fit_job()
        record = self.fit_record
        log = logged_fits.active()
        logged = None if log is None else log.take(self, job)
        if logged is not None:  # a replay: the live call's fit, not fitted again
            ensemble, inner = logged_fits.installable(self, logged, job)
            self._drop_handle()
            record.due_at = None
            FIT_STATS.add_logged()
            self.install(ensemble, job, inner)
            return
        reached = None
        if record.due_at is not None:  # the stream's time for L(N) events, without the
            # install points met meanwhile (another part's fit the same calls waited for)
            since, installing = record.due_at
            reached = time.perf_counter() - since - (FIT_STATS.install_seconds - installing)

        def compute() -> tuple[dict[str, np.ndarray], Any]:
            ensemble, row_leaves = job.run()
            return ensemble, self.prepare(ensemble, job, row_leaves)

        ensemble, prepared = obtain(record, job, compute)
        if reached is not None and record.last_seconds is not None and not replaying():
            # a replay's pace is not the stream's: it says nothing of the fitter's timing
            record.in_time = reached >= record.last_seconds
        record.due_at = None
        if log is not None:  # before the install: it goes on learning with ``prepared``
            log.record(self, job, ensemble, prepared)
        self.install(ensemble, job, prepared)

    def _drop_handle(self) -> None:
        record = self.fit_record
        if record.handle is not None:
            record.handle.cancel()
            record.handle = None
