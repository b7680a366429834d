"""auto against batch HistGradientBoosting and logistic regression on real tabular sets whose
positive class is down-sampled to a rare one (issue 39: "rare-positive nonlinear sets within
.05 pAUC of HGB").  Not a test: prints a table per set, then the means over sets.

Usage::

    python bench/rare_real.py [--sets magic_h,elec_up,...] [--seeds 3] [--rate 0.015]
                              [--learners auto,hgb,logreg] [--trace] [--code /work/main]

Sets (``--sets``, all with >= 10k events before the down-sampling; nothing is downloaded;
the default: the first four and ``shuttle``, where batch HGB beats batch LR):

* ``magic_h``: KEEL magic (19,020 x 10), hadron showers positive;
* ``letter_h``: KEEL letter (20,000 x 16), the letter H against the other 25;
* ``penbased_8``: KEEL penbased (10,992 x 16), the pen-written digit 8;
* ``shuttle``: River's ODDS shuttle (49,097 x 9), the rare flight states;
* ``sylva``: SYLVA of the 2006 agnostic-learning challenge (13,086 x 216), forest cover;
* ``elec_up``: Elec2 (45,312 x 6, time order shuffled), the price goes up;
* ``covtype_3``: covertype (54 columns), cover type 3 (Ponderosa pine), a fixed stratified
  sample of 60,000 of its 581,012 rows (``--covtype-n``).

The last two are files of scikit-multiflow 0.4.1's source archive (bench/streams.py: read from
``~/.cache/aucstream-bench``); a set whose file is missing is skipped with a note.

Protocol, per set and seed: every negative is kept and the positives are down-sampled (seeded)
so that they are ``--rate`` of the events (default 1.5 %); a stratified 80/20 split
(as bench/quality.py's ``split``, whose 30 % becomes 20 %: the training stream in shuffled
order); ``auto`` (the defaults of
a model created over HTTP, raw input) learns the training stream in one pass, in batches of 256
events (``prequential_step``); ``hgb`` is scikit-learn's batch ``HistGradientBoostingClassifier``
(defaults: early stopping on a 10 % validation split above 10,000 events) and ``logreg`` batch
``LogisticRegression`` on standardised input, both on the whole training split.  Held-out AUC
and pAUC(0, 0.1) (unstandardised: the area over FPR [0, 0.1] divided by 0.1).

``--trace``: for ``auto``, each candidate scored alone on the held-out split (AUC / pAUC), its
served weight, and the boosted candidate's fits and fit-buffer positives / rows; then the drift
detector's detections on the training stream, the last one's event, and ``drift_since`` (the
last detection not dismissed; a restart shows as a short fit buffer).
``--code DIR`` imports ``core`` from another checkout, so two versions run the same data.
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BATCH = 256
PAUC_BETA = 0.1
#: the fixed sample of covertype's rows (independent of the benchmark's seed)
COVTYPE_SEED = 20_261_201
KEEL_SETS = {
    "magic_h": ("magic", "h"),
    "letter_h": ("letter", "H"),
    "penbased_8": ("penbased", "8"),
}
ALL_SETS = (*KEEL_SETS, "shuttle", "sylva", "elec_up", "covtype_3")
#: [CHOICE] the default: the sets where batch HGB's pAUC is above batch LR's (nonlinear); on
#: sylva and elec_up, down-sampled, LR is within .012 of HGB or above it (bench/README.md, RP)
DEFAULT_SETS = ("magic_h", "letter_h", "penbased_8", "covtype_3", "shuttle")


def _archived(member: str) -> bytes | None:
    import streams

    path = streams.cache_dir() / streams.ARCHIVE
    if not path.is_file():
        return None
    with tarfile.open(path) as archive:
        handle = archive.extractfile(streams.MEMBER.format(member))
        return None if handle is None else handle.read()


def load(name: str, covtype_n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(X, y)`` of a set before the down-sampling (y in {0, 1}), None if its file is missing."""
    import datasets

    if name in KEEL_SETS:
        file, positive = KEEL_SETS[name]
        return datasets.keel("balanced", file, positive)()
    if name == "shuttle":
        return datasets._river_shuttle()
    if name == "sylva":
        return datasets._challenge("sylva")()
    import pandas as pd

    data = _archived("elec" if name == "elec_up" else "covtype")
    if data is None:
        return None
    table = pd.read_csv(io.BytesIO(data)).to_numpy(dtype=np.float64)
    X, label = np.ascontiguousarray(table[:, :-1]), table[:, -1]
    if name == "elec_up":
        return X, (label == 1).astype(np.int64)
    y = (label == 3).astype(np.int64)
    rows = datasets.subsample(y, covtype_n, COVTYPE_SEED)
    return np.ascontiguousarray(X[rows]), y[rows]


def rare(y: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """Sorted indices: every negative and a seeded sample of positives, ``rate`` of the whole."""
    negatives, positives = np.flatnonzero(y == 0), np.flatnonzero(y == 1)
    wanted = int(round(rate * negatives.size / (1.0 - rate)))
    if wanted > positives.size:
        raise SystemExit(f"{positives.size} positives, fewer than the {wanted} asked")
    kept = np.random.default_rng(seed).choice(positives, size=wanted, replace=False)
    return np.sort(np.concatenate([negatives, kept]))


def split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """bench/quality.py's split with 20 % held out (datasets.py's; importing quality would put
    this checkout's ``core`` first, whatever ``--code`` says)."""
    import datasets

    return datasets.split(y, seed, 0.2)


def run_auto(X_train, y_train, X_test, seed: int, trace: bool):
    from core.learners import make_learner

    model = make_learner("auto", random_state=seed)
    for start in range(0, len(y_train), BATCH):
        model.prequential_step(X_train[start : start + BATCH], y_train[start : start + BATCH])
    return model.decision_function(X_test), model if trace else None


def candidate_trace(model, X_test, y_test) -> list[str]:
    """Each candidate alone on the held-out split, its served weight, and the boosted
    candidate's fits and fit-buffer positives / rows; the drift detector's detections."""
    from core.metrics import auc, pauc
    from core.preprocessing import scale_batch

    scaled = scale_batch(model.scaling, model._scaler_arrays, X_test, learn=False)
    weights = model._own_state["served_weights"]
    leader = int(model._own_state["leader"][0])
    state = model.state_
    lines = []
    for k, (spec, candidate) in enumerate(
        zip(model.candidate_specs(), model._served_candidates(X_test), strict=True)
    ):
        scores = candidate._decision(scaled)
        extra = ""
        if spec["learner"] == "boosted_embedded" and f"c{k}:fits" in state:
            fill = int(state[f"c{k}:buffer_fill"][0])
            positives = int((state[f"c{k}:buffer_y"][:fill] > 0).sum())
            extra = f", fits {int(state[f'c{k}:fits'][0])}, buffer {positives} / {fill}"
        lines.append(
            f"    c{k} {spec['learner']}: AUC {auc(y_test, scores):.4f} "
            f"pAUC {pauc(y_test, scores, 0.0, PAUC_BETA):.4f}, weight {weights[k]:.3f}"
            f"{' (leader)' if k == leader else ''}{extra}"
        )
    if "drift:counters" in state:  # the detector on the served scores (track_drift)
        detections, last = (int(v) for v in state["drift:counters"][2:4])
        lines.append(
            f"    drift: {detections} detections (last at event {last}), "
            f"drift_since {int(state['drift_since'][0])}"
        )
    return lines


def run_peer(name: str, X_train, y_train, X_test, seed: int) -> np.ndarray:
    if name == "hgb":
        from sklearn.ensemble import HistGradientBoostingClassifier

        model = HistGradientBoostingClassifier(random_state=seed).fit(X_train, y_train)
        return model.decision_function(X_test)
    from sklearn.linear_model import LogisticRegression

    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    std[std == 0] = 1.0
    model = LogisticRegression(max_iter=10_000).fit((X_train - mean) / std, y_train)
    return model.decision_function((X_test - mean) / std)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--sets", default=",".join(DEFAULT_SETS),
                        help=f"comma-separated, of {', '.join(ALL_SETS)}")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.015, help="positives after sampling")
    parser.add_argument("--learners", default="auto,hgb,logreg")
    parser.add_argument("--trace", action="store_true", help="auto's candidates one by one")
    parser.add_argument("--covtype-n", type=int, default=60_000)
    parser.add_argument("--code", default=str(ROOT), help="the checkout whose core is run")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve()))
    sys.path.insert(1, str(HERE))
    warnings.filterwarnings("ignore")
    from core.metrics import auc, pauc

    learners = [name.strip() for name in args.learners.split(",") if name.strip()]
    sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    print(f"code {Path(args.code).resolve()}, positives down-sampled to {args.rate:.1%}")
    means: dict[str, dict[str, tuple[float, float]]] = {}
    for set_name in sets:
        data = load(set_name, args.covtype_n)
        if data is None:
            print(f"\n{set_name}: skipped, its file is missing (bench/streams.py says how)")
            continue
        X_all, y_all = data
        print(f"\n### {set_name} ({len(y_all):,} x {X_all.shape[1]}, {y_all.mean():.1%} "
              f"positives before sampling)\n")  # fmt: skip
        print("| seed | learner | train events | train positives | AUC | pAUC(0, 0.1) | CPU s |")
        print("|---|---|--:|--:|--:|--:|--:|")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in learners}
        for seed in range(args.seeds):
            rows = rare(y_all, args.rate, seed)
            X, y = X_all[rows], y_all[rows]
            train, test = split(y, seed)
            X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
            for name in learners:
                started = time.process_time()
                model = None
                if name == "auto":
                    scores, model = run_auto(X_train, y_train, X_test, seed, args.trace)
                else:
                    scores = run_peer(name, X_train, y_train, X_test, seed)
                seconds = time.process_time() - started
                results[name].append((auc(y_test, scores), pauc(y_test, scores, 0.0, PAUC_BETA)))
                print(f"| {seed} | {name} | {len(y_train):,} | {int(y_train.sum())} | "
                      f"{results[name][-1][0]:.4f} | {results[name][-1][1]:.4f} | "
                      f"{seconds:.1f} |", flush=True)  # fmt: skip
                if model is not None:
                    print("\n".join(candidate_trace(model, X_test, y_test)), flush=True)
        means[set_name] = {}
        for name in learners:
            aucs, paucs = np.array(results[name]).T
            means[set_name][name] = (aucs.mean(), paucs.mean())
            print(f"| mean | {name} | | | {aucs.mean():.4f} | {paucs.mean():.4f} | |")
    print("\n### means over the seeds\n")
    print("| set | " + " | ".join(f"{n} AUC | {n} pAUC" for n in learners) + " |")
    print("|---|" + "--:|--:|" * len(learners))
    for set_name, row in means.items():
        cells = " | ".join(f"{row[n][0]:.4f} | {row[n][1]:.4f}" for n in learners)
        print(f"| {set_name} | {cells} |")
    if means:
        cells = " | ".join(
            f"{np.mean([r[n][0] for r in means.values()]):.4f} | "
            f"{np.mean([r[n][1] for r in means.values()]):.4f}"
            for n in learners
        )
        print(f"| mean | {cells} |")


if __name__ == "__main__":
    main()
