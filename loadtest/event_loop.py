"""Does the server keep answering while it does heavy work?  ``/healthz`` latency, polled every
20 ms over a second connection, while one heavy request runs, through a real uvicorn::

    python -m loadtest.event_loop                 # this checkout's service
    python -m loadtest.event_loop --server-path /path/to/another/checkout   # e.g. the code before

Heavy requests (memory store, one uvicorn worker, kernels compiled before: ``/readyz``):

``hashed-json``   ``--hashed-mb`` of JSON for a hashed model, a new feature name per value
                  (the slowest body to parse, ~200 ns per byte)
``ndjson-line``   one NDJSON line of ``--line-mb`` (an event of a dense model that wide)
``snapshot``      export of a dense ``spam`` model of ``--snapshot-features`` features after
                  learning two events (its state arrays deflated into a zip)

Prints, per request: its duration, how many ``/healthz`` answered meanwhile, their median and
maximum latency.  A maximum near the request's duration means the event loop was held.
"""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time

import numpy as np
import orjson

from loadtest.local import checkout_parser, checkout_server, latency_ms


def hashed_body(megabytes: float) -> bytes:
    rng = np.random.default_rng(5)
    n_events = max(1, int(megabytes * 1e6 / 380))  # ~380 bytes per event of 20 names
    names = rng.integers(1 << 40, size=(n_events, 20))
    events = [
        {"x": {f"k{name:x}": 1.0 for name in row}, "y": int(index % 3 == 0)}
        for index, row in enumerate(names)
    ]
    return orjson.dumps({"events": events})


def one_line_body(megabytes: float) -> tuple[bytes, int]:
    value = b"0.123456789012,"
    n_features = int(megabytes * 1e6) // len(value)
    return b'{"y": 1, "x": [' + (value * n_features)[:-1] + b"]}\n", n_features


def npz_body(n_features: int) -> bytes:
    rng = np.random.default_rng(1)
    buffer = io.BytesIO()
    np.savez(buffer, X=rng.normal(size=(2, n_features)), y=np.array([1, 0]))
    return buffer.getvalue()


def during(http_url: str, heavy) -> tuple[float, list[float]]:
    """Run ``heavy()`` in a thread, poll /healthz until it returns; (its seconds, latencies)."""
    import httpx

    outcome: dict = {}

    def run() -> None:
        started = time.perf_counter()
        outcome["status"] = heavy()
        outcome["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=run)
    latencies = []
    with httpx.Client(base_url=http_url, timeout=300) as http:
        http.get("/healthz")  # the connection is open before the heavy request starts
        thread.start()
        while thread.is_alive():
            started = time.perf_counter()
            http.get("/healthz")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.02)
    thread.join()
    if outcome.get("status") not in (200, 201):
        raise RuntimeError(f"heavy request answered {outcome.get('status')}")
    return outcome["seconds"], latencies


def main(argv: list[str] | None = None) -> int:
    import httpx

    parser = checkout_parser(__doc__)
    parser.add_argument("--hashed-mb", type=float, default=16.0)
    parser.add_argument("--line-mb", type=float, default=20.0)
    parser.add_argument("--snapshot-features", type=int, default=2_000_000)
    args = parser.parse_args(argv)
    rows = []
    served = checkout_server(args.server_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with served as (url, _), httpx.Client(base_url=url, timeout=600) as http:

        def create(body: dict) -> None:
            response = http.post("/v1/models", json=body)
            assert response.status_code == 201, response.text

        def post(model: str, body: bytes, content_type: str) -> int:
            with httpx.Client(base_url=url, timeout=600) as client:
                headers = {"content-type": content_type}
                return client.post(
                    f"/v1/models/{model}/events", content=body, headers=headers
                ).status_code

        body = hashed_body(args.hashed_mb)
        create({"id": "hashed", "n_features": 2**20, "feature_mode": "hashed",
                "learner": "spam"})  # fmt: skip
        seconds, latencies = during(url, lambda: post("hashed", body, "application/json"))
        rows.append((f"hashed-json {len(body) / 1e6:.0f} MB", seconds, latencies))

        line, width = one_line_body(args.line_mb)
        create({"id": "wide", "n_features": width, "learner": "spam", "scaling": "none"})
        seconds, latencies = during(url, lambda: post("wide", line, "application/x-ndjson"))
        rows.append((f"ndjson-line {len(line) / 1e6:.0f} MB", seconds, latencies))

        create({"id": "big", "n_features": args.snapshot_features, "learner": "spam",
                "scaling": "none"})  # fmt: skip
        assert post("big", npz_body(args.snapshot_features), "application/x-npz") == 200

        def export() -> int:
            with httpx.Client(base_url=url, timeout=600) as client:
                return client.get("/v1/models/big/snapshot").status_code

        seconds, latencies = during(url, export)
        rows.append((f"snapshot {args.snapshot_features:,} features", seconds, latencies))
    print(f"server code: {args.server_path}   load: {os.getloadavg()[0]:.2f} (1 min)")
    print(f"{'heavy request':32s} {'seconds':>8} {'healthz':>8} {'median ms':>10} {'max ms':>8}")
    for name, seconds, latencies in rows:
        median, _, worst = latency_ms(latencies)
        print(f"{name:32s} {seconds:8.2f} {len(latencies):8d} {median:10.1f} {worst:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
