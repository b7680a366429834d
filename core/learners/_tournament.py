"""The bookkeeping of ``auto``'s tournament (docs/algorithms/auto.md): which candidates it runs
(validated, with the model's pAUC range), when it compares them, the comparison with
hysteresis, the score map at a change of leader, and the leaderboard.

The functions work on auto's own state arrays (``own``, declared by :func:`tournament_state`
and :func:`tournament_invariants`), so the learner class keeps only the learning, state and
serving contract.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from core._kernels import auto as kernels
from core.errors import InvalidParameter
from core.learners import learner_class
from core.learners._auto_drift import FAST_CANDIDATES
from core.learners._served_mix import mix_weights
from core.learners._state import Count, Finite, Fraction, Grown, Index, OneOf, StateInvariant
from core.tree_embedding import node_capacity

__all__ = [
    "DEFAULT_CANDIDATES",
    "LEGACY_DEFAULT_CANDIDATES",
    "PAIR_DEFAULT_CANDIDATES",
    "TREE_CANDIDATE",
    "TREE_REFIT_FEATURES",
    "SINGLE_FIT_TREE_CANDIDATE",
    "WIDE_DEFAULT_CANDIDATES",
    "WIDE_FEATURES",
    "MAX_CANDIDATES",
    "candidate_specs",
    "check_pauc_range",
    "default_candidates",
    "saved_defaults",
    "saved_candidates",
    "evaluate",
    "invalid_field",
    "leaderboard",
    "next_evaluation",
    "record",
    "tournament_invariants",
    "tournament_state",
]

#: [CHOICE] ftrl_pauc's solver runs every this many events in auto's default tournament (its
#: own default is 500): measured over the real-data suite the held-out and prequential figures
#: barely move, and the solver's cost per event falls with the interval (docs/algorithms/auto.md,
#: "Cost").  2,000 with two candidates; 5,000 since the tree candidate joined: held-out AUC
#: moved by at most 0.0003 on the three benchmark sets long enough to tell (the others learn the
#: same schedule up to 4,000 events), and auto learns 20 % faster
FTRL_PAUC_UPDATE_EVERY = 5000

#: the users' usual baseline with the base-rate offset (docs/algorithms/logistic.md
#: (logistic.10)): the first candidate of every default tournament since the offset
OFFSET_LOGISTIC: dict[str, Any] = {"learner": "logistic", "params": {"base_rate_offset": True}}

#: [CHOICE] the default tournament's third candidate: ``logistic`` (base-rate offset, FTRL) on
#: POISE's tree-path embedding (docs/algorithms/poise.md (poise.8)-(poise.10)), a
#: tree fitted on the first 2,000 labelled events.  Alone it gains little over ``logistic``;
#: in the mix it adds what a linear score cannot rank: held-out AUC 0.8856 -> 0.8948 on the
#: real-data suite and 0.9003 -> 0.9122 on the hold-out sets, pAUC(0, 0.1) above batch logistic
#: regression's (bench/README.md, "A tree candidate in auto's default tournament").  FTRL is
#: named, not left to the width: the embedding (``d + 511`` columns at depth 8) is wider than
#: the Laplace solver's 128, and a stored state then reads as it was learned.
#: [CHOICE] Its fits: at the 2,000th event, the inner learner relearning those events embedded
#: (as if the tree had been there from the start), and again on the first 8,000 events, where a
#: tree grown on four times the events splits better.  Over the suite's 11 sets of more than
#: 4,000 events auto's held-out AUC rose 0.0034 and its pAUC(0, 0.1) 0.010 (magic +0.010 /
#: +0.038, shuttle +0.009 / +0.015), nothing lost on the shorter ones; refits at 5,000 or 16,000
#: gained less (bench/README.md, "The tree candidate's refit").  Depth 8 (tree_embedded's own
#: default is 6): trees grown on 2,000-8,000 events have the events for it (leaves keep their
#: 20), and it ranked better on both collections, by 0.0016 held-out AUC and 0.006 pAUC on the
#: suite's longest sets, no held-out AUC lower by 0.001 (bench/README.md, "The tree
#: candidate's depth").
TREE_CANDIDATE: dict[str, Any] = {
    "learner": "tree_embedded",
    "params": {
        "learner": "logistic",
        "params": {"base_rate_offset": True, "solver": "ftrl"},
        "refit_events": 8000,
        "relearn": True,
        "max_depth": 8,
    },
}

#: [CHOICE] above this width the tree candidate fits its tree once (still relearning): its
#: refit's 8,000 buffered rows would pass the 16 MB that the 2,000 rows of the first fit take
#: at 1,000 features (:data:`WIDE_FEATURES`)
TREE_REFIT_FEATURES = 250

#: the tree candidate of models wider than :data:`TREE_REFIT_FEATURES`
SINGLE_FIT_TREE_CANDIDATE: dict[str, Any] = {
    "learner": "tree_embedded",
    "params": {k: v for k, v in TREE_CANDIDATE["params"].items() if k != "refit_events"},
}

#: the default tournament from ftrl_pauc's joining until the tree candidate joined (a state
#: saved then with ``candidates=None`` loads as it: :func:`saved_defaults`)
PAIR_DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    OFFSET_LOGISTIC,
    {"learner": "ftrl_pauc", "params": {"update_every": 2000}},  # the interval it ran with
)

#: [CHOICE] the default tournament (see ``Auto``, Notes, for the cost): the users' usual
#: baseline, a pAUC learner on the model's range and the baseline on the tree embedding.  The
#: baseline carries the base-rate offset (docs/algorithms/logistic.md (logistic.10)): without it
#: its early scores sit on a falling intercept, which cost auto 0.04 of prequential pAUC(0, 0.1)
#: over the real-data suite (bench/README.md, "The base-rate offset").  The pAUC learner is
#: ftrl_pauc, the best single learner of the suite (bench/README.md, "auto's served mix and its
#: candidates"); the third is :data:`TREE_CANDIDATE`.
DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    OFFSET_LOGISTIC,
    {"learner": "ftrl_pauc", "params": {"update_every": FTRL_PAUC_UPDATE_EVERY}},
    TREE_CANDIDATE,
)

#: [CHOICE] wider than this, ftrl_pauc's 3,000 dense reservoir rows would hold more than 24 MB
#: per model (and per stored state), the tree candidate's 2,000 buffered events 16 MB: the
#: default tournament takes pmb (50 rows) instead, and no tree
WIDE_FEATURES = 1000

#: the default tournament of models wider than :data:`WIDE_FEATURES`, and the default of every
#: model before ftrl_pauc joined (a state saved then with ``candidates=None`` loads as it)
WIDE_DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    OFFSET_LOGISTIC,
    {"learner": "pmb", "params": {}},
)


def saved_defaults(params: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a state saved with ``candidates=None`` by an earlier version, with that
    version's default tournament made explicit (instead of a layout error): ``ftrl_pauc`` second
    and no tree third (``c1:n_solver_steps``, no ``c2:tree_*`` array), before that ``pmb``
    second (a ``c1:buffer_fill`` array; still the default of wide models), and before that
    ``logistic`` without the base-rate offset first (no ``c0:class_counts`` beside ``c0:z``);
    the fast candidates with ``track_drift``."""
    if params.get("candidates") is not None:
        return params
    if "c1:buffer_fill" in state:
        if "c0:z" in state and "c0:class_counts" not in state:
            earlier = list(LEGACY_DEFAULT_CANDIDATES)
        else:
            earlier = list(WIDE_DEFAULT_CANDIDATES)
    elif "c1:n_solver_steps" in state and not any(key.startswith("c2:tree_") for key in state):
        earlier = list(PAIR_DEFAULT_CANDIDATES)
    else:
        return params
    if params.get("track_drift"):
        earlier += FAST_CANDIDATES
    return {**params, "candidates": earlier}


def saved_candidates(params: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a state whose candidates were saved by an earlier version: each
    candidate's params as its class's ``saved_params`` makes them for its ``c{k}:`` arrays
    (``logistic`` saved before its Laplace solver: FTRL; ``poise`` before its all-negatives
    term: ``auc_weight=0``; the default tree candidate with the depth of its stored tree), the
    tournament made explicit if it was the default."""
    candidates = params.get("candidates")
    asked = candidates
    if candidates is None:
        try:
            width = int(np.asarray(state["n_features"]).reshape(-1)[0])
        except (KeyError, IndexError, TypeError, ValueError, OverflowError):
            return params  # the layout check names what is wrong
        asked = default_candidates(width, bool(params.get("track_drift")))
        candidates = [_saved_tree_depth(spec, state, k) for k, spec in enumerate(asked)]
    if not isinstance(candidates, list | tuple):
        return params  # candidate_specs names what is wrong
    patched = []
    for k, spec in enumerate(candidates):
        own = (spec.get("params") or {}) if isinstance(spec, dict) else None
        if isinstance(own, dict) and isinstance(spec.get("learner"), str):
            try:
                cls = learner_class(spec["learner"])
            except ValueError:
                cls = None  # candidate_specs names it
            saved = cls.saved_params(own, state, prefix=f"c{k}:") if cls is not None else own
            spec = spec if saved is own else {**spec, "params": saved}
        patched.append(spec)
    if patched == list(asked or ()):
        return params  # nothing saved before a change (a default tournament stays None)
    return {**params, "candidates": patched}


def _saved_tree_depth(spec: dict[str, Any], state: dict[str, Any], k: int) -> dict[str, Any]:
    """The default tree candidate ``spec`` with the depth of the tree its state holds: the
    default was depth 6 before it became 8 (``node_capacity(D) = 2^(D+1) - 1`` nodes)."""
    nodes = np.shape(state.get(f"c{k}:tree_left", ()))
    if spec["learner"] != "tree_embedded" or len(nodes) != 1:
        return spec
    depth = next((d for d in range(1, 13) if node_capacity(d) == nodes[0]), None)
    if depth is None or depth == spec["params"].get("max_depth"):
        return spec
    return {**spec, "params": {**spec["params"], "max_depth": depth}}


def default_candidates(
    n_features: int | None, track_drift: bool = False
) -> tuple[dict[str, Any], ...]:
    """The default tournament for a model of ``n_features`` (None: not known yet), with the
    fast-adapting candidates after it when ``track_drift``."""
    if n_features is not None and n_features > WIDE_FEATURES:
        defaults = WIDE_DEFAULT_CANDIDATES
    elif n_features is not None and n_features > TREE_REFIT_FEATURES:
        defaults = (*DEFAULT_CANDIDATES[:-1], SINGLE_FIT_TREE_CANDIDATE)
    else:
        defaults = DEFAULT_CANDIDATES
    return (*defaults, *FAST_CANDIDATES) if track_drift else defaults


#: the default tournament before the offset: what ``candidates=None`` meant for a state saved
#: by an earlier version (its first candidate has no ``class_counts``), so it still loads
LEGACY_DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    {"learner": "logistic", "params": {}},
    {"learner": "pmb", "params": {}},
)

#: the most candidates a model may hold (each multiplies the learning work)
MAX_CANDIDATES = 16


def invalid_field(field: str, message: str) -> InvalidParameter:
    return InvalidParameter(f"{field}: {message}", param=field)


def check_pauc_range(pauc_range) -> tuple[float, float]:
    """``[alpha, beta]`` with ``0 <= alpha < beta <= 1``; ValueError naming ``pauc_range``."""
    if (
        isinstance(pauc_range, str | bytes)
        or not hasattr(pauc_range, "__len__")
        or len(pauc_range) != 2
        or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            for v in pauc_range
        )
    ):
        raise invalid_field(
            "pauc_range", f"expected [alpha, beta], two numbers, got {pauc_range!r}"
        )
    alpha, beta = float(pauc_range[0]), float(pauc_range[1])
    if not 0.0 <= alpha < beta <= 1.0:
        raise invalid_field("pauc_range", f"expected 0 <= alpha < beta <= 1, got {[alpha, beta]!r}")
    return alpha, beta


def candidate_specs(candidates, pauc_range, random_state) -> list[dict[str, Any]]:
    """The effective ``[{"learner": name, "params": {...}}, ...]`` of an ``auto`` model:
    validated, with ``scaling="none"`` (auto scales once for all), the model's pAUC range on
    the pAUC learners and auto's ``random_state`` where a candidate sets none.  Errors are
    :class:`~core.errors.InvalidParameter` whose ``param`` is the field at fault, e.g.
    ``candidates[1].learner`` or ``candidates[2].params.beta``.  ``None`` is the default
    tournament of a model whose width is not known yet (``Auto`` passes its width's)."""
    alpha, beta = check_pauc_range(pauc_range)
    if candidates is None:
        candidates = default_candidates(None)
    if isinstance(candidates, str | bytes | dict) or not isinstance(candidates, list | tuple):
        raise invalid_field(
            "candidates",
            f'expected None or a list of {{"learner": name, "params": {{...}}}}, got '
            f"{candidates!r}",
        )
    if not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise invalid_field(
            "candidates", f"expected 1 to {MAX_CANDIDATES} candidates, got {len(candidates)}"
        )
    specs = []
    for index, candidate in enumerate(candidates):
        field = f"candidates[{index}]"
        if not isinstance(candidate, dict):
            raise invalid_field(
                field, f'expected {{"learner": name, "params": {{...}}}}, got {candidate!r}'
            )
        unexpected = sorted(set(candidate) - {"learner", "params"})
        if unexpected:
            raise invalid_field(field, f"unexpected key(s) {unexpected}; accepted: learner, params")
        name = candidate.get("learner")
        if not isinstance(name, str):
            raise invalid_field(f"{field}.learner", f"expected a learner name, got {name!r}")
        if name == "auto":
            raise invalid_field(f"{field}.learner", "auto cannot be a candidate of auto")
        try:
            cls = learner_class(name)
        except ValueError as error:
            raise invalid_field(f"{field}.learner", str(error)) from None
        if not getattr(cls, "online", True):
            raise invalid_field(
                f"{field}.learner", f"{name!r} is a batch solver, not an online learner"
            )
        params = candidate.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise invalid_field(f"{field}.params", f"expected an object, got {params!r}")
        accepted = cls._param_names()
        for key in params:
            if key not in accepted:
                raise invalid_field(
                    f"{field}.params.{key}",
                    f"unknown parameter for learner {name!r}; accepted: {', '.join(accepted)}",
                )
        if params.get("scaling", "none") != "none":
            raise invalid_field(
                f"{field}.params.scaling",
                "auto scales the features once for every candidate; set auto's own scaling instead",
            )
        effective = dict(params, scaling="none")
        # a pAUC learner optimises the model's range (``pmb`` also has Prec@k losses, whose
        # alpha / beta play no part)
        if cls.optimises_pauc and params.get("loss", "pauc") == "pauc":
            for key, value in (("alpha", alpha), ("beta", beta)):
                if key in params and params[key] != value:
                    raise invalid_field(
                        f"{field}.params.{key}",
                        f"{params[key]!r} contradicts pauc_range {[alpha, beta]!r}: the pAUC "
                        "candidates optimise the model's range; omit it or change pauc_range",
                    )
                effective[key] = value
        # a wrapper (tree_embedded) hands its pauc_range to the pAUC learner inside it
        if "pauc_range" in accepted:
            given = params.get("pauc_range")
            try:
                same = given is None or [float(v) for v in given] == [alpha, beta]
            except (TypeError, ValueError):
                same = False
            if not same:
                raise invalid_field(
                    f"{field}.params.pauc_range",
                    f"{given!r} contradicts pauc_range {[alpha, beta]!r}: the candidates "
                    "optimise the model's range; omit it or change auto's pauc_range",
                )
            effective["pauc_range"] = [alpha, beta]
        if "random_state" in accepted and params.get("random_state") is None:
            effective["random_state"] = random_state
        try:
            cls(**effective).validate_params()
        except ValueError as error:
            inner = getattr(error, "param", None)
            where = f"{field}.params.{inner}" if inner else f"{field}.params"
            raise invalid_field(where, str(error)) from None
        specs.append({"learner": name, "params": effective})
    return specs


def tournament_state(n_candidates: int, window: int) -> dict[str, np.ndarray]:
    """The tournament's arrays for ``n_candidates`` candidates compared over the last
    ``window`` events, before any event."""

    def counter(value=0):
        return np.array([value], dtype=np.int64)

    return {
        "n_seen": counter(),
        "window_scores": np.zeros((n_candidates, window)),
        "window_labels": np.zeros(window, dtype=np.int64),
        "leader": counter(),
        "leader_since": counter(),
        # served score = served_scale * (leader's score) + served_offset
        "served_scale": np.ones(1),
        "served_offset": np.zeros(1),
        "challenger": counter(-1),
        "challenger_streak": counter(),
        "window_pauc": np.full(n_candidates, np.nan),
        "window_auc": np.full(n_candidates, np.nan),
        "evaluated_at": counter(),
    }


def tournament_invariants(n_candidates: int) -> dict[str, StateInvariant]:
    """What each array of :func:`tournament_state` may hold once events were learned."""
    return {
        "n_seen": Count(),
        "window_scores": Finite(),
        "window_labels": OneOf((-1, 0, 1)),  # 0: a slot not written yet
        "leader": Index(n_candidates),
        "leader_since": Count(0, "n_seen"),
        "served_scale": Grown(0.0, strict=True),  # the score map keeps the order
        "served_offset": Grown(),
        "challenger": Count(-1, n_candidates - 1),  # -1: no challenger
        "challenger_streak": Count(0, "evaluated_at"),
        "window_pauc": Fraction(),
        "window_auc": Fraction(),
        "evaluated_at": Count(0, "n_seen"),
    }


def next_evaluation(seen: int, evaluate_every: int, first_evaluation: int) -> int:
    """The first event count after ``seen`` at which the candidates are compared: the
    multiples of ``evaluate_every`` and, before the first of them, ``first_evaluation``, twice
    that, four times that, ... (a function of the count alone, so batch = one at a time)."""
    due = (seen // evaluate_every + 1) * evaluate_every
    early = first_evaluation
    while early < evaluate_every:
        if early > seen:
            return min(early, due)
        early *= 2
    return due


def record(own: dict[str, np.ndarray], candidate_scores: np.ndarray, labels: np.ndarray) -> None:
    """Append a segment to the ring buffers (only its last ``window`` events can stay)."""
    window = own["window_labels"].shape[0]
    seen = int(own["n_seen"][0])
    length = labels.shape[0]
    kept = min(length, window)
    slots = (seen + np.arange(length - kept, length)) % window
    own["window_scores"][:, slots] = candidate_scores[:, length - kept :]
    own["window_labels"][slots] = labels[length - kept :]
    own["n_seen"][0] = seen + length


def evaluate(
    own: dict[str, np.ndarray],
    pauc_range,
    *,
    min_positives: int,
    min_negatives: int,
    margin: float,
    patience: int,
    since: int = 0,
    temperature: float = 0.0,
) -> None:
    """Each candidate's exact pAUC and AUC on the window (auto.2), then the leader choice with
    hysteresis (auto.3)-(auto.4): the challenger takes over after ``patience`` consecutive
    evaluations ahead by more than ``margin``; windows with too few positives or negatives in
    the FPR range decide nothing.  ``since``: only the window's events from that event count
    on are compared (after a detected drift, docs/algorithms/auto.md (auto.8)).  With
    ``temperature`` > 0 a deciding evaluation also sets the served mix's weights (auto.10)."""
    seen = int(own["n_seen"][0])
    filled = min(seen, own["window_labels"].shape[0])
    labels = own["window_labels"][:filled]
    window_scores = own["window_scores"][:, :filled]
    if since > seen - filled:
        columns = np.arange(since, seen) % own["window_labels"].shape[0]
        labels = own["window_labels"][columns]
        window_scores = own["window_scores"][:, columns]
    own["evaluated_at"][0] = seen
    compared = labels.shape[0]
    n_positive = int(np.count_nonzero(labels > 0))
    if n_positive == 0 or n_positive == compared:
        own["window_pauc"][:] = np.nan
        own["window_auc"][:] = np.nan
        return
    alpha, beta = check_pauc_range(pauc_range)
    positive = labels > 0
    kernels.window_metrics(
        np.sort(window_scores[:, positive], axis=1),
        np.sort(window_scores[:, ~positive], axis=1),
        alpha, beta, own["window_pauc"], own["window_auc"],
    )  # fmt: skip
    if n_positive < min_positives or (beta - alpha) * (compared - n_positive) < min_negatives:
        return
    paucs, aucs = own["window_pauc"], own["window_auc"]
    if temperature > 0.0:
        mix_weights(paucs, temperature, own["served_weights"])
    # highest pAUC, then AUC, then the lowest index (lexsort: last key is the primary)
    best = int(np.lexsort((np.arange(len(paucs)), -aucs, -paucs))[0])
    leader = int(own["leader"][0])
    if best != leader and paucs[best] > paucs[leader] + margin:
        if int(own["challenger"][0]) == best:
            own["challenger_streak"][0] += 1
        else:
            own["challenger"][0] = best
            own["challenger_streak"][0] = 1
        if own["challenger_streak"][0] >= patience:
            match_scale(own, leader, best, filled)
            own["leader"][0] = best
            own["leader_since"][0] = seen
            own["challenger"][0] = -1
            own["challenger_streak"][0] = 0
    else:
        own["challenger"][0] = -1
        own["challenger_streak"][0] = 0


def match_scale(own: dict[str, np.ndarray], old: int, new: int, filled: int) -> None:
    """[CHOICE] At a change of leader, map the new leader's scores affinely (a positive
    scale: its ranking is unchanged) so that, over the window, they have the mean and
    standard deviation the served scores had (auto.5): a logit and a pAUC learner's score live
    on different scales, and without this a user's thresholds, and every prequential metric
    over events on both sides of the change, would mix the two scales."""
    window_scores = own["window_scores"]
    served = own["served_scale"][0] * window_scores[old, :filled] + own["served_offset"][0]
    incoming = window_scores[new, :filled]
    served_std, incoming_std = float(np.std(served)), float(np.std(incoming))
    scale = served_std / incoming_std if served_std > 0.0 and incoming_std > 0.0 else 1.0
    own["served_scale"][0] = scale
    own["served_offset"][0] = float(np.mean(served)) - scale * float(np.mean(incoming))


def leaderboard(
    own: dict[str, np.ndarray], specs: list[dict[str, Any]], pauc_range, temperature: float
) -> dict[str, Any]:
    """The tournament as JSON-able data: each candidate's effective learner and params, its
    windowed pAUC and AUC at the last evaluation (None while undefined), its share of the
    served scores, which one leads and since which event count."""
    leader = int(own["leader"][0])
    if temperature > 0.0:
        weights = [float(w) for w in own["served_weights"]]
    else:  # the leader alone is served
        weights = [float(k == leader) for k in range(len(specs))]

    def number(value: float) -> float | None:
        return None if math.isnan(value) else float(value)

    rows = [
        {
            "index": k,
            "learner": spec["learner"],
            "params": spec["params"],
            "window_pauc": number(own["window_pauc"][k]),
            "window_auc": number(own["window_auc"][k]),
            "leader": k == leader,
            "weight": weights[k],
        }
        for k, spec in enumerate(specs)
    ]
    challenger = int(own["challenger"][0])
    return {
        "leader": leader,
        "leader_since": int(own["leader_since"][0]),
        "served_scale": float(own["served_scale"][0]),
        "served_offset": float(own["served_offset"][0]),
        "challenger": None if challenger < 0 else challenger,
        "challenger_streak": int(own["challenger_streak"][0]),
        "n_seen": int(own["n_seen"][0]),
        "evaluated_at": int(own["evaluated_at"][0]),
        "window": int(min(own["n_seen"][0], own["window_labels"].shape[0])),
        "pauc_range": list(check_pauc_range(pauc_range)),
        "temperature": float(temperature),
        "candidates": rows,
    }
