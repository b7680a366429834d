"""Markdown tables from a ``bench/quality.py --csv`` file: one matrix per condition and metric
(data sets x learners, the mean over seeds), and the seconds per seed of every learner.

Usage::

    python bench/report.py out.csv                       # held-out AUC and pAUC, seconds
    python bench/report.py out.csv --metrics test_auc,preq_pauc --conditions raw
"""

from __future__ import annotations

import argparse
import csv
import math
import sys

import numpy as np


def matrix(rows, condition, metric, digits=4) -> list[str]:
    sets = list(dict.fromkeys(r["set"] for r in rows))
    learners = list(dict.fromkeys(r["learner"] for r in rows))
    cells: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["condition"] == condition:
            cells.setdefault((r["set"], r["learner"]), []).append(float(r[metric]))
    lines = [
        "| set | " + " | ".join(learners) + " |",
        "|---|" + "--:|" * len(learners),
    ]
    for set_name in sets:
        values = []
        for learner in learners:
            v = cells.get((set_name, learner))
            mean = float(np.mean(v)) if v else math.nan
            values.append("—" if math.isnan(mean) else f"{mean:.{digits}f}")
        lines.append(f"| {set_name} | " + " | ".join(values) + " |")
    means = []
    for learner in learners:
        per_set = [np.mean(cells[(s, learner)]) for s in sets if (s, learner) in cells]
        per_set = [v for v in per_set if not math.isnan(v)]
        means.append(f"**{np.mean(per_set):.{digits}f}**" if per_set else "—")
    lines.append("| **mean** | " + " | ".join(means) + " |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--metrics", default="test_auc,test_pauc")
    parser.add_argument("--conditions", default="raw,standardised")
    parser.add_argument("--seconds", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    with open(args.csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for condition in args.conditions.split(","):
        for metric in args.metrics.split(","):
            print(f"\n{metric}, {condition} (mean over seeds)\n")
            print("\n".join(matrix(rows, condition, metric)))
        if args.seconds:
            print(f"\nseconds per seed, {condition}\n")
            print("\n".join(matrix(rows, condition, "seconds", digits=2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
