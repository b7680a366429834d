"""Feature hashing of named features into ``n_features`` columns, stable everywhere.

Python's built-in ``hash`` of a string is salted per process (``PYTHONHASHSEED``), so two API
replicas would send the same feature to different columns.  We use MurmurHash3 (x86, 32-bit,
seed 0) of the UTF-8 name instead: the function scikit-learn's ``FeatureHasher`` uses, so a
feature lands in the same column as ``FeatureHasher(n_features, input_type="dict")`` puts it,
on any process, platform or Python version.

Like scikit-learn, the sign of the hashed value is taken from the hash too
(``alternate_sign=True``): colliding features then cancel in expectation instead of adding up,
which keeps inner products unbiased (Weinberger et al., 2009).

Names repeat endlessly in a stream, so the (column, sign) of each name is memoised; hashing a
batch is then one dictionary lookup per feature occurrence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from core.csr import CSRMatrix
from core.errors import InvalidFeatures
from core.validation import FEATURE_BOUND, first_out_of_range, row_of_entry

_MASK32 = 0xFFFFFFFF


def murmurhash3_32(key: bytes | str, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``key`` as a signed int32 (as scikit-learn returns it).

    >>> murmurhash3_32("foo")
    -156908512
    """
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    length = len(data)
    h = seed & _MASK32
    c1, c2 = 0xCC9E2D51, 0x1B873593
    n_blocks = length // 4
    for block in range(n_blocks):
        k = int.from_bytes(data[4 * block : 4 * block + 4], "little")
        k = (k * c1) & _MASK32
        k = ((k << 15) | (k >> 17)) & _MASK32
        k = (k * c2) & _MASK32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _MASK32
        h = (h * 5 + 0xE6546B64) & _MASK32
    tail = data[4 * n_blocks :]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & _MASK32
        k = ((k << 15) | (k >> 17)) & _MASK32
        k = (k * c2) & _MASK32
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


class FeatureHasher:
    """Map rows of ``{name: value}`` to a :class:`~core.csr.CSRMatrix`.

    Parameters
    ----------
    n_features : int
        Number of columns (a power of two spreads the modulo evenly).
    alternate_sign : bool, default=True
        Multiply each value by the sign of its hash, as scikit-learn does.
    cache_size : int, default=1_000_000
        Names whose column is memoised; beyond that new names are hashed each time.

    Examples
    --------
    >>> hasher = FeatureHasher(16)
    >>> batch = hasher.transform([{"amount": 2.0, "country=FR": 1.0}, {}])
    >>> batch.shape, batch.nnz
    ((2, 16), 2)

    Two names that collide in the same row are summed (with their signs).
    """

    def __init__(self, n_features: int, alternate_sign: bool = True, cache_size: int = 1_000_000):
        if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
        self.n_features = n_features
        self.alternate_sign = alternate_sign
        self.cache_size = cache_size
        self._columns: dict[str, tuple[int, float]] = {}

    def column_of(self, name: str) -> tuple[int, float]:
        """``(column, sign)`` for a feature name."""
        cached = self._columns.get(name)
        if cached is not None:
            return cached
        if not isinstance(name, str):
            raise ValueError(f"feature names must be strings, got {name!r}")
        hashed = murmurhash3_32(name)
        sign = -1.0 if (self.alternate_sign and hashed < 0) else 1.0
        entry = (abs(hashed) % self.n_features, sign)
        if len(self._columns) < self.cache_size:
            self._columns[name] = entry
        return entry

    def transform(self, rows: Iterable[Mapping[str, float]]) -> CSRMatrix:
        """Hash a batch of rows; values must be finite numbers (checked per batch)."""
        indptr = [0]
        indices: list[int] = []
        data: list[float] = []
        for row_number, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise InvalidFeatures(
                    f"row {row_number}: named features must be an object", row=row_number
                )
            merged: dict[int, float] = {}
            for name, value in row.items():
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise InvalidFeatures(
                        f"row {row_number}: feature {name!r} must be a number, got {value!r}",
                        row=row_number,
                    )
                column, sign = self.column_of(name)
                merged[column] = merged.get(column, 0.0) + sign * value
            indices.extend(merged)
            data.extend(merged.values())
            indptr.append(len(indices))
        values = np.asarray(data, dtype=np.float64)
        position = first_out_of_range(values)
        if position is not None:
            bad_row = row_of_entry(indptr, position)
            what = (
                "NaN or infinity"
                if not np.isfinite(values[position])
                else f"a value beyond the feature bound of +-{FEATURE_BOUND:g}"
            )
            raise InvalidFeatures(f"row {bad_row}: features contain {what}", row=bad_row)
        return CSRMatrix(
            np.asarray(indptr, dtype=np.int64),
            np.asarray(indices, dtype=np.int64),
            values,
            self.n_features,
        )
