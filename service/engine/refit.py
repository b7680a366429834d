"""Background fits: the boosted ensembles of ``boosted_embedded`` (alone or in ``auto``) fitted
by a thread of the process, in a child process at a lower priority
(:mod:`service.engine.fit_process`), off the request path; installed at event ``N + L(N)``
whoever computes them (docs/architecture.md, "Background fits").
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Iterator

from core.boosted_fits import FIT_STATS, FitHandle, FitJob, Prepare, background_fits
from core.learners._composed import ComposedState
from core.learners.boosted_embedded import BoostedEmbedded
from service.engine.fit_process import NICENESS, FitProcess
from service.schemas import FitStatus
from service.threadnames import name_this_thread

__all__ = ["Refitter", "boosted_parts", "fit_status"]

logger = logging.getLogger("aucstream.refit")
#: the process-wide fit counters (core.boosted_fits.FitStats) shown beside the fitter's own
_SHOWN_FIT_STATS = (
    "installed waits wait_seconds patient raced race_lost race_cpu_seconds in_call from_log".split()
)


def boosted_parts(learner: object, path: str = "") -> Iterator[tuple[str, BoostedEmbedded]]:
    """The boosted parts of ``learner`` (itself included), with the prefixes of the composites
    down to them (``learner:c2:`` for ``auto``'s third candidate; ``""`` for the learner)."""
    if isinstance(learner, BoostedEmbedded):
        yield path, learner
    elif isinstance(learner, ComposedState):
        for prefix, part in learner._parts():
            yield from boosted_parts(part, path + prefix)


def fit_status(learner: object) -> list[FitStatus] | None:
    """The fit status of each boosted part of ``learner`` (None without any): from its state,
    the fits installed and the one pending; from this process, the fitter's progress on it,
    the last fit's seconds and the install points that waited for the fitter."""
    found = []
    for path, part in boosted_parts(learner):
        own, record = part._own_state, part.fit_record
        pending = bool(own["pending"][0])
        handle = record.handle
        since = int(own["events"][0])  # the buffer's count: N while a fit is due
        fitted = bool(own["fits"][0])
        found.append(
            FitStatus(
                part=path,
                fits=int(own["fits"][0]),
                events=part.events_seen_,
                fit_delay=int(part.fit_delay),
                due=pending,
                due_from=since if pending else None,
                install_at=since + part._delay() if pending else None,  # N + L(N)
                fitter=handle.state if pending and handle is not None else None,
                last_fit_from=int(own["fit_from"][0]) if fitted else None,
                last_fit_at=int(own["fit_at"][0]) if fitted else None,
                last_fit_seconds=record.last_seconds,
                waits=record.waits,
                wait_seconds=record.wait_seconds,
                fits_in_call=record.in_call,
            )
        )
    return found or None


class Refitter:
    """A thread fitting the jobs :meth:`submit` hands it, in order, run by the service or worker."""

    def __init__(self) -> None:
        #: where the jobs are fitted (service/engine/fit_process.py)
        self._process = FitProcess()
        self._jobs: queue.SimpleQueue[FitHandle | None] = queue.SimpleQueue()
        #: jobs handed over, fitted here, being fitted
        self.submitted = 0
        self.fitted = 0
        self.running = 0
        self._count = threading.Lock()  # learner calls of several threads submit
        self._thread: threading.Thread | None = None
        self._handing: background_fits | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="aucstream-refit", daemon=True)
        self._thread.start()
        self._handing = background_fits(self.submit).__enter__()

    def submit(self, job: FitJob, prepare: Prepare) -> FitHandle:
        """Queue a job (called by the learner call that makes it due)."""
        handle = FitHandle(job, prepare)
        with self._count:
            self.submitted += 1
        self._jobs.put(handle)
        return handle

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    def stop(self) -> None:
        """Hand no more jobs over, finish the fit under way, then return; the jobs still
        queued are left to their learners, which fit them at their install points."""
        if self._handing is not None:
            self._handing.__exit__()
            self._handing = None
        self._jobs.put(None)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._process.close()

    def _run(self) -> None:
        name_this_thread()
        # this thread's share of the CPU after the requests' (Linux schedules threads
        # apart): the relearning of a fit's buffer runs here, the fit in the child process,
        # which starts from this thread and so at the same niceness
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        while (handle := self._jobs.get()) is not None:
            if not handle.begin():  # its learner took it back (or no longer needs it)
                continue
            self.running = 1
            started = time.perf_counter()
            try:
                job = handle.job
                ensemble, row_leaves = self._process.fit(
                    job.X, job.y, job.params, job.sample_weight
                )
                prepared = handle.prepare(ensemble, job, row_leaves)
            except Exception:  # the learner fits it itself at its install point
                handle.fail()
                logger.exception("background fit failed")
            else:
                handle.finish(ensemble, prepared, time.perf_counter() - started)
                self.fitted += 1
            finally:
                self.running = 0

    def stats(self) -> dict[str, float]:
        """This process's fit counters (Prometheus, ``GET /metrics``)."""
        counters = {
            "submitted": self.submitted,
            "fitted": self.fitted,
            "queued": self.queued,
            "running": self.running,
        }
        return {**counters, **{name: getattr(FIT_STATS, name) for name in _SHOWN_FIT_STATS}}
