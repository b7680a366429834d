"""``auto`` against a naive reference of the tournament, plus its contract beyond the shared
one (tests/core/test_learner_contract.py runs ``auto`` with its defaults, whose first
evaluation comes after 1000 events; here evaluations are frequent, so leader changes happen
inside the batches that are cut, restored and compared)."""

from __future__ import annotations

import copy
import json
from collections import deque

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from core.errors import InvalidParameter, InvalidState
from core.learners import learner_class, make_learner
from core.learners._candidates import (
    BOOSTED_CANDIDATE,
    FAST_TREE_CANDIDATE,
    FTRL_PAUC_UPDATE_EVERY,
    WIDE_FEATURES,
)
from core.learners._served_scale import SHRINK_EVENTS
from core.metrics import auc, pauc
from core.preprocessing import scale_batch
from tests.core.cases import states_equal
from tests.core.naive.metrics import naive_auc_difference_se

#: candidate 0 is deliberately bad: an L1 threshold no |z| reaches keeps every weight at 0,
#: so it scores by its intercept alone (no ranking); candidates 1 and 2 learn properly
BAD_FIRST = [
    {"learner": "logistic", "params": {"l1": 1e9}},
    {"learner": "logistic", "params": {}},
    {"learner": "pmb", "params": {}},
]
#: the leader served alone (``temperature=0``): the mix has tests of its own below; no drift
#: tracking (its own tests are below), as the naive references
SMALL = {"window": 60, "evaluate_every": 20, "margin": 0.01, "patience": 2, "min_positives": 3,
         "min_negatives": 2, "temperature": 0.0, "track_drift": False}  # fmt: skip
#: with evaluations after 3, 6 and 12 events too
EARLY = dict(SMALL, first_evaluation=3)
#: the served mix, with a temperature at which the small test windows' pAUCs set shares
MIX = dict(SMALL, temperature=0.05)


def stream(seed, n=400, n_features=5, positive_rate=0.25):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + 1.2 * y[:, None] * np.linspace(1, -0.5, n_features)
    X[::11] = np.round(X[::11])
    return X, y


# ------------------------------------------------------------------------- naive reference
def naive_tournament(
    candidate_scores, labels, pauc_range, window, every, margin, patience, first=None,
    min_positives=3, min_negatives=2,
):  # fmt: skip
    """Served scores and leader history from each candidate's own prequential scores, one
    event at a time, with a deque(maxlen=window) per candidate (the rule of ``Auto``)."""
    early = set()
    while first is not None and first < every:
        early.add(first)
        first *= 2
    n_candidates, n_events = candidate_scores.shape
    rings = [deque(maxlen=window) for _ in range(n_candidates)]
    ring_labels = deque(maxlen=window)
    leader, since, challenger, streak = 0, 0, -1, 0
    scale, offset = 1.0, 0.0  # served = scale * leader's score + offset
    served, history = [], []
    for t in range(n_events):
        served.append(scale * candidate_scores[leader, t] + offset)
        for k in range(n_candidates):
            rings[k].append(candidate_scores[k, t])
        ring_labels.append(labels[t])
        if (t + 1) % every and t + 1 not in early:
            continue
        # at most the later half of the events seen (docs/algorithms/auto.md (auto.3))
        compared = min(len(ring_labels), (t + 1) - (t + 1) // 2)
        window_labels = np.array(ring_labels)[-compared:]
        n_positive = int(np.sum(window_labels == 1))
        n_negative = len(window_labels) - n_positive
        if n_positive < min_positives or (pauc_range[1] - pauc_range[0]) * n_negative < (
            min_negatives
        ):
            continue
        paucs = [pauc(window_labels, np.array(r)[-compared:], *pauc_range) for r in rings]
        aucs = [auc(window_labels, np.array(r)[-compared:]) for r in rings]
        best = max(range(n_candidates), key=lambda k: (paucs[k], aucs[k], -k))
        if best != leader and paucs[best] > paucs[leader] + margin:
            streak = streak + 1 if challenger == best else 1
            challenger = best
            if streak >= patience:
                # keep the served scores' mean and spread over the window
                before = scale * np.array(rings[leader]) + offset
                after = np.array(rings[best])
                scale = before.std() / after.std() if before.std() > 0 < after.std() else 1.0
                offset = before.mean() - scale * after.mean()
                leader, since, challenger, streak = best, t + 1, -1, 0
                history.append((t + 1, best))
        else:
            challenger, streak = -1, 0
    return np.array(served), history, leader, since


def naive_mix(candidate_scores, labels, pauc_range, window, every, temperature, first=None,
              min_positives=3, min_negatives=2, initial=None, admissions=None,
              steady=None):  # fmt: skip
    """Served scores of the mix (docs/algorithms/auto.md (auto.9)-(auto.11)), one event at a
    time: each candidate's score standardised by the mean and population std of its scores
    before it (np.mean / np.std of the list so far), the sum after ``t`` events times
    ``t / (t + SHRINK_EVENTS)``, weighted by a softmax of the windowed
    pAUCs at the last deciding evaluation (``initial`` before, equal weights if None), shares
    < 1e-3 dropped, then the candidates clearly behind the best with a share (auto.13), the
    best candidate alone when that mix is clearly behind it on the window (auto.12); an
    evaluation that decides nothing drops the candidates clearly behind on the window
    extended back to ``min_positives`` positives (auto.13).  ``admissions``: event count ->
    the candidates whose first fit was installed at it, each of them given, when it holds no
    share, the mean share of those that hold one (auto.14), before an evaluation due there.
    Where the window compared is its later half, a best candidate that is ``steady`` (all when
    None) replaces the mix only if it is behind it on the whole window too (auto.12)."""

    def clearly_behind(window_labels, recent, best, k):
        se, _, _ = naive_auc_difference_se(window_labels, recent[best], recent[k])
        gap = auc(window_labels, recent[best]) - auc(window_labels, recent[k])
        return gap > 0 and gap > 3.0 * se

    def drop_behind(weights, lo, hi):
        """(auto.13) on the events ``lo`` .. ``hi - 1``, pair by pair against the best, the
        gap also without each positive in turn (an undecided evaluation's few positives)."""
        window_labels, recent = labels[lo:hi], candidate_scores[:, lo:hi]
        paucs = [pauc(window_labels, row, *pauc_range) for row in recent]
        aucs = [auc(window_labels, row) for row in recent]
        held = [k for k in range(n_candidates) if weights[k] > 0]
        best = max(held, key=lambda k: (paucs[k], aucs[k], -k))
        weights = np.array(weights, dtype=float)
        for k in held:
            if aucs[best] - aucs[k] > 0 and clearly_behind(window_labels, recent, best, k):
                rest = [
                    [i for i in range(hi - lo) if i != out]
                    for out in range(hi - lo)
                    if window_labels[out] == 1
                ]
                if all(
                    np.sum(window_labels[kept] == 1) >= 2
                    and clearly_behind(window_labels[kept], recent[:, kept], best, k)
                    for kept in rest
                ):
                    weights[k] = 0.0
        return weights / weights.sum()

    early = set()
    while first is not None and first < every:
        early.add(first)
        first *= 2
    n_candidates, n_events = candidate_scores.shape
    weights = np.full(n_candidates, 1.0 / n_candidates) if initial is None else initial
    served = []
    for t in range(n_events):
        total = 0.0
        for k in range(n_candidates):
            past = candidate_scores[k, :t]
            spread = past.std() if t > 1 else 0.0
            if weights[k] > 0 and spread > 0:
                total += weights[k] * (candidate_scores[k, t] - past.mean()) / spread
        served.append(total * t / (t + SHRINK_EVENTS))
        for k in (admissions or {}).get(t + 1, []):
            if weights[k] == 0:
                weights = np.array(weights, dtype=float)
                weights[k] = 1.0 / np.count_nonzero(weights)
                weights = weights / weights.sum()
        if (t + 1) % every and t + 1 not in early:
            continue
        low = max(0, t + 1 - window, (t + 1) // 2)  # at most the later half (auto.3)
        window_labels = labels[low : t + 1]
        n_positive = int(np.sum(window_labels == 1))
        n_negative = len(window_labels) - n_positive
        if n_positive < min_positives or (pauc_range[1] - pauc_range[0]) * n_negative < (
            min_negatives
        ):
            earliest = max(0, t + 1 - window)
            found = n_positive
            while found < min_positives and low > earliest:
                low -= 1
                found += int(labels[low] == 1)
            found_negatives = t + 1 - low - int(np.sum(labels[low : t + 1] == 1))
            if min(int(np.sum(labels[low : t + 1] == 1)), found_negatives) >= 2:
                weights = drop_behind(weights, low, t + 1)
            continue
        paucs = np.array(
            [pauc(window_labels, candidate_scores[k, low : t + 1], *pauc_range)
             for k in range(n_candidates)]
        )  # fmt: skip
        shares = np.exp((paucs - paucs.max()) / temperature)
        shares /= shares.sum()
        shares[shares < 1e-3] = 0.0
        weights = drop_behind(shares / shares.sum(), low, t + 1)
        # the mix falls back to the best candidate when it is no better on the pAUC ...
        recent = candidate_scores[:, low : t + 1]
        spreads = [candidate_scores[k, : t + 1].std() for k in range(n_candidates)]
        mix = sum(weights[k] / spreads[k] * recent[k] for k in range(n_candidates)
                  if weights[k] > 0 and spreads[k] > 0)  # fmt: skip
        aucs = [auc(window_labels, recent[k]) for k in range(n_candidates)]
        best = max(range(n_candidates), key=lambda k: (paucs[k], aucs[k], -k))
        mix_metrics = (pauc(window_labels, mix, *pauc_range), auc(window_labels, mix))
        # ... and behind on the AUC by more than half a standard error (auto.12)
        se, _, _ = naive_auc_difference_se(window_labels, recent[best], mix)
        behind = mix_metrics[0] <= paucs[best] and mix_metrics[1] <= aucs[best] - 0.5 * se
        # ... and, for a steady best where the later half was compared, on the whole window
        whole = max(0, t + 1 - window)
        if behind and low > whole and (steady is None or steady[best]):
            every_label, every_score = labels[whole : t + 1], candidate_scores[:, whole : t + 1]
            whole_mix = sum(weights[k] / spreads[k] * every_score[k] for k in range(n_candidates)
                            if weights[k] > 0 and spreads[k] > 0)  # fmt: skip
            se, _, _ = naive_auc_difference_se(every_label, every_score[best], whole_mix)
            behind = (
                pauc(every_label, whole_mix, *pauc_range)
                <= pauc(every_label, every_score[best], *pauc_range)
                and auc(every_label, whole_mix) <= auc(every_label, every_score[best]) - 0.5 * se
            )
        if weights[best] < 1.0 and behind:
            weights = np.eye(n_candidates)[best]
    return np.array(served), weights


def standalone_scores(model, inputs, y, raw=None):
    """Each effective candidate run on its own over the rows auto's candidates saw: the rows
    auto scaled, or for a candidate that scales its own rows (``boosted_embedded``) the
    unscaled rows ``raw`` with auto's scaling."""
    out = []
    for spec in model.candidate_specs():
        if learner_class(spec["learner"]).scales_itself:
            learner = make_learner(spec["learner"], **(spec["params"] | {"scaling": model.scaling}))
            rows = [(raw[s], s) for _, s in inputs]
        else:
            learner = make_learner(spec["learner"], **spec["params"])
            rows = inputs
        out.append(np.concatenate([learner.prequential_step(X, y[s]) for X, s in rows]))
    return np.array(out)


def first_install(model, k, X, y):
    """The event count after which candidate ``k`` of ``model``, learning alone one event at a
    time, has installed its first fit (None: never)."""
    spec = model.candidate_specs()[k]
    alone = make_learner(spec["learner"], **(spec["params"] | {"scaling": model.scaling}))
    for t in range(len(y)):
        alone.prequential_step(X[t : t + 1], y[t : t + 1])
        if alone.fits_:
            return t + 1
    return None


@pytest.mark.parametrize(
    ("scaling", "schedule"),
    [
        ("none", SMALL),
        ("standard", SMALL),
        ("none", dict(SMALL, evaluate_every=40, first_evaluation=3)),
    ],
    ids=["none", "standard", "early_doubling"],
)
def test_tournament_agrees_with_the_naive_reference(scaling, schedule):
    X, y = stream(1)
    model = make_learner("auto", candidates=BAD_FIRST, scaling=scaling, **schedule)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 7), slice(7, 150), slice(150, 151), slice(151, None)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    reference = standalone_scores(model, inputs, y)
    expected, history, leader, since = naive_tournament(
        reference, y, (0.0, 0.1), schedule["window"], schedule["evaluate_every"], 0.01, 2,
        schedule.get("first_evaluation"),
    )  # fmt: skip
    # the map's mean and std sum the window in another order (ring vs deque): ulps
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-12, atol=1e-12)
    assert history and history[0][1] != 0  # the bad first candidate lost the lead
    board = model.leaderboard()
    assert (board["leader"], board["leader_since"]) == (leader, since)
    # the windowed metrics are those of the last evaluation's window (the last 60 events)
    last = board["evaluated_at"]
    for k, row in enumerate(board["candidates"]):
        window = slice(last - SMALL["window"], last)
        assert row["window_pauc"] == pauc(y[window], reference[k, window], 0.0, 0.1)
        assert row["window_auc"] == auc(y[window], reference[k, window])
    scaled = scale_batch(scaling, model.state_, X, learn=False)
    mapped = board["served_scale"] * model._candidates[leader].decision_function(scaled)
    np.testing.assert_array_equal(model.decision_function(X), mapped + board["served_offset"])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_batch_equals_one_event_at_a_time_across_leader_changes(sparse):
    X, y = stream(2)
    if sparse:
        X[np.random.default_rng(2).random(X.shape) < 0.4] = 0.0
    rows = sp.csr_matrix(X) if sparse else X
    # sparse rows keep their zeros with ``scale`` (the service's choice for them)
    early = dict(EARLY, scaling="scale" if sparse else "standard")
    at_once = make_learner("auto", candidates=BAD_FIRST, **early)
    scores = at_once.prequential_step(rows, y)
    single = make_learner("auto", candidates=BAD_FIRST, **early)
    one_by_one = np.concatenate(
        [single.prequential_step(rows[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    )
    np.testing.assert_array_equal(scores, one_by_one)
    states_equal(at_once.get_state(), single.get_state())
    assert at_once.leaderboard()["leader"] != 0
    # uneven cuts that straddle evaluation points
    uneven = make_learner("auto", candidates=BAD_FIRST, **early)
    cuts = [0, 3, 19, 20, 21, 77, 140, 141, 260, len(y)]
    pieces = [
        uneven.prequential_step(rows[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]
    np.testing.assert_array_equal(np.concatenate(pieces), scores)
    states_equal(at_once.get_state(), uneven.get_state())


def test_round_trip_mid_stream_continues_bit_for_bit():
    X, y = stream(3)
    original = make_learner("auto", candidates=BAD_FIRST, **SMALL).partial_fit(X[:130], y[:130])
    state = original.get_state()
    assert {key.split(":")[0] for key in state if ":" in key} == {"c0", "c1", "c2"}
    restored = learner_class("auto").from_state(original.get_params(), state)
    states_equal(state, restored.get_state())
    np.testing.assert_array_equal(
        original.prequential_step(X[130:], y[130:]), restored.prequential_step(X[130:], y[130:])
    )
    states_equal(original.get_state(), restored.get_state())
    assert restored.leaderboard() == original.leaderboard()
    twin = copy.deepcopy(original)
    np.testing.assert_array_equal(original.decision_function(X), twin.decision_function(X))


def test_the_clearly_better_candidate_takes_over_after_patience_evaluations():
    X, y = stream(4, n=600)
    model = make_learner("auto", candidates=BAD_FIRST[:2], window=100, evaluate_every=50,
                         margin=0.05, patience=3, min_positives=3, min_negatives=2,
                         temperature=0.0, track_drift=False, scaling="none")  # fmt: skip
    streaks = []
    for start in range(0, 200, 50):
        model.partial_fit(X[start : start + 50], y[start : start + 50])
        board = model.leaderboard()
        streaks.append((board["leader"], board["challenger"], board["challenger_streak"]))
    # the bad candidate leads until the good one has won three evaluations in a row
    assert streaks == [(0, 1, 1), (0, 1, 2), (1, None, 0), (1, None, 0)]
    assert model.leaderboard()["leader_since"] == 150
    rows = model.leaderboard()["candidates"]
    assert rows[1]["window_pauc"] > rows[0]["window_pauc"] + 0.05
    assert rows[1]["leader"] and not rows[0]["leader"]
    np.testing.assert_array_equal(
        model.coef_, model.leaderboard()["served_scale"] * model._candidates[1].coef_
    )


def test_served_scores_keep_their_mean_and_spread_when_the_leader_changes():
    X, y = stream(10)
    model = make_learner("auto", candidates=BAD_FIRST, **SMALL)
    for start in range(0, len(y), 20):  # one evaluation per batch: stop at the first change
        model.partial_fit(X[start : start + 20], y[start : start + 20])
        if model.leaderboard()["leader"] != 0:
            break
    state = model.state_
    leader = int(state["leader"][0])
    assert leader != 0
    filled = min(int(state["n_seen"][0]), SMALL["window"])
    # the first leader was served unmapped; over the window the new leader's mapped scores
    # have the same mean and standard deviation
    old_served = state["window_scores"][0, :filled]
    new_served = state["served_scale"][0] * state["window_scores"][leader, :filled]
    new_served = new_served + state["served_offset"][0]
    assert state["served_scale"][0] > 0
    np.testing.assert_allclose(new_served.mean(), old_served.mean(), atol=1e-12)
    np.testing.assert_allclose(new_served.std(), old_served.std(), rtol=1e-12)


def test_equal_candidates_never_swap():
    X, y = stream(5, n=800)
    twins = [{"learner": "spam", "params": {}}, {"learner": "spam", "params": {}}]
    model = make_learner("auto", candidates=twins, window=100, evaluate_every=10, patience=1,
                         margin=0.0)  # fmt: skip
    model.partial_fit(X, y)
    board = model.leaderboard()
    assert board["evaluated_at"] == 800
    assert (board["leader"], board["leader_since"], board["challenger"]) == (0, 0, None)
    assert board["candidates"][0]["window_pauc"] == board["candidates"][1]["window_pauc"]


def test_near_equal_candidates_within_the_margin_do_not_flap():
    """Two different but similar learners: their windowed pAUCs cross many times, yet with a
    margin and patience the leader changes at most once where margin 0 and patience 1 flap."""
    X, y = stream(6, n=3000, positive_rate=0.3)
    pair = [
        {"learner": "logistic", "params": {"solver": "ftrl"}},
        {"learner": "logistic", "params": {"solver": "ftrl", "alpha": 0.15}},
    ]
    changes = {}
    for name, rule in {"no_hysteresis": (0.0, 1), "default": (0.01, 3)}.items():
        model = make_learner("auto", candidates=pair, window=200, evaluate_every=20,
                             margin=rule[0], patience=rule[1])  # fmt: skip
        leaders = []
        for start in range(0, len(y), 20):
            model.partial_fit(X[start : start + 20], y[start : start + 20])
            leaders.append(model.leaderboard()["leader"])
        changes[name] = int(np.count_nonzero(np.diff(leaders)))
    assert changes["no_hysteresis"] >= 3
    assert changes["default"] <= 1


def test_one_class_window_changes_nothing():
    X, y = stream(7)
    model = make_learner("auto", candidates=BAD_FIRST, **SMALL)
    model.partial_fit(X[:100], np.zeros(100, dtype=int))
    board = model.leaderboard()
    assert board["evaluated_at"] == 100 and board["leader"] == 0
    assert all(row["window_pauc"] is None for row in board["candidates"])


def test_windows_with_too_few_positives_or_negatives_in_range_decide_nothing():
    X, y = stream(9)
    # 60 events, about 15 positives and 45 negatives: 4.5 negatives in FPR [0, 0.1]
    strict = make_learner("auto", candidates=BAD_FIRST, **dict(SMALL, min_negatives=10))
    strict.partial_fit(X, y)
    board = strict.leaderboard()
    assert board["leader"] == 0 and board["challenger"] is None
    assert board["candidates"][1]["window_pauc"] > board["candidates"][0]["window_pauc"] + 0.1
    # the same stream with a range wide enough for 10 negatives lets the good candidate lead
    wide = make_learner("auto", candidates=BAD_FIRST, pauc_range=[0.0, 0.5],
                        **dict(SMALL, min_negatives=10))  # fmt: skip
    assert wide.partial_fit(X, y).leaderboard()["leader"] != 0
    few_positives = make_learner("auto", candidates=BAD_FIRST, **dict(SMALL, min_positives=30))
    assert few_positives.partial_fit(X, y).leaderboard()["leader"] == 0


def test_leaderboard_is_json_and_shows_effective_parameters():
    X, y = stream(8)
    model = make_learner("auto", pauc_range=[0.0, 0.3], random_state=4, **SMALL)
    model.partial_fit(X, y)
    board = json.loads(json.dumps(model.leaderboard()))
    assert board["pauc_range"] == [0.0, 0.3]
    assert board["n_seen"] == 400 and board["window"] == 60 and board["evaluated_at"] == 400
    learners = [row["learner"] for row in board["candidates"]]
    assert learners == ["logistic", "ftrl_pauc", "boosted_embedded"]
    # the parameters that differ from the learner's defaults (ftrl_pauc's alpha = 0 and
    # scaling "none" do not)
    ftrl = board["candidates"][1]["params"]
    assert ftrl == {"beta": 0.3, "random_state": 4, "update_every": FTRL_PAUC_UPDATE_EVERY}
    assert sum(row["leader"] for row in board["candidates"]) == 1
    assert all(0.0 <= row["window_pauc"] <= 1.0 for row in board["candidates"])
    assert "beta" not in board["candidates"][0]["params"]  # logistic's beta is no FPR


def test_leaderboard_lists_the_same_parameters_when_every_one_is_explicit():
    """A model read back from the store runs candidates whose every parameter is explicit
    (service.engine.model.stored_params): its leaderboard lists what the model built from
    its creation request lists, the parameters that differ from the defaults."""
    X, y = stream(9)
    created = make_learner("auto", pauc_range=[0.0, 0.3], random_state=4, **SMALL)
    created.partial_fit(X, y)
    explicit = [
        {"learner": spec["learner"],
         "params": learner_class(spec["learner"])(**spec["params"]).get_params()}
        for spec in created.candidate_specs()
    ]  # fmt: skip
    stored = make_learner(
        "auto", candidates=explicit, pauc_range=[0.0, 0.3], random_state=4, **SMALL
    ).partial_fit(X, y)
    shown = [row["params"] for row in created.leaderboard()["candidates"]]
    assert [row["params"] for row in stored.leaderboard()["candidates"]] == shown
    assert all(len(params) < 8 for params in shown)  # not every parameter


def test_a_wrapped_pauc_learner_takes_the_model_s_range_too():
    """tree_embedded around pmb: the wrapper's pauc_range reaches pmb's alpha / beta."""
    candidates = [
        {"learner": "logistic"},
        {"learner": "tree_embedded", "params": {"learner": "pmb"}},
    ]
    model = make_learner("auto", candidates=candidates, pauc_range=(0.0, 0.05))
    assert model.candidate_specs()[1]["params"]["pauc_range"] == [0.0, 0.05]
    X, y = stream(5, n=1200)
    model.partial_fit(X, y)
    inner = model._candidates[1]._inner
    assert (inner.alpha, inner.beta) == (0.0, 0.05)


def test_explicit_pauc_range_equal_to_the_model_s_is_accepted():
    candidates = [{"learner": "pmb", "params": {"beta": 0.2, "alpha": 0.0}}]
    model = make_learner("auto", candidates=candidates, pauc_range=(0.0, 0.2))
    assert model.candidate_specs()[0]["params"]["beta"] == 0.2
    # Prec@k pmb is not a pAUC learner: its beta is left alone
    precision = [{"learner": "pmb", "params": {"loss": "prec_at_k", "beta": 0.5}}]
    assert make_learner("auto", candidates=precision).candidate_specs()[0]["params"]["beta"] == 0.5


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"candidates": [{"learner": "logistic"}, {"learner": "nope"}]}, "candidates[1].learner"),
        ({"candidates": [{"learner": "spam", "params": {"nope": 1}}]}, "candidates[0].params.nope"),
        ({"candidates": [{"learner": "spam", "params": {"eta0": -1.0}}]}, "candidates[0].params"),
        ({"candidates": [{"learner": "spam"}, {"learner": "pmb", "params": {"beta": 0.3}}]},
         "candidates[1].params.beta"),
        ({"candidates": [{"learner": "ftrl_pauc", "params": {"alpha": 0.05}}]},
         "candidates[0].params.alpha"),
        ({"candidates": [{"learner": "spam", "params": {"scaling": "standard"}}]},
         "candidates[0].params.scaling"),
        ({"candidates": [{"learner": "tree_embedded",
                          "params": {"learner": "pmb", "pauc_range": [0.0, 0.3]}}]},
         "candidates[0].params.pauc_range"),
        ({"candidates": [{"learner": "tree_embedded", "params": {"pauc_range": "wide"}}]},
         "candidates[0].params.pauc_range"),
        ({"candidates": [{"learner": "auto"}]}, "candidates[0].learner"),
        ({"candidates": [{"learner": "svm_pauc"}]}, "candidates[0].learner"),
        ({"candidates": [{"learner": 3}]}, "candidates[0].learner"),
        ({"candidates": [{"learner": "spam", "param": {}}]}, "candidates[0]"),
        ({"candidates": [{"learner": "spam", "params": [1]}]}, "candidates[0].params"),
        ({"candidates": ["spam"]}, "candidates[0]"),
        ({"candidates": []}, "candidates"),
        ({"candidates": {"learner": "spam"}}, "candidates"),
        ({"pauc_range": [0.2, 0.1]}, "pauc_range"),
        ({"pauc_range": 0.1}, "pauc_range"),
        ({"pauc_range": [0.0, float("nan")]}, "pauc_range"),
    ],
)  # fmt: skip
def test_candidate_errors_name_the_field(params, field):
    with pytest.raises(InvalidParameter) as raised:
        make_learner("auto", **params)
    assert raised.value.param.startswith(field)
    assert str(raised.value).startswith(field)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"window": 1}, "window"),
        ({"evaluate_every": 0}, "evaluate_every"),
        ({"window": 10, "evaluate_every": 20}, "evaluate_every <= window"),
        ({"margin": -0.1}, "margin"),
        ({"patience": 0}, "patience"),
        ({"min_positives": 0}, "min_positives"),
        ({"min_negatives": 1.5}, "min_negatives"),
        ({"first_evaluation": 0}, "first_evaluation"),
    ],
)
def test_bad_tracking_parameters_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        make_learner("auto", **params)


def test_a_candidate_that_cannot_hold_the_features_is_named():
    # ftrl_pauc's reservoirs are dense rows (pmb's sparse buffer, whose memory follows the
    # events' non-zeros, holds any width)
    with pytest.raises(InvalidParameter, match=r"candidates\[1\].*ftrl_pauc keeps") as raised:
        candidates = [{"learner": "logistic"}, {"learner": "ftrl_pauc"}]
        make_learner("auto", candidates=candidates).initialize(2**20)
    assert raised.value.param == "candidates[1]"


def test_clone_and_params_are_json():
    model = make_learner("auto", candidates=BAD_FIRST, pauc_range=[0.0, 0.05])
    json.dumps(model.get_params())
    assert clone(model).get_params() == model.get_params()


# ---------------------------------------------------------------------- track_drift
def _flipping(n=24_000, change=12_000, seed=11):
    """7 % positives from a logistic model whose weights flip sign on half the features."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    weights = np.array([1.2, -0.8, 1.0, 0.6, -1.2, 0.9, 0.5, -0.7])
    flipped = weights * np.array([-1, 1, -1, 1, -1, 1, -1, 1])
    logits = np.where(np.arange(n) < change, X @ weights, X @ flipped) - 3.2
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return X, y, change


def _learn(model, X, y, sizes):
    scores, start = [], 0
    for size in sizes:
        scores.append(model.prequential_step(X[start : start + size], y[start : start + size]))
        start += size
    return np.concatenate(scores)


def test_track_drift_adds_the_fast_candidate_and_promotes_it_after_a_change():
    X, y, change = _flipping()
    model = make_learner("auto", track_drift=True)
    names = [
        (spec["learner"], spec["params"].get("half_life", spec["params"].get("params")))
        for spec in model.candidate_specs()
    ]
    assert names == [
        ("logistic", None),
        ("ftrl_pauc", None),
        ("boosted_embedded", BOOSTED_CANDIDATE["params"]["params"]),
        ("logistic", 2000),
        ("boosted_embedded", FAST_TREE_CANDIDATE["params"]["params"]),
    ]
    scores, leaders = [], []
    for start in range(0, len(y), 500):
        scores.append(model.prequential_step(X[start : start + 500], y[start : start + 500]))
        leaders.append(model.leaderboard()["leader"])
    scores = np.concatenate(scores)
    own = model.state_
    assert own["drift:counters"][2] >= 1  # detected
    assert change <= own["drift_since"][0] < change + 5000
    # a precise candidate led before the change, a fast one took over within 6,000 events
    # after it and leads at the end
    assert leaders[change // 500 - 1] in (0, 1, 2)
    assert set(leaders[change // 500 + 12 :]) <= {3, 4}
    # recovered: the last 6,000 events rank as well as the 6,000 before the change
    assert (
        auc(y[-6000:], scores[-6000:])
        > auc(y[change - 6000 : change], scores[change - 6000 : change]) - 0.03
    )
    # without tracking, the same tournament is still behind 4,000 events after the change
    # (0.830 against 0.801; 0.772 before the mix was kept when it beats its best candidate on
    # either measure, which helps the untracked tournament follow the change too)
    plain = _learn(make_learner("auto", track_drift=False), X, y, [500] * (len(y) // 500))
    window = slice(change, change + 4000)
    assert auc(y[window], scores[window]) > auc(y[window], plain[window]) + 0.02


def test_track_drift_batch_equals_other_batchings_bit_for_bit():
    X, y, _ = _flipping(n=16_000, change=8_000)
    whole = make_learner("auto", track_drift=True)
    expected = _learn(whole, X, y, [len(y)])
    uneven = make_learner("auto", track_drift=True)
    sizes = [1, 499, 37, 2000, 3] + [503] * 26
    sizes.append(len(y) - sum(sizes))
    np.testing.assert_array_equal(_learn(uneven, X, y, sizes), expected)
    states_equal(whole.get_state(), uneven.get_state())
    assert whole.state_["drift:counters"][2] >= 1


def test_the_library_default_is_the_http_model_s():
    """One default: ``make_learner("auto")`` runs what a model created over HTTP with dense
    features runs (drift tracking, the fast candidate, standard scaling)."""
    model = make_learner("auto").initialize(4)
    assert model.track_drift is True and model.scaling == "standard"
    assert "drift_since" in model.state_ and "scaler_mean" in model.state_
    assert [spec["learner"] for spec in model.candidate_specs()] == [
        "logistic", "ftrl_pauc", "boosted_embedded", "logistic", "boosted_embedded",
    ]  # fmt: skip
    assert model.candidate_specs()[3]["params"]["half_life"] == 2000
    plain = make_learner("auto", track_drift=False).initialize(4)
    assert not any(key.startswith("drift") for key in plain.state_)
    assert len(plain.candidate_specs()) == 3


@pytest.mark.parametrize("candidates", [None, [{"learner": "logistic"}, {"learner": "pmb"}]])
def test_a_state_of_another_tournament_is_refused_naming_the_array(candidates):
    """One state format: a state learned by another tournament than the parameters name (a
    default tournament that changed, another candidate list) is refused, InvalidState naming
    the first array missing or unexpected; nothing is rebuilt from it."""
    X, y = stream(12, n=300)
    other = [{"learner": "logistic"}, {"learner": "ftrl_pauc"}]
    saved = make_learner("auto", candidates=other, **MIX)
    saved.partial_fit(X[:200], y[:200])
    params = dict(saved.get_params(), candidates=candidates)
    with pytest.raises(InvalidState, match="missing|unexpected") as caught:
        learner_class("auto").from_state(params, saved.get_state())
    assert caught.value.field.startswith("c")


def test_a_state_without_the_mix_arrays_is_refused():
    X, y = stream(13)
    model = make_learner("auto", candidates=BAD_FIRST, **MIX).partial_fit(X[:300], y[:300])
    state = {key: value for key, value in model.get_state().items() if key != "score_mean"}
    with pytest.raises(InvalidState, match="missing \\['score_mean'\\]") as caught:
        learner_class("auto").from_state(model.get_params(), state)
    assert caught.value.field == "score_mean"


# ------------------------------------------------------------------------- the served mix


@pytest.mark.parametrize("scaling", ["none", "standard"])
def test_the_mix_agrees_with_the_naive_reference(scaling):
    X, y = stream(11)
    model = make_learner("auto", candidates=BAD_FIRST, scaling=scaling, **MIX)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 1), slice(1, 7), slice(7, 150), slice(150, 151), slice(151, None)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    reference = standalone_scores(model, inputs, y)
    expected, weights = naive_mix(reference, y, (0.0, 0.1), MIX["window"],
                                  MIX["evaluate_every"], MIX["temperature"])  # fmt: skip
    # Welford's running mean and spread against numpy's two-pass ones: rounding only
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-9)
    board = model.leaderboard()
    np.testing.assert_allclose([row["weight"] for row in board["candidates"]], weights, rtol=1e-12)
    assert board["temperature"] == MIX["temperature"]
    # the bad first candidate's share fell below 1e-3 and was dropped; of the others, the mix
    # of their shares did not beat the better one on the last window, which is served alone
    assert weights[0] == 0.0 and sorted(weights[1:]) == [0.0, 1.0]
    # scoring new rows: the same mix with the statistics of every event learned, shrunk after
    # all of them
    scaled = scale_batch(scaling, model.state_, X, learn=False)
    shrink = len(y) / (len(y) + SHRINK_EVENTS)
    expected_scores = shrink * sum(
        weights[k]
        * (model._candidates[k].decision_function(scaled) - reference[k].mean())
        / reference[k].std()
        for k in (1, 2)
    )
    np.testing.assert_allclose(model.decision_function(X), expected_scores, rtol=1e-9, atol=1e-9)
    # coef_ is the linear part of that mix (both candidates are linear)
    expected_coef = shrink * sum(
        weights[k] / reference[k].std() * model._candidates[k].coef_ for k in (1, 2)
    )
    np.testing.assert_allclose(model.coef_, expected_coef, rtol=1e-9, atol=1e-12)


def test_evaluations_that_decide_nothing_shed_candidates_clearly_behind_as_the_naive_mix():
    """(auto.13) on windows with fewer positives than the guard asks: the evaluations at 20,
    40, ... events compare the later half extended back to 40 positives (or the whole window),
    and the useless first candidate (a constant score) leaves the equal start's mix there, pair
    by pair as the naive reference says, before any evaluation decides."""
    X, y = stream(16, n=400)
    params = dict(MIX, min_positives=40)
    model = make_learner("auto", candidates=BAD_FIRST, **params)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 90), slice(90, 230), slice(230, None)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    undecided = make_learner("auto", candidates=BAD_FIRST, **params)
    undecided.prequential_step(X[:100], y[:100])
    reference = standalone_scores(model, inputs, y)
    expected, weights = naive_mix(reference, y, (0.0, 0.1), MIX["window"], MIX["evaluate_every"],
                                  MIX["temperature"], min_positives=40)  # fmt: skip
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose([row["weight"] for row in model.leaderboard()["candidates"]],
                               weights, rtol=1e-12)  # fmt: skip
    # after 100 events the later half holds ~12 positives: nothing decided, and the constant
    # candidate, whose AUC is 0.5, is out of the mix while the other two keep equal shares
    early_weights = [row["weight"] for row in undecided.leaderboard()["candidates"]]
    np.testing.assert_allclose(early_weights, [0.0, 0.5, 0.5], rtol=1e-12)
    _, naive_early = naive_mix(reference[:, :100], y[:100], (0.0, 0.1), MIX["window"],
                               MIX["evaluate_every"], 0.05, min_positives=40)  # fmt: skip
    np.testing.assert_allclose(naive_early, early_weights, rtol=1e-12)


def test_the_mix_holds_bit_for_bit_across_batchings_and_a_round_trip():
    X, y = stream(12, n=500)
    one = make_learner("auto", candidates=BAD_FIRST, **MIX)
    whole = make_learner("auto", candidates=BAD_FIRST, **MIX)
    singles = np.concatenate([one.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(250)])
    twin = learner_class("auto").from_state(one.get_params(), one.get_state())
    singles = np.concatenate([singles, twin.prequential_step(X[250:], y[250:])])
    np.testing.assert_array_equal(singles, whole.prequential_step(X, y))
    states_equal(twin.get_state(), whole.get_state())
    np.testing.assert_array_equal(twin.decision_function(X), whole.decision_function(X))


def test_mix_weights_that_do_not_sum_to_one_are_refused():
    X, y = stream(14)
    model = make_learner("auto", candidates=BAD_FIRST, **MIX).partial_fit(X, y)
    state = model.get_state()
    state["served_weights"] = np.array([0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="served_weights.*sums to 1.5"):
        learner_class("auto").from_state(model.get_params(), state)


def test_temperature_zero_serves_the_leader_and_negative_is_refused():
    X, y = stream(15)
    leader_only = make_learner("auto", candidates=BAD_FIRST, **SMALL).partial_fit(X, y)
    board = leader_only.leaderboard()
    assert [row["weight"] for row in board["candidates"]] == [
        float(row["leader"]) for row in board["candidates"]
    ]
    with pytest.raises(ValueError, match="temperature"):
        make_learner("auto", temperature=-0.1).partial_fit(X, y)


# ------------------------------------------------------------------------- default tournament
def test_the_default_tournament_follows_the_model_s_width():
    narrow = make_learner("auto", track_drift=False).initialize(WIDE_FEATURES)
    wide = make_learner("auto", track_drift=True).initialize(WIDE_FEATURES + 1)
    assert [spec["learner"] for spec in narrow.candidate_specs()] == [
        "logistic",
        "ftrl_pauc",
        "tree_embedded",
    ]
    assert [spec["learner"] for spec in wide.candidate_specs()] == [
        "logistic",
        "pmb",
        "logistic",
        "logistic",
    ]
    # the third: the Laplace solver on the columns in use, 128 slots whatever the width
    assert wide.candidate_specs()[2]["params"]["max_columns"] == 128
    assert wide.state_["c2:covariance"].shape == (129, 129)
    assert "c1:buffer_fill" in wide.state_ and "c1:n_solver_steps" in narrow.state_
    # the width-chosen tournament round-trips through the state
    twin = learner_class("auto").from_state(wide.get_params(), wide.get_state())
    assert twin.candidate_specs() == wide.candidate_specs()


def test_the_third_candidate_is_boosted_up_to_its_width_limit_then_a_tree():
    """Up to TREE_REFIT_FEATURES the third candidate is the boosted one, its buffer empty
    until events come (it grows as it fills, up to 8,000 rows); wider, the tree embedding
    fitted once on 2,000 (the buffer stays within what the first fit takes at 1,000
    features), relearning at its fit, depth 8."""
    from core.learners._candidates import TREE_REFIT_FEATURES

    boosted = make_learner("auto").initialize(TREE_REFIT_FEATURES)
    once = make_learner("auto").initialize(TREE_REFIT_FEATURES + 1)
    assert boosted.candidate_specs()[2]["learner"] == "boosted_embedded"
    assert once.candidate_specs()[2]["learner"] == "tree_embedded"
    assert boosted.state_["c2:buffer_X"].shape == (0, TREE_REFIT_FEATURES)  # grows as it fills
    assert once.state_["c2:buffer_X"].shape == (2000, TREE_REFIT_FEATURES + 1)
    assert once.candidate_specs()[2]["params"].get("refit_events") is None
    assert once.candidate_specs()[2]["params"]["relearn"] is True
    assert once.state_["c2:tree_left"].shape == (511,)  # depth 8
    for model in (boosted, once):
        twin = learner_class("auto").from_state(model.get_params(), model.get_state())
        assert twin.candidate_specs() == model.candidate_specs()


def test_the_default_tournament_fits_its_tree_and_serves_the_naive_mix_of_its_candidates():
    """The default's third candidate (logistic on boosted trees' leaves) fits its trees from the
    250th, 375th, 563rd, 845th, 1,268th and 1,902nd events inside auto as it does alone: auto's
    served scores are the naive mix of the three candidates run on their own, batch sizes do not
    matter, and a state saved after the fits continues bit for bit."""
    X, y = stream(21, n=2600, n_features=4, positive_rate=0.1)
    X[:, 3] = X[:, 0] * X[:, 1]  # an interaction: something for the tree's paths to find
    params = {"random_state": 3, "window": 800, "evaluate_every": 400, "temperature": 0.05}
    model = make_learner("auto", **params)
    served, inputs = [], []
    with model.recording_inputs() as sink:
        for batch in (slice(0, 1500), slice(1500, 2001), slice(2001, 2300)):
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
    assert [spec["learner"] for spec in model.candidate_specs()][2] == "boosted_embedded"
    # due at 250 (installed L(N) = 32 events later), 375, 563, 845, 1,268, 1,902 (each half
    # as many events again as the last learned; L = 32, 32, 35, 52, 79, 118)
    assert model._candidates[2].fit_points_ == (1902, 2020)
    reference = standalone_scores(model, inputs, y, X)
    # before the window decides, logistic and ftrl_pauc share the mix; the tree candidates
    # and the forgetting one have none (auto.11)
    # and the boosted candidate joins the mix at its first fit if it holds no share (auto.14)
    initial = np.array([0.5, 0.5, 0.0, 0.0, 0.0])
    admissions = {first_install(model, 2, X, y): [2]}
    expected, weights = naive_mix(reference, y[:2300], (0.0, 0.1), 800, 400, 0.05, first=50,
                                  min_positives=10, min_negatives=10, initial=initial,
                                  admissions=admissions, steady=initial > 0)  # fmt: skip
    np.testing.assert_allclose(np.concatenate(served), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        [row["weight"] for row in model.leaderboard()["candidates"]], weights, rtol=1e-12
    )
    assert model.raw_weights() is None  # the leaves are not linear in x
    # one event at a time through the fit, and a round trip after it
    singles = make_learner("auto", **params)
    one_by_one = [singles.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(2300)]
    np.testing.assert_array_equal(np.concatenate(one_by_one), np.concatenate(served))
    twin = learner_class("auto").from_state(model.get_params(), model.get_state())
    np.testing.assert_array_equal(
        twin.prequential_step(X[2300:], y[2300:]), model.prequential_step(X[2300:], y[2300:])
    )
    states_equal(twin.get_state(), model.get_state())


def test_a_detected_drift_restarts_the_tree_candidates_tree_however_the_events_are_batched():
    """With ``track_drift`` a detection restarts the tree candidate's tree at the first
    multiple of the fast period after it (an event count): its buffer then holds the events
    from there on, and batches of any size give the same scores and state as one event at a
    time."""
    rng = np.random.default_rng(31)
    n = 4000
    y = np.where(rng.random(n) < 0.2, 1, -1)
    X = rng.normal(size=(n, 4))
    sign = np.where(np.arange(n) < 2000, 1.0, -1.0)  # the ranking flips at 2,000
    X[:, 0] += 2.0 * sign * (y > 0)
    params = {
        "track_drift": True, "scaling": "none", "window": 800, "evaluate_every": 200,
        "candidates": [
            {"learner": "logistic", "params": {"base_rate_offset": True}},
            {"learner": "tree_embedded", "params": {
                "learner": "logistic", "params": {"base_rate_offset": True, "solver": "ftrl"},
                "n_fit_events": 300, "refit_events": 600, "relearn": True, "max_depth": 3}},
        ],
    }  # fmt: skip
    batched = make_learner("auto", **params)
    served = np.concatenate([batched.prequential_step(X[i : i + 700], y[i : i + 700])
                             for i in range(0, n, 700)])  # fmt: skip
    detected = int(batched.state_["drift_since"][0])
    assert 2000 < detected < 2600
    tree = batched._candidates[1]
    # the restart came at the first multiple of the fast period (200 events here) after the
    # detection; the buffer holds the events from there, and the tree was grown again on them
    first = (detected // 200 + 1) * 200
    assert int(tree.state_["tree_fitted"][0]) == 2
    np.testing.assert_array_equal(tree.state_["buffer_X"][:600], X[first : first + 600])
    single = make_learner("auto", **params)
    one_by_one = np.concatenate([single.prequential_step(X[i : i + 1], y[i : i + 1])
                                 for i in range(n)])  # fmt: skip
    np.testing.assert_array_equal(one_by_one, served)
    states_equal(single.get_state(), batched.get_state())
