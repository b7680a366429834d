"""``aucstream replay``: stream a file's labelled events into a model, in this process or into
a running server (``--url``), and print the model's metrics and this run's rate."""

from __future__ import annotations

import argparse
import io
import time
from typing import Any, get_args

import numpy as np
import orjson

from core.csr import CSRMatrix
from core.validation import row_range
from service.cli import add_command
from service.cli._errors import CliError, expect
from service.cli._readers import (
    DENSE_MAX_FEATURES,
    ReplayData,
    add_file_options,
    default_feature_mode,
    model_features,
    read_file_events,
)
from service.cli._report import RunTally, metrics_table
from service.schemas import (
    DEFAULT_LEARNER,
    DEFAULT_SCALING,
    FeatureModeName,
    ModelCreate,
    ScalingName,
)

#: [CHOICE] the hashed width of --feature-mode hashed: 2**16 columns keep collisions rare for
#: tables of a few hundred columns and categories, and the model's state a few MB
HASH_FEATURES = 1 << 16

#: the line of ``aucstream --help``; DESCRIPTION follows it in ``aucstream replay --help``
SUMMARY = "stream a CSV / Parquet / LIBSVM / NPZ file into a model and print its metrics"
DESCRIPTION = f"""\
Files: CSV / TSV (also .csv.gz), Parquet, LIBSVM text and NPZ (X and y, or the CSR arrays
indptr, indices, data and y); the format follows the extension unless --format is given.
CSV and Parquet: the label column is --label-column (default: the first of y, label, target,
class, is_fraud in any case, else the last column), the other numeric columns are the
features, named after the
header (the model's feature_names).  Text columns are refused unless --feature-mode hashed
(each column by name, a text value one-hot as the feature column=value, as the server's JSON
route does) or --drop-non-numeric.  A missing value (an empty cell; NaN in NPZ and LIBSVM)
follows --missing, the server's missing_values policies: refuse (the default, naming its row
and column), zero (read as 0) or mean (the feature's running mean over the events learned
before it; a sparse or hashed model leaves it out, as zero does; a dense model refuses a NaN
pair in LIBSVM); the new model keeps the policy.  Labels are 0/1, -1/+1, true/false or
yes/no (any case); --positive-label VALUE makes that value the positive class and every
other one negative.

The model is created with the options below if it does not exist (with --url: if the server
has no model of that id).  Feature mode by default: dense for CSV, Parquet and dense NPZ;
for LIBSVM and sparse NPZ, dense up to {DENSE_MAX_FEATURES:,} features (so that auto scaling
standardises them), sparse above (auto scaling then divides by the running spread).

Every event is sent with an id: the --id-column value, else <content hash>-<row>, so replaying
the same file into the same server again skips what was learned (a run that stopped half way
can simply be run again).  In-process, only --id-column ids are used (a repeated id is
skipped).  The rate printed is this run's events over this run's sending time.

examples:
  aucstream replay transactions.csv --model fraud --label-column is_fraud --id-column tx_id
  aucstream replay transactions.parquet --model fraud --drop-non-numeric --save fraud.zip
  aucstream replay data.libsvm --model a9a --url http://127.0.0.1:8000 --batch-size 2000"""


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "replay", SUMMARY, DESCRIPTION)
    parser.add_argument("file", help="the events")
    parser.add_argument("--model", required=True, help="model id (created if it does not exist)")
    parser.add_argument(
        "--url",
        help="a running server, e.g. http://127.0.0.1:8000 (default: learn in this process)",
    )
    parser.add_argument("--api-key", help="sent as X-API-Key to --url")
    parser.add_argument("--save", metavar="PATH",
                        help="write the model's snapshot there at the end (the archive PUT "
                        "/v1/models/{id}/snapshot loads)")  # fmt: skip
    add_file_options(parser)
    parser.add_argument("--batch-size", type=positive_int, default=1000, help="events per batch")
    add_model_options(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=replay)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The options of a new model, read by :func:`model_request` (replay, fit)."""
    parser.add_argument("--learner", default=DEFAULT_LEARNER, help="learner of a new model")
    parser.add_argument("--params", help="learner parameters as JSON, e.g. '{\"eta0\": 0.1}'")
    parser.add_argument("--feature-mode", choices=get_args(FeatureModeName),
                        help="feature mode of a new model (default: see above); hashed (CSV / "
                        "Parquet): each column's value by name, a text value one-hot as the "
                        "feature column=value, hashed into --hash-features columns")  # fmt: skip
    parser.add_argument("--hash-features", type=positive_int, default=HASH_FEATURES,
                        help="with --feature-mode hashed: the model's n_features")  # fmt: skip
    # the defaults and choices of POST /v1/models
    fields = ModelCreate.model_fields
    parser.add_argument("--scaling", default=DEFAULT_SCALING, choices=get_args(ScalingName),
                        help="online scaling of a new model; auto = standard when dense, "
                        "scale when sparse")  # fmt: skip
    parser.add_argument("--pauc-range", type=float, nargs=2, default=fields["pauc_range"].default,
                        metavar=("ALPHA", "BETA"), help="FPR range of the pAUC")  # fmt: skip
    window = fields["window"]
    parser.add_argument("--window", type=int, default=window.default, help=window.description)


def replay(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    tally = RunTally()
    started = time.perf_counter()
    data = read_file_events(args)
    tally.read_seconds = time.perf_counter() - started
    request = model_request(args, data)
    replay_to = replay_to_server if args.url else replay_in_process
    with tqdm(total=data.n_events, unit="ev", unit_scale=True, disable=args.quiet or None) as bar:
        metrics, snapshot = replay_to(args, data, request, tally, bar.update)
    print(metrics_table(metrics))
    print(tally.summary())
    if snapshot is not None:
        write_snapshot(args.save, snapshot)
        print(f"snapshot of model {args.model} written to {args.save} ({len(snapshot):,} bytes)")
    return 0


def write_snapshot(path: str, body: bytes) -> None:
    try:
        with open(path, "wb") as handle:
            handle.write(body)
    except OSError as error:
        raise CliError(f"cannot write the snapshot: {error.strerror}: {path}") from None


def model_request(args: argparse.Namespace, data: ReplayData) -> dict[str, Any]:
    """The ``POST /v1/models`` body of a new model for this file."""
    try:
        params = orjson.loads(args.params) if args.params else {}
    except orjson.JSONDecodeError as error:
        raise CliError(f"--params is not valid JSON: {error}") from None
    if not isinstance(params, dict):
        raise CliError("--params must be a JSON object, e.g. '{\"eta0\": 0.1}'")
    n_features = int(data.X.shape[1])  # hashed: --hash-features
    mode = args.feature_mode or default_feature_mode(isinstance(data.X, CSRMatrix), n_features)
    request = {
        "id": args.model,
        "learner": args.learner,
        "params": params,
        "n_features": n_features,
        "feature_mode": mode,
        "scaling": args.scaling,
        "pauc_range": list(args.pauc_range),
        "window": args.window,
        "missing_values": args.missing,
    }
    if data.feature_names is not None:
        request["feature_names"] = data.feature_names
    return request


def in_layout(X: np.ndarray | CSRMatrix, start: int, stop: int, dense: bool):
    """Rows ``start:stop`` of ``X`` as the model takes them (dense rows or CSR)."""
    part = row_range(X, start, stop)
    if dense and isinstance(part, CSRMatrix):
        return part.toarray()
    if not dense and not isinstance(part, CSRMatrix):
        return CSRMatrix.from_dense(part)
    return part


def learn_in_batches(args, data: ReplayData, tally: RunTally, advance, learn) -> None:
    """``learn(start, stop)`` on each batch of ``--batch-size`` events, its answer counted."""
    started = time.perf_counter()
    for start in range(0, data.n_events, args.batch_size):
        stop = min(start + args.batch_size, data.n_events)
        tally.add(learn(start, stop), stop - start)
        advance(stop - start)
    tally.learn_seconds = time.perf_counter() - started


# ---------------------------------------------------------------------------- in-process
def replay_in_process(args, data: ReplayData, request, tally: RunTally, advance):
    from service import snapshot
    from service.engine import Engine
    from service.ingest import Batch, FeatureSpec
    from service.models import create_model
    from service.schemas import ModelCreate
    from service.stores.memory import MemoryStore

    engine = Engine(MemoryStore())
    create_model(engine, ModelCreate(**request))
    dense = request["feature_mode"] == "dense"
    spec = FeatureSpec(request["n_features"], request["feature_mode"],
                       missing_values=request["missing_values"])  # fmt: skip

    def learn(start: int, stop: int) -> dict[str, int]:
        ids = None if data.ids is None else list(data.ids[start:stop])
        part = model_features(in_layout(data.X, start, stop, dense), spec, data.rows[start:stop])
        result = engine.learn(args.model, Batch(part, data.y[start:stop], ids))  # type: ignore[arg-type]
        return {"learned": result.learned, "duplicates": len(result.duplicate_ids)}

    learn_in_batches(args, data, tally, advance, learn)
    archive = None
    if args.save:
        archive = snapshot.export_snapshot(*engine.state_arrays(args.model))
    return engine.metrics(args.model), archive


# ---------------------------------------------------------------------------- to a server
def npz_body(X, y: np.ndarray, ids: list[str]) -> bytes:
    buffer = io.BytesIO()
    arrays: dict[str, np.ndarray] = {"y": y, "ids": np.array(ids)}
    if isinstance(X, CSRMatrix):
        arrays.update(indptr=X.indptr, indices=X.indices, data=X.data)
    else:
        arrays["X"] = X
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def json_body(data: ReplayData, start: int, stop: int, ids: list[str]) -> bytes:
    """Events ``start:stop`` of a hashed replay as the JSON body of ``/events``."""
    assert data.named_events is not None
    labels = data.y[start:stop].tolist()
    events = [{"id": ids[index], "x": data.named_events[index], "y": labels[index - start]}
              for index in range(start, stop)]  # fmt: skip
    return orjson.dumps({"events": events})


def ensure_model(http, request: dict[str, Any], has_missing: bool) -> dict[str, Any]:
    """The server's configuration of the model, created unless it has it; it must take this
    file (its width, and the policy --missing asks for if the file has missing values: the
    server applies its model's own)."""
    model = request["id"]
    found = http.get(f"/v1/models/{model}")
    if found.status_code == 404:
        created = http.post("/v1/models", json=request)
        # 409: created meanwhile by another client
        expect(created, f"could not create model {model}", 201, 409)
        found = http.get(f"/v1/models/{model}")
    config = expect(found, f"could not read model {model}").json()["config"]
    if config["n_features"] != request["n_features"]:
        raise CliError(
            f"model {model} on the server has {config['n_features']} features, the file "
            f"{request['n_features']}; pick another --model"
        )
    policy = config.get("missing_values", "refuse")
    if has_missing and policy != request["missing_values"]:
        raise CliError(
            f"model {model} on the server has missing_values {policy!r} and the file has "
            f"missing values; pass --missing {policy} to send them to it, or pick another "
            "--model"
        )
    return config


def server(args: argparse.Namespace, timeout: float):
    """An HTTP client of ``--url`` that sends ``--api-key``."""
    import httpx

    headers = {"x-api-key": args.api_key} if args.api_key else {}
    return httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=timeout)


def replay_to_server(args, data: ReplayData, request, tally: RunTally, advance):
    with server(args, timeout=120) as http:
        dense = ensure_model(http, request, data.has_missing)["feature_mode"] == "dense"
        ids = data.event_ids()

        def learn(start: int, stop: int) -> dict[str, Any]:
            if data.named_events is not None:  # a hashed model hashes the events itself
                content = json_body(data, start, stop, ids)
                kind = "application/json"
            else:
                part = in_layout(data.X, start, stop, dense)
                content = npz_body(part, data.y[start:stop], ids[start:stop])
                kind = "application/x-npz"
            response = http.post(
                f"/v1/models/{args.model}/events", content=content, headers={"content-type": kind}
            )
            first = int(data.rows[start])
            return expect(
                response,
                f"the server refused the batch of rows {first}-{int(data.rows[stop - 1])} "
                f"(rows before {first} were sent; a re-run skips them)",
                200, 202,
            ).json()  # fmt: skip

        learn_in_batches(args, data, tally, advance, learn)
        metrics = expect(http.get(f"/v1/models/{args.model}/metrics"), "could not read the metrics")
        archive = None
        if args.save:
            exported = http.get(f"/v1/models/{args.model}/snapshot")
            archive = expect(exported, "could not export the snapshot").content
        return metrics.json(), archive
