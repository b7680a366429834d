"""``auto``'s served mix against each of its candidates run alone, per data set: the sets where
the served model's prequential or held-out AUC falls more than ``MARGIN`` (0.005) below its
best candidate's (a *miss*).  Not a test: prints one table per code tree and the counts.

Usage (``bench/README.md``, "The served mix against its best candidate")::

    python bench/mix_misses.py --sets suite --seeds 3
    python bench/mix_misses.py --sets holdout --seeds 3 --trees /path/to/main,/path/to/branch

Protocol: ``quality.py``'s split (stratified 70 / 30, the training events shuffled with the
seed), raw features, one pass in batches of 256, each event scored before it is learned.
``auto`` runs with the defaults of a dense HTTP model (``scaling="standard"``, drift
tracking); each candidate alone is the learner and parameters auto gives it
(``candidate_specs()`` once auto knows the width), with the same scaling and seed.  The
figures per set are the means over the seeds.

``--trees`` compares code trees in one run: each (set list, seed) job runs once per tree in a
child process that imports that tree's ``core``, the trees alternated (the first tree first on
even seeds, last on odd ones), so a noisy machine weighs on all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MARGIN = 0.005
BATCH = 256
TEST_FRACTION = 0.3


def split(y: np.ndarray, seed: int):
    """``quality.split``: datasets.py's (this tree's bench code, first on the child's path after
    the measured tree's root)."""
    import datasets

    return datasets.split(y, seed, TEST_FRACTION)


def one_pass(model, X_train, y_train, X_test):
    preq = np.empty(len(y_train))
    for start in range(0, len(y_train), BATCH):
        rows = slice(start, start + BATCH)
        preq[rows] = model.prequential_step(X_train[rows], y_train[rows])
    return preq, model.decision_function(X_test)


def run_set(name: str, seed: int) -> dict:
    """auto and each of its candidates alone on one set and seed (in the tree on sys.path)."""
    import datasets

    from core.learners import make_learner
    from core.learners._mix_fallback import auc_difference_se
    from core.metrics import auc

    warnings.filterwarnings("ignore")
    X, y, _ = datasets.load(name, 50_000)
    train, test = split(y, seed)
    X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
    auto = make_learner("auto", scaling="standard", random_state=seed)
    started = time.process_time()
    preq, held = one_pass(auto, X_train, y_train, X_test)
    seconds = time.process_time() - started
    served = [auc(y_train, preq), auc(y_test, held)]
    row = {"set": name, "seed": seed, "n": len(y), "served": served}
    candidates, errors = [], []
    for spec in auto.candidate_specs():
        params = {**spec["params"], "scaling": "standard", "random_state": seed}
        alone = one_pass(make_learner(spec["learner"], **params), X_train, y_train, X_test)
        candidates.append([auc(y_train, alone[0]), auc(y_test, alone[1])])
        # the standard error of (candidate - served) on this seed's events (DeLong's, paired)
        errors.append([auc_difference_se(y_train, alone[0], preq),
                       auc_difference_se(y_test, alone[1], held)])  # fmt: skip
    row["candidates"] = candidates
    row["errors"] = errors
    row["names"] = [spec["learner"] for spec in auto.candidate_specs()]
    row["auto_cpu"] = seconds
    return row


def worker(root: str, sets: list[str], seed: int) -> list[dict]:
    """Run in a child process with ``root`` first on sys.path: one JSON list on stdout."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, root)
    return [run_set(name, seed) for name in sets]


def set_names(which: str) -> list[str]:
    sys.path.insert(0, str(HERE))
    import datasets

    if which == "suite":
        return list(datasets.SUITE)
    if which == "holdout":
        return list(datasets.HOLDOUT)
    return which.split(",")


#: a miss counts as beyond the noise when its gap exceeds ``MARGIN`` by this many standard
#: errors of the seeds' mean paired difference besides
NOISE_ERRORS = 2.0


def report(tree: str, rows: list[dict]) -> tuple[int, int, int]:
    """Print the per-set table of one tree; return (preq misses, held-out misses, either).
    A miss flagged in lower case (``p``, ``h``) is also beyond the noise: its gap exceeds
    ``MARGIN`` by more than :data:`NOISE_ERRORS` standard errors of the mean over the seeds of
    the paired difference from that best candidate."""
    by_set: dict[str, list[dict]] = {}
    for row in rows:
        by_set.setdefault(row["set"], []).append(row)
    print(f"\n{tree}: AUC, prequential / held-out, mean over seeds; * a miss (< best - {MARGIN})")
    names = next(iter(by_set.values()))[0]["names"]
    header = ["set", "n", "served", *[f"{k}:{n}" for k, n in enumerate(names)], "miss"]
    print(" | ".join(header))
    preq_misses = held_misses = either = 0
    beyond_noise = np.zeros(2, dtype=int)
    for name, group in by_set.items():
        served = np.mean([r["served"] for r in group], axis=0)
        candidates = np.mean([r["candidates"] for r in group], axis=0)
        best = candidates.max(axis=0)
        miss = served < best - MARGIN
        preq_misses += int(miss[0])
        held_misses += int(miss[1])
        either += int(miss.any())
        cells = [f"{p:.3f}/{h:.3f}" for p, h in candidates]
        flag = ("P" if miss[0] else "") + ("H" if miss[1] else "")
        if "errors" in group[0]:
            chosen = np.argmax(candidates, axis=0)
            squares = np.sum([np.square(np.array(r["errors"])[chosen, [0, 1]]) for r in group], 0)
            beyond = best - served - MARGIN > NOISE_ERRORS * np.sqrt(squares) / len(group)
            beyond_noise += beyond
            flag += ("p" if beyond[0] else "") + ("h" if beyond[1] else "")
        served_cell = f"{served[0]:.3f}/{served[1]:.3f}"
        print(" | ".join([name, str(group[0]["n"]), served_cell, *cells, flag or "-"]))
    cpu = sum(r["auto_cpu"] for r in rows)
    print(f"misses: prequential {preq_misses}, held-out {held_misses}, either {either} "
          f"of {len(by_set)} sets, beyond the noise {beyond_noise[0]} / {beyond_noise[1]}; "
          f"auto's CPU {cpu:.1f} s")  # fmt: skip
    return preq_misses, held_misses, either


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="suite", help="suite, holdout or comma-separated names")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. n-1")
    parser.add_argument(
        "--trees",
        default=str(HERE.parent),
        help="comma-separated code trees (the root of each checkout)",
    )
    parser.add_argument("--worker", nargs=2, metavar=("ROOT", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    sets = set_names(args.sets)
    if args.worker:
        print(json.dumps(worker(args.worker[0], sets, int(args.worker[1]))))
        return 0
    trees = args.trees.split(",")
    rows: dict[str, list[dict]] = {tree: [] for tree in trees}
    started = time.perf_counter()
    cpu: dict[str, float] = dict.fromkeys(trees, 0.0)
    for seed in range(args.seeds):
        for tree in trees if seed % 2 == 0 else trees[::-1]:
            env = {**os.environ, "PYTHONPATH": tree}
            before = os.times()
            out = subprocess.run(
                [sys.executable, __file__, "--sets", ",".join(sets), "--worker", tree, str(seed)],
                env=env, check=True, capture_output=True, text=True,
            )  # fmt: skip
            after = os.times()
            cpu[tree] += after.children_user - before.children_user
            rows[tree].extend(json.loads(out.stdout.strip().splitlines()[-1]))
    for tree in trees:
        report(tree, rows[tree])
        print(f"child CPU {cpu[tree]:.0f} s")
    print(f"\nwall {time.perf_counter() - started:.0f} s, seeds {args.seeds}, "
          f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
