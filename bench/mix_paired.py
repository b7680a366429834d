"""Paired tests of the candidates on an undecided evaluation's events, replayed beside auto's
rule on the recorded runs of ``mix_replay.py`` (issue 39 item 5; bench/README.md, "MX2: paired
tests on a short stream's undecided window").  Not a test: prints one line per rule, counted
as ``mix_replay.py`` counts them, and with ``--joined-z`` a line per recorded run.

Usage::

    python bench/mix_replay.py --sets holdout --seeds 3 --cache C --rules ": auto"   # records
    python bench/mix_paired.py --sets holdout --seeds 3 --cache C
    python bench/mix_paired.py --sets holdout --seeds 3 --cache C --joined-z wine_w_3_vs_7

Every rule is auto's (``mix_replay.py``'s "...: auto") with one change on the evaluations
that fail the guard after (auto.3) (their events: the later half extended back to the guard's
positives):

- the fallback (auto.12) there too: the best candidate (pAUC, then AUC) replaces the mix when
  the mix is no better on the pAUC and behind on the AUC by more than z standard errors of
  the paired difference (DeLong's covariance of the two correlated AUCs), at the one-sided
  error rates 5 %, 1 % and auto's (auto.13) 3 SE, with or without the leave-one-positive-out
  check of (auto.13)'s undecided shed;
- (auto.13)'s undecided shed at those error rates in place of its 3 SE (the constant is set
  for the replay in the library's module too: its leave-one-positive-out check reads it, and
  so does (auto.15)'s pair test since a join, deciding evaluations' included);
- with ``--permutation`` (minutes where the others take seconds): after (auto.13)'s undecided
  shed, a candidate with a share leaves it when a paired permutation test puts it behind the
  best of them (pAUC, then AUC) at the one-sided error rate of 3 SE (0.135 %) or 1 %: each
  candidate's window scores turned into ranks, each event's two ranks swapped with
  probability 1/2 over :data:`DRAWS` draws (an exact-size test on few positives, where
  DeLong's error rests on a handful of placements); every pair on all the events compared,
  (auto.15)'s columns since a join not applied.

``--joined-z``: per recorded run of the named sets, each candidate's AUC on the events since
the boosted candidate joined the mix (auto.14), and the boosted candidate's paired z against
each other one there (its AUC lead over DeLong's error of the difference).
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np
from scipy.stats import rankdata

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import mix_joined  # noqa: E402
import mix_replay  # noqa: E402

import core.learners._mix_fallback as mix_fallback  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402

AUTO = "and a full window's later half compared when it passes the guard (auto.3): auto"

#: the one-sided error rates replayed, as standard errors, and auto's (auto.13) own
ERRORS = {
    "5 %": NormalDist().inv_cdf(0.95),
    "1 %": NormalDist().inv_cdf(0.99),
    "auto's 3 SE": mix_fallback.DROP_UNCERTAINTY,
}


#: the permutation test's draws: a p-value of 0.135 % is then resolved to 5 draws' worth
DRAWS = 4000


def permutation_p(labels: np.ndarray, best: np.ndarray, other: np.ndarray, rng) -> float:
    """The one-sided p-value of ``AUC(best) - AUC(other)`` under the swap of each event's
    two ranks (the two rankings exchangeable)."""
    positive = labels > 0
    positives, negatives = int(np.count_nonzero(positive)), int(np.count_nonzero(~positive))

    def auc_rows(rows: np.ndarray) -> np.ndarray:
        ranks = rankdata(rows, axis=1)
        return (ranks[:, positive].sum(axis=1) - positives * (positives + 1) / 2) / (
            positives * negatives
        )

    ranks = np.vstack([rankdata(best), rankdata(other)])
    observed = auc_rows(ranks)
    beyond = 0
    for _ in range(DRAWS // 500):  # 500 draws at a time: a window of 5,000 events is 20 MB
        swapped = rng.random((500, labels.size)) < 0.5
        gaps = auc_rows(np.where(swapped, ranks[1], ranks[0])) - auc_rows(
            np.where(swapped, ranks[0], ranks[1])
        )
        beyond += int(np.count_nonzero(gaps >= observed[0] - observed[1] - 1e-12))
    return (1 + beyond) / (DRAWS + 1)


def permutation_shed(error_rate: float):
    """The ``--permutation`` rule at ``error_rate``."""
    rng = np.random.default_rng(0)

    def shed(weights, labels, window, scaled, point):
        paucs, aucs = mix_joined.metrics(labels, window)
        held = np.flatnonzero(weights)
        best = held[mix_fallback.best_candidate(paucs[held], aucs[held])]
        weights = weights.copy()
        for other in held[aucs[held] < aucs[best]].tolist():
            if permutation_p(labels, window[best], window[other], rng) < error_rate:
                weights[other] = 0.0
        return weights / weights.sum()

    return shed


def undecided_fallback(errors: float, leave_one_out: bool):
    """(auto.12) on an undecided evaluation's events, at ``errors`` standard errors of the
    paired difference; ``leave_one_out``: it must hold with each positive left out too."""

    def mix_behind(labels, best, mix) -> bool:
        if pauc(labels, mix, 0.0, 0.1) > pauc(labels, best, 0.0, 0.1):
            return False
        margin = errors * mix_fallback.auc_difference_se(labels, best, mix)
        return auc(labels, mix) <= auc(labels, best) - margin

    def fall_back(weights, labels, window, scaled, point):
        paucs, aucs = mix_joined.metrics(labels, window)
        best = mix_fallback.best_candidate(paucs, aucs)
        if weights[best] == 1.0:
            return weights
        mix = scaled.mix(weights, point, window)
        if not mix_behind(labels, window[best], mix):
            return weights
        for left_out in np.flatnonzero(labels > 0) if leave_one_out else ():
            kept = np.arange(labels.size) != left_out
            if not mix_behind(labels[kept], window[best][kept], mix[kept]):
                return weights
        return np.eye(weights.shape[0])[best]

    return fall_back


def rules(permutation: bool = False) -> dict[str, tuple]:
    """auto's rule, then each change of the module docstring at each error rate."""
    auto = mix_replay.RULES[AUTO]
    changed: dict[str, tuple] = {"the same rule: auto": auto}
    for name, errors in ERRORS.items():
        for leave_one_out in (False, True):
            hook = undecided_fallback(errors, leave_one_out)
            label = f"undecided fallback at {name}" + (", each positive left out" * leave_one_out)
            changed[label] = (*auto, hook)
    for name, errors in ERRORS.items():
        rule = list(auto)
        rule[6] = errors  # (auto.13)'s errors on an undecided evaluation
        changed[f"undecided shed at {name}"] = tuple(rule)
    for error_rate in (1.0 - NormalDist().cdf(mix_fallback.DROP_UNCERTAINTY), 0.01):
        changed[f"undecided shed, then a paired permutation test's at {error_rate:.3%}"] = (
            *auto,
            permutation_shed(error_rate),
        )
    return changed if permutation else {k: v for k, v in changed.items() if "permu" not in k}


def joined_z(names: list[str], seeds: int, cache: Path) -> None:
    """The ``--joined-z`` lines."""
    for name in names:
        for seed in range(seeds):
            run = mix_replay.record(name, seed, cache)
            joined = int(np.max(run["joined"]))
            boosted = int(np.argmax(run["joined"]))
            labels, scores = run["y"][joined:], run["scores"][:, joined:]
            aucs = [auc(labels, row) for row in scores]
            z = [(aucs[boosted] - aucs[k]) / mix_fallback.auc_difference_se(
                     labels, scores[boosted], scores[k])
                 for k in range(scores.shape[0]) if k != boosted]  # fmt: skip
            print(f"{name} seed {seed}: since event {joined} ({int(labels.sum())} positives) "
                  f"AUCs {np.round(aucs, 3).tolist()}, candidate {boosted}'s paired z against "
                  f"the others {np.round(z, 2).tolist()}")  # fmt: skip


def main(argv=None) -> int:
    parser = mix_replay.replay_arguments(__doc__.split("\n\n")[0], "a line per set and rule")
    parser.add_argument("--permutation", action="store_true", help="the permutation rules too")
    parser.add_argument("--joined-z", default="", help="comma-separated sets: the z lines only")
    args = parser.parse_args(argv)
    if args.joined_z:
        joined_z(args.joined_z.split(","), args.seeds, Path(args.cache))
        return 0
    passed = ["--sets", args.sets, "--seeds", str(args.seeds), "--cache", args.cache]
    passed += ["--per-set"] if args.per_set else []
    kept, replayed = mix_fallback.DROP_UNCERTAINTY, rules(args.permutation)
    auto_length = len(replayed["the same rule: auto"])
    for label, rule in replayed.items():
        if args.rules and not any(part in label for part in args.rules.split("|")):
            continue
        shed_errors = rule[6] if len(rule) == auto_length else kept
        mix_fallback.DROP_UNCERTAINTY = mix_joined.DROP_UNCERTAINTY = shed_errors
        mix_replay.RULES.clear()
        mix_replay.RULES[label] = rule
        try:
            mix_replay.main(passed)
        finally:
            mix_fallback.DROP_UNCERTAINTY = mix_joined.DROP_UNCERTAINTY = kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
