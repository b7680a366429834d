"""Rules for ``auto``'s served mix replayed beside its own on the candidates' recorded scores of
``mix_replay.py`` (issue 39 item 5, bench/README.md, "M: the served mix's misses, set by set").
Not a test: prints one line per rule, counted as ``mix_replay.py`` counts them.

Usage::

    python bench/mix_replay.py --sets holdout --seeds 5 --cache C --rules ": auto"   # records
    python bench/mix_variants.py --sets holdout --seeds 5 --cache C
    python bench/mix_variants.py --sets suite --seeds 3 --cache C --per-set

:func:`serve` is auto's rule before this branch ((auto.2), (auto.3), (auto.9)-(auto.14), as
``mix_replay.py``'s "...: auto before M" replays it, which it equals: the lines ``auto before
M`` and ``auto before HO3`` print the largest difference from ``mix_replay.py``'s; auto's
(auto.15) is not among these rules, ``mix_replay.py`` replays it) with one option per rule
tried: the evaluation schedule while nothing decided, the softmax's
temperature on few positives, its pAUCs taken partly on the whole window, the weights averaged
with the previous ones, the fallback's uncertainty and the fallback checked on the whole window
too (where the compared events are the window's later half), for every best candidate or a
steady one only (auto's), and the share a boosted candidate takes at its first fit (half
or all of the mix, in place of (auto.14)'s mean share: bench/README.md, "HO: the hold-out's
mean AUC at batch HGB's").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import mix_misses  # noqa: E402
import mix_replay  # noqa: E402
import mix_scales  # noqa: E402

from core.learners import make_learner  # noqa: E402
from core.learners._mix_fallback import DROP_UNCERTAINTY, UNCERTAINTY, auc_difference_se  # noqa: E402
from core.learners._served_scale import SHRINK_EVENTS  # noqa: E402
from core.learners._tournament import MIN_WEIGHT  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

SCALE = mix_scales.shrunk(mix_scales.running, SHRINK_EVENTS)


def _mix_behind(scaled, weights, point, labels, window, best, uncertainty):
    """(auto.12)'s test on ``window``: the mix of ``weights`` no better than ``best`` on the
    pAUC and behind on the AUC by more than ``uncertainty`` standard errors."""
    mix = scaled.mix(weights, point, window)
    margin = uncertainty * auc_difference_se(labels, window[best], mix)
    return pauc(labels, mix, 0.0, 0.1) <= pauc(labels, window[best], 0.0, 0.1) and (
        auc(labels, mix) <= auc(labels, window[best]) - margin
    )


def serve(
    run: dict,
    model,
    *,
    undecided_every: int = 0,
    temperature_for=None,
    whole_pauc: float = 0.0,
    smooth: float = 0.0,
    uncertainty: float = UNCERTAINTY,
    whole_fallback: bool = False,
    joined_share: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Served prequential and held-out scores of auto's rule on one recorded run, or of a
    variant: ``undecided_every``: until an evaluation first decides, the next comes that many
    events later (not at the doubled count); ``temperature_for``: the softmax's temperature
    as a function of the compared positives; ``whole_pauc``: the softmax ranks by that share of
    each candidate's pAUC on the whole window and the rest on the compared events;
    ``smooth``: the new weights averaged with the previous ones, that share to the previous;
    ``uncertainty``: (auto.12)'s ``u``; ``whole_fallback``: where the compared events are the
    later half, the fallback needs (auto.12)'s test to hold on the whole window too (with
    ``"steady"``, only for a steady best candidate: auto's); ``joined_share``: the share a
    boosted candidate takes at its first fit, the others scaled to the rest (None: (auto.14)'s
    mean share)."""
    s, y = run["scores"], run["y"]
    k, n = s.shape
    first, every, width = model.first_evaluation, model.evaluate_every, model.window
    weights = run["steady"] / run["steady"].sum()
    served = np.empty(n)
    scaled = SCALE(s, mix_replay.evaluation_points(n, model), y)
    terms = scaled.served()
    joins = run["joined"]
    decided, done, last = False, 0, 0

    def next_due(seen: int) -> int:
        if undecided_every and not decided and seen < every:
            return min(seen + undecided_every, every) if seen else first
        early = first
        while early < every:
            if early > seen:
                return early
            early *= 2
        return (seen // every + 1) * every

    while done < n:
        due = next_due(last)
        point = min([due, n, *[j for j in joins.tolist() if done < j < due]])
        served[done:point] = weights @ terms[:, done:point]
        done = point
        for joining in np.flatnonzero(joins == point):  # (auto.14)
            if weights[joining] == 0.0:
                weights = weights.copy()
                if joined_share is None:  # (auto.14): the mean share
                    weights[joining] = 1.0 / np.count_nonzero(weights)
                    weights = weights / weights.sum()
                else:
                    weights = (1.0 - joined_share) * weights / weights.sum()
                    weights[joining] = joined_share
        if point != due:  # an admission, or the stream's end
            continue
        last = point
        earliest = max(0, point - width)
        low = max(earliest, point // 2)  # the later half (auto.3)
        labels, window = y[low:point], s[:, low:point]
        positives = int(labels.sum())
        if positives < model.min_positives or 0.1 * (labels.size - positives) < (
            model.min_negatives
        ):
            before = np.flatnonzero(y[earliest:low])
            need = model.min_positives - positives
            if need > 0:
                low = earliest + (before[-need] if before.size >= need else 0)
            labels = y[low:point]
            if 2 <= int(labels.sum()) <= labels.size - 2:
                weights = mix_replay.shed(weights, labels, s[:, low:point], DROP_UNCERTAINTY)
            continue
        if positives == labels.size:
            continue
        decided = True
        paucs = np.array([pauc(labels, row, 0.0, 0.1) for row in window])
        aucs = np.array([auc(labels, row) for row in window])
        ranked = paucs
        if whole_pauc and earliest < low:
            whole = np.array(
                [pauc(y[earliest:point], row, 0.0, 0.1) for row in s[:, earliest:point]]
            )
            ranked = (1.0 - whole_pauc) * paucs + whole_pauc * whole
        temperature = model.temperature if temperature_for is None else temperature_for(positives)
        shares = np.exp((ranked - ranked.max()) / temperature)
        shares /= shares.sum()
        shares[shares < MIN_WEIGHT] = 0.0
        shares /= shares.sum()
        if smooth:
            shares = (1.0 - smooth) * shares + smooth * weights
            shares[shares < MIN_WEIGHT] = 0.0
        weights = shares / shares.sum()
        best = int(np.lexsort((np.arange(k), -aucs, -paucs))[0])
        weights = mix_replay.shed(weights, labels, window, DROP_UNCERTAINTY)
        behind = _mix_behind(scaled, weights, point, labels, window, best, uncertainty)
        if (
            behind
            and whole_fallback
            and earliest < low
            and (whole_fallback != "steady" or run["steady"][best])
        ):
            behind = _mix_behind(scaled, weights, point, y[earliest:point], s[:, earliest:point],
                                 best, uncertainty)  # fmt: skip
        if weights[best] != 1.0 and behind:
            weights = np.eye(k)[best]
    return served, weights @ scaled.at(n, run["test_scores"])


def _sqrt_temperature(positives: int) -> float:
    return 0.1 * max(1.0, np.sqrt(30.0 / positives))


#: rule -> :func:`serve`'s options
VARIANTS = {
    "auto before M": {},
    "evaluations every 50 events until one decides": {"undecided_every": 50},
    "T x sqrt(30 / n_+) below 30 positives": {"temperature_for": _sqrt_temperature},
    "softmax of the pAUCs, a quarter on the whole window": {"whole_pauc": 0.25},
    "softmax of the pAUCs, half on the whole window": {"whole_pauc": 0.5},
    "new weights averaged with the previous, 0.3 to them": {"smooth": 0.3},
    "fallback u = 0.25": {"uncertainty": 0.25},
    "fallback u = 1": {"uncertainty": 1.0},
    "fallback on the whole window too": {"whole_fallback": True},
    "auto before HO3": {"whole_fallback": "steady"},
    "the joiner takes half": {"whole_fallback": "steady", "joined_share": 0.5},
    "the joiner takes all": {"whole_fallback": "steady", "joined_share": 1.0},
}


def main(argv=None) -> int:
    parser = mix_replay.replay_arguments(__doc__.split("\n\n")[0], "the sets missed, per rule")
    args = parser.parse_args(argv)
    names = mix_misses.set_names(args.sets)
    runs = {name: [mix_replay.record(name, seed, Path(args.cache)) for seed in range(args.seeds)]
            for name in names}  # fmt: skip
    model = make_learner("auto")
    replayed = {
        "auto before M": mix_replay.RULES[
            "and the mix shrunk by n / (n + 50) (auto.9): auto before M"
        ],
        "auto before HO3": mix_replay.RULES[
            "and a steady best confirmed on the whole window (auto.12): auto before HO3"
        ],
    }
    print("rule | misses prequential / held-out / either | beyond the noise prequential / "
          "held-out | mean served AUC preq / held-out, pAUC(0, 0.1) preq / held-out")  # fmt: skip
    for rule, options in VARIANTS.items():
        if args.rules and not any(part in rule for part in args.rules.split("|")):
            continue
        misses, beyond, means, missed, difference = np.zeros(3, int), np.zeros(2, int), [], [], 0.0
        for name, group in runs.items():
            served, held = zip(*[serve(run, model, **options) for run in group], strict=True)
            if rule in replayed:  # the same as mix_replay.py's
                start, both, half, *rest = replayed[rule]
                for run, mine in zip(group, served, strict=True):
                    theirs = mix_replay.serve(run, start(run), both, model, half, *rest)[0]
                    difference = max(difference, float(np.max(np.abs(mine - theirs))))
            verdict = mix_replay.judge(group, list(served), list(held))
            miss = verdict["miss"]
            misses += [int(miss[0]), int(miss[1]), int(miss[0] or miss[1])]
            beyond += np.array(verdict["beyond"], dtype=int)
            means.append(verdict["means"])
            if miss[0] or miss[1]:
                missed.append(name + ("P" if miss[0] else "") + ("H" if miss[1] else ""))
        figures = " ".join(f"{v:.4f}" for v in np.mean(means, axis=0))
        print(f"{rule} | {' / '.join(map(str, misses))} | {' / '.join(map(str, beyond))} | "
              f"{figures}" + (f" | mix_replay.py's within {difference:.1e}"
                              if rule in replayed else ""))  # fmt: skip
        if args.per_set:
            print("    " + " ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
