"""A boosted candidate's one-event learn on Elec2 through several commits' versions of its Python
path (``core/learners/_boosted_learning.py`` and ``_boosted_fused.py``), in one process.

Not a test: prints a table.  Sub-microsecond cuts are lost in the spread between processes
(~3 % on a shared machine), so every version runs here on the same model, the same kernels
and the rest of the code as checked out: each version's two modules are read with ``git show``
and loaded under names of their own; ``make_learner("auto", random_state=0)`` learns Elec2's
first ``--warm`` events in batches of 100, then ``--single`` one at a time, and each boosted
candidate then learns the next event ``--number`` times in a row through each version, on a
fresh deep copy of the model each repeat (the same state, no fit falling due), best of 5 on the
thread's CPU clock, the versions alternated ``--rounds`` times::

    PYTHONPATH=. python bench/boosted_path_ab.py 59c496e HEAD [--number 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from auto_event_parts import warmed_auto  # noqa: E402

_MODULES = ("_boosted_fused", "_boosted_learning")


def version(commit: str, folder: Path):
    """The commit's ``_boosted_learning`` module, calling that commit's ``_boosted_fused``."""
    loaded = {}
    for name in _MODULES:
        source = subprocess.run(["git", "show", f"{commit}:core/learners/{name}.py"],
                                check=True, capture_output=True, text=True).stdout  # fmt: skip
        path = folder / f"{name}_{commit}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"{name}_{commit}", path)
        assert spec is not None and spec.loader is not None
        loaded[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded[name])
    fused, learning = loaded["_boosted_fused"], loaded["_boosted_learning"]
    learning.learn_whole, learning.learn_fused = fused.learn_whole, fused.learn_fused
    return learning


def timed(module, model, k: int, rows, labels, scores, number: int) -> float:
    """Microseconds per call: best of 5, each on a fresh copy of ``model``."""
    best = []
    for _ in range(5):
        candidate = copy.deepcopy(model)._candidates[k]
        start = time.thread_time()
        for _ in range(number):
            module.learn(candidate, rows, labels, scores)
        best.append(time.thread_time() - start)
    return min(best) / number * 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commits", nargs="+")
    parser.add_argument("--warm", type=int, default=8100)
    parser.add_argument("--single", type=int, default=100)
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    from core.preprocessing import scale_batch

    model, X, y, event = warmed_auto(args.warm, args.single)
    at = event.start - 1
    rows, labels = model._coerce(X[event], y[event], check_finite=False)
    scaled = scale_batch(model.scaling, model._scaler_arrays, rows, learn=False)
    roles = model._candidate_roles()
    scores = np.empty(1)
    with tempfile.TemporaryDirectory() as folder:
        versions = {commit: version(commit, Path(folder)) for commit in args.commits}
        print(f"Elec2 event {at + 2}, load {os.getloadavg()[0]:.2f}; us per call (vs the first)\n")
        print("| candidate | " + " | ".join(args.commits) + " |")
        print("|---|" + "---|" * len(args.commits))
        for k, candidate in enumerate(model._candidates):
            if type(candidate).__name__ != "BoostedEmbedded":
                continue
            given = rows if roles.unscaled[k] else scaled
            took: dict[str, list[float]] = {commit: [] for commit in args.commits}
            for round_ in range(args.rounds):  # alternated, each order in turn
                order = args.commits if round_ % 2 == 0 else args.commits[::-1]
                for commit in order:
                    took[commit].append(
                        timed(versions[commit], model, k, given, labels, scores, args.number)
                    )
            first = min(took[args.commits[0]])
            cells = [f"{min(took[c]):.2f} ({min(took[c]) / first:.3f})" for c in args.commits]
            print(f"| {k} | " + " | ".join(cells) + " |")
        print(f"\nload after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
