"""``python -m service.cli`` as a user runs it: the help texts, failures as one line on stderr
and an exit status (never a traceback), and ``replay --url`` against a real uvicorn server
(idempotent re-runs with content-hash ids, ``--save`` from the server, refusals)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import numpy as np
import orjson
import pandas as pd
import pytest

from loadtest.local import free_port
from service.cli import command_modules
from tests.service.conftest import make_stream
from tests.service.server_helpers import uvicorn_server

ROOT = Path(__file__).resolve().parents[2]


def aucstream(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("AUCSTREAM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


def one_line_failure(result: subprocess.CompletedProcess, status: int, *fragments: str) -> str:
    assert result.returncode == status, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aucstream: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def csv_file(tmp_path):
    X, y = make_stream(500, n_features=4, seed=8)
    frame = pd.DataFrame(X, columns=["amount", "hour", "age", "score"])
    frame.insert(0, "tx", [f"tx-{i}" for i in range(len(frame))])
    frame["is_fraud"] = y
    path = tmp_path / "transactions.csv"
    frame.to_csv(path, index=False)
    return path


def test_help_texts_are_clean():
    texts = [aucstream("--help")]
    texts += [aucstream(name, "--help") for name in command_modules()]
    for result in texts:
        assert result.returncode == 0 and result.stderr == ""
        assert "``" not in result.stdout and ":class:" not in result.stdout
    top = texts[0].stdout
    assert all(name in top for name in ("serve", "replay", "worker"))
    serve = aucstream("serve", "--help").stdout
    for option, default in (("--host", "127.0.0.1"), ("--port", "8000"), ("--workers", "1"),
                            ("--log-level", "info")):  # fmt: skip
        assert option in serve and f"(default: {default})" in " ".join(serve.split())
    replay = " ".join(aucstream("replay", "--help").stdout.split())
    for text in ("--missing {refuse,zero,mean}", "--drop-non-numeric", "--id-column", "--save",
                 "dense up to 1,000 features", "(default: 1000)"):  # fmt: skip
        assert text in replay


def test_failures_are_one_line_with_an_exit_status(tmp_path, csv_file):
    one_line_failure(aucstream("replay", str(tmp_path / "gone.csv"), "--model", "m"), 2,
                     "No such file or directory", "gone.csv")  # fmt: skip
    one_line_failure(aucstream("replay", str(csv_file), "--model", "m"), 2,
                     "non-numeric column(s) 'tx'")  # fmt: skip
    one_line_failure(
        aucstream("replay", str(csv_file), "--model", "m", "--id-column", "nope"), 2,
        "--id-column: no column 'nope'",
    )  # fmt: skip
    down = f"http://127.0.0.1:{free_port()}"
    one_line_failure(
        aucstream("replay", str(csv_file), "--model", "m", "--id-column", "tx", "--url", down),
        1, "cannot reach", "connection refused",
    )  # fmt: skip
    usage = aucstream("replay", str(csv_file))  # argparse: usage and one error line, 2
    assert usage.returncode == 2 and "the following arguments are required: --model" in usage.stderr


def test_replay_in_process_as_a_command(tmp_path, csv_file):
    archive = tmp_path / "fraud.zip"
    result = aucstream("replay", str(csv_file), "--model", "fraud", "--id-column", "tx",
                       "--quiet", "--save", str(archive))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "this run: 500 events sent, 500 events learned, 0 already learned" in result.stdout
    with zipfile.ZipFile(archive) as opened:
        config = orjson.loads(opened.read("manifest.json"))["model"]
    assert config["feature_names"] == ["amount", "hour", "age", "score"]


def test_replay_into_a_server_is_idempotent(tmp_path, csv_file):
    plain = tmp_path / "plain.csv"  # no id column: ids from the file's content hash and row
    pd.read_csv(csv_file).drop(columns=["tx"]).to_csv(plain, index=False)
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        command = ("replay", str(plain), "--model", "fraud", "--url", url, "--quiet",
                   "--batch-size", "128")  # fmt: skip
        first = aucstream(*command)
        assert first.returncode == 0, first.stderr
        assert "this run: 500 events sent, 500 events learned, 0 already learned" in first.stdout
        again = aucstream(*command, "--save", str(tmp_path / "server.zip"))
        assert again.returncode == 0, again.stderr
        assert "500 events sent, 0 events learned, 500 already learned" in again.stdout
        model = http.get("/v1/models/fraud").json()
        assert model["counts"]["events_learned"] == 500
        assert model["config"]["feature_names"] == ["amount", "hour", "age", "score"]
        assert model["config"]["feature_mode"] == "dense"
        with zipfile.ZipFile(tmp_path / "server.zip") as opened:
            saved = orjson.loads(opened.read("manifest.json"))
        # the snapshot is the server's model as of the save; a background fit of the default's
        # boosted candidate may have committed since (a new version, no new events)
        assert saved["version"] <= model["version"]
        # the id column instead: other ids, so learned again, into another model
        by_column = aucstream("replay", str(csv_file), "--model", "tx", "--url", url, "--quiet",
                              "--id-column", "tx")  # fmt: skip
        assert by_column.returncode == 0, by_column.stderr
        assert http.get("/v1/models/tx").json()["counts"]["events_learned"] == 500
        # a model of another shape: refused in one line before anything is sent
        wrong = tmp_path / "wide.npz"
        np.savez(wrong, X=np.zeros((4, 9)), y=np.array([0, 1, 0, 1]))
        one_line_failure(aucstream("replay", str(wrong), "--model", "fraud", "--url", url), 2,
                         "has 4 features, the file 9")  # fmt: skip


def test_a_server_refusal_is_one_line(tmp_path, csv_file):
    with uvicorn_server(AUCSTREAM_STORE="memory", AUCSTREAM_API_KEYS="secret") as url:
        command = ("replay", str(csv_file), "--model", "m", "--id-column", "tx", "--url", url)
        one_line_failure(aucstream(*command), 1, "HTTP 401")
        result = aucstream(*command, "--api-key", "secret", "--quiet")
        assert result.returncode == 0, result.stderr
        long_ids = tmp_path / "long.csv"
        frame = pd.read_csv(csv_file)
        frame["tx"] = ["x" * 100_000 + str(i) for i in range(len(frame))]
        frame.to_csv(long_ids, index=False)
        line = one_line_failure(
            aucstream("replay", str(long_ids), "--model", "m", "--id-column", "tx", "--url", url,
                      "--api-key", "secret", "--quiet"),  # fmt: skip
            1, "the server refused the batch of rows 1-", "HTTP 413",
        )  # fmt: skip
        assert len(line) < 600


def test_the_worker_prints_each_log_line_once(redis_server):
    """``aucstream worker`` logs through one handler: its start line appears once."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "AUCSTREAM_WARMUP": "false"}
    environment.pop("AUCSTREAM_LOG_FORMAT", None)
    name = f"log-once-{os.getpid()}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--redis-url", redis_server,
         "--name", name],
        stderr=subprocess.PIPE, text=True, env=environment,
    )  # fmt: skip
    try:
        assert worker.stderr is not None
        first = worker.stderr.readline()  # blocks until the worker logs its start
        assert f"worker {name} started" in first, first
    finally:
        worker.terminate()
        _, rest = worker.communicate(timeout=60)
    lines = [first, *rest.splitlines()]
    started = [line for line in lines if f"worker {name} started" in line]
    stopped = [line for line in lines if f"worker {name} stopped" in line]
    assert len(started) == 1 and len(stopped) == 1, lines
