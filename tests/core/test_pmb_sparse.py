"""The pmb learner on sparse events (hashed models): the same as its naive reference and as
dense rows, a stored buffer that breaks its layout refused, and the weights checked after the
events that take a step."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidState, StateOverflow
from core.learners import learner_class, make_learner
from tests.core.pmb_helpers import reference_pmb


def _wide_sparse_stream(seed, n=500, width=3000):
    """CSR events on ``width`` columns, a few non-zero values each, some with many more, and
    some with stored zeros."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.25).astype(np.int64)
    rows, columns, values = [], [], []
    for i in range(n):
        count = 69 if i % 37 == 0 else int(rng.integers(0, 12))
        chosen = rng.choice(width, size=count, replace=False)
        rows += [i] * count
        columns += chosen.tolist()
        values += (rng.normal(size=count) + 0.7 * y[i] * (chosen < 40)).tolist()
    X = sp.csr_matrix((values, (rows, columns)), shape=(n, width))
    X.data[::23] = 0.0  # stored zeros: a value written, not a non-zero one
    return X, y


def _stored_rows(state, prefix):
    """A store's rows (core.learners._row_store) as a dense array."""
    import scipy.sparse as sp

    indptr = state[f"{prefix}_indptr"]
    total = int(indptr[-1])
    entries = (state[f"{prefix}_values"][:total], state[f"{prefix}_indices"][:total], indptr)
    return sp.csr_matrix(entries, shape=(len(indptr) - 1, int(state["n_features"][0]))).toarray()


def test_sparse_events_learn_what_the_reference_and_dense_rows_learn():
    """The naive per-event reference (dense rows), the same rows passed dense and one event at
    a time all learn the same, bit for bit but for the reference, and leave the same state:
    the buffer holds the current epoch's events, sparse either way."""
    X, y = _wide_sparse_stream(8)
    params = dict(buffer_size=20, first_buffer_size=8)
    sparse = make_learner("pmb", **params)
    scores = sparse.prequential_step(X, y)
    ref_scores, ref_w, ref_average, ref_steps = reference_pmb(X.toarray(), y, **params)
    assert sparse.state_["n_steps"][0] == ref_steps > 10
    np.testing.assert_allclose(sparse.state_["w"], ref_w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.coef_, ref_average, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-9, atol=1e-12)
    dense = make_learner("pmb", **params)
    np.testing.assert_array_equal(dense.prequential_step(X.toarray(), y), scores)
    single = make_learner("pmb", **params)
    one_by_one = [single.prequential_step(X[i : i + 1], y[i : i + 1]) for i in range(len(y))]
    np.testing.assert_array_equal(np.concatenate(one_by_one), scores)
    for key, value in sparse.state_.items():
        np.testing.assert_array_equal(value, single.state_[key], err_msg=key)
        np.testing.assert_array_equal(value, dense.state_[key], err_msg=key)
    fill = int(sparse.state_["buffer_fill"][0])
    assert fill > 0
    rows = _stored_rows(sparse.state_, "buffer")
    np.testing.assert_array_equal(rows[:fill], X[len(y) - fill :].toarray())
    assert not rows[fill:].any()
    stored = learner_class("pmb").from_state(sparse.get_params(), sparse.get_state())
    np.testing.assert_array_equal(stored.decision_function(X), sparse.decision_function(X))


def _shuffled_within_rows(X, seed):
    """The same CSR matrix with each row's column indices in a random order."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    indices, data = X.indices.copy(), X.data.copy()
    for start, stop in zip(X.indptr[:-1], X.indptr[1:], strict=True):
        order = start + rng.permutation(stop - start)
        indices[start:stop], data[start:stop] = X.indices[order], X.data[order]
    shuffled = sp.csr_matrix((data, indices, X.indptr.copy()), shape=X.shape)
    assert not shuffled.has_sorted_indices
    return shuffled


@pytest.mark.parametrize(
    "params",
    [
        dict(loss="pauc", passes=1, beta=0.2),
        dict(loss="pauc", passes=1, alpha=0.05, beta=0.3, auc_weight=0.0),
        # the naive Prec@k subgradient searches every top set: small buffers
        dict(loss="prec_at_k", passes=1, k=0.2, buffer_size=8, first_buffer_size=4),
        dict(loss="prbep", passes=1, buffer_size=8),
        dict(loss="pauc", passes=2, beta=0.2, random_state=3),
        dict(loss="prec_at_k", passes=2, k=0.3, buffer_size=5, random_state=4),
        dict(loss="prbep", passes=2, half_life=300.0, buffer_size=5, random_state=5),
    ],
)
def test_the_epoch_over_sparse_rows_learns_what_dense_rows_learn(params):
    """Each epoch scores and sums the stored rows over their entries only (sorted, whatever
    the CSR order): the scores and weights are those of the same events passed dense, bit for
    bit, and within rounding of the naive reference; the stores hold the same entries."""
    X, y = _wide_sparse_stream(10, n=600)
    params = {"buffer_size": 20, "first_buffer_size": 8, **params}
    dense = make_learner("pmb", **params)
    dense_scores = dense.prequential_step(X.toarray(), y)
    in_order = make_learner("pmb", **params)
    np.testing.assert_array_equal(in_order.prequential_step(X, y), dense_scores)
    sparse = make_learner("pmb", **params)
    scores = sparse.prequential_step(_shuffled_within_rows(X, 11), y)
    for key, value in dense.state_.items():
        np.testing.assert_array_equal(sparse.state_[key], value, err_msg=key)
        np.testing.assert_array_equal(in_order.state_[key], value, err_msg=key)
    # an event's own score sums its values in the CSR order given (pauc_buffers.event_dot)
    np.testing.assert_allclose(scores, dense_scores, rtol=1e-13, atol=1e-15)
    ref_scores, ref_w, ref_average, ref_steps = reference_pmb(X.toarray(), y, **params)
    assert sparse.state_["n_steps"][0] == ref_steps > 5
    np.testing.assert_allclose(sparse.state_["w"], ref_w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.coef_, ref_average, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-9, atol=1e-12)
    positives = X[y > 0].toarray()
    for prefix, fill in (("buffer", "buffer_fill"), ("positive", "positive_fill")):
        rows = _stored_rows(sparse.state_, prefix)
        held = int(sparse.state_[fill][0])
        assert not rows[held:].any()
        if prefix == "positive" and held:  # the reservoir holds positives, each once
            matches = (rows[:held, None, :] == positives[None, :, :]).all(axis=2)
            assert (matches.sum(axis=1) >= 1).all()


def _forged(state, key, change):
    forged = {**state, key: state[key].copy()}
    change(forged[key])
    return forged


@pytest.mark.parametrize("prefix", ["buffer", "positive"])
def test_a_store_whose_rows_break_its_layout_is_refused(prefix):
    """Offsets that decrease or pass the entries, rows past the fill holding entries, columns
    out of order, repeated or out of range, zero entries, a non-zero tail, entry arrays of two
    lengths or longer than the capacity: each refused, naming the array."""
    X, y = _wide_sparse_stream(12, n=200)
    model = make_learner("pmb", passes=2, buffer_size=20, first_buffer_size=8, random_state=0)
    params, state = model.partial_fit(X[1:], y[1:]).get_params(), model.get_state()
    indptr_key, indices_key, values_key = (f"{prefix}_indptr", f"{prefix}_indices",
                                           f"{prefix}_values")  # fmt: skip
    indptr = state[indptr_key]
    row = int(np.flatnonzero(np.diff(indptr) > 1)[0])
    first = int(indptr[row])
    fill = int(state[f"{prefix}_fill"][0])

    def refused(forged, key, match):
        with pytest.raises(InvalidState, match=match) as caught:
            learner_class("pmb").from_state(params, forged)
        assert caught.value.field == key

    def swap(a):
        a[first], a[first + 1] = a[first + 1], a[first]

    def repeat(a):
        a[first + 1] = a[first]

    def decrease(a):
        at = int(np.flatnonzero(a > 0)[0])
        a[at + 1] = a[at] - 1

    refused(_forged(state, indices_key, swap), indices_key, f"columns of row {row} out of order")
    refused(_forged(state, indices_key, repeat), indices_key, "out of order")
    refused(_forged(state, indices_key, lambda a: a.__setitem__(first, X.shape[1])),
            indices_key, "expected an integer in")  # fmt: skip
    refused(_forged(state, values_key, lambda a: a.__setitem__(first, 0.0)), values_key, "zero")
    refused(_forged(state, indptr_key, decrease), indptr_key, "never decreasing")
    refused(_forged(state, indptr_key, lambda a: a.__setitem__(-1, len(state[values_key]) + 1)),
            indptr_key, "never decreasing|ends at")  # fmt: skip
    if prefix == "buffer" and fill and indptr[fill] > indptr[fill - 1]:
        # the last event's row past a fill one less (a reservoir's fill follows its offers)
        earlier = _forged(state, "buffer_fill", lambda a: a.__setitem__(0, fill - 1))
        refused(earlier, indptr_key, f"rows from {fill - 1} on")
    longer = {**state, values_key: np.append(state[values_key], 0.0)}
    refused(longer, values_key, "entries")
    tail = {key: state[key].copy() for key in (indices_key, values_key)}
    grown = {key: np.append(value, np.zeros(4, dtype=value.dtype)) for key, value in tail.items()}
    grown[values_key][-1] = 1.0
    refused({**state, **grown}, values_key, "past the rows")
    capacity = len(indptr) * X.shape[1]
    huge = {key: np.zeros(capacity + 1, dtype=value.dtype) for key, value in tail.items()}
    refused({**state, **huge}, indices_key, "grows as it fills")
    learner_class("pmb").from_state(params, state)  # the unaltered state loads


def _in_bounds_naively(model) -> bool:
    from core.learners._state import STATE_BOUND

    keys = model.grown_state_keys()
    return all(bool(np.all(np.abs(model.state_[key]) <= STATE_BOUND)) for key in keys)


def _spy_on_the_check(model) -> list:
    """The arrays each check of ``model``'s grown arrays skips, as it starts."""
    skipped: list = []
    check = model._kernel_in_bounds

    def spy(keys, arrays, bounds, settles):
        skipped.append(model._unchanged_grown_keys())
        return check(keys, arrays, bounds, settles)

    model._kernel_in_bounds = spy
    return skipped


def test_the_weights_are_checked_after_the_events_that_take_a_step():
    """Between steps pmb's weights do not change: the check after a one-event batch skips
    them, and its verdict is a full scan's; a step that overflows is refused."""
    X, y = _wide_sparse_stream(10, n=200)
    model = make_learner("pmb", buffer_size=20, first_buffer_size=8).partial_fit(X[:1], y[:1])
    skipped = _spy_on_the_check(model)
    for i in range(1, len(y)):
        steps = int(model.state_["n_steps"][0])
        model.prequential_step(X[i : i + 1], y[i : i + 1])
        stepped = int(model.state_["n_steps"][0]) != steps
        assert skipped[-1] == (frozenset() if stepped else {"w", "w_avg"})
        assert model.grown_state_in_bounds() == _in_bounds_naively(model) is True
    assert 0 < sum(map(len, skipped)) < 2 * len(skipped)
    stored = learner_class("pmb").from_state(model.get_params(), model.get_state())
    assert stored._unchanged_grown_keys() == frozenset()  # new arrays: read in full

    diverging = make_learner(
        "pmb", buffer_size=8, first_buffer_size=8, radius=0.0, eta=1e60, scaling="none"
    )
    labels = np.array([1, 0, 1, 0, 1, 0, 1, 0])
    rows = np.where(labels[:, None] > 0, 1e95, -1e95) * np.array([1.0, -1.0, 0.5])
    for i in range(7):  # no step: nothing grows
        diverging.partial_fit(rows[i : i + 1], labels[i : i + 1])
    assert diverging._unchanged_grown_keys() == {"w", "w_avg"}
    with pytest.raises(StateOverflow):
        diverging.partial_fit(rows[7:], labels[7:])  # the epoch's step
    assert not _in_bounds_naively(diverging)


def test_auto_reads_its_pmb_weights_after_the_events_that_take_a_step():
    """A wide ``auto`` (pmb among its candidates) skips the weights its pmb has not moved."""
    X, y = _wide_sparse_stream(11, n=150, width=2000)
    model = make_learner("auto", scaling="scale").partial_fit(X[:1], y[:1])
    prefix, pmb = next((p, part) for p, part in model._parts() if part.name == "pmb")
    weights = {prefix + "w", prefix + "w_avg"}
    skipped = _spy_on_the_check(model)
    for i in range(1, len(y)):
        steps = int(pmb.state_["n_steps"][0])
        model.prequential_step(X[i : i + 1], y[i : i + 1])
        stepped = int(pmb.state_["n_steps"][0]) != steps
        assert weights.isdisjoint(skipped[-1]) if stepped else weights <= skipped[-1]
        assert model.grown_state_in_bounds() == _in_bounds_naively(model) is True
    assert sum(weights <= keys for keys in skipped) > len(skipped) // 2
