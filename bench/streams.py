"""Real time-ordered streams: window-mean prequential AUC and CPU cost of ``auto`` (the default
model) against River's adaptive random forest and logistic regression.

Streams (``--sets``), read in their own order, one pass, each event scored before it is learned:

* ``elec2``: Elec2 (45,312 events, 6 features; NSW electricity prices, label: the price goes
  up), the classic drifting real stream;
* ``weather``: NOAA weather of Bellevue, Nebraska (18,159 days, 8 features; label: rain);
* ``sea``: scikit-multiflow's ``sea_stream.csv`` (40,000 events of the SEA concepts with
  abrupt changes and 10 % label noise);
* ``agrawal``: River's ``synth.Agrawal`` loan stream, rules 0, 2, 5 and 8 in turn (abrupt
  changes every 10,000 events), 40,000 events.

The first three are files of scikit-multiflow 0.4.1's source archive, which this script reads
with ``tarfile`` from a cache directory (``$AUCSTREAM_BENCH_DATA``, default
``~/.cache/aucstream-bench``).  Fill it once (pip keeps the archive; nothing is installed)::

    pip download --no-deps --no-build-isolation scikit-multiflow==0.4.1 -d ~/.cache/aucstream-bench

Learners (``--learners``): ``auto`` (``make_learner("auto")``: the service's default model),
``river_arf`` (``forest.ARFClassifier()``, its defaults), ``river_lr`` (``StandardScaler |
LogisticRegression``).  ``--before PATH`` adds ``auto@before``: the same ``auto`` imported from
another checkout (e.g. main), run beside this one's.  Each (stream, learner) runs in its own
process, in the order given (``--rounds 2`` runs the ``auto`` models again in reverse order, so
a slow spell of the shared machine falls on both; the River peers, ten times slower, run
once); the child measures its own CPU seconds of learning
(``time.process_time``), and those of its first call (imports, numba's start, the kernels'
loads from the cache: a cost per process), and returns the scores.

``--bytecode``: the children import ``core`` from Python bytecode compiled before the timed
runs (an untimed run of each learner on the stream's first events fills a
``PYTHONPYCACHEPREFIX`` folder of the run), as an installed service does (``pip install``
compiles every module; River's are installed so): without it, a shell that sets
``PYTHONDONTWRITEBYTECODE`` over a checkout without ``__pycache__`` makes every ``auto`` child
compile ``core``'s sources inside its timed first call.

Printed: per stream and learner, the window-mean prequential AUC (the mean of the AUCs of the
consecutive ``--window``-event windows), the pooled prequential AUC, the window-mean pAUC(0,
0.1) (divided by 0.1), CPU microseconds per event and the CPU ratio to ``river_arf``, then the
CPU seconds up to the end of the first call and the CPU microseconds per event after it.
``--split`` times each of ``auto``'s calls (thread CPU) and prints, after the first call, the
usual calls apart from the heavy ones (over 1 ms: a boosted fit, an evaluation, a restart).

    nice -n 10 python bench/streams.py --before /path/to/main --rounds 2
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = "scikit-multiflow-0.4.1.tar.gz"
MEMBER = "scikit-multiflow-0.4.1/src/skmultiflow/data/datasets/{}.csv"
FILES = {"elec2": "elec", "weather": "weather", "sea": "sea_stream"}
FETCH = "pip download --no-deps --no-build-isolation scikit-multiflow==0.4.1 -d {}"


def cache_dir() -> Path:
    return Path(os.environ.get("AUCSTREAM_BENCH_DATA", "~/.cache/aucstream-bench")).expanduser()


def read_archived(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a CSV of scikit-multiflow's archive (features, then the 0/1 label)."""
    path = cache_dir() / ARCHIVE
    if not path.is_file():
        raise SystemExit(
            f"{path} is missing: the {name} stream is read from scikit-multiflow 0.4.1's source "
            f"archive. Fetch it once with:\n    {FETCH.format(cache_dir())}"
        )
    with tarfile.open(path) as archive:
        member = archive.extractfile(MEMBER.format(FILES[name]))
        if member is None:
            raise SystemExit(f"{path} holds no {MEMBER.format(FILES[name])}")
        table = np.loadtxt(io.BytesIO(member.read()), delimiter=",", skiprows=1)
    return np.ascontiguousarray(table[:, :-1]), table[:, -1].astype(np.int64)


def agrawal(n: int = 40_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """River's Agrawal loan stream, rules 0, 2, 5 and 8 in turn, ``n / 4`` events each."""
    from river.datasets import synth

    rows, labels = [], []
    for k, rule in enumerate((0, 2, 5, 8)):
        for x, label in synth.Agrawal(classification_function=rule, seed=seed + k).take(n // 4):
            rows.append(list(x.values()))
            labels.append(int(label))
    return np.asarray(rows, dtype=np.float64), np.asarray(labels, dtype=np.int64)


def load_stream(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name in FILES:
        return read_archived(name)
    if name == "agrawal":
        return agrawal()
    raise SystemExit(f"unknown stream {name!r}; known: {', '.join([*FILES, 'agrawal'])}")


# ------------------------------------------------------------------------------ the child
#: the CPU seconds at the end of the learner's first call (its imports, numba's start and the
#: kernels' loads from the cache fall before it: a fixed cost per process, not per event)
FIRST_CALL: list[float] = []
#: ``--split``: a call above this many us of thread CPU is counted apart (a fit, an evaluation)
HEAVY_US = 1000.0
#: ``--bytecode``: the events of the untimed run that compiles the modules
WARM_UP_EVENTS = 200


def learn_auto(X, y, batch: int, params: dict, calls: np.ndarray | None = None) -> np.ndarray:
    """``auto``'s prequential scores; ``calls``, if given, gets each call's thread CPU us."""
    from core.learners import make_learner

    model = make_learner("auto", random_state=0, **params)
    scores = np.empty(len(y))
    clock = time.thread_time_ns
    for call, start in enumerate(range(0, len(y), batch)):
        rows = slice(start, start + batch)
        begun = clock() if calls is not None else 0
        scores[rows] = model.prequential_step(X[rows], y[rows])
        if calls is not None:
            calls[call] = (clock() - begun) / 1e3
        if not start:
            FIRST_CALL.append(time.process_time())
    return scores


def learn_river(spec: str, X, y) -> np.ndarray:
    from river import forest, linear_model, preprocessing

    if spec == "river_arf":
        model = forest.ARFClassifier(seed=0)
    else:
        model = preprocessing.StandardScaler() | linear_model.LogisticRegression()
    names = [f"x{i}" for i in range(X.shape[1])]
    scores = np.empty(len(y))
    for i, (row, label) in enumerate(zip(X.tolist(), y.tolist(), strict=True)):
        x = dict(zip(names, row, strict=True))
        scores[i] = model.predict_proba_one(x).get(1, 0.0)
        model.learn_one(x, label)
        if not i:
            FIRST_CALL.append(time.process_time())
    return scores


def child(args) -> None:
    """One (stream, learner): load, learn, write the scores and the CPU seconds."""
    X, y = load_stream(args.set)
    if args.events:
        X, y = X[: args.events], y[: args.events]
    started = time.process_time()
    if args.learner.startswith("auto"):
        calls = np.empty(-(-len(y) // args.batch)) if args.split else None
        scores = learn_auto(X, y, args.batch, json.loads(args.params), calls)
        if calls is not None:
            np.save(args.out + ".calls.npy", calls)
    else:
        scores = learn_river(args.learner, X, y)
    cpu = time.process_time() - started
    np.save(args.out, scores)
    first = FIRST_CALL[0] - started
    Path(args.out + ".json").write_text(json.dumps({"cpu": cpu, "first": first}))


# ------------------------------------------------------------------------------ the parent
def window_mean(metric, y, scores, width: int) -> float:
    values = []
    for start in range(0, len(y) - width + 1, width):
        part = slice(start, start + width)
        if 0 < y[part].sum() < width:
            values.append(metric(y[part], scores[part]))
    return float(np.mean(values))


def child_environment(args, code: str, folder: str) -> dict[str, str]:
    """The child's environment: ``code`` first on the path; with ``--bytecode``, the bytecode
    folder of the run (:func:`warm_up` fills it)."""
    environment = dict(os.environ, PYTHONPATH=code)
    if args.bytecode:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        environment["PYTHONPYCACHEPREFIX"] = os.path.join(folder, "bytecode")
    return environment


def warm_up(specs: list[str], name: str, args, folder: str) -> None:
    """With ``--bytecode``: each learner learns the stream's first events once, untimed, so
    that every module its timed runs import is compiled into the run's bytecode folder (with
    ``PYTHONPYCACHEPREFIX`` set, Python reads no ``__pycache__`` beside the sources, the
    installed packages' included)."""
    if args.bytecode:
        for spec in specs:
            run(spec, name, args, folder, events=WARM_UP_EVENTS)


def run(spec: str, name: str, args, folder: str, events: int = 0) -> tuple:
    out = os.path.join(folder, f"{name}-{spec}.npy")
    code = args.before if spec == "auto@before" else str(ROOT)
    command = [sys.executable, __file__, "--child", "--set", name, "--learner", spec,
               "--batch", str(args.batch), "--params", args.params, "--out", out,
               "--events", str(events), *(["--split"] if args.split else [])]  # fmt: skip
    subprocess.run(command, check=True, env=child_environment(args, code, folder), cwd=code)
    times = json.loads(Path(out + ".json").read_text())
    calls = Path(out + ".calls.npy")
    split = np.load(calls) if calls.is_file() else None
    return np.load(out), times["cpu"], times["first"], split


def print_split(name: str, n_events: int, results: dict) -> None:
    """With ``--split``: where each ``auto`` run's calls went (thread CPU, the first call
    aside): calls of at most :data:`HEAVY_US` (the usual event) and those above (a boosted
    fit, an evaluation, a restart), means of the rounds."""
    print(f"\n{name}, auto's calls after the first (thread CPU; heavy: over {HEAVY_US:.0f} us)\n"
          "| learner | median call us | usual calls us/event | heavy calls | heavy us/event |\n"
          "|---|---|---|---|---|")  # fmt: skip
    for spec, runs in results.items():
        splits = [run[3][1:] for run in runs if run[3] is not None]
        if not splits:
            continue
        heavy = [calls[calls > HEAVY_US] for calls in splits]
        usual = [calls[calls <= HEAVY_US].sum() / n_events for calls in splits]
        print(f"| {spec} | {np.mean([np.median(c) for c in splits]):.1f} | "
              f"{np.mean(usual):.1f} | {np.mean([len(h) for h in heavy]):.0f} | "
              f"{np.mean([h.sum() / n_events for h in heavy]):.1f} |")  # fmt: skip


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="elec2,weather,sea,agrawal")
    parser.add_argument("--learners", default="auto,river_arf,river_lr")
    parser.add_argument("--before", help="a checkout whose auto runs beside this one's")
    parser.add_argument("--batch", type=int, default=1, help="events per auto call")
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--params", default="{}", help="auto's parameters, JSON")
    parser.add_argument("--bytecode", action="store_true",
                        help="import core from bytecode compiled before the runs")  # fmt: skip
    parser.add_argument("--split", action="store_true",
                        help="time auto's calls: the usual ones, the heavy ones apart")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--set", help=argparse.SUPPRESS)
    parser.add_argument("--learner", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, os.environ["PYTHONPATH"])
        child(args)
        return
    sys.path.insert(0, str(ROOT))
    from core.metrics import auc, pauc

    specs = [s.strip() for s in args.learners.split(",")]
    if args.before:
        specs.insert(specs.index("auto") if "auto" in specs else 0, "auto@before")
    print(f"batch {args.batch}, windows of {args.window}, load {os.getloadavg()[0]:.2f}"
          f"{', core from bytecode' if args.bytecode else ''}")  # fmt: skip
    for name in args.sets.split(","):
        _, y = load_stream(name)
        results: dict[str, list] = {spec: [] for spec in specs}
        with tempfile.TemporaryDirectory() as folder:
            warm_up(specs, name, args, folder)
            for round_ in range(args.rounds):
                for spec in specs if round_ % 2 == 0 else specs[::-1]:
                    if round_ == 0 or spec.startswith("auto"):  # the peers' CPU: one round
                        results[spec].append(run(spec, name, args, folder))
        print(f"\n## {name}: n={len(y)}, positives {y.mean():.3f}, "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        print("| learner | window-mean AUC | pooled AUC | window-mean pAUC(0, 0.1) "
              "| CPU us/event | CPU vs ARF | first call s | after it us/event |\n"
              "|---|---|---|---|---|---|---|---|")  # fmt: skip
        arf = np.mean([run[1] for run in results.get("river_arf", [])] or [np.nan])
        for spec in specs:
            scores = results[spec][0][0]  # every round learns the same: the first's scores
            cpu = float(np.mean([run[1] for run in results[spec]]))
            first = float(np.mean([run[2] for run in results[spec]]))
            windowed = window_mean(auc, y, scores, args.window)
            partial = window_mean(lambda a, b: pauc(a, b, 0.0, 0.1), y, scores, args.window)
            print(f"| {spec} | {windowed:.4f} | {auc(y, scores):.4f} | {partial:.4f} | "
                  f"{1e6 * cpu / len(y):.0f} | {cpu / arf:.3f} | {first:.2f} | "
                  f"{1e6 * (cpu - first) / (len(y) - args.batch):.0f} |")  # fmt: skip
        if args.split:
            print_split(name, len(y), results)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
