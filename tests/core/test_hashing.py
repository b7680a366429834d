import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.feature_extraction import FeatureHasher as SklearnFeatureHasher
from sklearn.utils import murmurhash3_32 as sklearn_murmurhash3_32

from core.hashing import FeatureHasher, murmurhash3_32


@given(st.text(max_size=40))
def test_murmurhash_matches_scikit_learn(name):
    assert murmurhash3_32(name) == sklearn_murmurhash3_32(name, seed=0)


@given(st.binary(max_size=40), st.integers(0, 2**32 - 1))
def test_murmurhash_matches_scikit_learn_on_bytes_and_seeds(key, seed):
    assert murmurhash3_32(key, seed) == sklearn_murmurhash3_32(key, seed=seed)


names = st.text(min_size=1, max_size=12)
values = st.floats(-1e6, 1e6, allow_nan=False)


@given(
    st.lists(st.dictionaries(names, values, max_size=8), min_size=1, max_size=6),
    st.sampled_from([1, 7, 16, 2**20]),
    st.booleans(),
)
def test_feature_hasher_matches_scikit_learn(rows, n_features, alternate_sign):
    ours = FeatureHasher(n_features, alternate_sign=alternate_sign).transform(rows).toarray()
    theirs = (
        SklearnFeatureHasher(n_features, input_type="dict", alternate_sign=alternate_sign)
        .transform(rows)
        .toarray()
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-9)


def test_columns_are_stable_across_processes_with_different_hash_seeds():
    code = (
        "from core.hashing import FeatureHasher;"
        "print(FeatureHasher(2**20).column_of('merchant=ACME'))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert outputs == {str(FeatureHasher(2**20).column_of("merchant=ACME")) + "\n"}


def test_collisions_within_a_row_are_summed_not_duplicated():
    batch = FeatureHasher(1, alternate_sign=False).transform([{"a": 1.0, "b": 2.0}])
    assert batch.nnz == 1 and batch.data.tolist() == [3.0]


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"a": float("nan")}], "row 0: features contain NaN"),
        ([{"a": 1.0}, {"b": float("inf")}], "row 1: features contain NaN"),
        ([{"a": "x"}], "feature 'a' must be a number"),
        ([{"a": True}], "feature 'a' must be a number"),
        ([[1.0]], "row 0: named features must be an object"),
    ],
)
def test_bad_rows_are_rejected_with_their_row(rows, message):
    with pytest.raises(ValueError, match=message):
        FeatureHasher(8).transform(rows)


def test_rejects_bad_width():
    with pytest.raises(ValueError, match="n_features must be a positive integer"):
        FeatureHasher(0)
