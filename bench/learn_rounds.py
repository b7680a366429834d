"""One learner call over a coalesced group's rounds against one call per round (issue 36).

    PYTHONPATH=. python bench/learn_rounds.py [--events 1920] [--repeats 4]

For each learner (default parameters; ``auto`` with ``scaling="standard"``, as the service
makes dense models), warmed by 1,600 events of 20 features: thread CPU per event of learning
groups of 1, 4 and 32 one-event rounds with the regret window's records (served weights and
rows, the rows copied as the service copies them), ``per round`` (one ``prequential_step``
per round: the service before) and ``at once`` (``learn_rounds``), alternated, best of
``--repeats``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from core.csr import CSRMatrix
from core.learners import make_learner
from core.learners._rounds import learn_rounds_one_by_one

LEARNERS = {"auto": {"scaling": "standard"}, "spam": {}, "ftrl_pauc": {}, "logistic": {}}
WIDTHS = (1, 4, 32)


def _batch(rng: np.random.Generator, n_events: int) -> tuple[np.ndarray, np.ndarray]:
    y = np.where(rng.random(n_events) < 0.2, 1, -1).astype(np.int64)
    return rng.normal(size=(n_events, 20)) + 0.8 * (y > 0)[:, None], y


def _copied(rows: list) -> list[np.ndarray]:
    return [part.toarray() if isinstance(part, CSRMatrix) else np.array(part) for part in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1920, help="events per measurement")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for name, params in LEARNERS.items():
        learner = make_learner(name, **params)
        learner.partial_fit(*_batch(rng, 1600))
        best: dict[tuple[int, str], float] = {}
        for repeat in range(args.repeats):
            ways = ("per round", "at once") if repeat % 2 == 0 else ("at once", "per round")
            for width in WIDTHS:
                for way in ways:
                    X, y = _batch(rng, args.events)
                    stops = list(range(1, width + 1))
                    begun = time.thread_time()
                    for start in range(0, args.events - width + 1, width):
                        rows, labels = X[start : start + width], y[start : start + width]
                        if way == "per round":
                            learned = learn_rounds_one_by_one(learner, rows, labels, stops, True)
                        else:
                            learned = learner.learn_rounds(rows, labels, stops)
                        _copied(learned.rows)
                    spent = (time.thread_time() - begun) / args.events * 1e6
                    best[width, way] = min(best.get((width, way), np.inf), spent)
        print(name, "  ".join(
            f"{width}: {best[width, 'per round']:.1f} -> {best[width, 'at once']:.1f} us/event "
            f"({best[width, 'at once'] / best[width, 'per round']:.2f})" for width in WIDTHS
        ), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
