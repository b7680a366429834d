"""``aucstream replay`` in-process on CSV, Parquet, LIBSVM and NPZ files: the readers' policies
(quoted fields, text columns, missing cells), ids, ``--save``, the printed rate, and every
failure as one line on stderr with a non-zero exit; ``serve`` settings and ``worker --check``.
(``test_cli_subprocess.py`` runs the command as a process, and against a real server.)"""

from __future__ import annotations

import time
import zipfile

import numpy as np
import orjson
import pandas as pd
import pytest

from core.learners import make_learner
from core.metrics import auc
from service import cli
from service.stores.client import connect
from tests.service.cli_helpers import failed
from tests.service.conftest import ON_REDIS_AND_CLUSTER, make_stream, started_apps

HEADER = ["a", "b", "is_fraud", "c", "d"]


@pytest.fixture
def stream():
    return make_stream(600, n_features=4, seed=21)


@pytest.fixture
def frame(stream):
    X, y = stream
    table = pd.DataFrame(np.column_stack([X[:, :2], y, X[:, 2:]]), columns=HEADER)
    table["is_fraud"] = y
    return table


def _check_table(output: str, n_events: int) -> None:
    assert "AUC" in output and "pAUC [0, 0.1]" in output
    assert f"{n_events:,} events learned since its creation" in output
    assert f"this run: {n_events:,} events sent" in output


def _replay(path, *options: str) -> int:
    """``aucstream replay <path> --model m --quiet <options>``; returns the exit status."""
    return cli.main(["replay", str(path), "--model", "m", "--quiet", *options])


def test_replay_csv(tmp_path, frame, capsys):
    path = tmp_path / "events.csv"
    frame.to_csv(path, index=False)
    assert _replay(path, "--label-column", "is_fraud", "--batch-size", "128") == 0
    _check_table(capsys.readouterr().out, 600)


def test_csv_and_parquet_give_the_same_model_and_the_header_names_its_features(
    tmp_path, frame, capsys
):
    csv, parquet = tmp_path / "events.csv", tmp_path / "events.parquet"
    frame.to_csv(csv, index=False)
    frame.to_parquet(parquet)
    snapshots = []
    for path in (csv, parquet):
        archive = tmp_path / f"{path.suffix[1:]}.zip"
        assert _replay(path, "--label-column", "is_fraud", "--save", str(archive)) == 0
        assert f"written to {archive}" in capsys.readouterr().out
        with zipfile.ZipFile(archive) as opened:
            manifest = orjson.loads(opened.read("manifest.json"))
            snapshots.append({name: opened.read(name) for name in opened.namelist()})
        assert manifest["model"]["feature_names"] == ["a", "b", "c", "d"]
        assert manifest["model"]["feature_mode"] == "dense"
    arrays = [{k: v for k, v in s.items() if k.startswith("arrays/learner:")} for s in snapshots]
    assert arrays[0] == arrays[1]  # CSV's text round trip keeps every bit of the floats


def test_a_saved_model_loads_into_the_service_as_trained(tmp_path, frame, capsys):
    path, archive = tmp_path / "events.csv", tmp_path / "m.zip"
    frame.to_csv(path, index=False)
    assert _replay(path, "--save", str(archive), "--learner", "spam") == 0
    printed = capsys.readouterr().out
    with started_apps(store="memory") as build:
        client = build()
        loaded = client.put(
            "/v1/models/fraud/snapshot",
            content=archive.read_bytes(),
            headers={"content-type": "application/zip"},
        )
        assert loaded.status_code == 201, loaded.text
        assert loaded.json()["counts"]["events_learned"] == 600
        assert loaded.json()["config"]["feature_names"] == ["a", "b", "c", "d"]
        served = client.get("/v1/models/fraud/metrics").json()
    assert f"{served['since_start']['auc']:.4f}" in printed


def test_quoted_fields_and_text_columns(tmp_path, frame, capsys):
    frame.insert(0, "tx", [f"t{i}" for i in range(len(frame))])
    frame["merchant"] = [f'Shop "{i % 7}", Paris' for i in range(len(frame))]  # quotes, commas
    path = tmp_path / "events.csv"
    frame.to_csv(path, index=False)
    assert _replay(path) == 2
    failed(capsys, 2, "non-numeric column(s) 'tx', 'merchant'", "--drop-non-numeric")
    assert _replay(path, "--id-column", "tx") == 2
    failed(capsys, 2, "non-numeric column(s) 'merchant'")
    assert _replay(path, "--id-column", "tx", "--drop-non-numeric", "--label-column",
                   "is_fraud") == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "left out non-numeric column(s) 'merchant'" in captured.err
    _check_table(captured.out, 600)


def test_missing_values_policies(tmp_path, frame, capsys):
    frame.loc[2, "b"] = np.nan
    frame.loc[9, "d"] = np.nan
    path = tmp_path / "events.csv"
    frame.to_csv(path, index=False)
    assert _replay(path) == 2
    failed(capsys, 2, "row 3, column 'b': missing value (2 missing cell(s)", "--missing zero")
    assert _replay(path, "--missing", "zero") == 0
    _check_table(capsys.readouterr().out, 600)
    assert _replay(path, "--missing", "mean") == 0
    _check_table(capsys.readouterr().out, 600)
    frame.loc[4, "is_fraud"] = np.nan
    frame.to_csv(path, index=False)
    assert _replay(path, "--missing", "zero") == 2
    failed(capsys, 2, "row 5: no value in column 'is_fraud'")


def test_ids_from_a_column_skip_repeats(tmp_path, frame, capsys):
    frame.insert(0, "tx", [f"t{i}" for i in range(len(frame))])
    frame.loc[10, "tx"] = "t3"  # a repeated id: learned once
    path = tmp_path / "events.csv"
    frame.to_csv(path, index=False)
    assert _replay(path, "--id-column", "tx") == 0
    out = capsys.readouterr().out
    assert "600 events sent, 599 events learned, 1 already learned" in out


def test_replay_libsvm_and_npz_give_the_learner_metrics(tmp_path, stream, capsys):
    X, y = stream
    libsvm = tmp_path / "events.libsvm"
    libsvm.write_text(
        "".join(
            f"{int(label)} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(row)) + "\n"
            for row, label in zip(X, y, strict=True)
        )
    )
    npz = tmp_path / "events.npz"
    np.savez(npz, X=X, y=y)
    outputs = []
    for path in (libsvm, npz):
        assert _replay(path, "--scaling", "none", "--learner", "spam") == 0
        outputs.append(capsys.readouterr().out)
        _check_table(outputs[-1], 600)
    for path in (libsvm, npz):  # both layouts of the model, whatever the file's
        assert _replay(path, "--scaling", "none", "--learner", "spam", "--feature-mode",
                       "sparse") == 0  # fmt: skip
        outputs.append(capsys.readouterr().out)
        _check_table(outputs[-1], 600)
    learner = make_learner("spam")
    learner.initialize(4)
    expected = f"{auc(y, learner.prequential_step(X, y)):.4f}"
    assert all(expected in out for out in outputs)


def test_a_small_libsvm_file_becomes_a_dense_standardised_model(tmp_path, capsys):
    rng = np.random.default_rng(2)
    lines = []
    for _ in range(300):
        label = int(rng.random() < 0.3)
        active = sorted(rng.choice(40, size=5, replace=False) + 1)
        lines.append(f"{label} " + " ".join(f"{j}:{1000 + 50 * label * (j < 10)}" for j in active))
    path = tmp_path / "small.svm"
    path.write_text("\n".join(lines) + "\n")
    archive = tmp_path / "m.zip"
    assert _replay(path, "--save", str(archive)) == 0
    with zipfile.ZipFile(archive) as opened:
        config = orjson.loads(opened.read("manifest.json"))["model"]
    assert (config["feature_mode"], config["scaling"]) == ("dense", "standard")
    assert config["n_features"] == max(int(t.split(":")[0]) for t in path.read_text().split()
                                       if ":" in t)  # fmt: skip
    capsys.readouterr()


@pytest.mark.parametrize(
    "content, options, fragments",
    [(None, (), ("No such file or directory", "nowhere.csv")),
     ("a,b,y\n", (), ("has a header but no rows",)),
     ("", (), ("is empty",)),
     ("a,b,y\n1,2,0\n3,4,1\n", ("--label-column", "label"), ("no column 'label'", "'a', 'b'")),
     ("a,b,y\n1,2,0\n3,4,2\n", (), ("label column 'y'", "row 2")),
     ("a,b,y\n1,2,0\n3,inf,1\n", (), ("row 2, column 'b': infinite value",)),
     ("a,b,y\n1,2,0\n3,1e300,1\n", (), ("row 2: features contain 1e+300, beyond the feature "
                                      "bound of +-1e+100: rescale",)),
     ('a,b,y\n1,"2,0\n', (), ("cannot read",)),
     ("a,b,y\n1,2,0\n3,4,1\n", ("--params", "{eta0: 1}"), ("--params is not valid JSON",)),
     ("a,b,y\n1,2,0\n3,4,1\n", ("--params", '{"eta0": -1}'), ("eta0",)),
     ("a,b,y\n1,2,0\n3,4,1\n", ("--model", "bad id!"), ("invalid id",)),
     ("a,b,y\n1,2,0\n3,4,1\n", ("--pauc-range", "0.5", "0.1"), ("pauc_range",))],
)  # fmt: skip
def test_each_failure_is_one_line_and_exit_2(tmp_path, capsys, content, options, fragments):
    path = tmp_path / "nowhere.csv"
    if content is not None:
        path.write_text(content)
    assert _replay(path, *options) == 2
    failed(capsys, 2, *fragments)


def test_files_of_other_formats_fail_in_one_line(tmp_path, capsys):
    odd = tmp_path / "events.xlsx"
    odd.write_bytes(b"PK")
    assert _replay(odd) == 2
    failed(capsys, 2, "cannot tell the format", "--format")
    broken = tmp_path / "events.parquet"
    broken.write_bytes(b"not parquet at all")
    assert _replay(broken) == 2
    failed(capsys, 2, "cannot read", "as parquet")
    npz = tmp_path / "events.npz"
    np.savez(npz, features=np.zeros((2, 2)))
    assert _replay(npz) == 2
    failed(capsys, 2, "expected y and X")
    svm = tmp_path / "events.libsvm"
    svm.write_text("1 1:0.5\n0 2:x\n")
    assert _replay(svm) == 2
    failed(capsys, 2, "line 2")
    assert _replay(svm, "--id-column", "tx") == 2
    failed(capsys, 2, "--id-column is for CSV and Parquet")
    directory = tmp_path / "folder.csv"
    directory.mkdir()
    assert _replay(directory) == 2
    failed(capsys, 2, "folder.csv")


def test_a_snapshot_that_cannot_be_written_is_one_line(tmp_path, frame, capsys):
    path = tmp_path / "events.csv"
    frame.to_csv(path, index=False)
    assert _replay(path, "--save", str(tmp_path / "no" / "such" / "dir.zip")) == 2
    failed(capsys, 2, "cannot write the snapshot", "dir.zip")


def test_serve_refuses_invalid_settings(capsys, monkeypatch):
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_WORKERS"):
        monkeypatch.setenv(name, "")  # restored after the test (serve sets them)
        monkeypatch.delenv(name)
    assert cli.main(["serve", "--workers", "2", "--store", "memory"]) == 2
    failed(capsys, 2, "invalid settings", "Redis store")


def test_serve_passes_the_access_log_option_to_uvicorn(monkeypatch):
    import uvicorn

    for name in ("AUCSTREAM_STORE", "AUCSTREAM_WORKERS"):
        monkeypatch.setenv(name, "")  # restored after the test (serve sets them)
    runs: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: runs.append(options))
    assert cli.main(["serve", "--store", "memory"]) == 0
    assert cli.main(["serve", "--store", "memory", "--access-log"]) == 0
    assert cli.main(["serve", "--store", "memory", "--no-access-log"]) == 0
    assert [options["access_log"] for options in runs] == [False, True, False]


@ON_REDIS_AND_CLUSTER
def test_worker_check_reads_the_heartbeat_of_this_hosts_workers(any_redis, capsys, monkeypatch):
    import socket

    from service.cli import main
    from service.queue.lease import Leases
    from service.stores import keys

    # the command writes its options to the environment (AUCSTREAM_*): restored after the test
    monkeypatch.setenv("AUCSTREAM_REDIS_URL", any_redis)
    monkeypatch.setenv("AUCSTREAM_WORKER_NAME", "unset below")

    def check(*extra: str) -> int:
        monkeypatch.delenv("AUCSTREAM_WORKER_NAME", raising=False)  # no --name: the default
        return main(["worker", "--check", "--redis-url", any_redis, *extra])

    client = connect(any_redis)
    leases = Leases(client)
    host = socket.gethostname()
    assert check() == 1  # no worker at all
    assert "no live heartbeat" in capsys.readouterr().err
    leases.heartbeat(f"{host}x-17", 10_000)  # another host whose name starts like ours
    leases.heartbeat("worker-b", 10_000)
    assert check() == 1
    leases.heartbeat(f"{host}-4242", 10_000)  # what the worker's loop writes (<host>-<pid>)
    assert check() == 0
    assert f"{host}-4242" in capsys.readouterr().out
    assert check("--name", "worker-b") == 0
    assert check("--name", "worker-c") == 1
    client.delete(keys.WORKERS)
    leases.heartbeat(f"{host}-4242", 100)  # a worker that stopped renewing: expired
    time.sleep(0.2)
    assert check() == 1
    client.close()
    capsys.readouterr()
    monkeypatch.delenv("AUCSTREAM_WORKER_NAME", raising=False)
    nowhere = "redis+cluster://127.0.0.1:1" if "cluster" in any_redis else "redis://127.0.0.1:1/0"
    assert main(["worker", "--check", "--redis-url", nowhere]) == 1
    failed(capsys, 1, "Redis did not answer")
