"""``auto``'s one-event call on Elec2 in two checkouts at once, in lockstep: each checkout's
model in a process of its own, warmed as bench/auto_event_parts.py warms it (8,100 events in
batches of 100, then 300 one at a time), then blocks of ``--events`` one-event calls run in
turn, one checkout's block after the other's (the order alternating), ``--blocks`` times.  A
slow spell of the shared machine falls on both checkouts' neighbouring blocks, so the ratio of
each pair of blocks is steadier than that of separate runs.  Not a test: prints one line.

``--layers``: the candidates' ``_learn`` replaced by a fill of their score rows, so that the
blocks time auto's own layers around them (validation, scaling, segments, the served scores'
kernel, the drift detector, the grown-state check) apart from the candidates' learning.

    python bench/auto_lockstep.py --before /work/main [--layers] [--blocks 40] [--events 300]

Printed: each checkout's median and lowest per-block thread CPU us per event, and the median
(and quartiles) of the ratios of paired blocks, this checkout over ``--before``, with the load.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def child(layers: bool) -> None:
    """Warm a model, then run a block of one-event calls for each line read (its size),
    writing each block's thread CPU us per event."""
    sys.path.insert(0, str(ROOT / "bench"))
    from auto_event_parts import warmed_auto

    model, X, y, event = warmed_auto(8100, 300)
    if layers:
        count = itertools.count()
        for k, candidate in enumerate(model._candidates):

            def fill(rows, labels, scores, k=k):
                scores[:] = (next(count) % 7) * 0.1 + k

            candidate._learn = fill
    at = event.start
    print("ready", flush=True)
    for line in sys.stdin:
        n_events = int(line)
        if at + n_events > len(y):
            at = event.start
        begun = time.thread_time_ns()
        for i in range(at, at + n_events):
            model.prequential_step(X[i : i + 1], y[i : i + 1])
        at += n_events
        print((time.thread_time_ns() - begun) / n_events / 1e3, flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the checkout compared with this one")
    parser.add_argument("--layers", action="store_true", help="the candidates' learning left out")
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.layers)
        return
    trees = {"before": args.before, "after": str(ROOT)}
    processes = {}
    for name, code in trees.items():
        environment = dict(os.environ, PYTHONPATH=code, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
        command = [sys.executable, __file__, "--child", "--before", args.before,
                   *(["--layers"] if args.layers else [])]  # fmt: skip
        processes[name] = subprocess.Popen(
            command, env=environment, cwd=code, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
    for process in processes.values():
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("a child failed to start")
    times: dict[str, list[float]] = {name: [] for name in trees}
    for block in range(args.blocks):
        for name in list(trees) if block % 2 == 0 else list(trees)[::-1]:
            processes[name].stdin.write(f"{args.events}\n")
            processes[name].stdin.flush()
            times[name].append(float(processes[name].stdout.readline()))
    for process in processes.values():
        process.stdin.close()
        process.wait()
    before, after = np.array(times["before"]), np.array(times["after"])
    ratios = after / before
    print(f"{'layers' if args.layers else 'whole call'}: {args.blocks} blocks of {args.events} "
          f"events, thread CPU us/event: before median {np.median(before):.1f} (lowest "
          f"{before.min():.1f}), after median {np.median(after):.1f} (lowest {after.min():.1f});"
          f" after/before of paired blocks: median {np.median(ratios):.3f} (quartiles "
          f"{np.percentile(ratios, 25):.3f}-{np.percentile(ratios, 75):.3f}); "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
