"""``auto``'s serving rules replayed on its candidates' recorded prequential scores, counted as
``mix_misses.py`` counts them: the sets where the served prequential or held-out AUC falls more
than 0.005 below the best candidate's.  Not a test: prints one line per rule.

Usage (``bench/README.md``, "The served mix against its best candidate")::

    python bench/mix_replay.py --sets holdout --seeds 3
    python bench/mix_replay.py --sets suite --seeds 3 --cache /tmp/mix-replay

``mix_misses.py``'s protocol (its split, raw features, ``auto`` with the defaults of a dense
HTTP model, batches of 256).  ``auto`` learns each (set, seed) once; its candidates' scores are
taken from inside it (so they are what it mixed, a drift restart included) and cached as
``.npz``.  Each rule then serves them again from the equations of docs/algorithms/auto.md,
(auto.2), (auto.3), (auto.9)-(auto.11) and the fallback, with the weights before the first
deciding evaluation and the fallback as the rule says; the last is auto's own, and its column
``replay`` is the largest difference from auto's served scores (rounding; a set whose drift
detector fired is replayed without the detector's faster comparisons, and shows it there).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import datasets  # noqa: E402
import mix_misses  # noqa: E402

import core.learners.auto as auto_module  # noqa: E402
from core.learners import make_learner  # noqa: E402
from core.learners._mix_fallback import UNCERTAINTY, auc_difference_se  # noqa: E402
from core.learners._tournament import MIN_WEIGHT, initial_weights  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402
from core.preprocessing import scale_batch  # noqa: E402


def record(name: str, seed: int, cache: Path) -> dict:
    path = cache / f"{name}_{seed}.npz"
    if not path.exists():
        warnings.filterwarnings("ignore")
        X, y, _ = datasets.load(name, 50_000)
        train, test = mix_misses.split(y, seed)
        model = make_learner("auto", scaling="standard", random_state=seed)
        segments, original = [], auto_module.serve_and_record

        def recording(own, scores, labels, temperature, served):
            segments.append(np.array(scores))
            original(own, scores, labels, temperature, served)

        auto_module.serve_and_record = recording
        try:
            served, held = mix_misses.one_pass(model, X[train], y[train], X[test])
        finally:
            auto_module.serve_and_record = original
        rows = scale_batch(model.scaling, model.state_, model._coerce(X[test])[0], learn=False)
        np.savez(path, scores=np.hstack(segments), y=y[train], y_test=y[test], served=served,
                 test_scores=np.vstack([c._decision(rows) for c in model._candidates]),
                 steady=initial_weights(model._candidates) > 0)  # fmt: skip
    return dict(np.load(path))


def evaluation_points(n: int, model) -> list[int]:
    points, early = [], model.first_evaluation
    while early < model.evaluate_every:
        points.append(early)
        early *= 2
    return [p for p in points + list(range(model.evaluate_every, n + 1, model.evaluate_every))
            if p <= n]  # fmt: skip


def serve(
    run: dict, start: np.ndarray, both: bool, model, half: bool = False, uncertainty: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Served prequential scores and held-out scores of (auto.9)-(auto.10) and the fallback,
    from ``start`` weights; the fallback when the best candidate is at least as good as the mix
    on the window's pAUC and AUC (``both``: auto's) or ahead on (pAUC, AUC) in that order;
    ``half``: the window at most the later half of the events seen (auto's, (auto.3));
    ``uncertainty``: with ``both``, the best must lead the mix's AUC by that many standard
    errors of the difference (auto's :data:`UNCERTAINTY`, (auto.12))."""
    s, y = run["scores"], run["y"]
    k, n = s.shape
    before = np.concatenate([np.zeros((k, 1)), np.cumsum(s, axis=1)], axis=1)
    squares = np.concatenate([np.zeros((k, 1)), np.cumsum(s * s, axis=1)], axis=1)
    count = np.maximum(np.arange(n + 1), 1)
    mean = before / count
    spread = np.sqrt(np.maximum(squares / count - mean * mean, 0.0))
    spread[:, :2] = 0.0
    weights, served, done = start, np.empty(n), 0
    points = evaluation_points(n, model)
    for point in points + ([] if n in points else [n]):
        part = slice(done, point)
        sd = spread[:, part]
        z = np.divide(s[:, part] - mean[:, part], sd, out=np.zeros_like(sd), where=sd > 0)
        served[part] = weights @ z
        done = point
        low = max(0, point - model.window, point // 2 if half else 0)
        labels, window = y[low:point], s[:, low:point]
        positives = int(labels.sum())
        if point not in points or positives < model.min_positives or positives == labels.size:
            continue
        if 0.1 * (labels.size - positives) < model.min_negatives:
            continue
        paucs = np.array([pauc(labels, row, 0.0, 0.1) for row in window])
        aucs = np.array([auc(labels, row) for row in window])
        shares = np.exp((paucs - paucs.max()) / model.temperature)
        shares /= shares.sum()
        shares[shares < MIN_WEIGHT] = 0.0
        weights = shares / shares.sum()
        best = int(np.lexsort((np.arange(k), -aucs, -paucs))[0])
        factors = np.divide(weights, spread[:, point], out=np.zeros(k), where=spread[:, point] > 0)
        mix = factors @ window
        mixed = (pauc(labels, mix, 0.0, 0.1), auc(labels, mix))
        if both:
            margin = 0.0
            if uncertainty:
                margin = uncertainty * auc_difference_se(labels, window[best], mix)
            behind = mixed[0] <= paucs[best] and mixed[1] <= aucs[best] - margin
        else:
            behind = mixed <= (paucs[best], aucs[best])
        if weights[best] != 1.0 and behind:
            weights = np.eye(k)[best]
    final_sd = s.std(axis=1)[:, None]
    terms = np.divide(run["test_scores"] - s.mean(axis=1)[:, None], final_sd,
                      out=np.zeros_like(run["test_scores"]), where=final_sd > 0)  # fmt: skip
    return served, weights @ terms


def _equal(run):
    return np.full(run["scores"].shape[0], 1.0 / run["scores"].shape[0])


def _steady(run):
    return run["steady"] / run["steady"].sum()


def _first_three(run):
    return np.eye(run["scores"].shape[0])[:3].sum(0) / 3


#: rule -> (the weights before the first deciding evaluation, the fallback needs both counts,
#: the window at most the later half of the events seen[, the fallback's uncertainty])
RULES = {
    "equal start, (pAUC, AUC) fallback: auto before 2026-11-29": (_equal, False, False),
    "first three, (pAUC, AUC) fallback": (_first_three, False, False),
    "equal start, fallback on both": (_equal, True, False),
    "steady start (auto.11), (pAUC, AUC) fallback: auto at 81fc670": (
        _steady,
        False,
        False,
    ),
    "steady start, fallback on both": (_steady, True, False),
    "steady start, (pAUC, AUC) fallback, later half": (_steady, False, True),
    "steady start, fallback on both, later half (auto.3)": (_steady, True, True),
    "later half, fallback on both beyond the noise (auto.12): auto": (
        _steady,
        True,
        True,
        UNCERTAINTY,
    ),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="suite", help="suite, holdout or comma-separated names")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cache", default=os.path.join(os.getcwd(), "mix-replay-cache"))
    args = parser.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    names = mix_misses.set_names(args.sets)
    runs = {name: [record(name, seed, cache) for seed in range(args.seeds)] for name in names}
    model = make_learner("auto")
    print("rule | misses prequential / held-out / either | mean served AUC preq / held-out, "
          "pAUC(0, 0.1) preq / held-out | replay")  # fmt: skip
    for rule, (start, both, half, *uncertainty) in RULES.items():
        misses, means, replay = np.zeros(3, dtype=int), [], 0.0
        for group in runs.values():
            served_metrics, candidates = [], []
            for run in group:
                served, held = serve(run, start(run), both, model, half, *uncertainty)
                if rule.endswith(": auto"):
                    replay = max(replay, float(np.max(np.abs(served - run["served"]))))
                y, y_test = run["y"], run["y_test"]
                served_metrics.append(
                    [auc(y, served), auc(y_test, held)]
                    + [pauc(y, served, 0.0, 0.1), pauc(y_test, held, 0.0, 0.1)]
                )
                pairs = zip(run["scores"], run["test_scores"], strict=True)
                candidates.append([[auc(y, row), auc(y_test, test)] for row, test in pairs])
            served_mean = np.mean(served_metrics, axis=0)
            miss = served_mean[:2] < np.mean(candidates, axis=0).max(axis=0) - mix_misses.MARGIN
            misses += [int(miss[0]), int(miss[1]), int(miss.any())]
            means.append(served_mean)
        figures = " / ".join(f"{v:.4f}" for v in np.mean(means, axis=0))
        print(f"{rule} | {' / '.join(map(str, misses))} of {len(runs)} | {figures} | "
              + (f"{replay:.1e}" if rule.endswith(": auto") else "-"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
