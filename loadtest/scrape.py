"""The size and time of a Prometheus scrape (``GET /metrics``) with many models, through a real
uvicorn (memory store, one worker)::

    python -m loadtest.scrape --models 10000
    python -m loadtest.scrape --models 10000 --server-path /path/to/another/checkout

Each model is created, scores one event and has its metrics read (which sets its window
gauges): three requests per model, from ``--threads`` clients; after a first scrape the last
``--active`` models do so again.  Then ``--scrapes`` scrapes:
the exposition's bytes, its samples (lines that are not comments) and the median seconds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time

from loadtest.local import checkout_parser, checkout_server, create_model

ONE_EVENT = b'{"events": [{"x": [0.1, 0.2, 0.3, 0.4, 0.5]}]}'


def main(argv: list[str] | None = None) -> int:
    import httpx

    parser = checkout_parser(__doc__)
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--active", type=int, default=100, help="models used again at the end")
    args = parser.parse_args(argv)
    settings = {"AUCSTREAM_MAX_MODELS": str(max(args.models, 1))}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    with checkout_server(args.server_path, settings, access_log=False, **quiet) as (url, _):
        started = time.monotonic()

        def populate(first: int) -> None:
            headers = {"content-type": "application/json"}
            with httpx.Client(base_url=url, timeout=600) as http:
                for index in range(first, args.models, args.threads):
                    model = f"model-{index:05d}"
                    body = {"id": model, "learner": "spam", "n_features": 5}
                    create_model(http, body)
                    scored = http.post(f"/v1/models/{model}/score", content=ONE_EVENT,
                                       headers=headers)  # fmt: skip
                    assert scored.status_code == 200
                    assert http.get(f"/v1/models/{model}/metrics").status_code == 200

        threads = [
            threading.Thread(target=populate, args=(first,)) for first in range(args.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        populated = time.monotonic() - started
        sizes, samples, seconds = [], [], []
        with httpx.Client(base_url=url, timeout=600) as http:
            # one scrape ranks the models; the last --active ones are then used again, so that
            # the models given series of their own have them filled
            http.get("/metrics")
            headers = {"content-type": "application/json"}
            for index in range(max(args.models - args.active, 0), args.models):
                model = f"model-{index:05d}"
                http.post(f"/v1/models/{model}/score", content=ONE_EVENT, headers=headers)
                http.get(f"/v1/models/{model}/metrics")
            for _ in range(args.scrapes):
                began = time.perf_counter()
                text = http.get("/metrics").text
                seconds.append(time.perf_counter() - began)
                sizes.append(len(text.encode()))
                samples.append(sum(1 for line in text.splitlines() if line and line[0] != "#"))
    print(f"server code: {args.server_path}   models: {args.models:,} (made in {populated:.0f} s)"
          f"   load: {os.getloadavg()[0]:.1f} (1 min)")  # fmt: skip
    print(f"scrape: {statistics.median(sizes) / 1e6:.2f} MB, {statistics.median(samples):,.0f} "
          f"samples, {statistics.median(seconds):.3f} s (median of {args.scrapes})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
