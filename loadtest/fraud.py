"""A fraud pipeline against a live stack: score every transaction, label it later, plus bursts.

Run (starts its own redis-server, uvicorn API and, in queue mode, one worker; loopback only)::

    python -m loadtest.fraud                                   # queue mode, 20 s
    python -m loadtest.fraud --mode sync --seconds 30 --rate 500
    python -m loadtest.fraud --url http://127.0.0.1:8000       # an existing server

Why not locust: it is not installed here, and a Python HTTP client per request (locust's or
httpx's) costs far more CPU than the raw keep-alive client of :mod:`loadtest.client`
(microseconds per request) on a 2-core machine the generator shares with the server, where
that CPU would show up as server latency.

What it does, concurrently, for ``--seconds`` (bounded in time and in requests):

``score``   the payment flow: one ``POST /score`` per transaction with its id (the service
            keeps the features and the score for the label), open loop at ``--rate``
            transactions/s; latency is measured from the scheduled send time (no
            coordinated omission).  ``--fraud-rate`` (1 %) of transactions are fraud.
``labels``  the chargeback feed: every 0.25 s, the transactions scored more than
            ``--label-delay`` seconds ago get their label in one ``POST /labels``: fraud
            positive, the rest negative.
``burst``   backfill: every ``--burst-every`` seconds, ``--burst-events`` labelled historical
            events posted as NPZ batches of 1,000 to ``/events`` as fast as they are taken
            (queue mode: 202 or 429 + retry).

It prints, per flow: requests, events, errors by status, throughput, latency p50 / p95 / p99 /
max; then the model's counts, AUC / pAUC of the window, the learning lag, CPU seconds per
process and the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import httpx
import numpy as np
import orjson

from loadtest.client import Connection, build_request, check_loopback

MAX_REQUESTS = 1_000_000


@dataclass
class Flow:
    name: str
    requests: int = 0
    events: int = 0
    statuses: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)

    def record(self, status: int, events: int, latency_ms: float) -> None:
        self.requests += 1
        self.statuses[status] += 1
        if 200 <= status < 300:
            self.events += events
        self.latencies_ms.append(latency_ms)

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300)


class Transactions:
    """Card transactions: ``n_features`` standardised-ish features; fraud shifts a few."""

    def __init__(self, n_features: int, fraud_rate: float, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.n_features = n_features
        self.fraud_rate = fraud_rate
        self.shift = np.zeros(n_features)
        self.shift[: max(1, n_features // 4)] = 1.5

    def adapt(self) -> None:
        """The fraudsters change their pattern: fraud now shifts the next quarter of the
        features, and the ones it shifted before it now shifts the other way (a drift)."""
        k = max(1, self.n_features // 4)
        self.shift = np.roll(self.shift, k) - self.shift

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        y = (self.rng.random(n) < self.fraud_rate).astype(np.int64)
        X = self.rng.normal(size=(n, self.n_features)) + y[:, None] * self.shift
        X[:, 0] = np.round(np.exp(X[:, 0] + 3.0), 2)  # an amount, in currency units
        return X, y


async def score_flow(
    host: str, port: int, model: str, source: Transactions, args, flow: Flow, scored: deque
) -> None:
    n_requests = min(int(args.rate * args.seconds), MAX_REQUESTS)
    X, y = source.draw(n_requests)
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    opened = 0
    start = time.perf_counter() + 0.05
    tasks = []

    async def one(number: int, scheduled: float) -> None:
        nonlocal opened
        if idle.empty() and opened < 64:
            opened += 1
            idle.put_nowait(await Connection(host, port).open())
        connection = await idle.get()
        body = orjson.dumps({"events": [{"id": f"tx-{number}", "x": X[number].tolist()}]})
        raw = build_request("POST", f"/v1/models/{model}/score", host, body, "application/json")
        status, _ = await connection.request(raw)
        flow.record(status, 1, (time.perf_counter() - scheduled) * 1e3)
        if status == 200:
            scored.append((time.perf_counter(), f"tx-{number}", int(y[number])))
        idle.put_nowait(connection)

    for number in range(n_requests):
        scheduled = start + number / args.rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(number, scheduled)))
    await asyncio.gather(*tasks)
    while not idle.empty():
        await idle.get_nowait().close()


async def label_flow(
    host: str, port: int, model: str, args, flow: Flow, scored: deque, done: asyncio.Event
) -> None:
    connection = await Connection(host, port).open()
    try:
        while True:
            finished = done.is_set()
            cutoff = time.perf_counter() - (0 if finished else args.label_delay)
            labels = []
            while scored and scored[0][0] <= cutoff and len(labels) < 10_000:
                _, event_id, label = scored.popleft()
                labels.append({"id": event_id, "y": label})
            if labels:
                body = orjson.dumps(labels)
                raw = build_request(
                    "POST", f"/v1/models/{model}/labels", host, body, "application/json"
                )
                started = time.perf_counter()
                status, _ = await connection.request(raw)
                if status == 429:  # queue full: put them back, try again shortly
                    scored.extendleft((0.0, item["id"], item["y"]) for item in reversed(labels))
                flow.record(status, len(labels), (time.perf_counter() - started) * 1e3)
            elif finished and not scored:
                return
            if not labels or not finished:
                await asyncio.sleep(0.25)
    finally:
        await connection.close()


async def burst_flow(
    host: str, port: int, model: str, source: Transactions, args, flow: Flow, deadline: float
) -> None:
    number = 0
    await asyncio.sleep(min(args.burst_every, args.seconds / 3))
    while time.perf_counter() < deadline and flow.requests < MAX_REQUESTS:
        # a connection per burst: uvicorn closes keep-alive connections idle for 5 s
        connection = await Connection(host, port).open()
        try:
            for _ in range(max(1, args.burst_events // 1000)):
                X, y = source.draw(1000)
                buffer = io.BytesIO()
                ids = np.array([f"bf-{number}-{i}" for i in range(1000)])
                np.savez(buffer, X=X, y=y, ids=ids)
                raw = build_request(
                    "POST", f"/v1/models/{model}/events", host, buffer.getvalue(),
                    "application/x-npz",
                )  # fmt: skip
                number += 1
                for _ in range(200):  # a 429 is retried with the same ids
                    started = time.perf_counter()
                    status, _ = await connection.request(raw)
                    flow.record(status, 1000, (time.perf_counter() - started) * 1e3)
                    if status != 429:
                        break
                    await asyncio.sleep(0.05)
                if time.perf_counter() >= deadline:
                    break
        finally:
            await connection.close()
        await asyncio.sleep(max(0.0, min(args.burst_every, deadline - time.perf_counter())))


async def scenario(url: str, args) -> list[Flow]:
    host, port = check_loopback(url)
    source = Transactions(args.features, args.fraud_rate)
    scored: deque = deque()
    flows = [Flow("score"), Flow("labels"), Flow("burst")]
    done = asyncio.Event()
    labeller = asyncio.create_task(label_flow(host, port, args.model, args, flows[1], scored, done))
    deadline = time.perf_counter() + args.seconds
    await asyncio.gather(
        score_flow(host, port, args.model, source, args, flows[0], scored),
        burst_flow(host, port, args.model, Transactions(args.features, 0.01, 1), args,
                   flows[2], deadline),
    )  # fmt: skip
    done.set()  # the remaining labels are posted now, without waiting for their delay
    await labeller
    return flows


def report(flows: list[Flow], seconds: float) -> str:
    header = (
        f"{'flow':<7} {'requests':>8} {'events':>9} {'events/s':>9} {'errors':>7} "
        f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>8}  statuses"
    )
    lines = [header, "-" * len(header)]
    for flow in flows:
        latencies = np.asarray(flow.latencies_ms) if flow.latencies_ms else np.full(1, np.nan)
        p50, p95, p99 = np.percentile(latencies, [50, 95, 99])
        statuses = ", ".join(f"{status}: {n}" for status, n in sorted(flow.statuses.items()))
        lines.append(
            f"{flow.name:<7} {flow.requests:>8} {flow.events:>9} {flow.events / seconds:>9,.0f} "
            f"{flow.errors:>7} {p50:>7.1f} {p95:>7.1f} {p99:>7.1f} {np.max(latencies):>8.1f}  "
            f"{statuses}"
        )
    return "\n".join(lines)


def run(url: str, args, cpu=None) -> None:
    with httpx.Client(base_url=url, timeout=60) as http:
        http.delete(f"/v1/models/{args.model}")
        created = http.post(
            "/v1/models",
            json={"id": args.model, "n_features": args.features, "pauc_range": [0, 0.1],
                  "window": 20_000, "label_ttl_seconds": 600},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        if args.mode == "queue":
            time.sleep(args.worker_start)  # the worker discovers the model
        cpu_before = cpu() if cpu else {}
        started = time.perf_counter()
        flows = asyncio.run(scenario(url, args))
        elapsed = time.perf_counter() - started
        metrics = http.get(f"/v1/models/{args.model}/metrics").json()
        lag_at_end = metrics.get("queue")
        deadline = time.monotonic() + 120
        while (metrics.get("queue") or {}).get("entries", 0) and time.monotonic() < deadline:
            time.sleep(0.1)
            metrics = http.get(f"/v1/models/{args.model}/metrics").json()
        drained = time.perf_counter() - started
        cpu_after = cpu() if cpu else {}
    print(report(flows, elapsed))
    counts, window = metrics["counts"], metrics["window"]
    print(
        f"\nmodel {args.model}: {counts['events_learned']:,} events learned "
        f"({counts['labels_joined']:,} by label, {counts['positives']:,} positive), "
        f"{counts['duplicates']:,} duplicates, {counts['labels_expired']:,} labels expired; "
        f"window AUC {window['auc']:.4f}, pAUC[0, 0.1] {window['pauc']:.4f}"
    )
    if lag_at_end is not None:
        print(
            f"queue: backlog when the clients stopped {lag_at_end['events']:,} events "
            f"({lag_at_end['seconds']:.2f} s old); drained {drained - elapsed:.2f} s later"
        )
    if cpu_after:
        used = ", ".join(f"{k} {cpu_after[k] - cpu_before[k]:.1f}" for k in cpu_after)
        print(f"CPU seconds over {elapsed:.1f} s: {used}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=None, help="an existing server (loopback only)")
    parser.add_argument("--mode", choices=("sync", "queue"), default="queue")
    parser.add_argument("--model", default="fraud-lt")
    parser.add_argument("--seconds", type=float, default=20.0, help="<= 300")
    parser.add_argument("--rate", type=float, default=300.0, help="transactions scored per s")
    parser.add_argument("--fraud-rate", type=float, default=0.01)
    parser.add_argument("--label-delay", type=float, default=2.0, help="seconds")
    parser.add_argument("--burst-every", type=float, default=5.0, help="seconds")
    parser.add_argument("--burst-events", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--worker-start", type=float, default=3.0, help="queue mode, seconds")
    args = parser.parse_args(argv)
    args.seconds = min(args.seconds, 300.0)
    load_before = os.getloadavg()
    if args.url:
        check_loopback(args.url)
        run(args.url, args)
    else:
        from loadtest.stack import stack

        with stack(args.mode, 1) as running:
            run(running.url, args, running.cpu)
    print(
        f"{os.cpu_count()} CPUs; load average before {load_before[0]:.2f}, after "
        f"{os.getloadavg()[0]:.2f}; mode {args.mode}, {args.rate:g} transactions/s scored, "
        f"{args.fraud_rate:.0%} fraud, labels after {args.label_delay:g} s, bursts of "
        f"{args.burst_events:,} events every {args.burst_every:g} s, {args.seconds:g} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
