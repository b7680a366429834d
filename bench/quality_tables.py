"""The tables and summary lines of ``bench/quality.py`` (its module docstring says what they
mean): the per-set means, wins / ties / losses against the peers, and ``auto`` against its
candidates run alone."""

from __future__ import annotations

import csv
import math
import sys

import numpy as np

from core.learners import make_learner

#: a difference of per-set means below this is a tie
TIE = 0.002
PEERS = ("logreg", "sgd", "river", "hgb")
METRICS = ("preq_auc", "preq_pauc", "test_auc", "test_pauc")


def resolve_learner(name: str, overrides: dict) -> tuple[str, dict]:
    """``(registry name, params)`` of a learner or of a variant defined in ``--params``.

    A variant names its base in ``learner``, or in ``base`` when the base has a parameter
    called ``learner`` itself (``tree_embedded``'s inner learner)."""
    params = dict(overrides.get(name, {}))
    base = params.pop("base") if "base" in params else params.pop("learner", name)
    return base, params


def aggregate(rows):
    """{(condition, set, learner): {metric: (mean, std), "seconds": mean}}."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["condition"], row["set"], row["learner"]), []).append(row)
    out = {}
    for key, members in groups.items():
        cell = {}
        for metric in METRICS:
            values = np.array([m[metric] for m in members], dtype=float)
            cell[metric] = (
                (float(np.mean(values)), float(np.std(values)))
                if not np.isnan(values).all()
                else (math.nan, math.nan)
            )
        cell["seconds"] = float(np.mean([m["seconds"] for m in members]))
        cell["n_seeds"] = len(members)
        cell["refused"] = members[0].get("refused", "")
        out[key] = cell
    return out


def _cell(mean_std):
    mean, std = mean_std
    return f"{'—':>15}" if math.isnan(mean) else f"{mean:>8.4f}±{std:.4f}"


def print_tables(rows, agg, learners, conditions, sets, file=sys.stdout):
    info = {row["set"]: row for row in rows}
    for condition in conditions:
        print(f"\n## condition: {condition}", file=file)
        for set_name in sets:
            r = info[set_name]
            capped = f" of {r['n_full']}" if r["n_full"] != r["n"] else ""
            print(f"\n{set_name}: n={r['n']}{capped}, d={r['d']}, "
                  f"positives {100 * r['pos_rate']:.2f}%", file=file)  # fmt: skip
            header = f"  {'learner':<12}" + "".join(f"{m:>16}" for m in METRICS) + "  s/seed"
            print(header, file=file)
            for learner in learners:
                cell = agg.get((condition, set_name, learner))
                if cell is None:
                    continue
                cells = "".join(f" {_cell(cell[m])}" for m in METRICS)
                note = f"  refused: {cell['refused']}" if cell["refused"] else ""
                print(f"  {learner:<12}{cells}  {cell['seconds']:6.2f}{note}", file=file)


#: auto's prequential pAUC within this of the best of its candidates run alone
AUTO_MARGIN = 0.005


def wtl(agg, condition, sets, learner, peer, metric):
    wins = ties = losses = 0
    for set_name in sets:
        mine = agg.get((condition, set_name, learner))
        theirs = agg.get((condition, set_name, peer))
        if mine is None or theirs is None:
            continue
        diff = mine[metric][0] - theirs[metric][0]
        if math.isnan(diff):  # a learner refused the set
            continue
        if abs(diff) < TIE:
            ties += 1
        elif diff > 0:
            wins += 1
        else:
            losses += 1
    return wins, ties, losses


def summary_lines(agg, learners, conditions, sets, rows):
    """One line per learner and condition (see the module docstring)."""
    rare = sorted({r["set"] for r in rows if r["pos_rate"] <= 0.10 and r["set"] in sets})
    lines = [
        f"summary over {len(sets)} sets: mean of per-set means; W/T/L on per-set means, "
        f"tie = |diff| < {TIE}; 'rare' = the {len(rare)} sets with <= 10% positives"
    ]
    for condition in conditions:
        for learner in learners:
            cells = [agg.get((condition, s, learner)) for s in sets]
            cells = [c for c in cells if c is not None]
            if not cells:
                continue
            seconds = sum(c["seconds"] * c["n_seeds"] for c in cells)
            cells = [c for c in cells if not math.isnan(c["test_auc"][0])]
            mean_auc = np.mean([c["test_auc"][0] for c in cells]) if cells else math.nan
            mean_pauc = np.mean([c["test_pauc"][0] for c in cells]) if cells else math.nan
            parts = [f"{learner:<12} {condition:<12} AUC {mean_auc:.4f} pAUC {mean_pauc:.4f}"]
            if len(cells) < len(sets):  # means over fewer sets are not comparable: say so
                parts[0] += f" (on {len(cells)} sets)"
            for peer in PEERS:
                if peer == learner or not any((condition, s, peer) in agg for s in sets):
                    continue
                a = wtl(agg, condition, sets, learner, peer, "test_auc")
                p = wtl(agg, condition, sets, learner, peer, "test_pauc")
                parts.append(f"vs {peer} AUC {a[0]}/{a[1]}/{a[2]} pAUC {p[0]}/{p[1]}/{p[2]}")
            if learner != "logreg" and any((condition, s, "logreg") in agg for s in rare):
                p = wtl(agg, condition, rare, learner, "logreg", "test_pauc")
                parts.append(f"rare pAUC vs logreg {p[0]}/{p[1]}/{p[2]}")
            parts.append(f"{seconds:.1f}s")
            lines.append(" | ".join(parts))
    return lines


def auto_lines(agg, learners, overrides, conditions, sets):
    """The targets for every ``auto`` in the run: on how many sets its prequential pAUC
    is within ``AUTO_MARGIN`` of the best of its candidates run alone (those of the run whose
    (learner, params) equal a candidate's, the model's range added), and its held-out AUC at
    least River's."""
    lines = []
    for learner in learners:
        base, params = resolve_learner(learner, overrides) if learner not in PEERS else ("", {})
        if base != "auto":
            continue
        specs = make_learner("auto", **params).candidate_specs()
        alone = []
        for other in learners:
            if other in PEERS or other == learner:
                continue
            other_base, other_params = resolve_learner(other, overrides)
            candidate = make_learner(other_base, **other_params).get_params()
            for spec in specs:
                wanted = make_learner(spec["learner"], **spec["params"]).get_params()
                same = {k: v for k, v in wanted.items() if k not in ("scaling", "random_state")}
                if other_base == spec["learner"] and all(
                    candidate.get(k) == v for k, v in same.items()
                ):
                    alone.append(other)
        for condition in conditions:
            near = beats_river = compared = 0
            for set_name in sets:
                mine = agg.get((condition, set_name, learner))
                theirs = [agg.get((condition, set_name, name)) for name in alone]
                river = agg.get((condition, set_name, "river"))
                if mine is None or not theirs or any(t is None for t in theirs):
                    continue
                compared += 1
                best = max(t["preq_pauc"][0] for t in theirs)
                near += mine["preq_pauc"][0] >= best - AUTO_MARGIN
                if river is not None:
                    beats_river += mine["test_auc"][0] >= river["test_auc"][0]
            if compared:
                lines.append(
                    f"{learner:<12} {condition:<12} preq pAUC within {AUTO_MARGIN} of the best "
                    f"candidate alone ({', '.join(alone)}) on {near}/{compared} sets; held-out "
                    f"AUC >= river on {beats_river}/{compared}"
                )
    return lines


def write_csv(path, rows):
    fields = ["set", "seed", "condition", "learner", "n", "n_full", "d", "pos_rate",
              *METRICS, "seconds", "refused"]  # fmt: skip
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
