"""The feature-mode default of ``aucstream replay`` for LIBSVM files (``service/cli/_readers.py``,
``DENSE_MAX_FEATURES``): each set written as a LIBSVM file, then replayed in-process with the
default learner (``auto``) as a sparse model (``--feature-mode sparse``: ``auto`` scaling =
``scale``) and as a dense one (``auto`` = ``standard``, the default up to 1,000 features).
Prints the since-start (prequential) AUC and pAUC(0, 0.1) of each::

    python bench/replay_defaults.py                      # a few sets of bench/datasets.py
    python bench/replay_defaults.py --sets ada,german --shuffle-seed 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.datasets import load  # noqa: E402
from service.cli import main  # noqa: E402

DEFAULT_SETS = "ada,splice_ei,german,spambase,sylva,mushroom,car_vgood,hypothyroid"


def write_libsvm(path: Path, X: np.ndarray, y: np.ndarray) -> None:
    with path.open("w") as handle:
        for row, label in zip(X, y, strict=True):
            columns = np.flatnonzero(row)
            pairs = " ".join(f"{j + 1}:{float(row[j])!r}" for j in columns)
            handle.write(f"{int(label)} {pairs}\n")


def replayed(path: Path, feature_mode: str) -> tuple[float, float]:
    """(since-start AUC, pAUC) of an in-process replay, read back from its saved snapshot's
    metrics table on stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["replay", str(path), "--model", "m", "--quiet",
                       "--feature-mode", feature_mode])  # fmt: skip
    if status != 0:
        raise SystemExit(f"replay failed ({status})")
    values = {}
    for line in out.getvalue().splitlines():
        parts = line.split()
        if parts[:1] == ["AUC"] or parts[:1] == ["pAUC"] and parts[1].startswith("["):
            values[parts[0]] = float(parts[-1])
    return values["AUC"], values["pAUC"]


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--shuffle-seed", type=int, default=0, help="event order")
    args = parser.parse_args()
    print(f"{'set':<12} {'n':>6} {'d':>5}  {'AUC sparse/scale':>16} {'AUC dense/std':>14}  "
          f"{'pAUC sparse':>11} {'pAUC dense':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        for name in args.sets.split(","):
            X, y, _ = load(name)
            order = np.random.default_rng(args.shuffle_seed).permutation(len(y))
            path = Path(folder) / f"{name}.libsvm"
            write_libsvm(path, X[order], y[order])
            sparse_auc, sparse_pauc = replayed(path, "sparse")
            dense_auc, dense_pauc = replayed(path, "dense")
            print(f"{name:<12} {len(y):>6} {X.shape[1]:>5}  {sparse_auc:>16.4f} "
                  f"{dense_auc:>14.4f}  {sparse_pauc:>11.4f} {dense_pauc:>10.4f}")  # fmt: skip


if __name__ == "__main__":
    main_()
