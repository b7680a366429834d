"""Fits of ``boosted_embedded``'s ensembles handed to a background fitter
(docs/algorithms/boosted_embedded.md, "Fit points").

A fit taken from the buffer as of event ``N`` is installed after event ``N + fit_delay``,
whoever computes it.  In a library the learner computes it itself when it gets there.  While a
fitter is registered (:class:`background_fits`, as :mod:`service.engine.refit` does), the learner
call that makes the fit due hands the job to it at once (:class:`FitHandle`) and the call that
reaches ``N + fit_delay`` takes the result, waiting for it when it is not ready; a job the
fitter has not begun by then is taken back and computed by that call.  The result is the same
either way (the fit is deterministic), so only the time it costs depends on who fits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from core.boosted_trees import EnsembleParams, fit_ensemble

__all__ = ["FIT_STATS", "FitHandle", "FitJob", "FitRecord", "HandsOverFits", "background_fits",
           "obtain", "submitter"]  # fmt: skip


@dataclass(frozen=True)
class FitJob:
    """A due fit: copies of the learner's buffer as of event count ``fit_from`` and what the
    install checks it against (the learner's restarts and fits so far)."""

    X: np.ndarray
    y: np.ndarray
    params: EnsembleParams
    generation: int
    fits: int
    fit_from: int

    def run(self) -> dict[str, np.ndarray]:
        """The fitted ensemble's arrays (the slow part; needs no lock)."""
        return fit_ensemble(self.X, self.y, self.params)

    def same(self, other: FitJob) -> bool:
        """The same fit: the same counts and the same buffer (a learner whose state was put
        back may reach the same counts with other events)."""
        return (
            (self.generation, self.fits, self.fit_from, self.params)
            == (other.generation, other.fits, other.fit_from, other.params)
            and np.array_equal(self.y, other.y)
            and np.array_equal(self.X, other.X)
        )


Prepare = Callable[[dict[str, np.ndarray], FitJob], Any]


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
            ensemble = self.job.run()
            self.result = (ensemble, self.prepare(ensemble, self.job))
            self.seconds = time.perf_counter() - started
            self.state = "done"
        except Exception:
            self.state = "failed"
            raise
        finally:
            self._done.set()

    def finish(
        self, ensemble: dict[str, np.ndarray], prepared: Any, seconds: float
    ) -> None:  # the fitter's, when it fits elsewhere than :meth:`run` (another process)
        self.result, self.seconds, self.state = (ensemble, prepared), seconds, "done"
        self._done.set()

    def fail(self) -> None:
        self.state = "failed"
        self._done.set()

    def cancel(self) -> None:
        """Nobody needs the result any more: a fitter that has not begun skips the job."""
        with self._lock:
            if self.state == "queued":
                self.state = "taken"

    def take(self) -> tuple[dict[str, np.ndarray], Any] | None:
        """The learner's: the result, waiting for it while the fitter runs; None when the
        fitter had not begun (the job is taken back) or failed: the caller fits."""
        with self._lock:
            if self.state == "queued":
                self.state = "taken"
                return None
        self._done.wait()
        return self.result if self.state == "done" else None

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
    #: the handle of the pending fit, when a fitter has it
    handle: FitHandle | None = field(default=None, repr=False)


@dataclass
class FitStats:
    """Process-wide counts of the same, for Prometheus (updated under a lock)."""

    installed: int = 0
    waits: int = 0
    wait_seconds: float = 0.0
    in_call: int = 0
    fit_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, waited: float | None, in_call: bool, seconds: float) -> None:
        with self._lock:
            self.installed += 1
            self.in_call += int(in_call)
            self.fit_seconds += seconds
            if waited is not None:
                self.waits += 1
                self.wait_seconds += waited


FIT_STATS = FitStats()


def obtain(
    record: FitRecord, job: FitJob, compute: Callable[[], tuple[dict[str, np.ndarray], Any]]
) -> tuple[dict[str, np.ndarray], Any]:
    """The pending fit's ensemble and prepared inner learner at its install point: the
    fitter's (``record.handle``, waiting while it runs) when it holds this very job, else
    ``compute()`` here.  A wait is an install the fitter had not finished in time for (a job
    taken back and computed here included); ``record`` and :data:`FIT_STATS` count them."""
    handle, record.handle = record.handle, None
    started = time.perf_counter()
    result, late = None, False
    if handle is not None and handle.job.same(job):
        late = not handle.ready
        result = handle.take()
    elif handle is not None:
        handle.cancel()
    in_call = result is None
    if result is None:
        begun = time.perf_counter()
        result = compute()
        seconds = time.perf_counter() - begun
        record.in_call += 1
    else:
        seconds = (handle.seconds or 0.0) if handle is not None else 0.0
    waited = time.perf_counter() - started if late else None
    if waited is not None:
        record.waits += 1
        record.wait_seconds += waited
    record.last_seconds = seconds
    FIT_STATS.add(waited=waited, in_call=in_call, seconds=seconds)
    return result


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


def submitter() -> Submit | None:
    """The fitter due fits go to (the last entered), or None: the learner fits itself."""
    return _submitters[-1] if _submitters else None


class HandsOverFits:
    """The part of ``boosted_embedded`` that hands its pending fit to a background fitter and
    takes the result at the install point (:func:`obtain`); the learner gives ``fit_job``,
    ``prepare`` and ``install``."""

    if TYPE_CHECKING:  # the learner's (annotations would be taken for hyper-parameters)

        def fit_job(self) -> FitJob: ...
        def prepare(self, ensemble: dict[str, np.ndarray], job: FitJob) -> Any: ...
        def install(self, ensemble: dict[str, np.ndarray], job: FitJob, prepared: Any) -> bool: ...

    @property
    def fit_record(self) -> FitRecord:
        """What this object saw of its fits in this process (waits, fits computed in its own
        calls, the last one's seconds): not state."""
        record = self.__dict__.get("_fit_record")
        if record is None:
            record = self.__dict__["_fit_record"] = FitRecord()
        return record

    def _hand_over(self) -> None:
        """Hand the pending fit to the background fitter when one runs and does not hold it
        (it fell due in this object, or the state was loaded with the fit pending)."""
        submit = submitter()
        record = self.fit_record
        if submit is None or (record.handle is not None and record.handle.state != "taken"):
            return
        record.handle = submit(self.fit_job(), self.prepare)

    def _install_pending(self) -> None:
        """Install the pending fit: the fitter's result when it holds the same job, else
        computed here (a library, a state loaded with the fit pending, a job taken back)."""
        job = self.fit_job()

        def compute() -> tuple[dict[str, np.ndarray], Any]:
            ensemble = job.run()
            return ensemble, self.prepare(ensemble, job)

        ensemble, prepared = obtain(self.fit_record, job, compute)
        self.install(ensemble, job, prepared)

    def _drop_handle(self) -> None:
        record = self.fit_record
        if record.handle is not None:
            record.handle.cancel()
            record.handle = None
