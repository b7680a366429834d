"""Background fits: the boosted ensembles of ``boosted_embedded`` (on its own or as one of
``auto``'s candidates) are fitted by a thread of the process, never inside a request.

While a :class:`Refitter` runs, learners leave their due fits to it
(:class:`core.learners.boosted_embedded.background_fits`).  Each sweep looks at the models
cached in this process; for a learner whose fit is due it takes the job (copies of its buffer)
under the model's lock, fits it in a child process of lower priority
(:mod:`service.engine.fit_process`: no competition for the interpreter lock, the CPU left to the
requests first), so scoring and learning go on with the old ensemble, then swaps the new one
in through the repository's write (under the lock, committed with the expected version).  The
job is installed only into the very learner it was taken from, still cached: after a reload, a
reset on drift or a write by another process it is dropped, and the next sweep fits again if a
fit is still due.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np

from core.learners._base import OnlineLearner
from core.learners._composed import ComposedState
from core.learners.boosted_embedded import BoostedEmbedded, FitJob, background_fits
from service.engine.fit_process import NICENESS, FitProcess
from service.engine.model import Loaded
from service.engine.repository import ModelRepository
from service.errors import ServiceError

__all__ = ["Refitter", "due_parts"]

logger = logging.getLogger("aucstream.refit")

#: seconds between sweeps of the cached models
SWEEP_INTERVAL = 0.05

Path = tuple[str, ...]


def _parts(learner: object, path: Path = ()) -> Iterator[tuple[Path, BoostedEmbedded]]:
    if isinstance(learner, BoostedEmbedded):
        yield path, learner
    elif isinstance(learner, ComposedState):
        for prefix, part in learner._parts():
            yield from _parts(part, (*path, prefix))


def due_parts(learner: object) -> list[tuple[Path, BoostedEmbedded]]:
    """The boosted parts of ``learner`` (itself included) whose fit is due, with their paths
    (the prefixes of the composites down to them)."""
    return [(path, part) for path, part in _parts(learner) if part.fit_due()]


def _chain(learner: object, path: Path) -> list[object]:
    """``learner`` and the parts along ``path`` down to the one it names."""
    chain = [learner]
    for prefix in path:
        parts = dict(chain[-1]._parts()) if isinstance(chain[-1], ComposedState) else {}
        if prefix not in parts:
            return []
        chain.append(parts[prefix])
    return chain


class Refitter:
    """A thread fitting the due ensembles of the cached models (:meth:`sweep`), started and
    stopped with the service (or the queue worker)."""

    def __init__(
        self,
        repository: ModelRepository,
        *,
        interval: float = SWEEP_INTERVAL,
        fit: Callable[[FitJob], dict[str, np.ndarray]] | None = None,
    ) -> None:
        self.repository = repository
        self.interval = interval
        #: how a job is fitted: by default in a child process (service/engine/fit_process.py)
        self._process = FitProcess() if fit is None else None
        self._fit = fit or self._fit_in_process
        #: ensembles installed, and jobs dropped (their learner changed while they ran)
        self.installed = 0
        self.dropped = 0
        #: the last fits installed: (model id, the part's path, fit_from, fit_at)
        self.fit_log: deque[tuple[str, Path, int, int]] = deque(maxlen=1000)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._deferring: background_fits | None = None

    def start(self) -> None:
        self._deferring = background_fits().__enter__()
        self._thread = threading.Thread(target=self._run, name="aucstream-refit", daemon=True)
        self._thread.start()

    def _fit_in_process(self, job: FitJob) -> dict[str, np.ndarray]:
        assert self._process is not None
        return self._process.fit(job.X, job.y, job.params, job.sample_weight)

    def stop(self) -> None:
        """Finish the fit under way (an uninstalled job is simply dropped), then return."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._process is not None:
            self._process.close()
        if self._deferring is not None:
            self._deferring.__exit__()
            self._deferring = None

    def _run(self) -> None:
        # this thread's share of the CPU after the requests' (Linux schedules threads
        # apart): the relearning of a fit's buffer runs here, the fit in the child process
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        while not self._stop.wait(self.interval):
            try:
                self.sweep()
            except Exception:  # a sweep must not kill the thread: the next one tries again
                logger.exception("background fit failed")

    def sweep(self) -> int:
        """Fit and install every due ensemble of the cached models once; the number
        installed."""
        installed = 0
        for model_id in self.repository.cached_ids():
            for loaded, path, part, job in self._take(model_id):
                if self._stop.is_set():
                    return installed
                ensemble = self._fit(job)
                # the inner learner relearns the job's buffer here too, without the lock
                prepared = part.prepare(ensemble, job)
                installed += self._install(model_id, (loaded, path, part), job, ensemble, prepared)
        return installed

    def _take(self, model_id: str) -> list[tuple[Loaded, Path, BoostedEmbedded, FitJob]]:
        with self.repository.lock(model_id):
            loaded = self.repository.cached(model_id)
            if loaded is None:
                return []
            return [
                (loaded, path, part, part.fit_job()) for path, part in due_parts(loaded.learner)
            ]

    def _install(
        self,
        model_id: str,
        taken: tuple[Loaded, Path, BoostedEmbedded],
        job: FitJob,
        ensemble: dict[str, np.ndarray],
        prepared: OnlineLearner,
    ) -> bool:
        origin, path, part = taken

        def step(model_id: str, loaded: Loaded) -> bool:
            # the very learner the job came from, still cached (not reloaded, reset, replaced)
            chain = _chain(loaded.learner, path)
            if loaded is not origin or not chain or chain[-1] is not part:
                return False
            if not part.install(ensemble, job, prepared):
                return False
            self.fit_log.append((model_id, path, *part.fit_points_))
            for composite in reversed(chain[:-1]):  # the views over the new inner arrays
                assert isinstance(composite, ComposedState)
                composite._refresh_view()
            self.repository.commit(model_id, loaded)
            return True

        try:
            done = self.repository.write(model_id, step)
        except ServiceError:  # deleted, or the store unavailable: the next sweep sees
            done = False
        if done:
            self.installed += 1
        else:
            self.dropped += 1
        return done
