"""A model as this process holds it (:class:`Loaded`), and how it is built and stored.

The committed arrays of a model are named by part (``learner:*``, ``window:*``, ``stats:*``,
``regret:*``, ``drift:*``, ``calibration:*``, ``history:*``, ``missing:*``); with each array's
dtype and number of dimensions they are the stored state's format, versioned by
:data:`STATE_FORMAT_VERSION` (docs/architecture.md, "Stored state format").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import InvalidState
from core.learners import learner_class
from core.learners._base import OnlineLearner
from core.learners._state import MAX_COUNT, VALUE_BOUND
from core.metrics import PrequentialWindow
from core.metrics.calibration import OnlineCalibrator
from core.metrics.drift import DriftDetector
from core.regret import RegretWindow
from service.engine.history import HISTORY_PREFIX, history_state, initial_history
from service.engine.missing import MISSING_PREFIX, RunningMeans
from service.ingest import FeatureSpec
from service.kernels import require_kernels
from service.schemas import Counts, ModelConfig
from service.stores.base import StoredState

LEARNER_PREFIX = "learner:"
WINDOW_PREFIX = "window:"
STATS_PREFIX = "stats:"
REGRET_PREFIX = "regret:"
DRIFT_PREFIX = "drift:"
CALIBRATION_PREFIX = "calibration:"
#: [CHOICE] the version of the stored state's format (every store and snapshot): a state of
#: another version is refused on load (:class:`OtherStateFormat`), never reinterpreted.  Bump
#: it with any change of the layout, and regenerate the golden states
#: (``PYTHONPATH=. python3 -m tests.state_fixtures.regenerate``).
STATE_FORMAT_VERSION = 14
#: the committed array holding the state's format version (one int64)
FORMAT_ARRAY = "format:state_version"
#: [CHOICE] the version of a state without :data:`FORMAT_ARRAY`: the states committed before
#: it existed have the layout of version 1 (adding it changed no other array)
UNMARKED_FORMAT_VERSION = 1
COUNT_NAMES = ("events_learned", "positives", "negatives", "duplicates", "labels_joined",
               "labels_defaulted", "labels_expired")  # fmt: skip
#: time constant of the exponentially weighted throughput, seconds
RATE_TIME_CONSTANT = 10.0
#: [CHOICE] detected drifts whose position is kept (a ring), for the markers of the dashboard's
#: time charts: the detector itself keeps only the last one
DRIFT_LOG_CAPACITY = 20


class OtherStateFormat(InvalidState):
    """A committed state of another format version than this code reads: refused as a whole
    (it is not converted, not even through a snapshot).  ``found`` is its version."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"stored state format {found}, this server reads {STATE_FORMAT_VERSION}",
            field=FORMAT_ARRAY,
        )
        self.found = found


def check_state_format(arrays: dict[str, np.ndarray]) -> None:
    """Refuse a state of another format version (:class:`OtherStateFormat`) or a bad version
    array."""
    marker = arrays.get(FORMAT_ARRAY)
    if marker is None:
        found = UNMARKED_FORMAT_VERSION
    else:
        marker = np.asarray(marker)
        if marker.dtype.kind not in "iu" or marker.shape != (1,):
            raise InvalidState(
                f"state array {FORMAT_ARRAY!r} has dtype {marker.dtype} and shape "
                f"{marker.shape}; expected one integer, the state's format version",
                field=FORMAT_ARRAY,
            )
        found = int(marker[0])
    if found != STATE_FORMAT_VERSION:
        raise OtherStateFormat(found)


def initial_stats() -> dict[str, np.ndarray]:
    stats = {name: np.zeros(1, dtype=np.int64) for name in COUNT_NAMES}
    # first_learned_at, last_learned_at (unix s) and the decayed event count behind the rate
    stats["times"] = np.zeros(2, dtype=np.float64)
    stats["rate"] = np.zeros(1, dtype=np.float64)
    # the ring of recent drifts: each one's event index and the unix time of the learning
    # call that detected it, and how many were logged in all (the ring's next slot is that
    # count modulo its capacity)
    stats["drift_events"] = np.zeros(DRIFT_LOG_CAPACITY, dtype=np.int64)
    stats["drift_times"] = np.zeros(DRIFT_LOG_CAPACITY, dtype=np.float64)
    stats["drifts_logged"] = np.zeros(1, dtype=np.int64)
    return stats


def log_drifts(stats: dict[str, np.ndarray], detected_at: list[int], now: float) -> None:
    """Add the drifts reported (event indices) at unix time ``now`` to the ring of recent drifts."""
    events, times, logged = stats["drift_events"], stats["drift_times"], stats["drifts_logged"]
    for event in detected_at:
        slot = int(logged[0]) % len(events)
        events[slot] = event
        times[slot] = now
        logged[0] += 1


def recent_drifts(stats: dict[str, np.ndarray]) -> list[dict[str, float | int]]:
    """The ring of recent drifts, oldest first: ``[{"event": index, "time": unix s}]``."""
    events, times = stats["drift_events"], stats["drift_times"]
    logged, capacity = int(stats["drifts_logged"][0]), len(events)
    slots = [i % capacity for i in range(max(logged - capacity, 0), logged)]
    return [{"event": int(events[i]), "time": float(times[i])} for i in slots]


#: one copy of each distinct learner ``params`` among the models this process holds (every
#: default ``auto`` model has the same ~4 KB of its candidates' parameters); read only: the
#: learner is built from a copy of them, and a configuration is changed by a new one
_SHARED_PARAMS: dict[str, dict[str, Any]] = {}
#: distinct ``params`` kept before the table starts again (a model keeps the copy it has)
SHARED_PARAMS_LIMIT = 256
#: the set of names pydantic keeps per configuration (2.3 KB) when every field was given, as in
#: every stored one: one set for them all (pydantic only ever adds a field's name to it)
_EVERY_FIELD = set(ModelConfig.model_fields)


def share_constants(config: ModelConfig) -> None:
    """Point ``config.params`` at the copy already held for an equal value (the repr of JSON
    values tells their types apart: ``1``, ``1.0`` and ``True`` are not shared), and its set of
    given fields at the one set of every field."""
    key = repr(config.params)
    shared = _SHARED_PARAMS.get(key)
    if shared is None:
        if len(_SHARED_PARAMS) >= SHARED_PARAMS_LIMIT:
            _SHARED_PARAMS.clear()
        _SHARED_PARAMS[key] = config.params
    elif shared is not config.params and shared == config.params:
        config.__dict__["params"] = shared
    if config.__pydantic_fields_set__ == _EVERY_FIELD:
        object.__setattr__(config, "__pydantic_fields_set__", _EVERY_FIELD)


@dataclass
class Loaded:
    """A model as cached in this process."""

    config: ModelConfig
    incarnation: str
    version: int
    learner: OnlineLearner
    window: PrequentialWindow
    stats: dict[str, np.ndarray]
    #: checkpoint fields committed with the state (e.g. a queue worker's last stream id)
    meta: dict[str, str] = field(default_factory=dict)
    #: the regret window (None when ``config.regret_window`` is 0)
    regret: RegretWindow | None = None
    #: the drift detector on the prequential scores (docs/algorithms/drift.md)
    drift: DriftDetector = field(default_factory=DriftDetector)
    #: the running means that fill missing values (None unless ``missing_values`` is ``mean``)
    means: RunningMeans | None = None
    #: the map from scores to probabilities (docs/algorithms/calibration.md)
    calibrator: OnlineCalibrator = field(default_factory=OnlineCalibrator)
    #: the metrics history's rings (:mod:`service.engine.history`)
    history: dict[str, np.ndarray] = field(default_factory=initial_history)

    def __post_init__(self) -> None:
        share_constants(self.config)

    @functools.cached_property
    def spec(self) -> FeatureSpec:
        """The feature layout of the model's events (made once: it is read by every request,
        and the configuration and the learner's class of a loaded model never change)."""
        return FeatureSpec(
            self.config.n_features,
            self.config.feature_mode,
            feature_names=self.config.feature_names,
            missing_values=self.config.missing_values,
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array that is committed: the format version, then each part's, prefixed."""
        arrays = {FORMAT_ARRAY: np.array([STATE_FORMAT_VERSION], dtype=np.int64)}
        parts = [
            (LEARNER_PREFIX, self.learner.state_),
            (WINDOW_PREFIX, self.window.get_state()),
            (STATS_PREFIX, self.stats),
            # views: every caller copies or encodes them at once
            (REGRET_PREFIX, {} if self.regret is None else self.regret.get_state(copy=False)),
            (DRIFT_PREFIX, self.drift.get_state()),
            (MISSING_PREFIX, {} if self.means is None else self.means.get_state()),
            (CALIBRATION_PREFIX, self.calibrator.get_state()),
            (HISTORY_PREFIX, self.history),
        ]
        for prefix, state in parts:
            arrays.update({prefix + name: value for name, value in state.items()})
        return arrays

    def counts(self) -> Counts:
        return Counts(**{name: int(self.stats[name][0]) for name in COUNT_NAMES})


@dataclass
class ServedWeights:
    """The served linear score of a model at ``version``: ``coef . scaled(x) + intercept``
    internally, ``raw[0] . x + raw[1]`` on the features as posted (None: not linear in them)."""

    config: ModelConfig
    version: int
    coef: np.ndarray
    intercept: float
    raw: tuple[np.ndarray, float] | None


def _prefixed(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The ``<prefix>*`` arrays of a model, named without the prefix."""
    return {name[len(prefix) :]: value for name, value in arrays.items() if name.startswith(prefix)}


def _named(error: InvalidState, prefix: str) -> InvalidState:
    """``error`` of a part's state, naming the committed array (``learner:fill_neg``)."""
    return InvalidState(str(error), field=None if error.field is None else prefix + error.field)


def _build_part(arrays: dict[str, np.ndarray], prefix: str, part: Any) -> Any:
    """``part`` (a class with ``from_state``) from the model's ``<prefix>*`` arrays;
    InvalidState names the committed array at fault (or the missing part)."""
    state = _prefixed(arrays, prefix)
    if not state:
        raise InvalidState(f"the state has no {prefix}* arrays", field=prefix)
    try:
        return part.from_state(state)
    except InvalidState as error:
        raise _named(error, prefix) from None


def _check_parameters(stored: Any, name: str, expected: list[int], what: str) -> None:
    """A part's stored size (the array ``name``) must be the configured ``expected`` (before
    use)."""
    stored = np.asarray(stored if stored is not None else np.zeros(0))
    if stored.dtype.kind not in "iu" or stored.reshape(-1).tolist() != expected:
        raise InvalidState(
            f"state array {name!r} holds {stored.reshape(-1)[:4].tolist()}; expected "
            f"{expected} ({what})",
            field=name,
        )


def build_regret(config: ModelConfig, arrays: dict[str, np.ndarray]) -> RegretWindow | None:
    """The model's regret window, restored from its ``regret:*`` arrays; None when
    ``regret_window`` is 0.  Raises ValueError when the arrays are missing or do not fit the
    configuration (their ``parameters``, the window's size, are checked first)."""
    capacity = int(config.regret_window or 0)
    if capacity == 0:
        return None
    name = f"{REGRET_PREFIX}parameters"
    if _prefixed(arrays, REGRET_PREFIX):
        expected = [capacity, config.n_features]
        _check_parameters(arrays.get(name), name, expected, "regret_window, n_features")
    return _build_part(arrays, REGRET_PREFIX, RegretWindow)


def _check_counter(name: str, value: np.ndarray, template: np.ndarray | None) -> None:
    """Counters and times are shown to users and summed: non-negative, finite, and with
    headroom (a counter at most ``MAX_COUNT``, so that adding a batch never wraps it; a time or
    rate at most ``VALUE_BOUND``)."""
    field = STATS_PREFIX + name
    if template is None or value.shape != template.shape or value.dtype != template.dtype:
        raise InvalidState(f"unexpected counter array {field!r}", field=field)
    limit = MAX_COUNT if value.dtype.kind in "iu" else VALUE_BOUND
    if not np.isfinite(value).all() or (value < 0).any() or (value > limit).any():
        raise InvalidState(
            f"state array {field!r} holds {value.tolist()}; expected finite values in "
            f"[0, {limit:g}]",
            field=field,
        )


def _check_class_counts(stats: dict[str, np.ndarray]) -> None:
    """Every learned event is a positive or a negative (``learning._count``)."""
    learned, positives, negatives = (
        int(stats[name][0]) for name in ("events_learned", "positives", "negatives")
    )
    if positives + negatives != learned:
        raise InvalidState(
            f"state arrays '{STATS_PREFIX}positives' ({positives}) and "
            f"'{STATS_PREFIX}negatives' ({negatives}) do not add up to "
            f"'{STATS_PREFIX}events_learned' ({learned})",
            field=f"{STATS_PREFIX}negatives",
        )


def from_arrays(
    config: ModelConfig, incarnation: str, version: int, arrays: dict[str, np.ndarray]
) -> Loaded:
    """A model from its committed arrays, each checked by value before anything is built on it (a
    corrupt snapshot or store entry never reaches a kernel): another format is
    :class:`OtherStateFormat`, a bad array :class:`~core.errors.InvalidState` naming it, arrays
    that do not fit ``config`` another ValueError, KeyError or TypeError."""
    check_state_format(arrays)
    # a 503 naming the kernels still compiling in the background, before any kernel is called
    require_kernels(config.learner, config.params, config.scaling, config.n_features)
    window_state = _prefixed(arrays, WINDOW_PREFIX)
    _check_parameters(
        window_state.get("window_parameters"),
        f"{WINDOW_PREFIX}window_parameters",
        [config.window, config.reservoir],
        "the model's window and reservoir",
    )
    try:
        learner = learner_class(config.learner).from_state(
            {**config.params, "scaling": config.scaling},
            _prefixed(arrays, LEARNER_PREFIX),
            n_features=config.n_features,
        )
    except InvalidState as error:
        raise _named(error, LEARNER_PREFIX) from None
    window = PrequentialWindow.from_state(window_state)
    full_stats, stats = initial_stats(), _prefixed(arrays, STATS_PREFIX)
    for name, value in stats.items():
        _check_counter(name, np.asarray(value), full_stats.get(name))
    missing = sorted(full_stats.keys() - stats.keys())
    if missing:
        field = STATS_PREFIX + missing[0]
        raise InvalidState(f"state array {field!r} is missing", field=field)
    # copies: a model never shares a snapshot's (or an undo point's) arrays
    full_stats.update({name: np.array(value) for name, value in stats.items()})
    _check_class_counts(full_stats)
    return Loaded(
        config,
        incarnation,
        version,
        learner,
        window,
        full_stats,
        regret=build_regret(config, arrays),
        drift=_build_part(arrays, DRIFT_PREFIX, DriftDetector),
        means=build_means(config, arrays, int(full_stats["events_learned"][0])),
        calibrator=_build_part(arrays, CALIBRATION_PREFIX, OnlineCalibrator),
        history=history_state(arrays),
    )


def build_means(
    config: ModelConfig, arrays: dict[str, np.ndarray], events_learned: int
) -> RunningMeans | None:
    """The running means of a dense model whose ``missing_values`` is ``mean`` (None for any
    other model: a sparse or hashed model reads a missing value as an absent feature)."""
    if config.missing_values != "mean" or config.feature_mode != "dense":
        return None
    return RunningMeans.from_arrays(arrays, config.n_features, events_learned)


def from_store(stored: StoredState) -> Loaded:
    """A model as the store sent it (with its arrays)."""
    assert stored.arrays is not None and stored.config is not None
    config = ModelConfig.model_validate(stored.config)
    loaded = from_arrays(config, stored.incarnation, stored.version, stored.arrays)
    loaded.meta = stored.meta
    return loaded


def fresh(config: ModelConfig, learner: OnlineLearner) -> Loaded:
    """A model that has learned nothing (version 1 once created)."""
    window = PrequentialWindow(config.window, config.reservoir)
    capacity = int(config.regret_window or 0)
    regret = RegretWindow(capacity, config.n_features) if capacity else None
    stats = initial_stats()
    means = build_means(config, {}, 0)
    return Loaded(config, config.incarnation, 1, learner, window, stats, regret=regret, means=means)


def stored_params(learner: OnlineLearner) -> dict[str, Any]:
    """The ``params`` and ``scaling`` fields of a model's config for ``learner`` (initialised):
    every parameter, those it resolves from the model's width explicit (``logistic``'s
    solver), and for ``auto`` the candidates it really runs, each with every parameter
    explicit too (shown by ``GET``; a later change of a default, a width-dependent one or the
    default tournament changes neither what a stored model runs nor its layout)."""
    params = {**learner.get_params(), **learner.width_params(int(learner.state_["n_features"][0]))}
    if hasattr(learner, "candidate_specs"):
        params["candidates"] = [
            {
                "learner": spec["learner"],
                "params": learner_class(spec["learner"])(**spec["params"]).get_params(),
            }
            for spec in learner.candidate_specs()
        ]
    scaling = params.pop("scaling")
    return {"params": params, "scaling": scaling}
