"""CPU per call of parsing the bodies the load tests send (``parse_events``, and
``parse_label_items`` for ``/labels``), in-process, for checkouts alternated in one run.

``python -m loadtest.ingest_parse --peer before=DIR --peer after=.`` (``DIR`` e.g. a
``git archive`` of the code before a change); prints wall and CPU microseconds per call of
each, their ratio to the first peer, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: (name, content type or "labels", events) of the bodies measured
BODIES = [("json 1 event", "application/json", 1), ("json 1000", "application/json", 1000),
          ("ndjson 1000", "application/x-ndjson", 1000), ("libsvm 1000", "text/x-libsvm", 1000),
          ("labels 1000", "labels", 1000)]  # fmt: skip


def measure() -> dict[str, tuple[float, float]]:
    """Median over 5 repeats of (wall s, CPU s) per call, for each body (in this checkout)."""
    import numpy as np
    import orjson

    from service.ingest import FeatureSpec, parse_events, parse_label_items

    rng = np.random.default_rng(0)
    spec = FeatureSpec(20, "dense")
    results = {}
    for name, kind, n in BODIES:
        rows = rng.normal(size=(n, 20)).round(6)
        events = [{"id": f"e{i}", "x": rows[i].tolist(), "y": int(i % 7 == 0)} for i in range(n)]
        if kind == "labels":
            body = orjson.dumps([{"id": e["id"], "y": e["y"]} for e in events])
            call = lambda body=body: parse_label_items(body, 10**5)  # noqa: E731
        else:
            if kind == "application/json":
                body = orjson.dumps({"events": events})
            elif kind == "application/x-ndjson":
                body = b"\n".join(orjson.dumps(event) for event in events)
            else:
                body = "\n".join(
                    f"{1 if e['y'] else -1} "
                    + " ".join(f"{k + 1}:{v}" for k, v in enumerate(e["x"]))
                    + f" # {e['id']}"
                    for e in events
                ).encode()
            call = lambda body=body, kind=kind: parse_events(  # noqa: E731
                body, kind, spec, labelled=True, max_events=10**5
            )
        for _ in range(50):
            call()
        calls = 20_000 if n == 1 else 300
        repeats = []
        for _ in range(5):
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                call()
            repeats.append(
                ((time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls)
            )
        results[name] = sorted(repeats)[2]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    peers = dict(peer.split("=", 1) for peer in args.peer)
    runs: dict[str, list[dict]] = {name: [] for name in peers}
    loads = []
    for round_ in range(args.rounds):
        order = list(peers) if round_ % 2 == 0 else list(reversed(peers))
        for name in order:
            loads.append(os.getloadavg()[0])
            env = {**os.environ, "PYTHONPATH": os.path.abspath(peers[name])}
            command = [sys.executable, "-c", "import json, loadtest.ingest_parse as m; "
                       "print(json.dumps(m.measure()))"]  # fmt: skip
            env["PYTHONPATH"] += os.pathsep + os.path.dirname(os.path.dirname(__file__))
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = next(iter(peers))
    print(f"load average {min(loads):.1f}-{max(loads):.1f}; {args.rounds} rounds alternated")
    print("| body | peer | wall us | CPU us | CPU / " + first + " |")
    print("|---|---|---|---|---|")
    for name, _, _ in BODIES:
        base = statistics.median(run[name][1] for run in runs[first])
        for peer in peers:
            wall = statistics.median(run[name][0] for run in runs[peer]) * 1e6
            cpu = statistics.median(run[name][1] for run in runs[peer])
            print(f"| {name} | {peer} | {wall:.1f} | {cpu * 1e6:.1f} | {cpu / base:.2f} |")


if __name__ == "__main__":
    main()
