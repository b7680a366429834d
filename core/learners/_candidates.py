"""Which candidates ``auto`` runs (docs/algorithms/auto.md, "Candidates"): the default
tournaments, in this one place, and the check of a tournament a user names, which makes each
candidate's parameters explicit (the model's pAUC range, auto's scaling and seed).
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidParameter
from core.learners import learner_class
from core.validation import check_fpr_pair

__all__ = [
    "BOOSTED_CANDIDATE",
    "DEFAULT_CANDIDATES",
    "FAST_CANDIDATES",
    "GivenUnscaled",
    "FAST_TREE_CANDIDATE",
    "IN_USE_CANDIDATE",
    "MAX_CANDIDATES",
    "SINGLE_FIT_TREE_CANDIDATE",
    "TREE_CANDIDATE",
    "TREE_REFIT_FEATURES",
    "WIDE_DEFAULT_CANDIDATES",
    "WIDE_FEATURES",
    "candidate_specs",
    "default_candidates",
    "invalid_field",
]

#: [CHOICE] ftrl_pauc's solver runs every this many events in auto's default tournament (its
#: own default is 500): over the real-data suite the held-out and prequential figures barely
#: move with the interval while the solver's cost per event falls with it (bench/README.md,
#: "auto's cost")
FTRL_PAUC_UPDATE_EVERY = 5000

#: the users' usual baseline with the base-rate offset (docs/algorithms/logistic.md
#: (logistic.10)): the first candidate of every default tournament.  [CHOICE] Its Laplace
#: solver's prior is re-estimated by empirical Bayes once the rarer class has two events per
#: weight ((logistic.18)): one prior variance did not fit abalone's correlated numbers and the
#: other sets alike (bench/README.md, "AB: an empirical-Bayes prior")
OFFSET_LOGISTIC: dict[str, Any] = {
    "learner": "logistic",
    "params": {"base_rate_offset": True, "empirical_prior_per_weight": 2.0},
}


#: the inner learner of the tree candidates: the baseline with FTRL named, not left to the
#: width: an embedding (``d + 511`` columns for a tree of depth 8) is wider than the Laplace
#: solver's 128, and a stored state reads as it was learned (FTRL has no prior to re-estimate)
TREES_INNER_LEARNER: dict[str, Any] = {
    "learner": "logistic",
    "params": {"base_rate_offset": True, "solver": "ftrl"},
}

#: [CHOICE] the default tournament's third candidate: ``logistic`` (base-rate offset, FTRL) on
#: POISE's tree-path embedding (docs/algorithms/poise.md (poise.8)-(poise.10)).  Alone it gains
#: little over ``logistic``; in the mix it adds what a linear score cannot rank
#: (bench/README.md, "A tree candidate in auto's default tournament").  Its fits: at the
#: 2,000th event, the inner learner relearning those events embedded (as if the tree had been
#: there from the start), and again on the first 8,000 events, where a tree grown on four times
#: the events splits better ("The tree candidate's refit").  Depth 8 (tree_embedded's own
#: default is 6): trees grown on 2,000-8,000 events have the events for it, leaves keeping their
#: 20 ("The tree candidate's depth").
TREE_CANDIDATE: dict[str, Any] = {
    "learner": "tree_embedded",
    "params": {
        **TREES_INNER_LEARNER,
        "refit_events": 8000,
        "relearn": True,
        "max_depth": 8,
    },
}

#: [CHOICE] the default tournament's third candidate up to :data:`TREE_REFIT_FEATURES`:
#: ``logistic`` (base-rate offset, FTRL: the embedding is wider than the Laplace solver's 128)
#: on the leaves of boosted trees (docs/algorithms/boosted_embedded.md), 50 trees of 31 leaves
#: fitted on the last 8,000 events as the events double and then every 8,000, in the background
#: in the service.  In place of :data:`TREE_CANDIDATE` it raised auto's held-out AUC / pAUC(0,
#: 0.1) from 0.894 / 0.605 to 0.901 / 0.630 on the real-data suite and from 0.919 / 0.715 to
#: 0.921 / 0.725 on the hold-out sets (raw, five seeds; bench/README.md, "Boosted trees'
#: leaves"); the tree candidate's fit inside a request (0.6 s at 8,000 x 50) is gone.
#: Learning rate 0.2: 50 trees at 0.1 stop half-way (a total step of 5 where batch HGB's 100
#: trees at 0.1 take 10), and the non-linear sets where auto served these trees and ranked
#: below batch HGB were under-fitted; twice the step reaches HGB's total with the same 50 trees,
#: so the same routing and leaves on the request path (bench/README.md, "The hold-out against
#: HGB (branch h-Q)").  Without ``x`` beside the margin and the leaves: the mix's other
#: candidates rank ``x`` linearly, and on a short stream the inner learner's weights of ``x``,
#: learned from a few dozen positives, blurred the trees' margin (wine_w_3_vs_7: the candidate
#: alone ranked 0.844 with them, 0.885 without, its margin alone 0.887; bench/README.md, "HO:
#: the hold-out's mean AUC at batch HGB's" and "HO2: the boosted candidate without ``x``").
#: The stored width of the candidate's inner learner changed with it: state format 14.
#: Refitted at most once a buffer's length of events (``boosted_embedded``'s own default refits
#: twice as often): each fit then sees rows the last one did not, and the fits, the dearest part
#: of a long stream's CPU after the one-event calls, halve with the same ranking (bench/README.md,
#: "2026-12-02: EL, fewer and smaller boosted fits").
BOOSTED_CANDIDATE: dict[str, Any] = {
    "learner": "boosted_embedded",
    "params": {
        **TREES_INNER_LEARNER,
        "learning_rate": 0.2,
        "append_features": False,
        "refit_every": 8000,
    },
}

#: [CHOICE] above this width the tree candidate fits its tree once (still relearning): its
#: refit's 8,000 buffered rows would pass the 16 MB that the 2,000 rows of the first fit take
#: at 1,000 features (:data:`WIDE_FEATURES`)
TREE_REFIT_FEATURES = 250

#: the tree candidate of models wider than :data:`TREE_REFIT_FEATURES` (the boosted
#: candidate's 8,000 buffered rows would pass 16 MB there)
SINGLE_FIT_TREE_CANDIDATE: dict[str, Any] = {
    "learner": "tree_embedded",
    "params": {k: v for k, v in TREE_CANDIDATE["params"].items() if k != "refit_events"},
}

#: [CHOICE] the default tournament (docs/algorithms/auto.md, "Cost"): the users' usual
#: baseline, a pAUC learner on the model's range and the baseline on the tree embedding.  The
#: baseline carries the base-rate offset (docs/algorithms/logistic.md (logistic.10)): without it
#: its early scores sit on a falling intercept, which pooled prequential metrics punish
#: (bench/README.md, "The base-rate offset").  The pAUC learner is ftrl_pauc, the best single
#: learner of the real-data suite ("auto's served mix and its candidates"); the third is
#: :data:`BOOSTED_CANDIDATE` (:data:`SINGLE_FIT_TREE_CANDIDATE` above
#: :data:`TREE_REFIT_FEATURES`).
DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    OFFSET_LOGISTIC,
    {"learner": "ftrl_pauc", "params": {"update_every": FTRL_PAUC_UPDATE_EVERY}},
    BOOSTED_CANDIDATE,
)

#: [CHOICE] wider than this, ftrl_pauc's 3,000 dense reservoir rows would hold more than 24 MB
#: per model (and per stored state), the tree candidate's 2,000 buffered events 16 MB: the
#: default tournament takes pmb (50 rows) instead, and no tree
WIDE_FEATURES = 1000

#: [CHOICE] the third candidate of models wider than :data:`WIDE_FEATURES` (hashed and sparse
#: ones): the baseline's Laplace solver on the first 128 columns in use
#: (docs/algorithms/logistic.md (logistic.15)), the bound and the cost of the solver's own
#: default (``LAPLACE_DEFAULT_FEATURES``).  The width alone leaves a hashed stream of a few
#: numbers and categories to FTRL, whose per-coordinate steps rank numbers far from 0 with a
#: small spread poorly (hashed abalone: bench/README.md, "Categorical and hashed features");
#: the tournament weighs it down where the stream uses many more columns than it holds.  A
#: slot whose values vary (a number) has the prior variance 3, an indicator (a hashed category,
#: +-4 under ``scale``, 16 times a number's spread) keeps 0.3: one prior shrank abalone's
#: numbers too hard or flare_f's categories too little (bench/README.md, "A prior per kind of
#: column").
IN_USE_CANDIDATE: dict[str, Any] = {
    "learner": "logistic",
    "params": {"base_rate_offset": True, "max_columns": 128, "number_prior_variance": 3.0},
}

#: the default tournament of models wider than :data:`WIDE_FEATURES`
WIDE_DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    OFFSET_LOGISTIC,
    {"learner": "pmb", "params": {}},
    IN_USE_CANDIDATE,
)


#: [CHOICE] the fast-adapting candidate that ``track_drift`` adds to every default tournament
#: (docs/algorithms/forgetting.md): logistic's discounted FTRL with a half-life of 2,000 events,
#: the cheapest learner that recovered in the fewest events on bench/drift.py's abrupt scenario
#: (4,000, the window's minimum)
FAST_CANDIDATES: tuple[dict[str, Any], ...] = (
    {"learner": "logistic", "params": {"half_life": 2000}},
)

#: [CHOICE] the second fast candidate, after :data:`FAST_CANDIDATES`, of the default tournaments
#: with a boosted candidate (up to :data:`TREE_REFIT_FEATURES` features; docs/algorithms/auto.md,
#: "The fast candidates"): the boosted candidate with a short memory, its inner learner's
#: discounted FTRL with a half-life of 150 events, 25 trees of 8 leaves (learning rate 0.2)
#: fitted on the last 2,000 events at most every 1,500.  On real time-ordered streams whose
#: concept moves all the time (Elec2) the leaves' weights must follow the last few hundred
#: events, which neither the precise candidates nor a linear one with a long memory do; the
#: tournament gives it the mix there and little weight on a stable stream (bench/README.md,
#: "Real time-ordered streams").  Half the trees of the other boosted candidate, and smaller: it
#: routes and learns them on every event (the request path), while its fits, refitted more
#: often, run off it; Elec2 and weather ranked as with 50 trees of 15 leaves every 2,000 events.
#: A buffer of 2,000 events: its inner learner forgets with a half-life of 150 events, and trees
#: fitted on twice the rows ranked Elec2 alike (to .0001) at a higher fit cost, on fewer rows lower
#: (bench/README.md, "2026-12-02: EL, fewer and smaller boosted fits").
FAST_TREE_CANDIDATE: dict[str, Any] = {
    "learner": "boosted_embedded",
    "params": {
        "learner": "logistic",
        "params": {"base_rate_offset": True, "solver": "ftrl", "half_life": 150},
        "n_trees": 25,
        "max_leaves": 8,
        "learning_rate": 0.2,
        "buffer_size": 2000,
        "refit_every": 1500,
    },
}


def default_candidates(n_features: int | None, track_drift: bool) -> tuple[dict[str, Any], ...]:
    """The default tournament for a model of ``n_features`` (None: not known yet), with the
    fast-adapting candidates after it when ``track_drift`` (:data:`FAST_TREE_CANDIDATE` as well
    up to :data:`TREE_REFIT_FEATURES` features)."""
    fast: tuple[dict[str, Any], ...] = FAST_CANDIDATES
    if n_features is not None and n_features > WIDE_FEATURES:
        defaults = WIDE_DEFAULT_CANDIDATES
    elif n_features is not None and n_features > TREE_REFIT_FEATURES:
        defaults = (*DEFAULT_CANDIDATES[:-1], SINGLE_FIT_TREE_CANDIDATE)
    else:
        defaults, fast = DEFAULT_CANDIDATES, (*FAST_CANDIDATES, FAST_TREE_CANDIDATE)
    return (*defaults, *fast) if track_drift else defaults


#: the most candidates a model may hold (each multiplies the learning work)
MAX_CANDIDATES = 16


def invalid_field(field: str, message: str) -> InvalidParameter:
    return InvalidParameter(f"{field}: {message}", param=field)


def candidate_specs(candidates, pauc_range, random_state) -> list[dict[str, Any]]:
    """The effective ``[{"learner": name, "params": {...}}, ...]`` of an ``auto`` model:
    validated, with ``scaling="none"`` (auto scales once for all), the model's pAUC range on
    the pAUC learners and auto's ``random_state`` where a candidate sets none.  Errors are
    :class:`~core.errors.InvalidParameter` whose ``param`` is the field at fault, e.g.
    ``candidates[1].learner`` or ``candidates[2].params.beta``.  ``None`` is the default
    tournament of a model whose width is not known yet (``Auto`` passes its width's)."""
    alpha, beta = check_fpr_pair(pauc_range)
    if candidates is None:
        candidates = default_candidates(None, track_drift=False)
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


def _comparable(value: Any) -> Any:
    """Tuples as lists (a default ``(0.0, 0.1)`` and a stored ``[0.0, 0.1]`` are the same)."""
    if isinstance(value, tuple | list):
        return [_comparable(item) for item in value]
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    return value


def shown_params(spec: dict[str, Any]) -> dict[str, Any]:
    """The parameters of candidate ``spec`` that differ from its learner's defaults: what the
    leaderboard lists.  The same whether the model was built from its creation request (the
    default tournament names a few parameters) or from its stored configuration, which names
    every one (``service.engine.model.stored_params``)."""
    cls = learner_class(spec["learner"])
    defaults = cls().get_params()
    given = cls(**spec["params"]).get_params()
    return {
        key: value
        for key, value in given.items()
        if key not in defaults or _comparable(value) != _comparable(defaults[key])
    }


class GivenUnscaled:
    """A candidate that scales its own rows (``scales_itself``), as auto's served mix scores it:
    with the unscaled ``rows`` of the scaled batch the mix passes."""

    def __init__(self, candidate: Any, rows: Any) -> None:
        self.candidate, self.rows = candidate, rows

    def _decision(self, X: Any) -> Any:
        return self.candidate._decision(self.rows)

    def _contributions(self, X: Any) -> Any:
        return self.candidate._contributions(self.rows)
