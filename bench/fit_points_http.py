"""The default model over HTTP learns what the library learns, bit for bit, with its boosted
trees fitted by the service's background fitter; how often and how long the install points
wait for it, on an idle and on a loaded machine (bench/README.md, "Fit points over HTTP").

For each real set (bench/datasets.py; at most ``--max-n`` of its events, in an order shuffled with a
fixed seed, since some files are sorted by class): an in-process app (memory store, the
refitter running, as ``aucstream serve`` runs it), one default model (``auto``), the set posted
in order in requests of ``--batch`` events, as fast as one client sends them; then the
committed learner state against ``make_learner`` with the model's parameters learning the same
events in one ``partial_fit``, array by array.  ``--hog N`` runs N busy processes (a CPU hog,
at the default priority) during the set.  The waits are the model's fit status
(docs/api.md, "Fit status").

    python bench/fit_points_http.py [--sets satimage_4 magic sylva] [--batch 10] [--hog 0]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.datasets import load  # noqa: E402

HOG = "while True: pass"
SHUFFLE_SEED = 0


def model_body(d: int, fit_delay: int | None) -> dict:
    """The default model, or with its boosted candidate's ``fit_delay`` set."""
    if fit_delay is None:
        return {"id": "m", "n_features": d}
    from core.learners._candidates import default_candidates

    candidates = [
        {**spec, "params": {**spec["params"], "fit_delay": fit_delay}}
        if spec["learner"] == "boosted_embedded"
        else spec
        for spec in default_candidates(d, track_drift=True)
    ]
    return {"id": "m", "n_features": d, "params": {"candidates": candidates}}


def run_set(name: str, batch: int, max_n: int, fit_delay: int | None) -> dict:
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    X, y, _ = load(name)
    # some files are sorted by class: a fixed shuffle makes a stream of them
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(y))[:max_n]
    X, y = np.ascontiguousarray(X[order]), y[order]
    settings = Settings(store="memory", warmup=False)
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/models", json=model_body(X.shape[1], fit_delay))
        assert created.status_code == 201, created.text
        started, cpu = time.perf_counter(), time.process_time()
        for first in range(0, len(y), batch):
            rows = slice(first, first + batch)
            body = {"events": [{"x": row.tolist(), "y": int(label)}
                               for row, label in zip(X[rows], y[rows], strict=True)]}  # fmt: skip
            response = client.post("/v1/models/m/events", json=body)
            assert response.status_code == 200, response.text
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        fits = client.get("/v1/models/m").json()["fits"]
        repository = client.app.state.engine.repository
        repository.drop("m")
        served = repository.read("m").learner
    library = type(served)(**served.get_params()).partial_fit(X, y)
    expected, state = library.get_state(), served.get_state()
    same = expected.keys() == state.keys() and all(
        np.array_equal(expected[key], state[key]) for key in expected
    )
    return {
        "set": name, "n": len(y), "d": X.shape[1], "seconds": seconds, "cpu": cpu,
        "fits": sum(part["fits"] for part in fits),
        "waits": sum(part["waits"] for part in fits),
        "wait_s": sum(part["wait_seconds"] for part in fits),
        "in_call": sum(part["fits_in_call"] for part in fits),
        "same": same, "load": os.getloadavg()[0],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["satimage_4", "magic", "sylva"])
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--max-n", type=int, default=20_000)
    parser.add_argument("--hog", type=int, default=0, help="busy processes during each set")
    parser.add_argument("--fit-delay", type=int, nargs="+", default=[None],
                        help="the boosted candidate's fit_delay (default: its own)")  # fmt: skip
    args = parser.parse_args(argv)
    print(f"requests of {args.batch} events; {args.hog} busy processes")
    print("| set | fit_delay | n | d | events/s | CPU s | fits | waits | waited s | "
          "fitted in call | bit for bit | load (1 min) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for name in args.sets:
        for delay in args.fit_delay:  # alternated within each set
            hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hog)]
            try:
                row = run_set(name, args.batch, args.max_n, delay)
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
            print_row(row, delay)
    return 0


def print_row(row: dict, delay: int | None) -> None:
    rate = row["n"] / row["seconds"]
    same = "yes" if row["same"] else "NO"
    print(f"| {row['set']} | {delay or 256} | {row['n']} | {row['d']} | {rate:.0f} | "
          f"{row['cpu']:.1f} | {row['fits']} | {row['waits']} | {row['wait_s']:.2f} | "
          f"{row['in_call']} | {same} | {row['load']:.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
