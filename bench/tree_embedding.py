"""Scoring throughput of the tree-path embedding (docs/algorithms/poise.md (poise.9)) and of
the boosted-leaves embedding (docs/algorithms/boosted_embedded.md (boosted_embedded.2)).

Events per second, in process, at depth 8 and 50 features (target: >= 1M events/s), of
``tree_embedded``'s ``decision_function`` (the embedding kernel and the inner learner's CSR
scores, in chunks of SCORE_CHUNK events) and of the embedding kernel alone on such chunks;
plain ``poise`` scoring of the raw 50 features is the reference; then ``boosted_embedded``'s
kernel, scores and learning (its default ensemble, fitted once on the training events).

    python bench/tree_embedding.py [--events 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import best_rate  # noqa: E402

from core.learners import make_learner  # noqa: E402
from core.learners.tree_embedded import SCORE_CHUNK  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--features", type=int, default=50)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    d = args.features
    X_train = rng.normal(size=(20_000, d))
    y_train = np.where(
        (X_train[:, 0] ** 2 + X_train[:, 1] ** 2 < 0.6) | (X_train[:, 2] > 1.8), 1, -1
    )
    X = rng.normal(size=(args.events, d))
    chunks = [X[start : start + SCORE_CHUNK] for start in range(0, len(X), SCORE_CHUNK)]
    print(f"{args.events} events, {d} features, depth {args.depth}, best of {args.repeats}")
    print(f"{'what':<44} {'events/s':>14}")
    plain = make_learner("poise").fit(X_train, y_train)
    rate = best_rate(lambda: plain.decision_function(X), args.events, args.repeats)
    print(f"{'poise, raw features':<44} {rate:>14,.0f}")
    for embedding in ("full", "frugal"):
        model = make_learner("tree_embedded", max_depth=args.depth, embedding=embedding,
                             min_samples_leaf=5, n_fit_events=20_000)  # fmt: skip
        model.fit_history(X_train, y_train)
        rate = best_rate(lambda m=model: [m.transform(c) for c in chunks], args.events,
                         args.repeats)  # fmt: skip
        print(f"{f'embedding kernel only ({embedding})':<44} {rate:>14,.0f}")
        rate = best_rate(lambda m=model: m.decision_function(X), args.events, args.repeats)
        print(f"{f'tree_embedded(poise) scores ({embedding})':<44} {rate:>14,.0f}")
    # boosted_embedded: the ensemble's leaves (50 trees of 15 leaves, its defaults), fitted
    # once on the 20,000 events, then learning as it scores (prequential_step)
    boosted = make_learner("boosted_embedded", buffer_size=20_000, first_fit=20_000,
                           refit_every=None).partial_fit(X_train, y_train)  # fmt: skip
    rate = best_rate(lambda: [boosted.transform(c) for c in chunks], args.events, args.repeats)
    print(f"{'boosted embedding kernel only':<44} {rate:>14,.0f}")
    rate = best_rate(lambda: boosted.decision_function(X), args.events, args.repeats)
    print(f"{'boosted_embedded(logistic) scores':<44} {rate:>14,.0f}")
    y = np.where(rng.random(args.events) < 0.1, 1, -1)
    learns = X[: args.events // 10], y[: args.events // 10]
    rate = best_rate(lambda: boosted.prequential_step(*learns), len(learns[1]), 1)
    print(f"{'boosted_embedded(logistic) learns':<44} {rate:>14,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
