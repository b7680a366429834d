"""Where the time of one request goes: CPU time per stage, measured in-process.

Complements ``loadtest.run`` (throughput and latency over real sockets) with a breakdown that
does not depend on the generator or on how much of the shared CPU the server got::

    python -m loadtest.breakdown              # memory store; add --redis for the Redis store

Stages, per request of ``--batch`` events (or of one event: ``/score`` and ``/events``) with
``--features`` dense features (CPU seconds of this process, ``time.process_time``, so time spent
waiting for a busy CPU is not counted):

``parse``   body -> validated batch (``service.ingest``)
``learn``   ``Engine.learn``: learner kernel, scaling, metrics window, commit to the store
``asgi``    the whole request through the ASGI app (FastAPI routing, dependencies, parsing,
            learning, response) without sockets; ``asgi - parse - learn`` is framework cost
Redis CPU per request is read from ``INFO cpu`` (its own process).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
import orjson

from loadtest.local import private_redis
from loadtest.run import MODEL_HELP, json_body, make_batches, model_settings, npz_body


async def asgi_call(
    app, method: str, path: str, body: bytes = b"", content_type: bytes = b"application/json"
) -> int:
    """One request straight into the ASGI ``app`` (no server, no socket): its status."""
    headers = [(b"host", b"127.0.0.1:8000")]
    if body:
        headers += [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(),
        "query_string": b"", "http_version": "1.1", "scheme": "http", "root_path": "",
        "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 1), "headers": headers,
    }  # fmt: skip
    status = 0
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def cpu_per_call(function, repeats: int) -> float:
    for _ in range(min(20, repeats)):
        function()
    started = time.process_time()
    for _ in range(repeats):
        function()
    return (time.process_time() - started) / repeats


async def asgi_cpu(app, path: str, bodies: list[bytes], content_type: bytes, repeats: int) -> float:
    for number in range(min(20, repeats)):
        assert await asgi_call(app, "POST", path, bodies[number % len(bodies)], content_type) == 200
    started = time.process_time()
    for number in range(repeats):
        await asgi_call(app, "POST", path, bodies[number % len(bodies)], content_type)
    return (time.process_time() - started) / repeats


def redis_cpu(url: str | None) -> float:
    if url is None:
        return float("nan")
    import redis

    client = redis.Redis.from_url(url)
    info = client.info("cpu")
    client.close()
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def measure(args: argparse.Namespace, redis_url: str | None) -> list[tuple]:
    from service.app import create_app
    from service.ingest import parse_events
    from service.settings import Settings

    store = "redis" if redis_url else "memory"
    app = create_app(Settings(store=store, redis_url=redis_url, warmup=False))
    rows = []
    async with app.router.lifespan_context(app):
        engine = app.state.engine
        batches = list(make_batches(8, args.batch, args.features))
        single = [orjson.dumps({"events": [{"x": X[0].tolist()}]}) for X, _ in batches]
        single_labelled = [
            orjson.dumps({"events": [{"x": row.tolist(), "y": int(label)}]})
            for X, y in batches
            for row, label in zip(X[:32], y[:32], strict=True)
        ]
        cases = [
            ("ingest-json", "application/json", [json_body(X, y) for X, y in batches], True),
            ("ingest-npz", "application/x-npz", [npz_body(X, y) for X, y in batches], True),
            ("score (1 event)", "application/json", single, False),
            ("events (1 event)", "application/json", single_labelled, True),
        ]
        for name, content_type, bodies, labelled in cases:
            model = name.split()[0]
            await asgi_call(app, "POST", "/v1/models",
                             orjson.dumps({"learner": "spam", **args.model, "id": model,
                                           "n_features": args.features}),
                             b"application/json")  # fmt: skip
            spec = engine.spec(model)
            parsed = [
                parse_events(body, content_type, spec, labelled=labelled, max_events=10**7)
                for body in bodies
            ]
            repeats = args.repeats * 10 if len(parsed[0]) == 1 else args.repeats
            counter = iter(range(10**9))

            def parse(
                bodies=bodies,
                content_type=content_type,
                labelled=labelled,
                spec=spec,
                counter=counter,
            ):
                body = bodies[next(counter) % len(bodies)]
                parse_events(body, content_type, spec, labelled=labelled, max_events=10**7)

            def work(parsed=parsed, model=model, labelled=labelled, counter=counter):
                batch = parsed[next(counter) % len(parsed)]
                if labelled:
                    engine.learn(model, batch)
                else:
                    engine.score(model, batch, keep=False)

            parse_cpu = cpu_per_call(parse, repeats)
            work_cpu = cpu_per_call(work, repeats)
            path = f"/v1/models/{model}/{'events' if labelled else 'score'}"
            redis_before = redis_cpu(redis_url)
            asgi = await asgi_cpu(app, path, bodies, content_type.encode(), repeats)
            redis_per_request = (redis_cpu(redis_url) - redis_before) / repeats
            rows.append((store, name, parse_cpu, work_cpu, asgi, redis_per_request))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", action="store_true", help="also measure the Redis store")
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--model", type=model_settings, default={}, help=MODEL_HELP)
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(args, None))
    if args.redis:
        with private_redis() as (url, _):
            rows += asyncio.run(measure(args, url))
    header = ("store", "request", "parse ms", "learn/score ms", "asgi total ms",
              "framework ms", "redis ms", "ceiling ev/s (1 core)")  # fmt: skip
    lines = [header]
    for store, name, parse_cpu, work_cpu, asgi, redis_ms in rows:
        events = 1 if "(1 event)" in name else args.batch
        lines.append((
            store, name, f"{parse_cpu * 1e3:.3f}", f"{work_cpu * 1e3:.3f}", f"{asgi * 1e3:.3f}",
            f"{(asgi - parse_cpu - work_cpu) * 1e3:.3f}",
            "-" if np.isnan(redis_ms) else f"{redis_ms * 1e3:.3f}",
            f"{events / asgi:,.0f}",
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for number, line in enumerate(lines):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if number == 0:
            print("  ".join("-" * width for width in widths))
    print(
        "\nCPU time of this process per request; 'ceiling' = events/s one uncontended core "
        "could serve at that cost (uvicorn's socket handling, ~0.1 ms/request, excluded)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
