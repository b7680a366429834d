"""Failover without loss: acknowledged events lost when Redis masters are killed (``kill -9``)
during load, with and without ``WAIT`` for a replica, in sync and queue mode.

Run (starts its own Redis Cluster of 3 masters with a replica each, uvicorn API and, in queue
mode, one ``aucstream worker``; loopback only)::

    python -m loadtest.failover                         # 10 failovers per row, 4 rows
    python -m loadtest.failover --failovers 12 --modes sync --wait on
    python -m loadtest.failover --failovers 0 --steady 20 --repeat 2   # WAIT's cost over HTTP
    python -m loadtest.failover --commit-cost     # a store commit with and without WAIT

Per row, ``--clients`` threads each post batches of ``--batch`` labelled events with ids to
their own model, retrying a batch until it is acknowledged (sync: 200, queue: 202; a 503 or a
lost connection is retried after 50 ms, with the same ids, so a batch that went in is never
learned twice).  After ``--steady`` seconds, a master chosen at random is killed with SIGKILL
``--failovers`` times; each time the cluster promotes its replica (cluster-node-timeout
1 s), then the killed node is started again and rejoins as the new master's replica.  When the
clients have stopped (and in queue mode the worker has learned the backlog), each model's
``events_learned`` is compared with the events acknowledged to the clients.

Columns: ``steady ev/s`` acknowledged events per second before the first kill, ``failover
ev/s`` during the kills, ``acked`` / ``learned`` / ``lost`` (acknowledged and not learned),
``alarms`` (losses of data the service noticed and answered 503 for, acknowledged at the end
to read the counts).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx
import numpy as np

from loadtest.local import PrivateCluster, create_model, free_port, start_uvicorn, stop, wait_ready


@dataclass
class Row:
    mode: str
    wait: str
    failovers: int
    steady_rate: float
    failover_rate: float
    acked: int
    learned: int
    lost: int
    alarms: int
    seconds_per_failover: float


def batch_body(model: str, number: int, size: int, features: int) -> dict:
    rng = np.random.default_rng(number)
    y = (rng.random(size) < 0.3).astype(int)
    X = rng.normal(size=(size, features)) + y[:, None]
    return {
        "events": [
            {"x": X[i].round(4).tolist(), "y": int(y[i]), "id": f"{model}-{number}-{i}"}
            for i in range(size)
        ]
    }


class Client(threading.Thread):
    """Posts batches to one model until stopped, each batch until acknowledged."""

    def __init__(self, url: str, model: str, size: int, features: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.url, self.model, self.size, self.features = url, model, size, features
        self.stop = stop
        self.acked = 0
        self.refused: dict[int, int] = {}

    def run(self) -> None:
        number = 0
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self.stop.is_set():
                body = batch_body(self.model, number, self.size, self.features)
                while True:
                    try:
                        status = http.post(f"/v1/models/{self.model}/events", json=body)
                        code = status.status_code
                    except httpx.TransportError:
                        code = 0
                    if code in (200, 202):
                        self.acked += self.size
                        break
                    self.refused[code] = self.refused.get(code, 0) + 1
                    if self.stop.is_set():
                        return
                    time.sleep(0.05)
                number += 1


def _until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


def fail_over(cluster: PrivateCluster, port: int) -> None:
    """SIGKILL the master on ``port``; wait for its replica's promotion; start it again and
    wait until it is the new master's replica, in sync."""
    cluster.nodes[port].kill()
    live = [other for other in cluster.ports if other != port]

    def promoted() -> bool:
        masters = [p for p in live if "role:master" in cluster.info(p, "info", "replication")]
        return len(masters) == cluster.masters and all(
            "cluster_state:ok" in cluster.info(p, "cluster", "info") for p in live
        )

    _until(promoted, 60, f"promotion of the replica of {port}")
    cluster.nodes[port].start()
    _until(
        lambda: "master_link_status:up" in cluster.info(port, "info", "replication"),
        60,
        f"node {port} back as a replica",
    )


def learned(http: httpx.Client, model: str) -> int:
    return http.get(f"/v1/models/{model}/metrics").json()["counts"]["events_learned"]


def run(mode: str, wait: str, args: argparse.Namespace) -> Row:
    cluster = PrivateCluster(masters=3, replicas=1, node_timeout_ms=1000)
    processes: list[subprocess.Popen] = []
    try:
        cluster.start()
        seeds = ",".join(f"127.0.0.1:{port}" for port in cluster.ports)
        env = {
            **os.environ,
            "AUCSTREAM_REDIS_URL": f"redis+cluster://{seeds}",
            "AUCSTREAM_MODE": mode,
            "AUCSTREAM_REDIS_WAIT_REPLICAS": "1" if wait == "on" else "0",
            "AUCSTREAM_REDIS_WAIT_TIMEOUT_MS": str(args.wait_timeout_ms),
            "AUCSTREAM_LOG_LEVEL": "warning",
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        api = start_uvicorn(port, env, access_log=False, stderr=subprocess.DEVNULL)
        processes.append(api)
        if mode == "queue":
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "service.cli", "worker"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        wait_ready(url, api, timeout=900)
        models = [f"m{i}" for i in range(args.clients)]
        with httpx.Client(base_url=url, timeout=30) as http:
            for model in models:
                body = {"id": model, "n_features": args.features, "learner": "spam"}
                create_model(http, body)
            stop_event = threading.Event()
            clients = [Client(url, m, args.batch, args.features, stop_event) for m in models]
            for client in clients:
                client.start()
            time.sleep(args.steady)
            steady_acked = sum(client.acked for client in clients)
            started = time.monotonic()
            kills = 0
            for _ in range(args.failovers):
                fail_over(cluster, random.choice(cluster.master_ports()))
                kills += 1
                time.sleep(args.between)
            failover_seconds = time.monotonic() - started
            failover_acked = sum(client.acked for client in clients) - steady_acked
            stop_event.set()
            for client in clients:
                client.join(timeout=60)
            acked = {client.model: client.acked for client in clients}
            alarms = http.post("/v1/store/acknowledge-loss").json().get("acknowledged", {})

            def drained() -> bool:
                return all(learned(http, m) >= acked[m] for m in models)

            if mode == "queue":
                try:
                    _until(drained, 120, "the worker learning the backlog")
                except RuntimeError:
                    pass
            counts = {m: learned(http, m) for m in models}
        return Row(
            mode,
            wait,
            kills,
            steady_acked / args.steady,
            failover_acked / failover_seconds if kills else 0.0,
            sum(acked.values()),
            sum(counts.values()),
            sum(max(0, acked[m] - counts[m]) for m in models),
            len(alarms),
            failover_seconds / kills if kills else 0.0,
        )
    finally:
        for process in processes:
            stop(process)
        cluster.close()


def commit_cost(blocks: int = 10, per_block: int = 200) -> None:
    """Wall time of one store commit (a 50-feature model's state, 50 event ids) on a private
    primary with one replica, with and without ``WAIT 1``, in alternating blocks: the cost of
    waiting alone, without HTTP or learning around it."""
    import redis as redis_client

    from loadtest.local import PrivateRedis
    from service.engine.entries import Entry
    from service.stores.base import Commit
    from service.stores.client import ReplicaWait
    from service.stores.redis import RedisStore

    primary, replica = PrivateRedis("aof"), PrivateRedis("aof")
    try:
        primary.start()
        replica.start()
        redis_client.Redis(port=replica.port).replicaof("127.0.0.1", primary.port)
        _until(
            lambda: (
                redis_client.Redis(port=replica.port).info("replication")["master_link_status"]
                == "up"
            ),
            30,
            "the replica's sync",
        )
        rng = np.random.default_rng(0)
        stores = {
            "off": RedisStore.from_url(primary.url),
            "on": RedisStore.from_url(primary.url, ReplicaWait(1, 2000)),
        }
        versions = {}
        for name, store in stores.items():
            versions[name] = store.create_model(name, {}, {"w": np.zeros(50)}, "i")
        timings: dict[str, list[float]] = {"off": [], "on": []}
        number = 0
        for block in range(blocks):
            for name in ("off", "on") if block % 2 == 0 else ("on", "off"):
                store = stores[name]
                started = time.perf_counter()
                for _ in range(per_block):
                    now = time.time()
                    ids = [f"{number}-{i}" for i in range(50)]
                    number += 1
                    commit = Commit(
                        expected_version=versions[name],
                        incarnation="i",
                        entry=Entry(now, rng.normal(size=(1, 50)), np.array([1])),
                        learned_ids=ids,
                        id_expiry=now + 3600,
                        now=now,
                    )
                    versions[name] = store.commit(name, commit)
                timings[name].append((time.perf_counter() - started) / per_block * 1000)
        print(f"{'WAIT':4} {'commits':>7} {'median ms/commit':>16} {'commits/s':>9}")
        for name in ("off", "on"):
            median = float(np.median(timings[name]))
            count = blocks * per_block
            print(f"{name:4} {count:7,d} {median:16.3f} {1000 / median:9,.0f}")
        for store in stores.values():
            store.close()
    finally:
        primary.close()
        replica.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["sync", "queue"])
    parser.add_argument("--wait", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--steady", type=float, default=10.0, help="seconds before the kills")
    parser.add_argument("--between", type=float, default=1.0, help="seconds between failovers")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--wait-timeout-ms", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=1, help="rows of each kind, interleaved")
    parser.add_argument(
        "--commit-cost", action="store_true", help="only time store commits with and without WAIT"
    )
    args = parser.parse_args()
    if args.commit_cost:
        commit_cost()
        print(f"load average: {os.getloadavg()[0]:.1f}")
        return
    header = (
        f"{'mode':6} {'WAIT':4} {'kills':>5} {'steady ev/s':>11} {'failover ev/s':>13} "
        f"{'acked':>8} {'learned':>8} {'lost':>5} {'alarms':>6} {'s/failover':>10}"
    )
    print(header, flush=True)
    rows = [(mode, wait) for _ in range(args.repeat) for mode in args.modes for wait in args.wait]
    for mode, wait in rows:
        row = run(mode, wait, args)
        print(
            f"{row.mode:6} {row.wait:4} {row.failovers:5d} {row.steady_rate:11,.0f} "
            f"{row.failover_rate:13,.0f} {row.acked:8,d} {row.learned:8,d} {row.lost:5d} "
            f"{row.alarms:6d} {row.seconds_per_failover:10.1f}",
            flush=True,
        )
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
