"""``aucstream`` command line: ``serve``, ``worker`` and ``replay``.

Examples
--------
Serve on the embedded store (nothing else needed)::

    aucstream serve --port 8000

Serve with four worker processes sharing a Redis::

    aucstream serve --workers 4 --redis-url redis://127.0.0.1:6379/0

Queue mode: the API appends to Redis Streams (202) and workers learn::

    AUCSTREAM_MODE=queue aucstream serve --workers 2 --redis-url redis://127.0.0.1:6379/0
    AUCSTREAM_REDIS_URL=redis://127.0.0.1:6379/0 aucstream worker     # one or more

Replay a file into an in-process model and print its metrics::

    aucstream replay transactions.csv --model fraud --label-column is_fraud

Replay into a running server (the model is created if it does not exist)::

    aucstream replay data.libsvm --model fraud --url http://127.0.0.1:8000 --batch-size 2000
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

# One BLAS thread per process, set before numpy loads OpenBLAS (it reads this once): the
# service runs many small kernel calls concurrently (uvicorn workers, queue workers), and
# OpenBLAS threads on top of them only fight over the cores (opauc's rank-k sketch slowed to a
# crawl on a busy 2-core machine).  A value set by the operator wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import orjson

from core.validation import CSRMatrix
from service.schemas import DEFAULT_LEARNER

FORMATS = ("auto", "csv", "libsvm", "npz")


# ---------------------------------------------------------------------------- serve
def serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from service.settings import Settings

    if args.store:
        os.environ["AUCSTREAM_STORE"] = args.store
    if args.redis_url:
        os.environ["AUCSTREAM_REDIS_URL"] = args.redis_url
    if args.mode:
        os.environ["AUCSTREAM_MODE"] = args.mode
    os.environ["AUCSTREAM_WORKERS"] = str(args.workers)
    try:
        Settings()  # invalid settings fail here, before any worker starts
    except ValidationError as error:
        print(f"aucstream: invalid settings:\n{error}", file=sys.stderr)
        return 2
    import shutil
    import tempfile

    import uvicorn

    from service.telemetry import reset_multiprocess_dir

    made_dir = None
    if args.workers > 1:
        # one Prometheus view across the workers: each writes its values under this directory
        # (read by prometheus_client when the workers import it, so set before they start),
        # emptied first since a previous run's files would be summed in
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            directory = made_dir = tempfile.mkdtemp(prefix="aucstream-prometheus-")
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        reset_multiprocess_dir(directory)
    try:
        uvicorn.run(
            "service.app:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
        )
    finally:
        if made_dir is not None:
            shutil.rmtree(made_dir, ignore_errors=True)
    return 0


# ---------------------------------------------------------------------------- worker
def worker(args: argparse.Namespace) -> int:
    """Queue worker: settings from the environment (``AUCSTREAM_REDIS_URL``,
    ``AUCSTREAM_WORKER_*``); the options override them."""
    from pydantic import ValidationError

    from service.settings import Settings

    for option, variable in (
        ("redis_url", "AUCSTREAM_REDIS_URL"),
        ("name", "AUCSTREAM_WORKER_NAME"),
        ("metrics_port", "AUCSTREAM_WORKER_METRICS_PORT"),
    ):
        value = getattr(args, option)
        if value is not None:
            os.environ[variable] = str(value)
    try:
        settings = Settings()
    except ValidationError as error:
        print(f"aucstream: invalid settings:\n{error}", file=sys.stderr)
        return 2
    if settings.redis_url is None:
        print("aucstream: the worker needs AUCSTREAM_REDIS_URL (or --redis-url)", file=sys.stderr)
        return 2
    if args.check:
        return check_worker(settings.redis_url, settings.worker_name)
    from service.queue.worker import main as run_worker

    return run_worker(settings)


def check_worker(redis_url: str, name: str | None) -> int:
    """``aucstream worker --check``: the container healthcheck of a queue worker.  0 when a
    worker of this host (``<hostname>-<pid>``, the default name; ``name`` when one is set) has
    a live heartbeat in ``aucs:workers`` -- the heartbeat the worker renews on every loop, so a
    hung or crashed worker turns unhealthy within its lease -- else 1 (and why on stderr)."""
    import socket

    import redis

    from service.stores import keys
    from service.stores.client import connect

    host = socket.gethostname()

    def mine(member: str) -> bool:
        if name:
            return member == name
        prefix, _, pid = member.rpartition("-")
        return prefix == host and pid.isdigit()

    client = connect(redis_url)
    try:
        seconds, microseconds = client.time()  # Redis's clock, as the heartbeat script uses
        now_ms = int(seconds) * 1000 + int(microseconds) // 1000
        members: list[bytes] = client.zrangebyscore(keys.WORKERS, now_ms, "+inf")  # type: ignore[assignment]
        live = [member.decode() for member in members]
    except redis.RedisError as error:
        print(
            f"aucstream: unhealthy: Redis did not answer ({type(error).__name__})", file=sys.stderr
        )
        return 1
    finally:
        client.close()
    alive = [member for member in live if mine(member)]
    if not alive:
        who = f"worker {name!r}" if name else f"a worker of host {host!r}"
        print(f"aucstream: unhealthy: no live heartbeat of {who}", file=sys.stderr)
        return 1
    print(f"healthy: {', '.join(alive)}")
    return 0


# ---------------------------------------------------------------------------- reading files
def detect_format(path: str) -> str:
    lowered = path.lower()
    if lowered.endswith(".npz"):
        return "npz"
    if lowered.endswith((".csv", ".csv.txt", ".tsv")):
        return "csv"
    if lowered.endswith((".libsvm", ".svm", ".svmlight", ".txt", ".dat")):
        return "libsvm"
    raise SystemExit(f"aucstream: cannot tell the format of {path!r}; pass --format")


def read_csv(path: str, label_column: str | None) -> tuple[np.ndarray, np.ndarray]:
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    with open(path, encoding="utf-8") as handle:
        header = [name.strip() for name in handle.readline().strip().split(delimiter)]
    if label_column is None:
        label_column = next(
            (n for n in ("y", "label", "target", "class") if n in header), header[-1]
        )
    if label_column not in header:
        raise SystemExit(f"aucstream: no column {label_column!r} in {path}; columns: {header}")
    data = np.loadtxt(path, delimiter=delimiter, skiprows=1, ndmin=2, dtype=np.float64)
    label_index = header.index(label_column)
    y = data[:, label_index]
    X = np.delete(data, label_index, axis=1)
    return np.ascontiguousarray(X), y


def read_libsvm(path: str, zero_based: bool) -> tuple[CSRMatrix, np.ndarray]:
    from service.ingest import FeatureSpec, libsvm_events

    with open(path, "rb") as handle:
        body = handle.read()
    indices = [int(token) for token in re.findall(rb"(\d+):", body)]
    n_features = (max(indices) + (1 if zero_based else 0)) if indices else 1
    spec = FeatureSpec(max(n_features, 1), "sparse")
    batch = libsvm_events(body, spec, labelled=True, max_events=sys.maxsize, zero_based=zero_based)
    assert isinstance(batch.X, CSRMatrix) and batch.y is not None
    return batch.X, batch.y


def read_npz(path: str) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        y = archive["y"]
        if "X" in archive.files:
            return np.ascontiguousarray(archive["X"], dtype=np.float64), y
        indptr = archive["indptr"].astype(np.int64)
        indices = archive["indices"].astype(np.int64)
        n_features = (
            int(archive["shape"][1]) if "shape" in archive.files else int(indices.max()) + 1
        )
        return CSRMatrix(indptr, indices, archive["data"].astype(np.float64), n_features), y


def read_file(path: str, file_format: str, label_column: str | None, zero_based: bool):
    file_format = detect_format(path) if file_format == "auto" else file_format
    if file_format == "csv":
        return read_csv(path, label_column)
    if file_format == "libsvm":
        return read_libsvm(path, zero_based)
    return read_npz(path)


def batches(X, y: np.ndarray, size: int) -> Iterator[tuple[Any, np.ndarray]]:
    n_events = X.shape[0]
    for start in range(0, n_events, size):
        rows = np.arange(start, min(start + size, n_events))
        part = X.take_rows(rows) if isinstance(X, CSRMatrix) else X[rows]
        yield part, y[rows]


def npz_body(X, y: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    if isinstance(X, CSRMatrix):
        np.savez(buffer, indptr=X.indptr, indices=X.indices, data=X.data, y=y)
    else:
        np.savez(buffer, X=X, y=y)
    return buffer.getvalue()


# ---------------------------------------------------------------------------- replay
def model_request(args: argparse.Namespace, n_features: int, sparse: bool) -> dict[str, Any]:
    return {
        "id": args.model,
        "learner": args.learner,
        "params": orjson.loads(args.params) if args.params else {},
        "n_features": n_features,
        "feature_mode": args.feature_mode or ("sparse" if sparse else "dense"),
        "scaling": args.scaling,
        "pauc_range": list(args.pauc_range),
        "window": args.window,
    }


def replay_in_process(args, X, y, progress) -> dict[str, Any]:
    from core.validation import as_labels
    from service.engine import Engine
    from service.ingest import Batch
    from service.schemas import ModelCreate
    from service.stores.memory import MemoryStore

    engine = Engine(MemoryStore())
    request = ModelCreate(**model_request(args, X.shape[1], isinstance(X, CSRMatrix)))
    engine.create_model(request)
    dense = request.feature_mode == "dense"
    for part, labels in batches(X, y, args.batch_size):
        if dense and isinstance(part, CSRMatrix):
            part = part.toarray()
        elif not dense and not isinstance(part, CSRMatrix):
            rows, columns = np.nonzero(part)
            indptr = np.zeros(part.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=part.shape[0]), out=indptr[1:])
            part = CSRMatrix(indptr, columns.astype(np.int64), part[rows, columns], part.shape[1])
        engine.learn(args.model, Batch(part, as_labels(labels), None))
        progress.update(len(labels))
    return engine.metrics(args.model)


def replay_to_server(args, X, y, progress) -> dict[str, Any]:
    import httpx

    headers = {"x-api-key": args.api_key} if args.api_key else {}
    with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=120) as http:
        found = http.get(f"/v1/models/{args.model}")
        if found.status_code == 404:
            created = http.post(
                "/v1/models", json=model_request(args, X.shape[1], isinstance(X, CSRMatrix))
            )
            if created.status_code != 201:
                raise SystemExit(f"aucstream: could not create the model: {created.text}")
        elif found.status_code != 200:
            raise SystemExit(f"aucstream: {found.status_code} {found.text}")
        for part, labels in batches(X, y, args.batch_size):
            response = http.post(
                f"/v1/models/{args.model}/events",
                content=npz_body(part, labels),
                headers={"content-type": "application/x-npz"},
            )
            if response.status_code != 200:
                raise SystemExit(f"aucstream: batch rejected: {response.text}")
            progress.update(len(labels))
        return http.get(f"/v1/models/{args.model}/metrics").json()


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def metrics_table(metrics: dict[str, Any], seconds: float) -> str:
    window, since = metrics["window"], metrics["since_start"]
    alpha, beta = metrics["alpha"], metrics["beta"]
    rows = [
        ("metric", "window", "since start"),
        ("events", window["events"], since["events"]),
        ("positives", window["positives"], since["positives"]),
        ("negatives", window["negatives"], since["negatives"]),
        ("AUC", window["auc"], since["auc"]),
        (f"pAUC [{alpha:g}, {beta:g}]", window["pauc"], since["pauc"]),
        ("pAUC (McClish)", window["pauc_standardized"], since["pauc_standardized"]),
    ]
    widths = [max(len(_cell(row[i])) for row in rows) for i in range(3)]
    lines = []
    for number, row in enumerate(rows):
        lines.append(
            "  ".join(_cell(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        )
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    reason = window.get("reason") or since.get("reason")
    counts = metrics["counts"]
    rate = counts["events_learned"] / seconds if seconds > 0 else float("nan")
    lines.append("")
    lines.append(
        f"model {metrics['model']} ({metrics['learner']}), version {metrics['version']}: "
        f"{counts['events_learned']} events learned, {counts['duplicates']} duplicates, "
        f"{rate:,.0f} events/s over {seconds:.2f} s"
    )
    if reason:
        lines.append(f"note: {reason}")
    return "\n".join(lines)


def replay(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    X, y = read_file(args.file, args.format, args.label_column, args.zero_based)
    started = time.perf_counter()
    with tqdm(total=int(X.shape[0]), unit="ev", unit_scale=True, disable=args.quiet) as progress:
        if args.url:
            metrics = replay_to_server(args, X, y, progress)
        else:
            metrics = replay_in_process(args, X, y, progress)
    print(metrics_table(metrics, time.perf_counter() - started))
    return 0


# ---------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aucstream", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    serve_parser = commands.add_parser("serve", help="run the HTTP API (uvicorn)")
    serve_parser.add_argument("--host", default="127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=8000)
    serve_parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve_parser.add_argument("--store", choices=("memory", "redis"), default=None)
    serve_parser.add_argument("--redis-url", default=None, help="selects the Redis store")
    serve_parser.add_argument("--log-level", default="info")
    serve_parser.add_argument(
        "--mode", choices=("sync", "queue"), default=None, help="default: AUCSTREAM_MODE or sync"
    )
    serve_parser.set_defaults(handler=serve)

    worker_parser = commands.add_parser(
        "worker", help="learn queued batches (queue mode); settings from AUCSTREAM_* variables"
    )
    worker_parser.add_argument("--redis-url", default=None, help="default: AUCSTREAM_REDIS_URL")
    worker_parser.add_argument("--name", default=None, help="consumer name (<host>-<pid>)")
    worker_parser.add_argument("--metrics-port", type=int, default=None, help="Prometheus port")
    worker_parser.add_argument(
        "--check",
        action="store_true",
        help="healthcheck: exit 0 if a worker of this host has a live heartbeat, else 1",
    )
    worker_parser.set_defaults(handler=worker)

    replay_parser = commands.add_parser(
        "replay", help="stream a CSV / LIBSVM / NPZ file into a model and print its metrics"
    )
    replay_parser.add_argument("file")
    replay_parser.add_argument("--model", required=True, help="model id")
    replay_parser.add_argument("--url", default=None, help="a running server; else in-process")
    replay_parser.add_argument("--api-key", default=None)
    replay_parser.add_argument("--format", choices=FORMATS, default="auto")
    replay_parser.add_argument("--batch-size", type=int, default=1000)
    replay_parser.add_argument("--label-column", default=None, help="CSV: default y/label/last")
    replay_parser.add_argument("--zero-based", action="store_true", help="LIBSVM 0-based indices")
    replay_parser.add_argument("--learner", default=DEFAULT_LEARNER)
    replay_parser.add_argument("--params", default=None, help="JSON, e.g. '{\"eta0\": 0.1}'")
    replay_parser.add_argument("--feature-mode", choices=("dense", "sparse"), default=None)
    replay_parser.add_argument("--scaling", default="auto")
    replay_parser.add_argument(
        "--pauc-range", type=float, nargs=2, default=(0.0, 0.1), metavar=("ALPHA", "BETA")
    )
    replay_parser.add_argument("--window", type=int, default=10_000)
    replay_parser.add_argument("--quiet", action="store_true", help="no progress bar")
    replay_parser.set_defaults(handler=replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from service.errors import ServiceError

    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ServiceError as error:
        where = f" ({error.field})" if error.field else ""
        print(f"aucstream: {error.detail}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
