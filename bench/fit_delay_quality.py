"""What ``fit_delay`` costs the default model's ranking: ``auto``'s prequential AUC and
pAUC(0, 0.1) over whole streams, in the library, for each ``fit_delay`` of its boosted
candidate (bench/README.md, "Fit points over HTTP").

Each set (bench/datasets.py) is shuffled with a fixed seed and cut to ``--max-n`` events, as
in bench/fit_points_http.py; one run (the learners are deterministic).

    python bench/fit_delay_quality.py [--sets satimage_4 magic sylva] [--delays 0 256 1024]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.datasets import load  # noqa: E402
from bench.fit_points_http import SHUFFLE_SEED  # noqa: E402
from core.learners import make_learner  # noqa: E402
from core.learners._candidates import default_candidates  # noqa: E402
from core.metrics.ranking import auc, pauc  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["satimage_4", "magic", "sylva"])
    parser.add_argument("--delays", type=int, nargs="+", default=[0, 256, 1024])
    parser.add_argument("--max-n", type=int, default=20_000)
    args = parser.parse_args(argv)
    print("| set | " + " | ".join(f"fit_delay {d}: AUC / pAUC" for d in args.delays) + " |")
    print("|---|" + "---:|" * len(args.delays))
    for name in args.sets:
        X, y, _ = load(name)
        order = np.random.default_rng(SHUFFLE_SEED).permutation(len(y))[: args.max_n]
        X, y = X[order], y[order]
        cells = []
        for delay in args.delays:
            candidates = [
                {**spec, "params": {**spec["params"], "fit_delay": delay}}
                if spec["learner"] == "boosted_embedded"
                else spec
                for spec in default_candidates(X.shape[1], track_drift=True)
            ]
            model = make_learner("auto", candidates=candidates, track_drift=True)
            scores = model.prequential_step(X, y)
            cells.append(f"{auc(y, scores):.4f} / {pauc(y, scores, 0.0, 0.1):.4f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
