"""Boosted fits as log entries: the fits a learner call installs, recorded with their arrays
so that a replay of the call installs the same arrays instead of fitting again
(docs/algorithms/boosted_embedded.md, "Fit points"; docs/architecture.md: recovery is the last
checkpoint and a replay of the log after it).

A fit is most of what a replay of a ``boosted_embedded`` part costs (tens of milliseconds
each, against microseconds an event), and it is a pure function of the buffer as of its fit
point, so its result can be kept beside the events that reached its install point.  While a
:class:`fit_log` is entered in a thread, each install of that thread (:meth:`HandsOverFits
._install_pending <core.boosted_fits.HandsOverFits._install_pending>`) first looks for a
logged fit of the same part, fit and buffer (:meth:`fit_log.take`): found, its arrays are
checked as a stored state is (:func:`installable`) and installed; not found, the fit is
computed as before and recorded (:meth:`fit_log.record`).  The service's
:func:`service.engine.learning.apply` records the fits of a live call into its log entry; its
replay provides them.  A logged fit that does not match the fit due where it is met, or that
is never met, is refused (:class:`LoggedFitRefused`): a replay stops there, never installs
another fit than the live call did.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from core.boosted_trees import fitted_ensemble_problem
from core.errors import InvalidState
from core.learners._leaf_columns import fitted_width, leaves_problem

if TYPE_CHECKING:
    from core.boosted_fits import FitJob

__all__ = ["LoggedFit", "LoggedFitRefused", "active", "buffer_digest", "fit_log", "installable"]


@dataclass(frozen=True, eq=False)
class LoggedFit:
    """One installed fit: which part of the model's learner (its prefix path, ``""`` for the
    learner itself, ``learner:c2:`` for ``auto``'s third candidate), which of its fits (the
    job's restarts, fits before it and fit point), a digest of the buffer it learned, the
    ensemble's arrays and the state of the inner learner that relearned the buffer embedded
    by them (what :meth:`~core.learners.boosted_embedded.BoostedEmbedded.install` needs)."""

    part: str
    generation: int
    fits: int
    fit_from: int
    digest: str
    ensemble: dict[str, np.ndarray]
    inner: dict[str, np.ndarray]
    #: the log entry that carried it (a replay sets it, so an error names the entry)
    version: int | None = None

    def key(self) -> tuple[str, int, int, int]:
        return self.part, self.generation, self.fits, self.fit_from

    def describe(self) -> str:
        return f"the fit of part {self.part!r} (fit {self.fits}, from event {self.fit_from})"


class LoggedFitRefused(ValueError):
    """A logged fit that cannot be installed where it was logged (a corrupt entry, or a bug:
    the replay is not where the live call was); ``version`` is its log entry."""

    def __init__(self, message: str, version: int | None) -> None:
        super().__init__(message)
        self.version = version


def buffer_digest(job: FitJob) -> str:
    """A digest of the rows, labels and weights a fit learns: a logged fit is installed only on
    the buffer it was fitted on."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (job.X, job.y, job.sample_weight, *job.x_scaling.values()):
        if array is not None:
            digest.update(repr((array.dtype.str, array.shape)).encode())
            digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def _path_in(root: object, target: object, path: str = "") -> str | None:
    """``target``'s prefix path among the parts of the composite ``root`` (None: not there)."""
    if root is target:
        return path
    parts = getattr(root, "_parts", None)
    if parts is None:
        return None
    for prefix, part in parts():
        found = _path_in(part, target, path + prefix)
        if found is not None:
            return found
    return None


_active = threading.local()


def active() -> fit_log | None:
    """The innermost :class:`fit_log` this thread entered, or None."""
    stack = getattr(_active, "stack", None)
    return stack[-1] if stack else None


class fit_log:  # noqa: N801 - used as a context manager, like a function
    """While entered, this thread's installs of fits in ``learner``'s boosted parts take the
    matching ``logged`` fits (a replay) and record the fits they compute (a live call:
    :attr:`recorded`); :meth:`finish` refuses logged fits never met."""

    def __init__(self, learner: object, logged: Sequence[LoggedFit] = ()) -> None:
        self.learner = learner
        self.logged = list(logged)
        self.recorded: list[LoggedFit] = []

    def __enter__(self) -> fit_log:
        stack = getattr(_active, "stack", None)
        if stack is None:
            stack = _active.stack = []
        stack.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        _active.stack.pop()

    def path_of(self, part: object) -> str:
        path = _path_in(self.learner, part)
        return "?" if path is None else path  # not a part of the model: matches no logged fit

    def take(self, part: object, job: FitJob) -> LoggedFit | None:
        """The logged fit of ``part``'s job, or None (not logged: computed and recorded)."""
        if not self.logged:
            return None
        key = (self.path_of(part), job.generation, job.fits, job.fit_from)
        for index, fit in enumerate(self.logged):
            if fit.key() == key:
                if fit.digest != buffer_digest(job):
                    raise LoggedFitRefused(
                        f"{fit.describe()} was fitted on another buffer than the one held here",
                        fit.version,
                    )
                return self.logged.pop(index)
        return None

    def record(
        self, part: object, job: FitJob, ensemble: dict[str, np.ndarray], prepared: Any
    ) -> None:
        """Keep the fit ``part`` installs now (copies: the learner goes on with its own)."""
        self.recorded.append(
            LoggedFit(
                self.path_of(part),
                job.generation,
                job.fits,
                job.fit_from,
                buffer_digest(job),
                {key: np.array(value) for key, value in ensemble.items()},
                prepared.get_state(),
            )  # fmt: skip
        )

    def finish(self) -> None:
        """Refuse the logged fits no install took (the entry's fit is not where it was)."""
        if self.logged:
            fit = self.logged[0]
            raise LoggedFitRefused(
                f"{fit.describe()} is not due where its entry was logged", fit.version
            )


def installable(part: Any, fit: LoggedFit, job: FitJob) -> tuple[dict[str, np.ndarray], Any]:
    """``fit``'s ensemble and inner learner for ``part`` (a ``boosted_embedded``), both checked
    by value as a stored state is (the inner learner rebuilt from its state, on copies: the
    logged arrays stay as they were); :class:`LoggedFitRefused` names what is wrong."""
    n_features = job.X.shape[1]
    problem = fitted_ensemble_problem(fit.ensemble, job.params, n_features)
    if problem is not None:
        raise LoggedFitRefused(f"{fit.describe()}: the ensemble {problem}", fit.version)
    left = fit.ensemble["ens_left"]
    problem = leaves_problem(part, n_features, left, fit.ensemble["ens_feature_or_leaf"])
    if problem is not None:
        raise LoggedFitRefused(f"{fit.describe()}: the ensemble {problem}", fit.version)
    built = part._build_inner()
    state = {key: np.array(value) for key, value in fit.inner.items()}
    try:
        inner = type(built).from_state(
            built.get_params(), state, n_features=fitted_width(part, n_features, left)
        )
    except (InvalidState, KeyError, TypeError) as error:
        message = f"{fit.describe()}: its inner learner: {error}"
        raise LoggedFitRefused(message, fit.version) from None
    return {key: np.array(value) for key, value in fit.ensemble.items()}, inner
