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
deciding evaluation and the fallback as the rule says; the one named ``...: auto`` is auto's
own, and its column ``replay`` is the largest difference from auto's served scores (rounding;
a set whose drift detector fired is replayed without the detector's faster comparisons, and
shows it there).  Besides the misses each line counts those beyond the noise (the gap past
0.005 larger than :data:`NOISE_ERRORS` standard errors of the seeds' mean paired difference)
and the prequential misses that the best candidate served alone through (auto.9) has too
(bench/README.md, "E: the served mix against its best candidate, beyond the noise").
``--rules "served scale"`` replays auto's weights on the other served scales of
``mix_scales.py`` (bench/README.md, "Q2: the served scale of auto's mix").
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
import mix_joined  # noqa: E402
import mix_misses  # noqa: E402
import mix_scales  # noqa: E402

import core.learners._auto_learning as auto_module  # noqa: E402
from core.learners import make_learner  # noqa: E402
from core.learners._auto_drift import DriftTracking  # noqa: E402
from core.learners._mix_fallback import DROP_UNCERTAINTY, UNCERTAINTY, auc_difference_se  # noqa: E402
from core.learners._served_scale import SHRINK_EVENTS  # noqa: E402
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
        admit, joined = auto_module.admit_fitted, {}

        watched = DriftTracking.serve_record_and_watch

        def recording(own, scores, labels, temperature, served):
            segments.append(np.array(scores))
            original(own, scores, labels, temperature, served)

        def recording_watched(drift, own, scores, *args, **kwargs):  # the same, with drift on
            segments.append(np.array(scores))
            return watched(drift, own, scores, *args, **kwargs)

        def admitting(own, candidates, awaiting, temperature):
            before = own["served_weights"] > 0.0
            admit(own, candidates, awaiting, temperature)
            for k in np.flatnonzero((own["served_weights"] > 0.0) & ~before):
                joined[int(k)] = int(own["n_seen"][0])  # the install's event count (auto.14)

        auto_module.serve_and_record, auto_module.admit_fitted = recording, admitting
        DriftTracking.serve_record_and_watch = recording_watched  # type: ignore[method-assign]
        try:
            served, held = mix_misses.one_pass(model, X[train], y[train], X[test])
        finally:
            auto_module.serve_and_record, auto_module.admit_fitted = original, admit
            DriftTracking.serve_record_and_watch = watched  # type: ignore[method-assign]
        unscaled = model._coerce(X[test])[0]
        rows = scale_batch(model.scaling, model.state_, unscaled, learn=False)
        # a candidate that scales its own rows (the boosted ones) scores them as posted
        test_scores = [c._decision(unscaled if c.scales_itself else rows)
                       for c in model._candidates]  # fmt: skip
        np.savez(path, scores=np.hstack(segments), y=y[train], y_test=y[test], served=served,
                 test_scores=np.vstack(test_scores), held=held,
                 steady=initial_weights(model._candidates) > 0,
                 joined=np.array([joined.get(k, 0) for k in range(len(test_scores))]))  # fmt: skip
    return dict(np.load(path))


def evaluation_points(n: int, model) -> list[int]:
    points, early = [], model.first_evaluation
    while early < model.evaluate_every:
        points.append(early)
        early *= 2
    return [p for p in points + list(range(model.evaluate_every, n + 1, model.evaluate_every))
            if p <= n]  # fmt: skip


def serve(
    run: dict,
    start: np.ndarray,
    both: bool,
    model,
    half: bool = False,
    uncertainty: float = 0.0,
    drop: float = 0.0,
    extend: bool = False,
    undecided: float = 0.0,
    admit: bool = False,
    strongest: bool = False,
    scale=mix_scales.running,
    whole: bool = False,
    joined: bool = False,
    half_window: bool = False,
    after_undecided=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Served prequential scores and held-out scores of (auto.9)-(auto.10) and the fallback,
    from ``start`` weights; the fallback when the best candidate is at least as good as the mix
    on the window's pAUC and AUC (``both``: auto's) or ahead on (pAUC, AUC) in that order;
    ``half``: the window at most the later half of the events seen (auto's, (auto.3));
    ``uncertainty``: with ``both``, the best must lead the mix's AUC by that many standard
    errors of the difference (auto's :data:`UNCERTAINTY`, (auto.12)); ``drop``: after the
    softmax, candidates behind the best's windowed AUC by more than that many standard errors of
    their difference lose their share (auto's :data:`DROP_UNCERTAINTY`, (auto.13));
    ``extend``: a deciding window extended back to the guard's positives; ``undecided``: an
    evaluation that fails the guard sheds, at that many standard errors, the candidates behind
    the best with a share, on the later half extended back to the guard's positives (auto's,
    (auto.13)); ``admit``: a boosted candidate without a share gets the mean share of those
    with one after the event its first fit is installed (auto's, (auto.14); the event counts
    at which auto's own run took it in, recorded as ``joined``, 0: none); ``strongest``: the
    fallback goes to the candidate whose windowed AUC leads the mix's by the most standard
    errors of their difference, if more than ``uncertainty`` and not behind its pAUC (a rule
    replayed, not auto's); ``scale``: how each candidate's score is put on the mix's scale
    (a builder of :mod:`mix_scales`; auto's is the running standardisation of (auto.9));
    ``whole``: with ``both``, where the window is its later half, a steady best (``steady``,
    as (auto.11)) replaces the mix only if the test holds on the whole window too (auto's);
    ``joined``: with ``admit``, (auto.15) as :mod:`mix_joined` replays it (auto's);
    ``half_window``: once the window is full, a deciding evaluation compares its later half
    when that passes the guard (auto's, (auto.3)); ``after_undecided``: a rule replayed after
    an undecided evaluation's shed, ``(weights, labels, window, scaled, point)`` -> weights."""
    s, y = run["scores"], run["y"]
    k, n = s.shape
    weights, served, done = start, np.empty(n), 0
    points = evaluation_points(n, model)
    scaled = scale(s, points, y)
    terms = scaled.served()
    joins = run["joined"] if admit and "joined" in run else np.zeros(k, dtype=np.int64)
    for point in sorted(set(points) | {n} | set(joins[joins > 0].tolist())):
        part = slice(done, point)
        served[part] = weights @ terms[:, part]
        done = point
        for joining in np.flatnonzero(joins == point):
            if weights[joining] == 0.0:
                weights = weights.copy()
                weights[joining] = 1.0 / np.count_nonzero(weights)
                weights = weights / weights.sum()
        low = max(0, point - model.window, point // 2 if half else 0)
        if half_window and point > model.window:
            later = point - model.window // 2
            positives = int(y[later:point].sum())
            if positives >= model.min_positives and (
                0.1 * (point - later - positives) >= model.min_negatives
            ):
                low = max(low, later)
        if extend and int(y[low:point].sum()) < model.min_positives:
            # the later half extended back until it holds the guard's positives
            earliest = max(0, point - model.window)
            before_positives = np.flatnonzero(y[earliest:low])
            need = model.min_positives - int(y[low:point].sum())
            low = earliest + (before_positives[-need] if before_positives.size >= need else 0)
        labels, window = y[low:point], s[:, low:point]
        positives = int(labels.sum())
        if point not in points:
            continue
        if undecided and (
            positives < model.min_positives or 0.1 * (labels.size - positives) < model.min_negatives
        ):
            earliest = max(0, point - model.window)
            before_positives = np.flatnonzero(y[earliest:low])
            need = model.min_positives - positives
            if need > 0:
                low = earliest + (before_positives[-need] if before_positives.size >= need else 0)
            labels, window = y[low:point], s[:, low:point]
            positives = int(labels.sum())
            if 2 <= positives <= labels.size - 2 and joined:
                firsts, metrics = mix_joined.columns(joins, low), mix_joined.metrics(labels, window)
                weights = mix_joined.drop(weights, *metrics, labels, window, firsts, undecided, 1)
            elif 2 <= positives <= labels.size - 2:
                weights = shed(weights, labels, window, undecided)
            if after_undecided is not None and 2 <= positives <= labels.size - 2:
                weights = after_undecided(weights, labels, window, scaled, point)
            continue
        if positives < model.min_positives or positives == labels.size:
            continue
        if 0.1 * (labels.size - positives) < model.min_negatives:
            continue
        paucs = np.array([pauc(labels, row, 0.0, 0.1) for row in window])
        aucs = np.array([auc(labels, row) for row in window])
        firsts = mix_joined.columns(joins, low) if joined and low > point - model.window else None
        mix_joined.judge(paucs, aucs, labels, window, firsts)
        shares = np.exp((paucs - paucs.max()) / model.temperature)
        shares /= shares.sum()
        shares[shares < MIN_WEIGHT] = 0.0
        weights = shares / shares.sum()
        best = int(np.lexsort((np.arange(k), -aucs, -paucs))[0])
        if drop and joined:
            weights = mix_joined.drop(weights, paucs, aucs, labels, window, firsts, drop, False)
        elif drop:
            for other in np.flatnonzero(weights):
                gap = aucs[best] - aucs[other]
                if gap > 0 and gap > drop * auc_difference_se(labels, window[best], window[other]):
                    weights[other] = 0.0
            weights = weights / weights.sum()
        mix = scaled.mix(weights, point, window)
        mixed = (pauc(labels, mix, 0.0, 0.1), auc(labels, mix))
        if strongest:
            leads = np.full(k, -np.inf)
            for c in range(k):
                se = auc_difference_se(labels, window[c], mix)
                if paucs[c] >= mixed[0] and 0.0 < se < np.inf:
                    leads[c] = (aucs[c] - mixed[1]) / se
            best = int(np.argmax(leads))
            behind = bool(leads[best] > uncertainty)
        elif both:
            margin = 0.0
            if uncertainty:
                margin = uncertainty * auc_difference_se(labels, window[best], mix)
            behind = mixed[0] <= paucs[best] and mixed[1] <= aucs[best] - margin
            earliest = max(0, point - model.window)
            if whole and behind and low > earliest and run["steady"][best]:
                every, all_scores = y[earliest:point], s[:, earliest:point]
                mix_all = scaled.mix(weights, point, all_scores)
                margin = uncertainty * auc_difference_se(every, all_scores[best], mix_all)
                behind = pauc(every, mix_all, 0.0, 0.1) <= pauc(every, all_scores[best], 0.0, 0.1)
                behind = behind and auc(every, mix_all) <= auc(every, all_scores[best]) - margin
        else:
            behind = mixed <= (paucs[best], aucs[best])
        if weights[best] != 1.0 and behind:
            weights = np.eye(k)[best]
    return served, weights @ scaled.at(n, run["test_scores"])


def _equal(run):
    return np.full(run["scores"].shape[0], 1.0 / run["scores"].shape[0])


def _steady(run):
    return run["steady"] / run["steady"].sum()


def _first_three(run):
    return np.eye(run["scores"].shape[0])[:3].sum(0) / 3


#: rule -> (the weights before the first deciding evaluation, the fallback needs both counts,
#: the window at most the later half of the events seen[, the fallback's uncertainty, ``drop``,
#: ``extend``, ``undecided``: :func:`serve`])
RULES = {
    "equal start, (pAUC, AUC) fallback: auto before 2026-11-29": (_equal, False, False),
    "first three, (pAUC, AUC) fallback": (_first_three, False, False),
    "equal start, fallback on both": (_equal, True, False),
    "steady start (auto.11), (pAUC, AUC) fallback: auto at 81fc670": (_steady, False, False),
    "steady start, fallback on both": (_steady, True, False),
    "steady start, (pAUC, AUC) fallback, later half": (_steady, False, True),
    "steady start, fallback on both, later half (auto.3)": (_steady, True, True),
    "later half, fallback on both beyond the noise (auto.12): auto before h-P": (
        _steady, True, True, UNCERTAINTY,
    ),
    "and candidates 2 SE behind the best dropped": (_steady, True, True, UNCERTAINTY, 2.0),
    "and candidates 3 SE behind the best dropped": (_steady, True, True, UNCERTAINTY, 3.0),
    "and the window extended to the guard's positives, 3 SE": (
        _steady, True, True, UNCERTAINTY, 3.0, True,
    ),
    "and 2 SE behind dropped, undecided evaluations too": (
        _steady, True, True, UNCERTAINTY, 2.0, False, 2.0,
    ),
    "and 3 SE behind dropped, undecided evaluations too (auto.13): auto before auto.14": (
        _steady,
        True,
        True,
        UNCERTAINTY,
        DROP_UNCERTAINTY,
        False,
        DROP_UNCERTAINTY,
    ),
    "and a boosted candidate joins at its first fit (auto.14): auto before Q2": (
        _steady,
        True,
        True,
        UNCERTAINTY,
        DROP_UNCERTAINTY,
        False,
        DROP_UNCERTAINTY,
        True,
    ),
    "and the fallback to the candidate leading the mix by the most errors, beyond 1": (
        _steady,
        True,
        True,
        1.0,
        DROP_UNCERTAINTY,
        False,
        DROP_UNCERTAINTY,
        True,
        True,
    ),
}  # fmt: skip

#: auto's weights ((auto.10)-(auto.14)) on each served scale of :mod:`mix_scales` but (auto.9)'s
AUTO_RULE = (_steady, True, True, UNCERTAINTY, DROP_UNCERTAINTY, False, DROP_UNCERTAINTY, True)
RULES.update(
    {f"auto's weights, served scale: {name}": (*AUTO_RULE, False, builder)
     for name, builder in list(mix_scales.SCALES.items())[1:]}
)  # fmt: skip
RULES["and the mix shrunk by n / (n + 50) (auto.9): auto before M"] = (
    *AUTO_RULE,
    False,
    mix_scales.shrunk(mix_scales.running, SHRINK_EVENTS),
)
RULES["and a steady best confirmed on the whole window (auto.12): auto before HO3"] = (
    *AUTO_RULE,
    False,
    mix_scales.shrunk(mix_scales.running, SHRINK_EVENTS),
    True,
)
RULES["and a joined candidate judged on its events since (auto.15): auto before MX"] = (
    *AUTO_RULE, False, mix_scales.shrunk(mix_scales.running, SHRINK_EVENTS), True, True,
)  # fmt: skip
RULES["and a full window's later half compared when it passes the guard (auto.3): auto"] = (
    *AUTO_RULE, False, mix_scales.shrunk(mix_scales.running, SHRINK_EVENTS), True, True, True,
)  # fmt: skip


#: a miss counts as beyond the noise when its gap exceeds the margin by this many standard
#: errors of the seeds' mean paired difference (DeLong's, each seed's events)
NOISE_ERRORS = 2.0


def through_standardisation(scores: np.ndarray) -> np.ndarray:
    """One candidate's prequential scores served alone through (auto.9): each minus the mean
    of those before it, over their population spread (0 while fewer than two)."""
    n = scores.shape[0]
    sums = np.concatenate([[0.0], np.cumsum(scores)])[:n]
    squares = np.concatenate([[0.0], np.cumsum(scores * scores)])[:n]
    count = np.maximum(np.arange(n), 1)
    mean = sums / count
    spread = np.sqrt(np.maximum(squares / count - mean * mean, 0.0))
    spread[:2] = 0.0
    return np.divide(scores - mean, spread, out=np.zeros(n), where=spread > 0)


def judge(group: list[dict], served: list[np.ndarray], held: list[np.ndarray]) -> dict:
    """One set's served scores (per seed) against its candidates': the mean served AUC and
    pAUC(0, 0.1) (prequential, held out), the best candidate per measure (highest mean AUC),
    the misses (more than ``MARGIN`` below it), those beyond the noise (by more than
    :data:`NOISE_ERRORS` standard errors of the mean paired difference besides) and the
    prequential miss the best candidate served alone through (auto.9) has too (the served
    scale's, which no choice of weights removes)."""
    columns = (("y", "scores", served), ("y_test", "test_scores", held))
    metrics = [[auc(run["y"], preq), auc(run["y_test"], test), pauc(run["y"], preq, 0.0, 0.1),
                pauc(run["y_test"], test, 0.0, 0.1)]
               for run, preq, test in zip(group, served, held, strict=True)]  # fmt: skip
    means = np.mean(metrics, axis=0)
    best, miss, beyond = [], [], []
    for column, (labels, scores, mine) in enumerate(columns):
        candidates = np.mean([[auc(run[labels], row) for row in run[scores]] for run in group], 0)
        k = int(np.argmax(candidates))
        errors = [auc_difference_se(run[labels], run[scores][k], ours)
                  for run, ours in zip(group, mine, strict=True)]  # fmt: skip
        se = float(np.sqrt(np.sum(np.square(errors)))) / len(group)
        gap = candidates[k] - means[column]
        best.append((k, candidates[k]))
        miss.append(gap > mix_misses.MARGIN)
        beyond.append(gap - mix_misses.MARGIN > NOISE_ERRORS * se)
    alone = np.mean([auc(run["y"], through_standardisation(run["scores"][best[0][0]]))
                     for run in group])  # fmt: skip
    scale = miss[0] and alone < best[0][1] - mix_misses.MARGIN
    return {"means": means, "best": best, "miss": miss, "beyond": beyond, "scale": scale,
            "alone": alone}  # fmt: skip


def scales_alone(runs: dict[str, list[dict]]) -> int:
    """Per served scale of :mod:`mix_scales`: the sets where the best candidate (the highest
    mean prequential AUC of its own scores) served alone through that scale from the first
    event loses more than ``MARGIN`` of pooled prequential AUC against its own scores, and the
    mean and largest loss over the sets (no weights, no evaluations: the scale's own cost)."""
    best = {}
    for name, group in runs.items():
        own = np.mean([[auc(run["y"], row) for row in run["scores"]] for run in group], axis=0)
        best[name] = (int(np.argmax(own)), float(np.max(own)))
    print("served scale | sets losing more than 0.005 | mean loss | largest loss")
    for scale, builder in mix_scales.SCALES.items():
        losses = []
        for name, group in runs.items():
            k, own = best[name]
            through = [auc(run["y"], builder(run["scores"], evaluation_points(
                run["y"].shape[0], make_learner("auto")), run["y"]).served()[k])
                for run in group]  # fmt: skip
            losses.append(own - float(np.mean(through)))
        print(f"{scale} | {int(np.sum(np.array(losses) > mix_misses.MARGIN))} of {len(runs)} | "
              f"{np.mean(losses):.4f} | {np.max(losses):.4f}")  # fmt: skip
    return 0


def shed(weights, labels, window, errors):
    """(auto.13) on ``window``: the candidates with a share behind the best of them by more
    than ``errors`` standard errors of the AUC difference lose it."""
    aucs = np.array([auc(labels, row) for row in window])
    paucs = np.array([pauc(labels, row, 0.0, 0.1) for row in window])
    held = np.flatnonzero(weights)
    best = held[np.lexsort((held, -aucs[held], -paucs[held]))[0]]
    weights = weights.copy()
    for other in held:
        gap = aucs[best] - aucs[other]
        if gap > 0 and gap > errors * auc_difference_se(labels, window[best], window[other]):
            weights[other] = 0.0
    return weights / weights.sum()


def replay_arguments(description: str, per_set: str) -> argparse.ArgumentParser:
    """The options of a replay of recorded runs (this script's, and bench/mix_variants.py's)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sets", default="suite", help="suite, holdout or comma-separated names")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cache", default=os.path.join(os.getcwd(), "mix-replay-cache"))
    parser.add_argument(
        "--rules", default="", help="only the rules naming one of these, |-separated"
    )
    parser.add_argument("--per-set", action="store_true", help=per_set)
    return parser


def main(argv=None) -> int:
    parser = replay_arguments(__doc__.split("\n\n")[0], "a line per set and rule")
    parser.add_argument(
        "--scales-alone",
        action="store_true",
        help="instead of the rules: the best candidate served alone through each served scale",
    )
    args = parser.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    names = mix_misses.set_names(args.sets)
    runs = {name: [record(name, seed, cache) for seed in range(args.seeds)] for name in names}
    if args.scales_alone:
        return scales_alone(runs)
    model = make_learner("auto")
    print("rule | misses prequential / held-out / either | beyond the noise prequential / "
          "held-out | prequential misses the best alone through (auto.9) has | mean served "
          "AUC preq / held-out, pAUC(0, 0.1) preq / held-out | replay")  # fmt: skip
    for rule, (start, both, half, *uncertainty) in RULES.items():
        if args.rules and not any(part in rule for part in args.rules.split("|")):
            continue
        misses, beyond, scale, means, replay = np.zeros(3, dtype=int), np.zeros(2, int), 0, [], 0.0
        for name, group in runs.items():
            served, held = [], []
            for run in group:
                preq, test = serve(run, start(run), both, model, half, *uncertainty)
                served.append(preq)
                held.append(test)
                if rule.endswith(": auto"):
                    replay = max(replay, float(np.max(np.abs(preq - run["served"]))))
                    if "held" in run:  # recorded since h-P
                        replay = max(replay, float(np.max(np.abs(test - run["held"]))))
            verdict = judge(group, served, held)
            miss = verdict["miss"]
            misses += [int(miss[0]), int(miss[1]), int(miss[0] or miss[1])]
            beyond += np.array(verdict["beyond"], dtype=int)
            scale += int(verdict["scale"])
            means.append(verdict["means"])
            if args.per_set:
                (k, preq_best), (j, held_best) = verdict["best"]
                flags = "".join(flag for flag, on in zip(
                    ("P", "H", "p", "h", "s"), [*miss, *verdict["beyond"], verdict["scale"]],
                    strict=True) if on)  # fmt: skip
                print(f"  {name}: served {verdict['means'][0]:.4f} / {verdict['means'][1]:.4f}, "
                      f"best {k}: {preq_best:.4f}, {j}: {held_best:.4f}, {k} alone through "
                      f"(auto.9) {verdict['alone']:.4f} {flags or '-'}")  # fmt: skip
        figures = " / ".join(f"{v:.4f}" for v in np.mean(means, axis=0))
        print(f"{rule} | {' / '.join(map(str, misses))} of {len(runs)} | "
              f"{' / '.join(map(str, beyond))} | {scale} | {figures} | "
              + (f"{replay:.1e}" if rule.endswith(": auto") else "-"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
