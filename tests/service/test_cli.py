"""``aucstream replay`` (in-process) on CSV, LIBSVM and NPZ files, and ``serve`` settings."""

from __future__ import annotations

import time

import numpy as np
import pytest

from core.learners import make_learner
from service import cli
from tests.service.conftest import make_stream


@pytest.fixture
def stream():
    return make_stream(600, n_features=4, seed=21)


def _check_table(output: str, n_events: int) -> None:
    assert "AUC" in output and "pAUC [0, 0.1]" in output
    assert f"{n_events} events learned" in output


def _replay(path, *options: str) -> int:
    """``aucstream replay <path> --model m --quiet <options>``; returns the exit status."""
    return cli.main(["replay", str(path), "--model", "m", "--quiet", *options])


def test_replay_csv(tmp_path, stream, capsys):
    X, y = stream
    path = tmp_path / "events.csv"
    header = "a,b,is_fraud,c,d"
    table = np.column_stack([X[:, :2], y, X[:, 2:]])
    np.savetxt(path, table, delimiter=",", header=header, comments="")
    assert _replay(path, "--label-column", "is_fraud", "--batch-size", "128") == 0
    _check_table(capsys.readouterr().out, 600)


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
        assert (
            _replay(path, "--feature-mode", "dense", "--scaling", "none", "--learner", "spam") == 0
        )
        outputs.append(capsys.readouterr().out)
        _check_table(outputs[-1], 600)
    learner = make_learner("spam")
    learner.initialize(4)
    scores = np.concatenate(
        [learner.prequential_step(X[i : i + 1000], y[i : i + 1000]) for i in range(0, 600, 1000)]
    )
    from core.metrics import auc

    expected = f"{auc(y, scores):.4f}"
    assert all(f"AUC                {expected}" in out or expected in out for out in outputs)


def test_replay_reports_bad_parameters(tmp_path, stream, capsys):
    X, y = stream
    path = tmp_path / "events.npz"
    np.savez(path, X=X, y=y)
    assert _replay(path, "--params", '{"eta0": -1}') == 2
    assert "eta0" in capsys.readouterr().err


def test_serve_refuses_invalid_settings(capsys, monkeypatch):
    for name in ("AUCSTREAM_STORE", "AUCSTREAM_REDIS_URL", "AUCSTREAM_WORKERS"):
        monkeypatch.setenv(name, "")  # restored after the test (serve sets them)
        monkeypatch.delenv(name)
    assert cli.main(["serve", "--workers", "2", "--store", "memory"]) == 2
    assert "Redis store" in capsys.readouterr().err


def test_worker_check_reads_the_heartbeat_of_this_hosts_workers(empty_redis, capsys, monkeypatch):
    import socket

    import redis

    from service.cli import main
    from service.queue.lease import Leases
    from service.stores import keys

    # the command writes its options to the environment (AUCSTREAM_*): restored after the test
    monkeypatch.setenv("AUCSTREAM_REDIS_URL", empty_redis)
    monkeypatch.setenv("AUCSTREAM_WORKER_NAME", "unset below")

    def check(*extra: str) -> int:
        monkeypatch.delenv("AUCSTREAM_WORKER_NAME", raising=False)  # no --name: the default
        return main(["worker", "--check", "--redis-url", empty_redis, *extra])

    client = redis.Redis.from_url(empty_redis)
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
    monkeypatch.delenv("AUCSTREAM_WORKER_NAME", raising=False)
    assert main(["worker", "--check", "--redis-url", "redis://127.0.0.1:1/0"]) == 1
    assert "Redis did not answer" in capsys.readouterr().err
