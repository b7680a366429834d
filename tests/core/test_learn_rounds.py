"""``learn_rounds``: several rounds in one call give, for every registered learner, exactly what
one call per round gives — the naive reference: ``coef_`` taken before each round, one
``prequential_step`` (or ``partial_fit``) per round, its rows from
``core.regret.learner_inputs`` computed before the call — the same state bit for bit, scores,
served weights, rows and regret window."""

from __future__ import annotations

import numpy as np
import pytest

from core.csr import CSRMatrix
from core.errors import InvalidFeatures
from core.learners import learner_class, make_learner
from core.regret import RegretWindow, learner_inputs
from tests.core.cases import learner_cases, states_equal, stream, unless_standard

pytestmark = pytest.mark.filterwarnings("ignore:svm_pauc. the pAUC surrogate:UserWarning")

#: one-event rounds, an empty one, a one-class one (the stream's first 15 events are
#: negatives), ties and zero rows (``stream``), a long one
SIZES = [1, 4, 0, 1, 1, 7, 30, 1, 0, 16, 3, 1]

LAYOUTS = [
    pytest.param(*case.values, sparse, id=f"{case.id}-{'csr' if sparse else 'dense'}")
    for case in learner_cases()
    for sparse in (False, True)
    if not sparse or learner_class(case.values[0]).supports_sparse
]


def _rows(X, sparse):
    return CSRMatrix.from_dense(X) if sparse else X


def _learners(name, config, sparse, warm):
    config = unless_standard(name, config, "scale") if sparse else config
    X, y = stream(11, n=warm + sum(SIZES), density=0.5 if sparse else 1.0)
    pair = [make_learner(name, **config) for _ in range(2)]
    for learner in pair:
        learner.partial_fit(_rows(X[:warm], sparse), y[:warm])
    return pair, _rows(X[warm:], sparse), np.where(y[warm:] > 0, 1, -1)


def _one_call_per_round(learner, X, y, want_scores):
    served, rows, scores = [], [], []
    start = 0
    for stop in np.cumsum(SIZES):
        served.append(np.array(learner.coef_, dtype=np.float64))
        if stop > start:
            part = X.row_range(start, stop) if isinstance(X, CSRMatrix) else X[start:stop]
            rows.append(learner_inputs(learner, part))
            if want_scores:
                scores.append(learner.prequential_step(part, y[start:stop]))
            else:
                learner.partial_fit(part, y[start:stop])
        start = stop
    return np.concatenate(scores) if scores else np.empty(0), np.stack(served), rows


def _dense(rows):
    return np.concatenate([r.toarray() if isinstance(r, CSRMatrix) else r for r in rows])


def _window(learner, scores, y, served, rows):
    window = RegretWindow(200, learner.n_features_in_)
    window.update_rounds(_dense(rows), y, scores, served, SIZES)
    return window.get_state()


@pytest.mark.parametrize(("name", "config", "sparse"), LAYOUTS)
@pytest.mark.parametrize("warm", [20, 60])
def test_one_call_over_rounds_equals_one_call_per_round_bit_for_bit(name, config, sparse, warm):
    (at_once, reference), X, y = _learners(name, config, sparse, warm)
    learned = at_once.learn_rounds(X, y, np.cumsum(SIZES))
    scores, served, rows = _one_call_per_round(reference, X, y, want_scores=True)
    states_equal(at_once.get_state(), reference.get_state())
    np.testing.assert_array_equal(learned.scores, scores)
    np.testing.assert_array_equal(learned.served, served)
    np.testing.assert_array_equal(_dense(learned.rows), _dense(rows))
    states_equal(
        _window(at_once, learned.scores, y, learned.served, learned.rows),
        _window(reference, scores, y, served, rows),
    )


@pytest.mark.parametrize(("name", "config", "sparse"), LAYOUTS[::3])
def test_without_scores_the_rounds_are_learned_as_partial_fit_learns_them(name, config, sparse):
    (at_once, reference), X, y = _learners(name, config, sparse, 20)
    learned = at_once.learn_rounds(X, y, np.cumsum(SIZES), want_scores=False)
    _, served, rows = _one_call_per_round(reference, X, y, want_scores=False)
    states_equal(at_once.get_state(), reference.get_state())
    assert learned.scores.shape == (0,)
    np.testing.assert_array_equal(learned.served, served)
    np.testing.assert_array_equal(_dense(learned.rows), _dense(rows))


@pytest.mark.parametrize("name", ["auto", "spam", "spdam"])
def test_a_bad_row_is_counted_in_the_whole_batch(name):
    (learner, _), X, y = _learners(name, {}, False, 20)
    X = X.copy()
    X[40, 2] = np.nan
    with pytest.raises(InvalidFeatures) as refused:
        learner.learn_rounds(X, y, np.cumsum(SIZES))
    assert refused.value.row == 40


@pytest.mark.parametrize("stops", [[], [3, 2, 65], [10, 64], [10, 66]])
def test_round_stops_must_rise_to_the_batch_end(stops):
    (learner, _), X, y = _learners("spam", {}, False, 20)
    before = learner.get_state()
    with pytest.raises(ValueError, match="round stops"):
        learner.learn_rounds(X, y, stops)
    states_equal(learner.get_state(), before)


def _auto_rounds(rng, n_events):
    """Random round sizes (empty and one-event rounds among them) over ``n_events``."""
    sizes = rng.choice([0, 1, 1, 1, 2, 3, 7, 20, 64], size=n_events)
    stops = np.minimum(np.cumsum(sizes), n_events)
    return [int(stop) for stop in stops[: np.searchsorted(stops, n_events) + 1]]


@pytest.mark.parametrize(
    "config",
    [{}, {"temperature": 0.0}, {"evaluate_every": 150, "window": 300, "fit_delay": 0}],
    ids=["default", "leader-alone", "fit-at-once"],
)
def test_auto_rounds_across_its_fits_equal_one_call_per_round(config):
    """``auto`` learns the rounds in one call, its weights taken inside it at each round's start
    (core.learners._auto_learning): across the boosted candidates' fits (falling due, held,
    installed), the evaluations and the drift tracking's segments, the same as one call per
    round, bit for bit."""
    params = {"random_state": 3, **config}
    fit_delay = params.pop("fit_delay", None)
    if fit_delay is not None:  # every boosted candidate installs its fits where they fall due
        params["candidates"] = [
            {"learner": "logistic"},
            {"learner": "boosted_embedded", "params": {"fit_delay": fit_delay, "first_fit": 60}},
        ]
    X, y = stream(5, n=900)
    labels = np.where(y > 0, 1, -1)
    at_once, reference = make_learner("auto", **params), make_learner("auto", **params)
    at_once.partial_fit(X[:30], labels[:30])
    reference.partial_fit(X[:30], labels[:30])
    rng = np.random.default_rng(1)
    start = 30
    while start < len(y):
        stop = min(len(y), start + int(rng.integers(1, 90)))
        stops = _auto_rounds(rng, stop - start)
        learned = at_once.learn_rounds(X[start:stop], labels[start:stop], stops)
        scores, served = [], []
        previous = 0
        for end in stops:
            served.append(np.array(reference.coef_, dtype=np.float64))
            if end > previous:
                part = slice(start + previous, start + end)
                scores.append(reference.prequential_step(X[part], labels[part]))
            previous = end
        np.testing.assert_array_equal(learned.served, np.stack(served))
        np.testing.assert_array_equal(learned.scores, np.concatenate(scores))
        start = stop
    assert reference._candidates[-1].fits_ >= 2
    states_equal(at_once.get_state(), reference.get_state())
