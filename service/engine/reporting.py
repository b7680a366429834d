"""What a model reports: windowed and since-start AUC / pAUC and operating points, counts,
throughput, the ROC and the regret against the best fixed model in hindsight.

Metrics are cached per ``(incarnation, version)``.  The regret is a solve (``svm_pauc`` on the
regret window), run outside the model lock, once per version and at most every ``throttle`` x
its last solve time per model; in between, metrics serve the last solution, whose ``version``
says which model version it describes.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.regret import RegretWindow
from service.engine.history import RESOLUTIONS, points
from service.engine.model import RATE_TIME_CONSTANT, Loaded, recent_drifts
from service.engine.refit import fit_status
from service.engine.repository import ModelLock, ModelRepository
from service.schemas import REGRET_DEFAULT_MAX_FEATURES, ModelConfig

#: [CHOICE] the hindsight comparator: svm_pauc with this C and tolerance on the regret window
#: (``core.regret`` module docstring: the best fixed model over the ball of its own radius)
REGRET_C = 10.0
REGRET_TOL = 1e-3

#: a model's regret is solved again at most every THROTTLE x its last solve's seconds
THROTTLE = 10.0

Key = tuple[str, int]  # (incarnation, version)


@dataclass
class SolvedRegret:
    key: Key  # (incarnation, version) solved
    section: dict[str, Any] | None
    reason: str | None
    finished: float  # time.monotonic() at the end of the solve
    seconds: float  # how long it took

    def serves(self, key: Key, throttle: float) -> bool:
        """Current for ``key``, or recent enough that solving again would be too soon."""
        if self.key == key:
            return True
        return self.key[0] == key[0] and time.monotonic() < self.finished + throttle * self.seconds


def without_online_loss(section: dict[str, Any], learner: str) -> dict[str, Any]:
    """The regret section of a model whose score is not linear in its features (a tree path
    embedding, or ``auto`` with one): the online loss charges each round's ``coef_``
    (docs/algorithms/regret.md), not that model's score, so loss and regret are None with a note;
    the pAUC gap, from the prequential scores, stays."""
    note = (
        f"learner {learner!r} scores with a tree path embedding (auto: one of its candidates), "
        "not linearly in the features: the online surrogate loss of its rounds' weights, and "
        "so the regret, are undefined; pauc_gap compares its prequential scores with the best "
        "linear model in hindsight"
    )
    return {**section, "regret": None, "regret_per_event": None, "online_loss": None,
            "online_loss_note": note}  # fmt: skip


def throughput(loaded: Loaded, now: float) -> dict[str, float | None]:
    """Events per second: exponentially weighted (recent) and since the first event (mean)."""
    times, rate = loaded.stats["times"], loaded.stats["rate"]
    learned = int(loaded.stats["events_learned"][0])
    if not times[1]:
        return {"events_per_second_recent": 0.0, "events_per_second_mean": None}
    decay = math.exp(-max(now - times[1], 0.0) / RATE_TIME_CONSTANT)
    span = times[1] - times[0]
    return {
        "events_per_second_recent": float(rate[0] * decay / RATE_TIME_CONSTANT),
        "events_per_second_mean": float(learned / span) if span > 0 else None,
    }


def regret_off_reason(config: ModelConfig, linear: bool) -> str:
    """Why a model keeps no regret window (``linear``: its learner scores linearly in the
    features), naming the default that turned it off (service.schemas.REGRET_WINDOW_DEFAULT)."""
    if config.n_features > REGRET_DEFAULT_MAX_FEATURES:
        default = f"; the default above {REGRET_DEFAULT_MAX_FEATURES:,} features"
    elif not linear:
        default = (
            "; the default for a learner whose score is not linear in its features, such as "
            "the default auto: give regret_window to report its pAUC gap"
        )
    else:
        default = ""
    return f"regret tracking is off for this model (regret_window = 0{default})"


class Reporting:
    """Metrics, regret and ROC of the models of a :class:`ModelRepository`."""

    def __init__(self, repository: ModelRepository) -> None:
        self.repository = repository
        self.throttle = THROTTLE
        self._metrics: dict[str, tuple[Key, dict[str, Any]]] = {}
        self._regret: dict[str, SolvedRegret] = {}
        self._regret_locks: dict[str, ModelLock] = {}
        self._guard = threading.Lock()
        repository.on_forget.append(self.forget)

    def forget(self, model_id: str) -> None:
        """Drop what is cached for a model that left this process."""
        self._metrics.pop(model_id, None)
        self._regret.pop(model_id, None)
        self._regret_locks.pop(model_id, None)

    def metrics(self, model_id: str) -> dict[str, Any]:
        """Windowed and since-start AUC / pAUC over the model's range, counts, throughput,
        regret (module docstring)."""
        repository = self.repository
        with repository.lock(model_id):
            loaded = repository.load(model_id)
            key = (loaded.incarnation, loaded.version)
            summary = self._summary(model_id, loaded)
            counts = loaded.counts()
            rates = throughput(loaded, repository.clock())
            # ``auto`` models: each candidate's windowed pAUC / AUC, the leader and since when
            leaderboard = getattr(loaded.learner, "leaderboard", None)
            board = leaderboard() if leaderboard is not None else None
            drift = {
                **loaded.drift.report(),
                "on_drift": loaded.config.on_drift,
                "recent": recent_drifts(loaded.stats),
            }
            regret, regret_reason, snapshot = self._cached_regret(model_id, loaded)
            linear = bool(loaded.learner.linear_in_features)
            fits = fit_status(loaded.learner)
        if snapshot is not None:  # solved outside the model lock: learning goes on meanwhile
            regret, regret_reason = self._solve_regret(
                model_id, key, snapshot, loaded.config, linear
            )
        return {
            "model": model_id,
            "version": key[1],  # the version read under the lock (a solve may outlast it)
            "learner": loaded.config.learner,
            "pauc_range": list(loaded.config.pauc_range),
            **summary,
            "counts": counts.model_dump(),
            "throughput": rates,
            "regret": regret,
            "regret_reason": regret_reason,
            "drift": drift,
            **({"leaderboard": board} if board is not None else {}),
            **({"fits": [fit.model_dump() for fit in fits]} if fits is not None else {}),
        }

    def _summary(self, model_id: str, loaded: Loaded) -> dict[str, Any]:
        """The window's summary (AUC, pAUC, operating points) of the loaded version, computed
        once per version.  Call under the model lock."""
        key = (loaded.incarnation, loaded.version)
        cached = self._metrics.get(model_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        config = loaded.config
        alpha, beta = config.pauc_range
        summary = loaded.window.summary(
            alpha=alpha,
            beta=beta,
            target_fprs=config.target_fprs,
            target_alert_rates=config.target_alert_rates,
            top_k=config.top_k,
        )
        self._metrics[model_id] = (key, summary)
        return summary

    def _cached_regret(
        self, model_id: str, loaded: Loaded
    ) -> tuple[dict[str, Any] | None, str | None, RegretWindow | None]:
        """``(section, reason, None)`` when known for the loaded version (or throttled), else
        ``(None, None, a copy of the regret window to solve)``.  Call under the model lock."""
        if loaded.regret is None:
            return None, regret_off_reason(loaded.config, loaded.learner.linear_in_features), None
        cached = self._regret.get(model_id)
        if cached is not None and cached.serves(
            (loaded.incarnation, loaded.version), self.throttle
        ):
            return cached.section, cached.reason, None
        return None, None, RegretWindow.from_state(loaded.regret.get_state(copy=False))

    def _solve_regret(
        self, model_id: str, key: Key, window: RegretWindow, config: ModelConfig, linear: bool
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Regret of ``window`` (the model at ``key``), solved once per version: concurrent
        requests for the same version wait for the first one's result.  A model whose score is
        not linear in its features (``linear``: False) gets the pAUC gap only
        (:func:`without_online_loss`)."""
        with self._guard:
            lock = self._regret_locks.setdefault(model_id, ModelLock())
        with lock:
            cached = self._regret.get(model_id)
            if cached is not None and cached.serves(key, self.throttle):
                return cached.section, cached.reason
            started = time.monotonic()
            alpha, beta = config.pauc_range
            section, reason = window.summary(alpha, beta, C=REGRET_C, tol=REGRET_TOL)
            if section is not None:
                section["version"] = key[1]
                section["online_loss_note"] = None
                if not linear:
                    section = without_online_loss(section, config.learner)
            finished = time.monotonic()
            self._regret[model_id] = SolvedRegret(
                key, section, reason, finished, finished - started
            )
            return section, reason

    def regret_pending(self, model_id: str) -> bool:
        """Whether :meth:`metrics` may have to solve the regret (never blocks): the HTTP layer
        then calls it from the thread pool even on the memory store."""
        cached = self.repository.cached(model_id)
        if cached is None:
            return True
        if cached.regret is None:
            return False
        known = self._regret.get(model_id)
        key = (cached.incarnation, cached.version)
        return known is None or not known.serves(key, self.throttle)

    def roc(
        self, model_id: str
    ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """(version, n_events, fpr, tpr, thresholds, the window's operating points and average
        precision) of the metrics window."""
        with self.repository.lock(model_id):
            loaded = self.repository.load(model_id)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fpr, tpr, thresholds = loaded.window.roc_curve()
            window = self._summary(model_id, loaded)["window"]
            shown = ("average_precision", "operating_points", "reason")
            points = {key: window[key] for key in shown}
            return loaded.version, len(loaded.window), fpr, tpr, thresholds, points

    def history(self, model_id: str, resolution: str, since: float | None) -> dict[str, Any]:
        """The model's metrics history at ``resolution`` (``minute`` or ``hour``), points after
        ``since`` (unix s) when given (:mod:`service.engine.history`)."""
        with self.repository.lock(model_id):
            loaded = self.repository.load(model_id)
            config = loaded.config
            seconds, capacity = RESOLUTIONS[resolution]
            return {
                "model": model_id,
                "version": loaded.version,
                "resolution": resolution,
                "interval_seconds": seconds,
                "capacity": capacity,
                "pauc_range": list(config.pauc_range),
                "target_fpr": config.target_fprs[0] if config.target_fprs else None,
                "last_learned_at": float(loaded.stats["times"][1]) or None,
                "points": points(loaded.history, resolution, since),
            }
