"""``aucstream fit FILE --model ID``: train a model on history and write (or upload) its snapshot,
which the service loads to go on learning online (DESCRIPTION below, docs/cli.md)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from core.csr import CSRMatrix
from core.metrics import auc, pauc
from core.validation import row_range
from service.cli import add_command
from service.cli._errors import CliError, expect
from service.cli._readers import ReplayData, add_file_options, model_features, read_file_events
from service.cli.replay import add_model_options, model_request, server, write_snapshot

#: the line of ``aucstream --help``; DESCRIPTION follows it in ``aucstream fit --help``
SUMMARY = "train a model on a history file and write (or upload) its snapshot"
DESCRIPTION = """\
The model is configured as POST /v1/models would (learner, params, scaling, pAUC range,
metrics window) and trained on the file but its last --holdout fraction (history is
time-ordered), which is then scored to print held-out AUC and pAUC.  The file options are
replay's (aucstream replay --help), --missing included: under mean the training events are
filled with the running means of the events before them, in file order, and the held-out
ones with the training events' means, which the snapshot keeps.  Online learners make
--passes passes of partial_fit (default: the learner's max_iter), reshuffled each pass; batch
learners (spdam) solve to convergence; tree_embedded fits its tree first.  The snapshot is
written to --output (PUT /v1/models/{id}/snapshot loads it); --url uploads it.

examples:
  aucstream fit history.csv --model fraud --label-column is_fraud
  aucstream fit history.parquet --model fraud --learner spdam --url http://127.0.0.1:8000"""


def _rows(X, rows: np.ndarray):
    return X.take_rows(rows) if isinstance(X, CSRMatrix) else X[rows]


def train(learner, X, y: np.ndarray, *, passes: int | None, batch_size: int, seed: int,
          progress) -> str:  # fmt: skip
    """Train ``learner`` on ``(X, y)`` as DESCRIPTION says; returns how."""
    if hasattr(learner, "fit_history"):
        learner.fit_history(X, y)
        progress.update(len(y))
        return "tree embedding fitted on the history, then its inner learner"
    if not type(learner).online:
        learner.fit(X, y)
        progress.update(len(y))
        converged = getattr(learner, "converged_", None)
        return f"batch solve (converged: {converged})" if converged is not None else "batch solve"
    passes = passes or int(learner.max_iter)
    rng = np.random.default_rng(seed)
    for _ in range(passes):
        order = rng.permutation(len(y)) if learner.shuffle else np.arange(len(y))
        for start in range(0, len(y), batch_size):
            rows = order[start : start + batch_size]
            learner.partial_fit(_rows(X, rows), y[rows])
            progress.update(len(rows))
    return f"{passes} pass{'' if passes == 1 else 'es'} of partial_fit"


def build_snapshot(args: argparse.Namespace, data: ReplayData, progress) -> tuple[bytes, dict]:
    """Train the model and return ``(snapshot bytes, held-out report)``."""
    from service.engine.model import fresh
    from service.models import new_model
    from service.schemas import ModelCreate
    from service.snapshot import export_snapshot

    X, labels = data.X, data.y  # labels in {-1, +1}
    request = ModelCreate(**model_request(args, data))
    if request.feature_mode == "dense" and isinstance(X, CSRMatrix):
        X = X.toarray()
    config, learner = new_model(request, incarnation="fit", created_at=0.0)
    n_train = len(labels) - int(round(args.holdout * len(labels)))
    if n_train < 2 or len(np.unique(labels[:n_train])) < 2:
        raise CliError("the training part needs events of both classes")
    loaded = fresh(config, learner)  # the model the snapshot holds; trains ``learner``
    X = model_features(X, loaded.spec, data.rows)
    X_train, X_test = row_range(X, 0, n_train), row_range(X, n_train, len(labels))
    if loaded.means is not None:  # missing_values "mean" in a dense model
        X_train = loaded.means.fill_and_learn(X_train)  # type: ignore[arg-type]
        X_test = loaded.means.fill_for_scoring(X_test)  # type: ignore[arg-type]
    trained = labels[:n_train]
    how = train(learner, X_train, trained, passes=args.passes, batch_size=args.batch_size,
                seed=args.seed, progress=progress)  # fmt: skip
    loaded.stats["events_learned"][0] = n_train
    loaded.stats["positives"][0] = int((trained > 0).sum())
    loaded.stats["negatives"][0] = int((trained <= 0).sum())
    arrays = {name: np.array(value) for name, value in loaded.arrays().items()}
    test_labels = labels[n_train:]
    report: dict[str, Any] = {"trained_on": n_train, "training": how, "held_out": len(test_labels)}
    if len(test_labels) and len(np.unique(test_labels)) == 2:
        scores = learner.decision_function(X_test)
        alpha, beta = args.pauc_range
        report.update(auc=auc(test_labels, scores), pauc=pauc(test_labels, scores, alpha, beta))
    return export_snapshot(config, 1, arrays), report


def upload(args: argparse.Namespace, body: bytes) -> None:
    with server(args, timeout=300) as http:
        response = http.put(f"/v1/models/{args.model}/snapshot", content=body,
                            headers={"content-type": "application/zip"},
                            params={"replace": str(args.replace).lower()})  # fmt: skip
    expect(response, "the server refused the snapshot", 201)


def fit(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    data = read_file_events(args)
    output = args.output or f"{args.model}.aucstream.zip"
    # a learner's default number of passes is known once it is built: no total then
    total = data.n_events * args.passes if args.passes else None
    with tqdm(total=total, unit="ev", unit_scale=True,
              disable=args.quiet or None) as progress:  # fmt: skip
        body, report = build_snapshot(args, data, progress)
    write_snapshot(output, body)
    print(f"model {args.model} ({args.learner}): {report['training']} on "
          f"{report['trained_on']} events; snapshot {output} ({len(body):,} bytes)")  # fmt: skip
    if "auc" in report:
        alpha, beta = args.pauc_range
        print(f"held out {report['held_out']} events: AUC {report['auc']:.4f}, "
              f"pAUC [{alpha:g}, {beta:g}] {report['pauc']:.4f}")  # fmt: skip
    elif report["held_out"]:
        print(f"held out {report['held_out']} events: one class only, no AUC")
    if args.url:
        upload(args, body)
        print(f"uploaded to {args.url} as model {args.model}")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "fit", SUMMARY, DESCRIPTION)
    parser.add_argument("file", help="the history: CSV, Parquet, LIBSVM or NPZ")
    parser.add_argument("--model", required=True, help="model id")
    add_file_options(parser)
    add_model_options(parser)
    parser.add_argument("--passes", type=int, help="online learners: passes")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--holdout", type=float, default=0.2, help="last fraction held out")
    parser.add_argument("--seed", type=int, default=0, help="shuffles of the passes")
    parser.add_argument("--output", help="default: <model>.aucstream.zip")
    parser.add_argument("--url", help="upload to this server (PUT .../snapshot)")
    parser.add_argument("--replace", action="store_true", help="with --url: overwrite the model")
    parser.add_argument("--api-key")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=fit)
