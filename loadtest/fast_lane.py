"""What the short lane of ``POST /events`` and ``/score`` (``service.fastlane``) saves per
request, in-process: the same app answering one-event requests through the lane and through
FastAPI's whole stack (the app's router holds the same routes), alternated.

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
from fastapi import FastAPI
from fastapi.testclient import TestClient

from loadtest.breakdown import _asgi_call
from service.app import create_app
from service.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--features", type=int, default=20)
    args = parser.parse_args()
    settings = Settings(store=args.store, warmup=False, data_dir=tempfile.mkdtemp())
    app = create_app(settings)
    x = [0.1 * k for k in range(args.features)]
    serial = 0

    async def run(call, route: str, n: int) -> float:
        nonlocal serial
        started = time.process_time()
        for _ in range(n):
            serial += 1
            event = {"id": f"e{serial}", "x": x, **({"y": 1} if route == "events" else {})}
            body = orjson.dumps({"events": [event]})
            status = await _asgi_call(
                call, "POST", f"/v1/models/m/{route}", body, b"application/json"
            )
            assert status == 200, status
        return (time.process_time() - started) / n * 1e3

    def through_fastapi(scope, receive, send):
        return FastAPI.__call__(app, scope, receive, send)

    with TestClient(app) as client:
        created = client.post("/v1/models", json={"id": "m", "n_features": args.features})
        assert created.status_code == 201, created.text
        figures: dict[tuple[str, str], list[float]] = {}
        for route in ("score", "events"):
            for call in (app, through_fastapi):
                client.portal.call(run, call, route, 200)  # warm
        for _ in range(args.rounds):
            for route in ("score", "events"):
                for name, call in (("lane", app), ("fastapi", through_fastapi)):
                    cpu = client.portal.call(run, call, route, args.requests)
                    figures.setdefault((route, name), []).append(cpu)
    print(f"store {args.store}, {args.features} features, CPU ms per one-event request:")
    for (route, name), values in figures.items():
        spread = f"{min(values):.4f}-{max(values):.4f}"
        print(f"  /{route:6} {name:8} {statistics.median(values):.4f} ({spread})")


if __name__ == "__main__":
    main()
