"""``/score`` latency while a ``boosted_embedded`` model refits in the background, against the
same load without refits (loadtest/README.md).

One uvicorn process (memory store) and one model of 50 dense features whose ensemble (50 trees
of 15 leaves, a buffer of 8,000 events) is refitted every ``--refit-every`` labelled events in
the ``refits`` condition and fitted once in ``no_refits``.  A feeder posts labelled batches of
100 events at a steady rate; single-event ``/score`` requests go out open loop at ``--rate``
per second, each latency measured from its scheduled send time.  The conditions alternate
(``--rounds``); the fits installed are read from the model's snapshot (``learner:fits``).

    python -m loadtest.refit_latency [--seconds 20] [--rounds 2] [--rate 100]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtest.local import free_port, start_uvicorn, wait_ready  # noqa: E402

N_FEATURES = 50
BATCH = 100


def stream(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES))
    y = (X[:, 0] * X[:, 1] + X[:, 2] + 0.5 * rng.normal(size=n) > 1.0).astype(int)
    return X, y


def body(X, y=None):
    events = [{"x": row.tolist()} for row in X]
    if y is not None:
        for event, label in zip(events, y, strict=True):
            event["y"] = int(label)
    return {"events": events}


def post(client, url, json):
    client.post(url, json=json).raise_for_status()


def fits(client, model_id):
    response = client.get(f"/v1/models/{model_id}/snapshot")
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        return int(np.load(io.BytesIO(archive.read("arrays/learner:fits.npy")))[0])


def run(client, model_id, refit_every, seconds, rate, seed):
    import httpx

    params = {"n_trees": 50, "max_leaves": 15, "buffer_size": 8000, "first_fit": 1000,
              "refit_every": refit_every}  # fmt: skip
    created = client.post(
        "/v1/models",
        json={
            "id": model_id,
            "n_features": N_FEATURES,
            "learner": "boosted_embedded",
            "params": params,
        },
    )
    created.raise_for_status()
    X, y = stream(8000 + int(seconds * 1000) + 2000, seed)
    for start in range(0, 8000, 1000):  # the buffer filled and the first fit done
        post(client, f"/v1/models/{model_id}/events",
                    json=body(X[start : start + 1000], y[start : start + 1000]))  # fmt: skip
    deadline = time.monotonic() + 120
    while fits(client, model_id) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    before = fits(client, model_id)
    stop = threading.Event()

    def feed():  # 10 batches of 100 labelled events a second, on a connection of its own
        position, tick = 8000, time.monotonic()
        feeder_client = httpx.Client(base_url=str(client.base_url), timeout=60)
        while not stop.is_set() and position + BATCH <= len(y):
            post(
                feeder_client,
                f"/v1/models/{model_id}/events",
                json=body(X[position : position + BATCH], y[position : position + BATCH]),
            )
            position += BATCH
            tick += 0.1
            stop.wait(max(0.0, tick - time.monotonic()))
        feeder_client.close()

    feeder = threading.Thread(target=feed)
    feeder.start()
    latencies = []
    one = body(X[:1])
    started = time.monotonic()
    for k in range(int(seconds * rate)):
        scheduled = started + k / rate
        time.sleep(max(0.0, scheduled - time.monotonic()))
        response = client.post(f"/v1/models/{model_id}/score", json=one)
        response.raise_for_status()
        latencies.append(time.monotonic() - scheduled)
    stop.set()
    feeder.join()
    installed = fits(client, model_id) - before
    client.delete(f"/v1/models/{model_id}")
    return np.array(latencies) * 1000.0, installed


def main(argv=None) -> int:
    import httpx

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100.0, help="/score requests a second")
    parser.add_argument("--refit-every", type=int, default=1000)
    args = parser.parse_args(argv)
    port = free_port()
    env = {
        **os.environ,
        "AUCSTREAM_STORE": "memory",
        "AUCSTREAM_WARMUP": "false",
        "PYTHONPATH": str(ROOT),
    }
    server = start_uvicorn(port, env, access_log=False)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server, timeout=300)
        with httpx.Client(base_url=url, timeout=60) as client:
            warm = run(client, "warm", 1000, 2.0, args.rate, seed=99)  # kernels compiled
            print(f"warm-up: {warm[1]} fits")
            print(f"{'condition':<10} {'fits':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
            for round_ in range(args.rounds):
                for name, every in (("no_refits", None), ("refits", args.refit_every)):
                    latency, installed = run(client, f"{name}{round_}", every, args.seconds,
                                             args.rate, seed=round_)  # fmt: skip
                    p50, p99 = np.percentile(latency, [50, 99])
                    print(f"{name:<10} {installed:>5} {p50:>8.2f} {p99:>8.2f} "
                          f"{latency.max():>8.2f}", flush=True)  # fmt: skip
            print("load average:", open("/proc/loadavg").read().strip())
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
