"""What ``/score?reasons=3`` costs for one event on the default ``auto`` at 50 features, its
tree fitted (docs/algorithms/reasons.md).

Not a test: prints the median time per call of scoring one event without and with reasons,
alternated, through the engine (``Engine.score``: lock, load, score, reasons) and through the
whole app in process (``TestClient``: parsing and the JSON answer too).  Usage::

    nice -n 5 python bench/reasons_cost.py --repeats 3000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from fastapi.testclient import TestClient

from service.app import create_app
from service.ingest import Batch
from service.settings import Settings


def median_us(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return float(np.median(times)) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3000)
    parser.add_argument("--features", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    d = args.features
    with TestClient(create_app(Settings(store="memory", warmup=False))) as client:
        created = client.post("/v1/models", json={"id": "m", "n_features": d})
        assert created.status_code == 201, created.text
        direction = rng.normal(size=d)
        for _ in range(9):  # 9,000 events: the tree is fitted (2,000) and refitted (8,000)
            y = (rng.random(1000) < 0.1).astype(int)
            X = rng.normal(size=(1000, d)) + 0.8 * y[:, None] * direction
            events = [
                {"x": row, "y": int(label)}
                for row, label in zip(X.tolist(), y.tolist(), strict=True)
            ]
            assert client.post("/v1/models/m/events", json={"events": events}).status_code == 200
        event = rng.normal(size=(1, d))
        engine = client.app.state.services.engine
        batch = Batch(np.ascontiguousarray(event), None, None)
        body = {"events": [{"x": event[0].tolist()}]}
        for k in (0, 3):  # warm both paths
            engine.score("m", batch, keep=False, reasons=k)
            client.post(f"/v1/models/m/score?keep=false&reasons={k}", json=body)
        rounds = {("engine", 0): [], ("engine", 3): [], ("http", 0): [], ("http", 3): []}
        for _ in range(5):
            for k in (0, 3):

                def engine_call(k=k):
                    return engine.score("m", batch, keep=False, reasons=k)

                rounds["engine", k].append(median_us(engine_call, args.repeats))
                rounds["http", k].append(median_us(
                    lambda k=k: client.post(f"/v1/models/m/score?keep=false&reasons={k}",
                                            json=body), args.repeats // 3))  # fmt: skip
        for path in ("engine", "http"):
            without, with_reasons = np.median(rounds[path, 0]), np.median(rounds[path, 3])
            print(f"{path:7s} score one event: {without:8.1f} us   with reasons=3: "
                  f"{with_reasons:8.1f} us   (+{with_reasons - without:.1f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
