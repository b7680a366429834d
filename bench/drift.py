"""Drifting streams: how fast each learner recovers after the stream changes.

Scenarios (``--scenarios``; every stream is one pass, in batches of ``--batch`` events,
scored test-then-train with ``prequential_step``):

* ``abrupt``: ``--n`` events (default 200,000), 20 standard Gaussian features, labels drawn from
  a logistic model with ~7 % positives whose weights change sign on half of the features at
  ``n / 2``.
* ``gradual``: the same two concepts, the new one drawn with a probability that rises from 0 to
  1 over ``n / 10`` events centred on ``n / 2`` (River's ``ConceptDriftStream`` with a width).
* ``recurring``: the concepts alternate every ``n / 4`` events (A, B, A, B).
* ``agrawal``: River's ``synth.Agrawal`` loan stream, classification function 0 then 4 at
  ``n / 2`` through ``synth.ConceptDriftStream`` (width ``max(1000, n / 100)``); raw features
  (salary in dollars), so every learner runs with ``scaling="standard"``.
* ``real:<set>``: a real set of ``bench/datasets.py`` (standardised, shuffled, repeated to
  ``n`` events if shorter) with an induced change at ``n / 2``: half of the features, chosen
  with the seed, change sign.

Learners (``--learners``): the registered online learners with their defaults, the same with
``half_life=H`` (``<name>@H``; ``--half-life`` sets H for the ``*@`` shorthand), ``auto@track``
(``auto(track_drift=True)``, as models created over HTTP run it), and two River
peers: ``river_lr`` (``LogisticRegression``, its default constant SGD step 0.01) and
``river_lr_adwin`` (the same, replaced by a fresh model whenever ``drift.ADWIN()`` flags a
rise of the per-event pairwise ranking loss: the share of the latest 100 events of the other
class that the event is ranked on the wrong side of).

Printed per scenario: windowed prequential AUC (windows as fractions of the stream, the
issue's 90-100k, 100-110k, 110-130k, 180-200k for the abrupt scenario of 200,000 events), the
pre-change AUC and the recovery time: events after the first change until the trailing window
of ``--recovery-window`` events (entirely after the change) first reaches the pre-change AUC
minus 0.03 (">" when it never does), and a second table of windowed pAUC(0, 0.1) over the
same windows.  ``--png`` writes the trailing-window AUC and pAUC curves.

    nice -n 10 python bench/drift.py                        # every scenario, full size
    nice -n 10 python bench/drift.py --n 40000 --scenarios abrupt --learners spam,spam@,river_lr
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.learners import available_learners, learner_class, make_learner  # noqa: E402
from core.metrics import auc, pauc  # noqa: E402
from core.metrics.drift import DriftDetector  # noqa: E402

RIVER_PEERS = ("river_lr", "river_lr_adwin")
#: windows of the abrupt scenario, as fractions of the 200,000-event stream
WINDOWS = ((0.45, 0.50), (0.50, 0.55), (0.55, 0.65), (0.90, 1.00))
RECOVERY_MARGIN = 0.03
#: the pAUC range of the windowed pAUC table and curves: FPR [0, 0.1], the fraud range
PAUC_BETA = 0.1


# ------------------------------------------------------------------------------ streams
def two_concepts(n_features: int, rng: np.random.Generator, rate: float = 0.07):
    """Weights of concept A and of concept B (A with half of the signs flipped) and the
    intercept that gives ~``rate`` positives."""
    weights = rng.normal(size=n_features)
    weights *= 2.0 / np.linalg.norm(weights)  # a logit spread that a linear model ranks ~0.88
    flipped = weights.copy()
    flipped[rng.permutation(n_features)[: n_features // 2]] *= -1.0
    probe = rng.normal(size=(50_000, n_features)) @ weights
    intercept = _intercept_for_rate(probe, rate)
    return weights, flipped, intercept


def _intercept_for_rate(logits: np.ndarray, rate: float) -> float:
    low, high = -20.0, 20.0
    for _ in range(60):  # bisection on the mean of sigmoid(logit + b)
        middle = (low + high) / 2
        if np.mean(1.0 / (1.0 + np.exp(-(logits + middle)))) < rate:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def logistic_stream(n: int, seed: int, concept_of_event) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian features, labels from concept A (False) or B (True) per event."""
    rng = np.random.default_rng(seed)
    weights_a, weights_b, intercept = two_concepts(20, rng)
    X = rng.normal(size=(n, 20))
    use_b = concept_of_event(np.arange(n), rng)
    logits = np.where(use_b, X @ weights_b, X @ weights_a) + intercept
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return X, y


def abrupt(n: int, seed: int):
    return logistic_stream(n, seed, lambda t, rng: t >= n // 2), [n // 2]


def gradual(n: int, seed: int):
    width = n / 10

    def concept(t, rng):
        return rng.random(len(t)) < 1.0 / (1.0 + np.exp(-8.0 * (t - n / 2) / width))

    return logistic_stream(n, seed, concept), [n // 2]


def recurring(n: int, seed: int):
    period = n // 4
    return logistic_stream(n, seed, lambda t, rng: (t // period) % 2 == 1), [
        period,
        2 * period,
        3 * period,
    ]


def agrawal(n: int, seed: int):
    from river.datasets import synth

    stream = synth.ConceptDriftStream(
        synth.Agrawal(classification_function=0, seed=seed),
        synth.Agrawal(classification_function=4, seed=seed + 1),
        position=n // 2,
        width=max(1000, n // 100),  # River's sigmoid overflows for narrower ones at this n
        seed=seed,
    )
    rows, labels = [], []
    for x, label in stream.take(n):
        rows.append(list(x.values()))
        labels.append(int(label))
    return (np.asarray(rows, dtype=np.float64), np.asarray(labels, dtype=np.int64)), [n // 2]


def real_with_sign_flip(name: str, n: int, seed: int):
    from bench.datasets import load

    X, y, _ = load(name)
    X = np.asarray(X, dtype=np.float64)
    std = X.std(axis=0)
    X = (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(y)) for _ in range(-(-n // len(y)))])[:n]
    X, y = X[order].copy(), np.asarray(y, dtype=np.int64)[order]
    flipped = rng.permutation(X.shape[1])[: X.shape[1] // 2]
    X[n // 2 :, flipped] *= -1.0
    return (X, y), [n // 2]


SCENARIOS = {"abrupt": abrupt, "gradual": gradual, "recurring": recurring, "agrawal": agrawal}


def make_scenario(name: str, n: int, seed: int):
    if name.startswith("real:"):
        return real_with_sign_flip(name[5:], n, seed)
    return SCENARIOS[name](n, seed)


# ------------------------------------------------------------------------------ learners
def run_aucstream(spec: str, X, y, batch: int, scaling: str, seed: int) -> np.ndarray:
    name, _, half_life = spec.partition("@")
    params = {"scaling": scaling, "random_state": seed}
    if half_life == "track":  # auto as HTTP models run it (docs/algorithms/auto.md (auto.8))
        params["track_drift"] = True
    elif half_life and name == "tree_embedded":  # the wrapper forgets through its inner learner
        params["params"] = {"half_life": float(half_life)}
    elif half_life:
        params["half_life"] = float(half_life)
    model = make_learner(name, **params)
    scores = np.empty(len(y))
    for start in range(0, len(y), batch):
        rows = slice(start, start + batch)
        scores[rows] = model.prequential_step(X[rows], y[rows])
    return scores


def run_river(spec: str, X, y, scaling: str) -> np.ndarray:
    """River's LogisticRegression one event at a time (default optimiser: SGD, constant step
    0.01), optionally reset when ADWIN flags a rise of the pairwise ranking error."""
    from river import drift, linear_model, optim, preprocessing

    def fresh():
        model = linear_model.LogisticRegression(optimizer=optim.SGD(0.01))
        return preprocessing.StandardScaler() | model if scaling == "standard" else model

    model, detector = fresh(), drift.ADWIN()
    recent: dict[int, deque] = {0: deque(maxlen=100), 1: deque(maxlen=100)}
    names = [f"x{i}" for i in range(X.shape[1])]
    scores = np.empty(len(y))
    for i, (row, label) in enumerate(zip(X.tolist(), y.tolist(), strict=True)):
        x = dict(zip(names, row, strict=True))
        p = model.predict_proba_one(x).get(True, 0.0)
        scores[i] = p
        model.learn_one(x, bool(label))
        if spec == "river_lr_adwin" and recent[1 - label]:
            # the pairwise ranking loss against the latest 100 events of the other class
            # (|y - p| barely moves at 7 % positives when the ranking breaks)
            other = np.fromiter(recent[1 - label], dtype=np.float64)
            loss = np.mean(other > p) if label else np.mean(other < p)
            mean_before = detector.estimation
            detector.update(float(loss))
            # ADWIN flags decreases too (a model that learns); only a worse loss resets it
            if detector.drift_detected and detector.estimation > mean_before:
                model, detector = fresh(), drift.ADWIN()
                recent = {0: deque(maxlen=100), 1: deque(maxlen=100)}
        recent[label].append(p)
    return scores


# ------------------------------------------------------------------------------ measures
def _windowed(metric, y, scores, start: int, end: int) -> float:
    part = slice(max(start, 0), min(end, len(y)))
    labels = y[part]
    if labels.min() == labels.max():
        return float("nan")
    return float(metric(labels, scores[part]))


def windowed_auc(y, scores, start: int, end: int) -> float:
    return _windowed(auc, y, scores, start, end)


def windowed_pauc(y, scores, start: int, end: int) -> float:
    """pAUC over FPR [0, PAUC_BETA] of the window, divided by the range's width (1 is
    perfect, a random ranking scores PAUC_BETA / 2), as ``bench/quality.py`` reports it."""
    return _windowed(lambda labels, part: pauc(labels, part, 0.0, PAUC_BETA), y, scores, start, end)


def trailing_curve(y, scores, width: int, step: int):
    """Trailing-window AUC and pAUC at every ``step`` events: (ends, auc values, pauc values)."""
    ends = np.arange(width, len(y) + 1, step)
    aucs = np.array([windowed_auc(y, scores, end - width, end) for end in ends])
    paucs = np.array([windowed_pauc(y, scores, end - width, end) for end in ends])
    return ends, aucs, paucs


def recovery(y, scores, change: int, width: int, step: int):
    """(pre-change AUC over ``width * 2`` events before the change, events until the trailing
    window entirely after the change reaches it minus the margin, or None)."""
    before = windowed_auc(y, scores, change - 2 * width, change)
    for end in range(change + width, len(y) + 1, step):
        if windowed_auc(y, scores, end - width, end) >= before - RECOVERY_MARGIN:
            return before, end - change
    return before, None


def detection(y, scores, change: int, batch: int):
    """(drifts reported before the change, events from the change to the first one after it)
    by :class:`core.metrics.drift.DriftDetector` fed the prequential scores batch by batch."""
    detector = DriftDetector()
    found = []
    for start in range(0, len(y), batch):
        found += detector.update(scores[start : start + batch], y[start : start + batch])
    after = [index - change for index in found if index >= change]
    return sum(index < change for index in found), (after[0] if after else None)


def stable_alarms(args, names: list[str]) -> None:
    """False alarms on stable streams: every real set of the suite, standardised and shuffled
    (one pass, the set's own length), scored prequentially by each learner."""
    from bench.datasets import SUITE, load

    sets = list(SUITE) if names == ["all"] else names
    specs = expand_learners(args.learners, args.half_life)
    print("\n## stable suite: drifts reported (false alarms) per learner")
    print("| set | n | " + " | ".join(specs) + " |\n|" + "---|" * (len(specs) + 2))
    totals = dict.fromkeys(specs, 0)
    for name in sets:
        X, y, _ = load(name)
        X = np.asarray(X, dtype=np.float64)
        std = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)
        order = np.random.default_rng(args.seed).permutation(len(y))
        X, y = X[order], np.asarray(y, dtype=np.int64)[order]
        cells = []
        for spec in specs:
            if spec in RIVER_PEERS:
                scores = run_river(spec, X, y, "none")
            else:
                scores = run_aucstream(spec, X, y, args.batch, "none", args.seed)
            alarms, _ = detection(y, scores, len(y), args.batch)
            totals[spec] += alarms
            cells.append(str(alarms))
        print(f"| {name} | {len(y)} | " + " | ".join(cells) + " |")
        sys.stdout.flush()
    print("| total | | " + " | ".join(str(totals[spec]) for spec in specs) + " |")


def window_bounds(n: int, changes: list[int]) -> list[tuple[int, int]]:
    if len(changes) == 1:
        return [(int(a * n), int(b * n)) for a, b in WINDOWS]
    # recurring: the last tenth before each change and the first tenth after it
    bounds = []
    for change in changes:
        bounds += [(change - n // 20, change), (change, change + n // 20)]
    return bounds


def expand_learners(text: str, half_life: float) -> list[str]:
    online = [name for name in available_learners() if learner_class(name).online]
    specs = []
    for item in text.split(","):
        item = item.strip()
        if item == "all":
            forgetting = [f"{name}@{half_life:g}" for name in online if name != "auto"]
            specs += online + forgetting + ["auto@track", *RIVER_PEERS]
        elif item.endswith("@"):
            specs.append(f"{item}{half_life:g}")
        elif item:
            specs.append(item)
    return specs


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="events per stream")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--scenarios",
        default="abrupt,gradual,recurring,agrawal,real:shuttle,real:letter_a",
        help="comma-separated: abrupt, gradual, recurring, agrawal, real:<set of datasets.py>",
    )
    parser.add_argument(
        "--learners",
        default="all",
        help="names, name@H (half_life=H), name@ (--half-life), river_lr, river_lr_adwin, all",
    )
    parser.add_argument("--half-life", type=float, default=5000.0)
    parser.add_argument("--recovery-window", type=int, default=4000)
    parser.add_argument("--png", help="write the trailing-window AUC and pAUC curves to this PNG")
    parser.add_argument(
        "--stable",
        help="instead: count drift alarms on stable real sets (names of datasets.py, or all)",
    )
    return parser.parse_args(argv)


def run_scenario(scenario: str, args, specs: list[str]):
    (X, y), changes = make_scenario(scenario, args.n, args.seed)
    scaling = "standard" if scenario == "agrawal" else "none"
    bounds = window_bounds(len(y), changes)
    width, step = args.recovery_window, args.batch
    header = ["learner"] + [f"{a // 1000}-{b // 1000}k" for a, b in bounds]
    header += ["pre", "recover", "alarms before", "detected after", "s"]
    print(f"\n## {scenario}: n={len(y)}, positives {y.mean():.3f}, change(s) at {changes}")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    curves = {}
    pauc_rows = []
    for spec in specs:
        started = time.perf_counter()
        try:
            if spec in RIVER_PEERS:
                scores = run_river(spec, X, y, scaling)
            else:
                scores = run_aucstream(spec, X, y, args.batch, scaling, args.seed)
        except ValueError as error:  # e.g. a learner without half_life
            print(f"| {spec} | refused: {error} |")
            continue
        seconds = time.perf_counter() - started
        cells = [f"{windowed_auc(y, scores, a, b):.3f}" for a, b in bounds]
        before, recovered = recovery(y, scores, changes[0], width, step)
        shown = f"{recovered:,}" if recovered is not None else f">{len(y) - changes[0]:,}"
        false_alarms, delay = detection(y, scores, changes[0], args.batch)
        found = f"{delay:,}" if delay is not None else "no"
        print(
            f"| {spec} | " + " | ".join(cells) + f" | {before:.3f} | {shown} | {false_alarms} | "
            f"{found} | {seconds:.0f} |"
        )
        sys.stdout.flush()
        pauc_cells = [f"{windowed_pauc(y, scores, a, b):.3f}" for a, b in bounds]
        pauc_rows.append(f"| {spec} | " + " | ".join(pauc_cells) + " |")
        curves[spec] = trailing_curve(y, scores, width, max(step, len(y) // 400))
    print(f"\n{scenario}: windowed prequential pAUC(0, {PAUC_BETA:g}) (divided by the width)")
    print("| " + " | ".join(header[: len(bounds) + 1]) + " |\n|" + "---|" * (len(bounds) + 1))
    print("\n".join(pauc_rows))
    return changes, curves


def plot(path: str, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(results)
    fig, axes = plt.subplots(rows, 2, figsize=(16, 3.2 * rows), squeeze=False)
    for row, (scenario, (changes, curves)) in zip(axes, results.items(), strict=True):
        # left: AUC; right: pAUC over FPR [0, PAUC_BETA], each trailing-window and prequential
        for column, (ax, metric, floor) in enumerate(
            ((row[0], "AUC", 0.3), (row[1], f"pAUC(0, {PAUC_BETA:g})", 0.0))
        ):
            for spec, (ends, *values) in curves.items():
                style = "--" if "@" in spec else ("-." if spec in RIVER_PEERS else "-")
                ax.plot(ends, values[column], style, label=spec, linewidth=1)
            for change in changes:
                ax.axvline(change, color="grey", linewidth=0.8)
            ax.set_title(f"{scenario}: trailing-window prequential {metric}")
            ax.set_ylim(floor, 1.0)
            ax.set_xlabel("events")
        row[0].legend(fontsize=6, ncol=4, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\nwrote {path}")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.stable:
        stable_alarms(args, args.stable.split(","))
        return
    specs = expand_learners(args.learners, args.half_life)
    results = {}
    for scenario in args.scenarios.split(","):
        results[scenario] = run_scenario(scenario.strip(), args, specs)
    if args.png:
        plot(args.png, results)


if __name__ == "__main__":
    main()
