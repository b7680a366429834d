"""What the lane (``service.fastlane``) saves per request, in-process: the same app answering
``GET /healthz``, one-event ``/score`` and ``/events`` and one-label ``/labels`` through the
lane, and through FastAPI's routing and parameter resolution (the lane emptied: the routes are
declared once, on FastAPI routers, so both serve the same declaration behind the same ASGI
layer), alternated.

    python -m loadtest.fast_lane [--requests 4000] [--rounds 5] [--store memory]

CPU of this process per request (``time.process_time``: independent of how busy the machine
is), the median over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import orjson
from fastapi.testclient import TestClient

from loadtest.breakdown import asgi_call
from service.app import create_app
from service.settings import Settings

ROUTES = ("healthz", "score", "events", "labels")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--features", type=int, default=20)
    # a learner of constant cost: the default auto's first thousands of events cost ms each
    parser.add_argument("--learner", default="spam")
    args = parser.parse_args()
    settings = Settings(store=args.store, warmup=False, data_dir=tempfile.mkdtemp())
    app = create_app(settings)
    lane = app.lane_routes
    x = [0.1 * k for k in range(args.features)]
    serial = 0

    async def run(route: str, n: int) -> float:
        nonlocal serial
        started = time.process_time()
        for _ in range(n):
            serial += 1
            if route == "healthz":
                status = await asgi_call(app, "GET", "/healthz", b"")
            elif route == "labels":  # a label for an id never scored: answered "unknown"
                body = orjson.dumps([{"id": f"l{serial}", "y": 1}])
                status = await asgi_call(app, "POST", "/v1/models/m/labels", body)
            else:
                label = {"y": 1 if serial % 7 == 0 else -1} if route == "events" else {}
                event = {"id": f"e{serial}", "x": x, **label}
                body = orjson.dumps({"events": [event]})
                status = await asgi_call(app, "POST", f"/v1/models/m/{route}", body)
            assert status == 200, status
        return (time.process_time() - started) / n * 1e3

    with TestClient(app) as client:
        created = client.post(
            "/v1/models", json={"id": "m", "n_features": args.features, "learner": args.learner}
        )
        assert created.status_code == 201, created.text
        figures: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds + 1):  # the first round warms up
            for route in ROUTES:
                for name, routes in (("lane", lane), ("fastapi", [])):
                    app.lane_routes = routes
                    cpu = client.portal.call(run, route, args.requests if round_ else 200)
                    if round_:
                        figures.setdefault((route, name), []).append(cpu)
        app.lane_routes = lane
    print(f"store {args.store}, {args.learner}, {args.features} features, CPU ms per request:")
    for (route, name), values in figures.items():
        spread = f"{min(values):.4f}-{max(values):.4f}"
        print(f"  {route:8} {name:8} {statistics.median(values):.4f} ({spread})")


if __name__ == "__main__":
    main()
