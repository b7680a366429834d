"""The model's metrics history: bounded rings of points, one per resolution, committed with
the model (``history:*`` arrays) and grown as they fill.  A point is written by the first
commit in a new minute (or hour); a model gone quiet gets the point of its last events from a
timer (:func:`behind`, :func:`catch_up_due`, :meth:`service.engine.Engine.catch_up_history`).
The API and its timing: docs/architecture.md, ``GET .../metrics/history``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from core._arrays import grown
from core.errors import InvalidState
from core.learners._growing import growing_shape_problem

HISTORY_PREFIX = "history:"
#: resolution -> (seconds per point, points kept): a day of minutes, 31 days of hours
RESOLUTIONS: dict[str, tuple[float, int]] = {"minute": (60.0, 1440), "hour": (3600.0, 744)}
#: the columns of a point; metrics undefined at the time (a class missing) are NaN
COLUMNS = ("time", "auc", "pauc", "average_precision", "recall_at_target_fpr", "events_learned",
           "positives")  # fmt: skip
_POINTS = "points"  # how many points each resolution has written in all (its ring's next slot)
_EVENTS = COLUMNS.index("events_learned")


def initial_history() -> dict[str, np.ndarray]:
    """No points yet: the rings grow as they fill (:func:`record`)."""
    history: dict[str, np.ndarray] = {
        name: np.zeros((0, len(COLUMNS)), dtype=np.float64) for name in RESOLUTIONS
    }
    history[_POINTS] = np.zeros(len(RESOLUTIONS), dtype=np.int64)
    return history


def _last(history: dict[str, np.ndarray], index: int, name: str) -> np.ndarray | None:
    """The last point of resolution ``name`` (the ``index``-th), None before any."""
    written, ring = int(history[_POINTS][index]), history[name]
    return ring[(written - 1) % len(ring)] if written else None


def _starts_interval(now: float, seconds: float, last: np.ndarray | None) -> bool:
    """Whether ``now`` is in a later interval of ``seconds`` than the ``last`` point."""
    return last is None or now // seconds > float(last[0]) // seconds


def record(history: dict[str, np.ndarray], loaded: Any, now: float) -> None:
    """Add a point to each resolution whose interval ``now`` starts (``loaded``: the model,
    whose window and counters were just updated)."""
    if not _starts_interval(now, 60.0, _last(history, 0, "minute")):
        return  # the common case: still in the minute of the last point
    point = _point(loaded, now)
    written = history[_POINTS]
    for index, (name, (seconds, capacity)) in enumerate(RESOLUTIONS.items()):
        if _starts_interval(now, seconds, _last(history, index, name)):
            # until full, a ring holds its points from slot 0 on (so len(ring) reads as its
            # capacity wherever a slot is computed)
            ring = history[name] = grown(history[name], int(written[index]) + 1, capacity)
            ring[int(written[index]) % capacity] = point
            written[index] += 1


def first_point(history: dict[str, np.ndarray], times: Sequence[float], start: int) -> int:
    """The index of the first of ``times`` from ``start`` on at which :func:`record` writes a
    point (its minute is later than the last point's), or ``len(times)`` when none does:
    a replay feeds the metrics the events before it at once."""
    last = _last(history, 0, "minute")
    if last is None:
        return min(start, len(times))
    minute = float(last[0]) // 60.0
    for index in range(start, len(times)):
        if times[index] // 60.0 > minute:
            return index
    return len(times)


def _last_events_learned(history: dict[str, np.ndarray], index: int, name: str) -> float:
    """The events learned by the last point of resolution ``name`` (0 before any point)."""
    last = _last(history, index, name)
    return 0.0 if last is None else float(last[_EVENTS])


def behind(history: dict[str, np.ndarray], events_learned: int) -> bool:
    """Whether the last point of some resolution shows fewer events than the model learned."""
    # a loop, not any() over a generator: every commit asks, and the first answers yes
    for index, name in enumerate(RESOLUTIONS):
        if _last_events_learned(history, index, name) < events_learned:
            return True
    return False


def catch_up_due(history: dict[str, np.ndarray], events_learned: int, now: float) -> bool:
    """Whether ``now`` starts the next interval of a resolution whose last point lags the model."""
    return any(
        _last_events_learned(history, index, name) < events_learned
        and _starts_interval(now, seconds, _last(history, index, name))
        for index, (name, (seconds, _)) in enumerate(RESOLUTIONS.items())
    )


def _point(loaded: Any, now: float) -> np.ndarray:
    config = loaded.config
    alpha, beta = config.pauc_range
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        window = loaded.window.summary(
            alpha=alpha,
            beta=beta,
            target_fprs=config.target_fprs[:1],
            target_alert_rates=(),
            top_k=(),
        )["window"]
    at_fpr = window["operating_points"]["at_fpr"]
    recall = at_fpr[0]["tpr"] if at_fpr else None
    values = (
        now,
        window["auc"],
        window["pauc"],
        window["average_precision"],
        recall,
        loaded.stats["events_learned"][0],
        loaded.stats["positives"][0],
    )
    return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)


def points(history: dict[str, np.ndarray], resolution: str, since: float | None) -> list[dict]:
    """The points of ``resolution``, oldest first, after ``since`` (unix s); undefined metrics
    None."""
    index = list(RESOLUTIONS).index(resolution)
    ring = history[resolution]
    written, capacity = int(history[_POINTS][index]), len(ring)
    rows = ring[[i % capacity for i in range(max(written - capacity, 0), written)]]
    if since is not None:
        rows = rows[rows[:, 0] > since]
    return [
        {
            name: (None if math.isnan(value) else int(value) if name in _INTEGERS else value)
            for name, value in zip(COLUMNS, row.tolist(), strict=True)
        }
        for row in rows
    ]


_INTEGERS = ("events_learned", "positives")


def history_state(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The history of a model's committed arrays; InvalidState names the array at fault."""
    stored = {
        name[len(HISTORY_PREFIX) :]: np.asarray(value)
        for name, value in arrays.items()
        if name.startswith(HISTORY_PREFIX)
    }
    history = initial_history()
    if not stored:
        raise InvalidState(f"the state has no {HISTORY_PREFIX}* arrays", field=HISTORY_PREFIX)
    for name, template in history.items():
        value = stored.pop(name, None)
        field = HISTORY_PREFIX + name
        capacity = RESOLUTIONS[name][1] if name in RESOLUTIONS else None
        if value is None or value.dtype != template.dtype:
            raise InvalidState(
                f"state array {field!r} is missing or not {template.dtype}", field=field
            )
        problem = (
            growing_shape_problem(field, value, template, 0, capacity)
            if capacity is not None
            else None
            if value.shape == template.shape
            else f"state array {field!r} has shape {value.shape}; expected {template.shape}"
        )
        if problem is not None:
            raise InvalidState(problem, field=field)
        history[name] = np.array(value)
    if stored:
        field = HISTORY_PREFIX + sorted(stored)[0]
        raise InvalidState(f"unexpected history array {field!r}", field=field)
    _check_values(history)
    return history


def _check_values(history: dict[str, np.ndarray]) -> None:
    written = history[_POINTS]
    if (written < 0).any():
        raise InvalidState(
            f"state array '{HISTORY_PREFIX}{_POINTS}' holds {written.tolist()}; expected "
            "non-negative counts",
            field=HISTORY_PREFIX + _POINTS,
        )
    for index, (name, (_, capacity)) in enumerate(RESOLUTIONS.items()):
        ring = history[name]
        if len(ring) < capacity and int(written[index]) > len(ring):
            raise InvalidState(
                f"state array '{HISTORY_PREFIX}{name}' has {len(ring)} rows after "
                f"{int(written[index])} points; expected every point until it holds {capacity}",
                field=HISTORY_PREFIX + name,
            )
        times, metrics, counts = ring[:, 0], ring[:, 1:5], ring[:, 5:]
        metrics_ok = np.isnan(metrics) | ((metrics >= 0.0) & (metrics <= 1.0))
        if (
            not np.isfinite(times).all()
            or (times < 0).any()
            or not metrics_ok.all()
            or not np.isfinite(counts).all()
            or (counts < 0).any()
        ):
            raise InvalidState(
                f"state array '{HISTORY_PREFIX}{name}' holds values out of range: times and "
                "counts must be finite and non-negative, metrics in [0, 1] or NaN",
                field=HISTORY_PREFIX + name,
            )
