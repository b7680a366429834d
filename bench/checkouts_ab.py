"""Two checkouts' learner in one process, on one stream one event a call, alternating chunks
of events: the CPU of each, under the same load (separate processes on a shared machine
measured noise: bench/README.md, "AC: ...").

    OMP_NUM_THREADS=1 python bench/checkouts_ab.py --before /work/wt/B --after . [--events 45312]

Each checkout's ``core`` is imported apart (its modules kept aside and put back in
``sys.modules`` before each of its chunks, so a function that imports at call time gets its
own checkout's); both learners (``make_learner(--learner, random_state=0, **--params)``)
learn the same events, each chunk of ``--chunk`` one-event ``prequential_step`` calls timed on
the thread's CPU clock, the order of the two flipped every chunk, after an untimed warm-up of
``--warm`` events on another learner of each (its kernels loaded from numba's cache, or
compiled where a checkout has none).  Printed: per checkout the CPU microseconds per event
over the whole stream, and over the chunks without a call above 1 ms (a fit, an evaluation),
their ratio, the load, and whether the scores are equal bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from streams import load_stream  # noqa: E402

#: a chunk with a call above this many us of thread CPU (a fit, an evaluation) is counted apart
HEAVY_US = 1000.0


def _core_names() -> list[str]:
    return [name for name in sys.modules if name == "core" or name.startswith("core.")]


def imported(checkout: str) -> dict:
    """The modules of ``checkout``'s ``core`` (``core.learners`` and what it imports)."""
    for name in _core_names():
        del sys.modules[name]
    sys.path.insert(0, checkout)
    try:
        import core.learners  # noqa: F401

        modules = {name: sys.modules[name] for name in _core_names()}
    finally:
        sys.path.remove(checkout)
    origin = Path(modules["core"].__file__).resolve().parent.parent
    if origin != Path(checkout).resolve():
        raise SystemExit(f"core of {checkout} imported from {origin}")
    return modules


def use(modules: dict) -> None:
    for name in _core_names():
        del sys.modules[name]
    sys.modules.update(modules)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--stream", default="elec2")
    parser.add_argument("--learner", default="auto")
    parser.add_argument("--params", default="{}", help="the learner's parameters, JSON")
    parser.add_argument("--events", type=int, default=0, help="the first events only (0: all)")
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--warm", type=int, default=3000, help="events of an untimed warm-up")
    args = parser.parse_args(argv)
    X, y = load_stream(args.stream)
    if args.events:
        X, y = np.ascontiguousarray(X[: args.events]), y[: args.events]
    sides = {}
    for label, checkout in (("before", args.before), ("after", args.after)):
        modules = imported(checkout)
        params = {"random_state": 0, **json.loads(args.params)}
        make = modules["core.learners"].make_learner
        use(modules)
        warm = make(args.learner, **params)  # the kernels loaded (or compiled), untimed
        for k in range(min(args.warm, len(y))):
            warm.prequential_step(X[k : k + 1], y[k : k + 1])
        model = make(args.learner, **params)
        sides[label] = (modules, model, np.empty(len(y)), [], [])
    load = os.getloadavg()[0]
    clock = time.thread_time_ns
    for chunk, start in enumerate(range(0, len(y), args.chunk)):
        order = ("before", "after") if chunk % 2 == 0 else ("after", "before")
        for label in order:
            modules, model, scores, totals, heavy = sides[label]
            use(modules)
            longest, began = 0, clock()
            for k in range(start, min(start + args.chunk, len(y))):
                at = clock()
                scores[k] = model.prequential_step(X[k : k + 1], y[k : k + 1])[0]
                longest = max(longest, clock() - at)
            totals.append((clock() - began) / 1e3)
            heavy.append(longest / 1e3 > HEAVY_US)
    print(f"{args.learner} on {args.stream}, {len(y)} events one a call, chunks of {args.chunk}; "
          f"load {load:.2f} -> {os.getloadavg()[0]:.2f}")  # fmt: skip
    light = ~np.array(sides["before"][4]) & ~np.array(sides["after"][4])
    figures = {}
    for label, (_, _, _, totals, _) in sides.items():
        spent = np.array(totals)
        events = np.diff([*range(0, len(y), args.chunk), len(y)])
        figures[label] = (spent.sum() / len(y), spent[light].sum() / events[light].sum())
        print(f"{label:<7} {figures[label][0]:8.2f} us/event, {figures[label][1]:8.2f} without "
              f"the chunks with a call over {HEAVY_US:.0f} us")  # fmt: skip
    ratios = [figures["after"][k] / figures["before"][k] for k in range(2)]
    print(f"after / before: {ratios[0]:.3f}, {ratios[1]:.3f} without those chunks")
    same = np.array_equal(sides["before"][2], sides["after"][2])
    print(f"scores equal bit for bit: {same}")


if __name__ == "__main__":
    main()
