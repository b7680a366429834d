"""How close ``bench/datasets.py``'s restoration of KEEL australian's lost decimal points
(A2, A3, A7; ``datasets._australian_points_restored``) comes to LIBSVM's copy of the set, of which
scikit-learn ships 85 rows as a test fixture.  ``python bench/australian_check.py`` prints the
counts of matching rows (bench/README.md quotes them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets  # noqa: E402


def australian_reference_rows() -> tuple[np.ndarray, np.ndarray]:
    """The first 85 rows of LIBSVM's australian (features scaled to [-1, 1], labels +-1) that
    scikit-learn ships as an OpenML test fixture (data set 292), mapped back to UCI units
    with UCI's ranges; for checking the restoration, too few rows to learn from."""
    text = datasets._package_text(
        "sklearn", "datasets", "tests", "data", "openml", "id_292", "data-v1-dl-49822.arff.gz"
    )
    rows = [line.strip()[1:-1] for line in text.splitlines() if line.startswith("{")]
    table = np.zeros((len(rows), 15))
    for i, row in enumerate(rows):  # sparse ARFF: "{index value, ...}", index 0 the label
        for item in row.split(","):
            index, value = item.split()
            table[i, int(index)] = float(value)
    low, high = np.array([13.75, 0.0, 0.0]), np.array([80.25, 28.0, 28.5])  # A2, A3, A7
    X = np.zeros((len(rows), 14))  # only A2, A3 and A7 are filled: those KEEL garbled
    X[:, [1, 2, 6]] = low + (table[:, [2, 3, 7]] + 1) / 2 * (high - low)
    return X, (table[:, 0] > 0).astype(np.int64)


def australian_restoration_check() -> dict[str, int]:
    """How many of the 85 reference rows the restored A2, A3, A7 (and the labels) match."""
    reference, labels = australian_reference_rows()
    restored, y = datasets._australian_points_restored()
    n = len(labels)
    counts = {"rows": n, "labels": int((y[:n] == labels).sum())}
    for column, name in ((1, "A2"), (2, "A3"), (6, "A7")):
        counts[name] = int((np.abs(restored[:n, column] - reference[:, column]) < 0.006).sum())
    return counts


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    print(australian_restoration_check())
