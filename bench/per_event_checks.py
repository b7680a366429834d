"""Per-event learning cost of the state checks: one-event ``prequential_step`` of ``auto``
(standard scaling, as the service builds a default dense model) and ``spam`` (no scaling) at
50 features, after 3,000 events, with and without the check of the grown state arrays after
each batch (``OnlineLearner.grown_state_in_bounds``, switched off on the instance), runs
alternated so that both see the same machine load; the best of 7 runs of 2,000 events each.
The feature bound costs no pass of its own (it is the comparison of the finiteness pass).

    python bench/per_event_checks.py
"""

import timeit

import numpy as np

from core.learners import make_learner

rng = np.random.default_rng(0)
X = rng.normal(size=(6000, 50))
y = np.where(rng.random(6000) < 0.3, 1, -1)
for name, kw in [("auto", {"scaling": "standard"}), ("spam", {})]:
    learner = make_learner(name, **kw).partial_fit(X[:3000], y[:3000])
    rows = [(X[k : k + 1], y[k : k + 1]) for k in range(3000, 6000)]

    def run(n=2000, learner=learner, rows=rows):
        for k in range(n):
            features, label = rows[k % 3000]
            learner.prequential_step(features, label)

    run(200)
    timings: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(7):
        learner.__dict__.pop("grown_state_in_bounds", None)
        timings["with"].append(timeit.timeit(run, number=1) / 2000 * 1e6)
        learner.grown_state_in_bounds = lambda: True  # type: ignore[method-assign]
        timings["without"].append(timeit.timeit(run, number=1) / 2000 * 1e6)
    learner.__dict__.pop("grown_state_in_bounds", None)
    alone = min(timeit.repeat(learner.grown_state_in_bounds, number=2000, repeat=7)) / 2000 * 1e6
    print(
        f"{name}: {min(timings['without']):.2f} us/event without the check, "
        f"{min(timings['with']):.2f} with it; the check alone {alone:.2f} us"
    )
