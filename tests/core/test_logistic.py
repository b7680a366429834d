"""``logistic``: the properties the service relies on over the configurations the defaults do
not reach (L1, L2, no intercept, CSR), for both solvers (FTRL-Proximal; the Laplace solver,
which ``solver=None`` picks for narrow models).

The shared contract (tests/core/test_learner_contract.py) runs over ``logistic`` with its
defaults and each configuration of tests/core/cases.py (bad parameters included), and
tests/core/test_naive_references.py runs the naive FTRL-Proximal reference over them.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from core.errors import InvalidParameter, InvalidState
from core.learners import learner_class, make_learner
from core.metrics import auc
from tests.core.cases import CONFIGURATIONS, N_FEATURES, close, naive_reference, stream
from tests.core.naive.logistic import NaiveLogistic

CONFIGS = CONFIGURATIONS["logistic"]


def test_l1_gives_exact_zeros_and_the_reference_agrees_on_them():
    X, y = stream(2)
    X[:, 3] *= 0.01  # a weak feature whose |z| stays under the threshold
    model = make_learner("logistic", **CONFIGS["l1"]).partial_fit(X, y)
    reference = NaiveLogistic(N_FEATURES, 0.5, 1.0, 2.0, 0.0, True)
    reference.learn(X, y)
    assert model.coef_[3] == 0.0 == reference.weights()[3]
    assert np.count_nonzero(model.coef_) >= 3


def test_one_class_stream_moves_only_towards_that_class():
    X, y = stream(3)
    model = make_learner("logistic", solver="ftrl").partial_fit(X[:50], np.zeros(50, dtype=int))
    assert model.intercept_ < 0
    reference = NaiveLogistic(N_FEATURES, 0.2, 1.0, 0.0, 0.0, True)
    reference.learn(X[:50], np.zeros(50, dtype=int))
    close(model.coef_, reference.weights())


def test_extreme_logits_do_not_overflow():
    X = np.array([[1e6, 0.0], [-1e6, 0.0], [1e6, 1.0]])
    model = make_learner("logistic", alpha=10.0)
    scores = model.prequential_step(X, np.array([0, 1, 1]))
    assert np.isfinite(scores).all() and np.isfinite(model.coef_).all()
    proba = model.predict_proba(X)
    assert np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_predict_proba_is_the_sigmoid_of_the_score():
    X, y = stream(4)
    model = make_learner("logistic").partial_fit(X, y)
    close(model.predict_proba(X)[:, 1], 1.0 / (1.0 + np.exp(-model.decision_function(X))))


@pytest.mark.parametrize("solver", ["ftrl", "laplace"])
def test_learns_like_batch_logistic_regression(solver):
    rng = np.random.default_rng(5)
    n = 6000
    y = (rng.random(n) < 0.1).astype(int)
    X = rng.normal(size=(n, 8)) + y[:, None] * np.linspace(1.0, 0.0, 8)
    model = make_learner("logistic", solver=solver).partial_fit(X[:4000], y[:4000])
    batch = LogisticRegression().fit(X[:4000], y[:4000])
    online_auc = auc(y[4000:], model.decision_function(X[4000:]))
    batch_auc = auc(y[4000:], batch.decision_function(X[4000:]))
    assert online_auc > batch_auc - 0.01
    # the intercept follows the class prior: log(0.1 / 0.9) = -2.2 at the mean
    assert -4.0 < model.intercept_ < -1.0


def test_high_dimensional_sparse_step_touches_only_its_columns():
    n_features = 2**20
    rng = np.random.default_rng(6)
    rows = sp.random(200, n_features, density=20 / n_features, format="csr", random_state=rng)
    y = rng.random(200) < 0.5
    model = make_learner("logistic")
    assert np.isfinite(model.prequential_step(rows, y)).all()
    touched = np.unique(rows.indices)
    assert np.count_nonzero(model.state_["n"]) == touched.size
    assert np.count_nonzero(model.coef_) <= touched.size


def test_base_rate_offset_shifts_scores_by_the_log_odds_of_the_labels_seen():
    X, y = stream(7)
    model = make_learner("logistic", solver="ftrl", base_rate_offset=True).partial_fit(X, y)
    positives, negatives = int((y > 0).sum()), int((y <= 0).sum())
    expected = np.log((positives + 0.5) / (negatives + 0.5))
    np.testing.assert_array_equal(model.state_["class_counts"], [negatives, positives])
    # the learned b, from its accumulators by (logistic.3) without penalty
    state = model.state_
    bias = -state["intercept_z"][0] * 0.2 / (1.0 + np.sqrt(state["intercept_n"][0]))
    close(model.decision_function(X), X @ model.coef_ + bias + expected)
    close(np.array([model.intercept_]), np.array([bias + expected]))
    assert abs(bias) < abs(expected)  # b learns only the residual of the base rate


def test_base_rate_offset_makes_early_and_late_scores_of_a_rare_class_comparable():
    # 3 % positives: without the offset FTRL's intercept falls from 0 to about -3.5 over the
    # first hundreds of events, so early negatives outrank later positives in the pooled
    # (prequential) ranking; with it the scale is right from the first events
    rng = np.random.default_rng(11)
    n = 3000
    y = (rng.random(n) < 0.03).astype(int)
    X = rng.normal(size=(n, 5)) + 1.5 * y[:, None] * np.array([1.0, 0.5, 0, 0, 0])
    plain = make_learner("logistic", solver="ftrl").prequential_step(X, y)
    offset = make_learner("logistic", solver="ftrl", base_rate_offset=True).prequential_step(X, y)
    assert auc(y, offset) > auc(y, plain) + 0.02


def test_the_default_solver_is_laplace_on_narrow_models_and_ftrl_otherwise():
    X, y = stream(8)
    assert "covariance" in make_learner("logistic").partial_fit(X, y).state_
    for params in ({"l1": 0.5}, {"l2": 1.0}, {"half_life": 100}):
        assert "z" in make_learner("logistic", **params).partial_fit(X, y).state_
    wide = make_learner("logistic").initialize(129)
    assert "z" in wide.state_ and "covariance" not in wide.state_
    assert "covariance" in make_learner("logistic").initialize(128).state_


def test_laplace_one_pass_approaches_the_penalised_batch_fit():
    # after one pass the mean approximates the posterior mode: batch logistic regression with
    # penalty ||w||^2 / (2 prior_variance) on the summed loss (weights that do not drift)
    rng = np.random.default_rng(9)
    n = 20_000
    y = (rng.random(n) < 0.2).astype(int)
    X = rng.normal(size=(n, 4)) + y[:, None] * np.array([1.0, -0.5, 0.25, 0.0])
    model = make_learner("logistic", solver="laplace", process_noise=0.0).partial_fit(X, y)
    batch = LogisticRegression(C=0.3).fit(X, y)
    np.testing.assert_allclose(model.coef_, batch.coef_[0], atol=0.02)
    assert abs(model.intercept_ - batch.intercept_[0]) < 0.02


def test_laplace_csr_rows_learn_what_their_dense_copies_learn():
    X, y = stream(10, density=0.4)
    dense = make_learner("logistic").partial_fit(X, y)
    sparse = make_learner("logistic").partial_fit(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(dense.state_["covariance"], sparse.state_["covariance"])
    np.testing.assert_array_equal(dense.state_["mean"], sparse.state_["mean"])
    np.testing.assert_array_equal(
        dense.decision_function(X), sparse.decision_function(sp.csr_matrix(X))
    )


def test_a_laplace_covariance_that_is_not_positive_semi_definite_is_refused():
    X, y = stream(11)
    model = make_learner("logistic").partial_fit(X, y)
    params, state = model.get_params(), model.get_state()
    asymmetric = {**state, "covariance": state["covariance"].copy()}
    asymmetric["covariance"][0, 1] += 1.0
    with pytest.raises(InvalidState, match="not symmetric"):
        learner_class("logistic").from_state(params, asymmetric)
    inflated = {**state, "covariance": state["covariance"] * 1e6}
    with pytest.raises(InvalidState, match="expected at most prior_variance"):
        learner_class("logistic").from_state(params, inflated)
    indefinite = {**state, "covariance": state["covariance"].copy()}
    indefinite["covariance"][-1, -1] = -1e-6  # symmetric, one negative eigenvalue
    with pytest.raises(InvalidState, match="not positive semi-definite"):
        learner_class("logistic").from_state(params, indefinite)


def test_an_explicit_laplace_solver_refuses_a_model_too_wide_before_allocating():
    with pytest.raises(InvalidParameter, match="at most 2048 features"):
        make_learner("logistic", solver="laplace").initialize(1_000_000)


def test_an_ftrl_state_is_refused_by_the_laplace_solver_naming_the_array():
    """One state format: a state learned by FTRL (``z``, ``n``) given with parameters that
    resolve to the Laplace solver is refused, naming the first array missing or unexpected."""
    X, y = stream(12)
    model = make_learner("logistic", solver="ftrl").partial_fit(X[:100], y[:100])
    params = {k: v for k, v in model.get_params().items() if k not in ("solver", "prior_variance")}
    with pytest.raises(InvalidState, match="missing .*unexpected") as caught:
        learner_class("logistic").from_state(params, model.get_state())
    assert caught.value.field in ("covariance", "mean")


def test_the_laplace_solver_follows_a_change_through_its_process_noise():
    # the relation of feature 0 to the label flips after 20,000 events: with fixed weights
    # (q = 0) the variances have shrunk as 1 / n, and the model still ranks backwards 4,000
    # events later (measured: AUC 0.06-0.10 from 2,000 to 5,000 events after the change); the
    # default random walk keeps them near sqrt(q / c), and it has learned the new relation
    rng = np.random.default_rng(13)
    n, change = 25_000, 20_000
    X = rng.normal(size=(n, 4))
    sign = np.where(np.arange(n) < change, 1.0, -1.0)
    y = (sign * X[:, 0] + 0.5 * rng.normal(size=n) > 1.0).astype(int)
    tail = slice(change + 2000, n)
    aucs = {}
    for noise in (0.0, 1e-6):
        model = make_learner("logistic", solver="laplace", process_noise=noise)
        aucs[noise] = auc(y[tail], model.prequential_step(X, y)[tail])
    assert aucs[1e-6] > 0.9 and aucs[0.0] < 0.5


# ------------------------------------------------------------------------- the columns in use
def _wide_rows(seed: int, n: int, width: int, used: np.ndarray):
    """A stream whose non-zero values lie on the columns ``used`` of a ``width``-wide CSR
    matrix, and its dense copy on those columns alone (in the order of ``used``)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.25).astype(int)
    dense = rng.normal(size=(n, used.size)) + 0.8 * y[:, None]
    dense[rng.random(dense.shape) < 0.4] = 0.0
    wide = sp.csr_matrix(
        (dense[dense != 0], (np.nonzero(dense)[0], used[np.nonzero(dense)[1]])),
        shape=(n, width),
    )
    return wide, dense, y


def test_max_columns_learns_what_the_laplace_solver_learns_on_the_columns_in_use():
    """The naive reference: the plain Laplace solver on a dense matrix of the columns in use,
    ordered as they first appear; a column first seen once every slot is taken is left out."""
    used = np.array([70_000, 5, 4_000, 12, 65_535])
    wide, dense, y = _wide_rows(14, 800, 70_001, used)
    model = make_learner("logistic", max_columns=4, base_rate_offset=True)
    scores = model.prequential_step(wide, y)
    slots = model.state_["columns"]
    # first appearances, in order of events then indices (CSR rows hold sorted indices)
    seen: list[int] = []
    for row in range(wide.shape[0]):
        for column in np.sort(wide.indices[wide.indptr[row] : wide.indptr[row + 1]]):
            if column not in seen:
                seen.append(int(column))
    assert slots.tolist() == seen[:4] and len(seen) == 5
    order = [int(np.flatnonzero(used == column)[0]) for column in slots]
    reference = make_learner("logistic", solver="laplace", base_rate_offset=True)
    assert np.array_equal(reference.prequential_step(dense[:, order], y), scores)
    held = np.array_equal(
        reference.decision_function(dense[:, order]), model.decision_function(wide)
    )
    assert held
    coef = model.coef_
    assert coef.shape == (70_001,) and np.count_nonzero(coef) == 4
    np.testing.assert_array_equal(coef[slots], reference.coef_)
    left_out = seen[4]
    assert coef[left_out] == 0.0 and model.state_["covariance"].shape == (5, 5)


def test_max_columns_learns_the_same_in_batches_as_one_event_at_a_time():
    used = np.array([9, 300, 2, 1_999])
    wide, _, y = _wide_rows(15, 300, 2_000, used)
    whole = make_learner("logistic", max_columns=3)
    scores = whole.prequential_step(wide, y)
    single = make_learner("logistic", max_columns=3)
    one_by_one = np.concatenate(
        [single.prequential_step(wide[i : i + 1], y[i : i + 1]) for i in range(300)]
    )
    assert np.array_equal(scores, one_by_one)
    for key, value in whole.state_.items():
        assert np.array_equal(value, single.state_[key]), key
    # a stored state round-trips, and dense rows take slots by their non-zero values
    twin = learner_class("logistic").from_state(whole.get_params(), whole.get_state())
    assert np.array_equal(twin.decision_function(wide), whole.decision_function(wide))
    dense_model = make_learner("logistic", max_columns=3).partial_fit(wide.toarray(), y)
    assert np.array_equal(dense_model.state_["mean"], whole.state_["mean"])


def test_max_columns_refuses_ftrl_and_a_state_whose_slots_are_not_a_prefix():
    with pytest.raises(InvalidParameter, match="max_columns"):
        make_learner("logistic", max_columns=8, solver="ftrl").initialize(10)
    with pytest.raises(InvalidParameter, match="half_life"):
        make_learner("logistic", max_columns=8, half_life=100.0).initialize(10)
    wide, _, y = _wide_rows(16, 50, 100, np.array([3, 7]))
    model = make_learner("logistic", max_columns=4).partial_fit(wide, y)
    params, state = model.get_params(), model.get_state()
    gap = {**state, "columns": np.array([3, -1, 7, -1])}
    with pytest.raises(InvalidState, match="free slot"):
        learner_class("logistic").from_state(params, gap)
    twice = {**state, "columns": np.array([3, 3, -1, -1])}
    with pytest.raises(InvalidState, match="twice"):
        learner_class("logistic").from_state(params, twice)
    outside = {**state, "columns": np.array([3, 100, -1, -1])}
    with pytest.raises(InvalidState, match="columns"):
        learner_class("logistic").from_state(params, outside)


# --------------------------------------------------------------- a prior per kind of column
def _kinds_stream(seed: int, n: int = 400):
    """Numbers (one with a first value of +1, one that starts late, integers 1-3) beside
    indicators of +1, -1 and 2 (a one-value column counts as an indicator whatever its
    magnitude), 12 columns wide."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    X = np.zeros((n, 12))
    X[:, 0] = rng.normal(size=n) + y
    X[0, 0] = 1.0
    X[:, 1] = np.where(rng.random(n) < 0.4, 1.0, 0.0)
    X[:, 2] = np.where(rng.random(n) < 0.2 + 0.3 * y, -1.0, 0.0)
    X[:, 5] = np.where(rng.random(n) < 0.5, rng.integers(1, 4, n), 0)
    X[:, 7] = np.where(rng.random(n) < 0.1 + 0.2 * y, 2.0, 0.0)
    X[60:, 9] = 3.0 * rng.normal(size=n - 60)
    return X, y


@pytest.mark.parametrize("process_noise", [0.0, 1e-6, 1e-3])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_prior_per_kind_learns_what_the_naive_information_form_learns(process_noise, sparse):
    """The kernel swaps a number's prior in the covariance (Sherman-Morrison); the reference
    adds the change of prior precision to the diagonal of the precision matrix and solves for
    the mean (tests/core/naive/logistic.py), event by event, in uneven batches."""
    X, y = _kinds_stream(21)
    params = {"max_columns": 6, "number_prior_variance": 3.0, "base_rate_offset": True}
    model = make_learner("logistic", process_noise=process_noise, **params)
    reference = naive_reference(model, NaiveLogistic, 12)
    for batch in (slice(0, 1), slice(1, 9), slice(9, 230), slice(230, None)):
        rows = sp.csr_matrix(X[batch]) if sparse else X[batch]
        close(model.prequential_step(rows, y[batch]), reference.learn(X[batch], y[batch]), 1e-10)
    close(model.coef_, reference.weights(), 1e-10)
    close(np.array([model.intercept_]), np.array([reference.intercept() + reference.offset()]))
    # the columns take slots 0, 1, 2, 5, 7, 9 in the order they appear; 0, 5, 9 are numbers
    slots = model.state_["columns"].tolist()
    assert sorted(slots) == [0, 1, 2, 5, 7, 9]
    kinds = dict(zip(slots, model.state_["magnitudes"].tolist(), strict=True))
    assert kinds == {0: -1.0, 1: 1.0, 2: 1.0, 5: -1.0, 7: 2.0, 9: -1.0}
    assert reference.numbers == {0, 5, 9}


def test_a_prior_per_kind_equals_one_prior_until_a_column_varies():
    """Indicators only: the same bits as the plain columns in use at ``prior_variance``."""
    X, y = _kinds_stream(22)
    X = X[:, [1, 2, 7]]
    kinds = make_learner("logistic", max_columns=3, number_prior_variance=3.0)
    plain = make_learner("logistic", max_columns=3)
    assert np.array_equal(kinds.prequential_step(X, y), plain.prequential_step(X, y))
    assert np.array_equal(kinds.state_["covariance"], plain.state_["covariance"])
    assert kinds.state_["magnitudes"].tolist() == [1.0, 1.0, 2.0]


def test_hashed_categories_stay_indicators_under_scale_and_numbers_take_their_prior():
    """Under ``scale`` a category is +-4 at every event and a number's first value is +-4 too:
    the number's second value tells it apart; its variance may then pass ``prior_variance``."""
    from core.hashing import FeatureHasher

    rng = np.random.default_rng(23)
    y = (rng.random(300) < 0.3).astype(int)
    rows = [
        {"amount": float(50 + 10 * rng.normal() + 5 * label), f"grade={rng.integers(3)}": 1.0}
        for label in y
    ]
    hashed = FeatureHasher(1 << 16).transform(rows)
    model = make_learner(
        "logistic", max_columns=8, number_prior_variance=3.0, scaling="scale", process_noise=0.1
    ).partial_fit(hashed, y)
    names = FeatureHasher(1 << 16).transform([{"amount": 1.0}])
    amount = int(names.indices[0])
    slots = model.state_["columns"].tolist()
    magnitudes = model.state_["magnitudes"]
    assert [magnitudes[slots.index(amount)]] == [-1.0]
    assert (
        sorted(m for s, m in zip(slots, magnitudes, strict=True) if 0 <= s != amount) == [4.0] * 3
    )
    variances = np.diag(model.state_["covariance"])
    assert (
        variances[slots.index(amount)] > 0.3
        and np.max(np.delete(variances, slots.index(amount))) <= 0.3
    )


def test_a_prior_per_kind_needs_max_columns_and_refuses_a_state_that_breaks_it():
    with pytest.raises(InvalidParameter, match="max_columns with number_prior_variance"):
        make_learner("logistic", number_prior_variance=3.0).initialize(10)
    with pytest.raises(InvalidParameter, match="number_prior_variance"):
        make_learner("logistic", max_columns=4, number_prior_variance=-1.0).initialize(10)
    X, y = _kinds_stream(24, n=80)
    model = make_learner("logistic", max_columns=8, number_prior_variance=3.0).partial_fit(X, y)
    params, state = model.get_params(), model.get_state()
    slot = state["magnitudes"].tolist().index(-1.0)
    for bad, match in [
        ({"magnitudes": np.where(state["columns"] < 0, 1.0, state["magnitudes"])}, "free slot"),
        (
            {"magnitudes": np.where(state["magnitudes"] == -1.0, -0.5, state["magnitudes"])},
            "other than -1",
        ),
    ]:
        with pytest.raises(InvalidState, match=match):
            learner_class("logistic").from_state(params, {**state, **bad})
    # a number's variance may reach 3, an indicator's 0.3
    indicator = state["magnitudes"].tolist().index(1.0)
    for index, variance, name in [(slot, 3.5, "number_prior_variance"), (indicator, 0.5, "prior_")]:
        covariance = state["covariance"].copy()
        covariance[index, index] = variance
        with pytest.raises(InvalidState, match=f"at {index}; expected at most {name}"):
            learner_class("logistic").from_state(params, {**state, "covariance": covariance})
    covariance = state["covariance"].copy()
    covariance[slot, slot] = 2.9
    twin = learner_class("logistic").from_state(params, {**state, "covariance": covariance})
    assert twin.state_["covariance"][slot, slot] == 2.9


@pytest.mark.parametrize(
    "params",
    [{}, {"half_life": 150}, {"solver": "laplace"}, {"base_rate_offset": True, "l1": 0.1}],
)
def test_leading_coef_is_the_first_weights_bit_for_bit(params):
    X, y = stream(3, n=200)
    model = make_learner("logistic", solver=params.pop("solver", "ftrl"), **params).fit(X, y)
    full = model.coef_
    for count in (0, 1, N_FEATURES - 1, N_FEATURES):
        head = model.leading_coef(count)
        assert head.dtype == np.float64 and head.shape == (count,)
        np.testing.assert_array_equal(head, full[:count], strict=True)
