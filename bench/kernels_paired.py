"""Kernel cost of two checkouts side by side: one long-lived process per checkout, timed in turn.

Not a test: prints one table.  Usage::

    python bench/kernels_paired.py --peer before=/work/wt/B --peer after=. \\
        --cases logistic-ftrl-dense50,logistic-ftrl-csr --rounds 40

Method: each peer process imports its own checkout, builds the ``kernels.py`` cases of that
checkout (the same batches: same seeds) and compiles them into a private ``NUMBA_CACHE_DIR``.
Then every round times one ``_learn`` call of each case in the first peer, then in the second
(the order swapped every round), so that both sides meet the same load on a shared machine.
Per case: the best CPU seconds of each side, their ratio, and the median of the per-round
ratios (second peer over first: above 1, the second is slower).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

#: the peer process: reads the case names, compiles them, then times one call per line read
_PEER = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import numpy as np
import kernels
from core.learners import make_learner
from core.validation import check_batch

made = {}
for name in sys.stdin.readline().split():
    case = kernels.CASES[name]
    X, y = case["data"](int(os.environ["PAIRED_EVENTS"]))
    X, labels = check_batch(X, y)
    learner = make_learner(case["learner"], **case["params"])
    learner.initialize(X.shape[1])
    learner._learn(X, labels, np.empty(0))  # compiles, and warms the caches
    made[name] = (learner, X, labels)
print("ready", flush=True)
for line in sys.stdin:
    learner, X, labels = made[line.strip()]
    started = time.process_time()
    learner._learn(X, labels, np.empty(0))
    print(json.dumps(time.process_time() - started), flush=True)
"""


def start_peer(path: str, cases: list[str], n_events: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=path, PAIRED_EVENTS=str(n_events), NUMBA_NUM_THREADS="1",
               NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="aucstream-paired-jit-"))  # fmt: skip
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    peer = subprocess.Popen([sys.executable, "-c", _PEER], cwd=path, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert peer.stdin is not None
    peer.stdin.write(" ".join(cases) + "\n")
    peer.stdin.flush()
    return peer


def timed(peer: subprocess.Popen, case: str) -> float:
    assert peer.stdin is not None and peer.stdout is not None
    peer.stdin.write(case + "\n")
    peer.stdin.flush()
    return float(json.loads(peer.stdout.readline()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="append", required=True, metavar="NAME=PATH",
                        help="a checkout to time, twice: first the reference")  # fmt: skip
    parser.add_argument("--cases", required=True, help="kernels.py case names, comma-separated")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--events", type=int, default=50_000)
    args = parser.parse_args(argv)
    if len(args.peer) != 2 or not all("=" in peer for peer in args.peer):
        parser.error("give two --peer NAME=PATH")
    names, paths = zip(*(peer.split("=", 1) for peer in args.peer), strict=True)
    cases = args.cases.split(",")
    peers = [start_peer(os.path.abspath(path), cases, args.events) for path in paths]
    for peer in peers:
        assert peer.stdout is not None and peer.stdout.readline().strip() == "ready"
    seconds: dict[tuple[int, str], list[float]] = {(side, c): [] for side in (0, 1) for c in cases}
    ratios: dict[str, list[float]] = {case: [] for case in cases}
    for round_ in range(args.rounds):
        for case in cases:
            got = {}
            for side in (0, 1) if round_ % 2 == 0 else (1, 0):
                got[side] = timed(peers[side], case)
                seconds[side, case].append(got[side])
            ratios[case].append(got[1] / got[0])
    for peer in peers:
        assert peer.stdin is not None
        peer.stdin.close()
        peer.wait()
    first, second = names
    print(f"CPU seconds per {args.events:,} events, best of {args.rounds} rounds, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'case':<30} {first:>10} {second:>10} {'ratio':>7} {'median ratio':>13}")
    for case in cases:
        low, high = min(seconds[0, case]), min(seconds[1, case])
        median = statistics.median(ratios[case])
        print(f"{case:<30} {low:>10.4f} {high:>10.4f} {high / low:>7.3f} {median:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
