"""Stored size and learning / scoring cost of a hashed ``pmb`` model, per checkout (issue 36).

Not a test: prints a table.  A hashed model's events are CSR rows of ``--nnz`` non-zeros
among 2^18 columns (a few numbers and categories hashed by name); ``pmb`` with its defaults
(50-row buffer, 1PMB) and with ``passes=2`` (a positive reservoir as well) learns ``--events``
of them one at a time (the service's request path), then in batches of 1,000, and scores
batches of 1,000.  A dense model of 16 features learns the same counts, to show what the
row layout costs dense rows.  The state's size is the bytes of its arrays and of their
``numpy.savez_compressed`` archive (what a store writes is of that order).

Each ``--tree`` runs in a fresh process in turn, round after round (so that a busy machine
slows them alike), with its own numba cache under /tmp (a tree is not written to); the best
round of each is reported.  Times are the process's CPU time (``time.process_time``) after a
warm-up that compiles the kernels, in microseconds per event.

Usage::

    python bench/pmb_memory.py --tree /work/main --tree . [--events 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["NUMBA_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

WIDTH = 2**18
CASES = {
    "hashed 2^18, 1PMB": ("csr", {}),
    "hashed 2^18, 2PMB": ("csr", {"passes": 2, "random_state": 0}),
    "dense 16, 1PMB": ("dense", {}),
}


def _events(kind: str, n: int, nnz: int, seed: int):
    from core.csr import CSRMatrix

    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.1, 1, -1).astype(np.int64)
    if kind == "dense":
        return rng.normal(size=(n, 16)) + 0.5 * (y[:, None] > 0), y
    columns = np.sort(rng.integers(0, WIDTH, size=(n, nnz)), axis=1)
    values = rng.normal(size=(n, nnz)) + 0.5 * (y[:, None] > 0) * (columns < WIDTH // 8)
    # the hashed columns of one event are distinct (a collision adds the two values)
    keep = np.concatenate([np.ones((n, 1), bool), np.diff(columns, axis=1) > 0], axis=1)
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
    return CSRMatrix(indptr, columns[keep].astype(np.int64), values[keep], WIDTH), y


def _rows(X, start: int, stop: int):
    return X.row_range(start, stop) if hasattr(X, "row_range") else X[start:stop]


def measure(events: int, nnz: int) -> dict:
    """One process's measurements: {case: {quantity: value}}."""
    from core.learners import make_learner

    results = {}
    for case, (kind, params) in CASES.items():
        X, y = _events(kind, 2 * events + 2000, nnz, seed=1)
        warm = make_learner("pmb", **params)
        warm.partial_fit(_rows(X, 0, 200), y[:200])
        for i in range(200, 260):
            warm.partial_fit(_rows(X, i, i + 1), y[i : i + 1])
        warm.decision_function(_rows(X, 0, 100))
        model = make_learner("pmb", **params)
        singles = [_rows(X, i, i + 1) for i in range(events)]
        started = time.process_time()
        for i, row in enumerate(singles):
            model.partial_fit(row, y[i : i + 1])
        one = (time.process_time() - started) / events
        started = time.process_time()
        for start in range(events, 2 * events, 1000):
            model.partial_fit(_rows(X, start, start + 1000), y[start : start + 1000])
        batch = (time.process_time() - started) / events
        started = time.process_time()
        for start in range(0, events, 1000):
            model.decision_function(_rows(X, start, start + 1000))
        score = (time.process_time() - started) / events
        state = model.get_state()
        archive = io.BytesIO()
        np.savez_compressed(archive, **state)
        results[case] = {
            "learn one at a time, us/event": one * 1e6,
            "learn in batches of 1,000, us/event": batch * 1e6,
            "score in batches of 1,000, us/event": score * 1e6,
            "state arrays, KiB": sum(value.nbytes for value in state.values()) / 1024,
            "state archive (npz), KiB": archive.tell() / 1024,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="a checkout to measure (repeatable)")
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--nnz", type=int, default=20, help="non-zeros per hashed event")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.events, args.nnz)))
        return
    trees = [str(Path(tree).resolve()) for tree in (args.tree or ["."])]
    best: dict[str, dict] = {tree: {} for tree in trees}
    script = str(Path(__file__).resolve())
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for tree in trees:
            cache = Path("/tmp/aucstream-pmb-memory") / tree.strip("/").replace("/", "_")
            env = dict(
                os.environ, PYTHONPATH=tree, NUMBA_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1"
            )
            command = [sys.executable, script, "--child", "--events", str(args.events),
                       "--nnz", str(args.nnz)]  # fmt: skip
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{tree}: {done.stderr}")
            for case, values in json.loads(done.stdout.strip().splitlines()[-1]).items():
                kept = best[tree].setdefault(case, {})
                for key, value in values.items():
                    kept[key] = min(kept.get(key, np.inf), value)
        loads.append(os.getloadavg()[0])
    print(f"load average (1 min) at the start and after each round: {loads}")
    first = trees[0]
    for case in CASES:
        print(f"\n{case}")
        print(f"{'':40s}" + "".join(f"{Path(tree).name:>12s}" for tree in trees) + "   ratio")
        for key in best[first][case]:
            values = [best[tree][case][key] for tree in trees]
            ratio = values[-1] / values[0] if values[0] else np.nan
            print(f"{key:40s}" + "".join(f"{v:12.2f}" for v in values) + f"{ratio:8.3f}")


if __name__ == "__main__":
    main()
