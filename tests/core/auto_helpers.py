"""Streams, tournament settings, the naive reference of the served mix and the candidates
run on their own, shared by the ``auto`` tests (tests/core/test_auto*.py)."""

from __future__ import annotations

import numpy as np

from core.learners import learner_class, make_learner
from core.learners._served_scale import SHRINK_EVENTS
from core.metrics import auc, pauc
from tests.core.naive.metrics import naive_auc_difference_se

#: candidate 0 is deliberately bad: an L1 threshold no |z| reaches keeps every weight at 0,
#: so it scores by its intercept alone (no ranking); candidates 1 and 2 learn properly
BAD_FIRST = [
    {"learner": "logistic", "params": {"l1": 1e9}},
    {"learner": "logistic", "params": {}},
    {"learner": "pmb", "params": {}},
]
#: the leader served alone (``temperature=0``): the mix has tests of its own
#: (test_auto_mix.py); no drift tracking (test_auto_drift.py), as the naive references
SMALL = {"window": 60, "evaluate_every": 20, "margin": 0.01, "patience": 2, "min_positives": 3,
         "min_negatives": 2, "temperature": 0.0, "track_drift": False}  # fmt: skip
#: the served mix, with a temperature at which the small test windows' pAUCs set shares
MIX = dict(SMALL, temperature=0.05)


def stream(seed, n=400, n_features=5, positive_rate=0.25):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + 1.2 * y[:, None] * np.linspace(1, -0.5, n_features)
    X[::11] = np.round(X[::11])
    return X, y


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
    Once the window is full, the events compared are its later half when that passes the guard
    (auto.3).  Where the window compared is its later half, a best candidate that is
    ``steady`` (all when None) replaces the mix only if it is behind it on the whole window
    too (auto.12).  A
    candidate admitted after the compared events' start is judged on its events since
    (auto.15): its pAUC and AUC there in a deciding evaluation (both classes present), and
    (auto.13)'s test of a pair on the events since the later of the two's admissions."""
    joined = {}

    def clearly_behind(window_labels, recent, best, k):
        se, _, _ = naive_auc_difference_se(window_labels, recent[best], recent[k])
        gap = auc(window_labels, recent[best]) - auc(window_labels, recent[k])
        return gap > 0 and gap > 3.0 * se

    def judged(lo, hi, deciding):
        """Each candidate's pAUC and AUC on the events ``lo`` .. ``hi - 1``; in a deciding
        evaluation, one admitted after ``lo`` on its events since (auto.15)."""
        paucs, aucs = [], []
        for k in range(n_candidates):
            start = joined.get(k, 0) if deciding and joined.get(k, 0) > lo else lo
            if len(set(labels[start:hi].tolist())) < 2:
                start = lo
            paucs.append(pauc(labels[start:hi], candidate_scores[k, start:hi], *pauc_range))
            aucs.append(auc(labels[start:hi], candidate_scores[k, start:hi]))
        return paucs, aucs

    def drop_behind(weights, lo, hi, deciding=False):
        """(auto.13) on the events ``lo`` .. ``hi - 1``, pair by pair against the best, in an
        undecided evaluation the gap also without each positive in turn (its few positives); a
        pair of which one was admitted after ``lo`` on the events since (auto.15)."""
        paucs, aucs = judged(lo, hi, deciding)
        held = [k for k in range(n_candidates) if weights[k] > 0]
        best = max(held, key=lambda k: (paucs[k], aucs[k], -k))
        weights = np.array(weights, dtype=float)
        for k in held:
            since = max(lo, joined.get(best, 0), joined.get(k, 0))
            window_labels, recent = labels[since:hi], candidate_scores[:, since:hi]
            ahead = aucs[best] - aucs[k] > 0 if since == lo else True
            if ahead and clearly_behind(window_labels, recent, best, k):
                rest = [
                    [i for i in range(hi - since) if i != out]
                    for out in range(hi - since)
                    if window_labels[out] == 1
                ]
                if deciding or all(
                    np.sum(window_labels[kept] == 1) >= 2
                    and clearly_behind(window_labels[kept], recent[:, kept], best, k)
                    for kept in rest
                ):
                    weights[k] = 0.0
        return weights / weights.sum()

    def passes_guard(lo, hi):
        """Whether the events ``lo`` .. ``hi - 1`` hold the guard's positives and negatives."""
        n_positive = int(np.sum(labels[lo:hi] == 1))
        n_negative = hi - lo - n_positive
        width = pauc_range[1] - pauc_range[0]
        return n_positive >= min_positives and width * n_negative >= min_negatives

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
                joined[k] = t + 1
        if (t + 1) % every and t + 1 not in early:
            continue
        low = max(0, t + 1 - window, (t + 1) // 2)  # at most the later half (auto.3)
        if t + 1 > window and passes_guard(t + 1 - window // 2, t + 1):  # of the window too
            low = max(low, t + 1 - window // 2)
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
        paucs, aucs = judged(low, t + 1, deciding=True)
        paucs = np.array(paucs)
        shares = np.exp((paucs - paucs.max()) / temperature)
        shares /= shares.sum()
        shares[shares < 1e-3] = 0.0
        weights = drop_behind(shares / shares.sum(), low, t + 1, deciding=True)
        # the mix falls back to the best candidate when it is no better on the pAUC ...
        recent = candidate_scores[:, low : t + 1]
        spreads = [candidate_scores[k, : t + 1].std() for k in range(n_candidates)]
        mix = sum(weights[k] / spreads[k] * recent[k] for k in range(n_candidates)
                  if weights[k] > 0 and spreads[k] > 0)  # fmt: skip
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


def rare_stream(seed, n=700, n_features=4, positive_rate=0.03):
    """Few positives: no evaluation of the default schedule passes the guard of 10."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < positive_rate).astype(np.int64)
    X = rng.normal(size=(n, n_features)) + y[:, None] * np.array([1.2, -0.6, 0.0, 0.4])
    X[:, 3] = X[:, 0] * X[:, 1] + y * 1.5  # an interaction for the trees
    return X, y


def learn(model, X, y, sizes):
    """The served scores of ``model`` learning ``X``, ``y`` in batches of ``sizes``, and each
    call's recorded inputs with its slice."""
    served, inputs, start = [], [], 0
    with model.recording_inputs() as sink:
        for size in sizes:
            batch = slice(start, start + size)
            served.append(model.prequential_step(X[batch], y[batch]))
            inputs.append((sink[-1], batch))
            start += size
    return np.concatenate(served), inputs
