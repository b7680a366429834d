"""The command line speaks the server's language: ``--missing`` takes the server's
``missing_values`` policies (refuse, zero, mean) with the server's semantics (a file replayed
in-process, sent to a server, or posted as JSON events learns the same model), ``fit`` takes
replay's file options, and a wrong option is reported with its subcommand's usage."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest

from service import cli
from tests.service.cli_helpers import failed
from tests.service.conftest import make_stream
from tests.service.server_helpers import uvicorn_server

NAMES = ["amount", "hour", "age"]
MODEL_OPTIONS = ("--learner", "spam", "--scaling", "none", "--batch-size", "64")


def _table(n_events: int = 300) -> pd.DataFrame:
    """Transactions with an id column, a few missing cells (the first in row 3) and a label."""
    X, y = make_stream(n_events, n_features=len(NAMES), seed=4)
    frame = pd.DataFrame(X, columns=NAMES)
    frame.loc[[2, 40, 41, 200], "amount"] = np.nan
    frame.loc[[7, 150], "age"] = np.nan
    frame.insert(0, "tx", [f"tx-{i}" for i in range(n_events)])
    frame["is_fraud"] = y
    return frame


def _json_events(frame: pd.DataFrame) -> list[dict]:
    """The table's rows as the server's JSON events, a missing cell as null."""
    events = []
    for row in frame.itertuples(index=False):
        x = {name: None if pd.isna(getattr(row, name)) else float(getattr(row, name))
             for name in NAMES}  # fmt: skip
        events.append({"id": row.tx, "x": x, "y": int(row.is_fraud)})
    return events


PROBES = {"events": [{"x": {"amount": None, "hour": 0.5, "age": -1.0}},
                     {"x": {"amount": 2.0, "hour": None, "age": None}},
                     {"x": {"amount": 1.0, "hour": 1.0, "age": 1.0}}]}  # fmt: skip


def test_missing_policies_are_the_servers_and_learn_what_the_server_learns(tmp_path, capsys):
    """Under ``mean`` (and ``zero``): the file learned in this process, the file sent to a
    server, and its rows posted as JSON with nulls give one model, whose scores of events with
    missing values agree to the bit."""
    path = tmp_path / "transactions.csv"
    _table().to_csv(path, index=False)
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        for policy in ("mean", "zero"):
            saved = tmp_path / f"{policy}.zip"
            common = ("--id-column", "tx", "--missing", policy, *MODEL_OPTIONS, "--quiet")
            assert cli.main(["replay", str(path), "--model", f"local-{policy}", *common,
                             "--save", str(saved)]) == 0  # fmt: skip
            assert cli.main(["replay", str(path), "--model", f"sent-{policy}", *common,
                             "--url", url]) == 0  # fmt: skip
            capsys.readouterr()
            config = http.get(f"/v1/models/sent-{policy}").json()["config"]
            assert config["missing_values"] == policy
            loaded = http.put(f"/v1/models/local-{policy}/snapshot", content=saved.read_bytes(),
                              headers={"content-type": "application/zip"})  # fmt: skip
            assert loaded.status_code == 201, loaded.text
            assert loaded.json()["config"]["missing_values"] == policy
            created = http.post("/v1/models", json={
                "id": f"posted-{policy}", "n_features": 3, "feature_names": NAMES,
                "learner": "spam", "scaling": "none", "missing_values": policy})  # fmt: skip
            assert created.status_code == 201, created.text
            events = _json_events(_table())
            for start in range(0, len(events), 64):
                answer = http.post(f"/v1/models/posted-{policy}/events",
                                   json={"events": events[start : start + 64]})  # fmt: skip
                assert answer.status_code == 200, answer.text
            scores = [http.post(f"/v1/models/{kind}-{policy}/score", json=PROBES).json()["scores"]
                      for kind in ("local", "sent", "posted")]  # fmt: skip
            assert scores[0] == scores[1] == scores[2]
        # the policies differ where a value is missing, and only there
        mean, zero = (http.post(f"/v1/models/posted-{p}/score", json=PROBES).json()["scores"]
                      for p in ("mean", "zero"))  # fmt: skip
        assert mean[0] != zero[0]


def test_refuse_names_the_row_and_column_and_a_server_model_keeps_its_policy(tmp_path, capsys):
    path = tmp_path / "transactions.csv"
    _table().to_csv(path, index=False)
    assert cli.main(["replay", str(path), "--model", "m", "--id-column", "tx", "--quiet"]) == 2
    failed(capsys, 2, "row 3, column 'amount': missing value (6 missing cell(s)",
           "--missing zero", "--missing mean")  # fmt: skip
    npz = tmp_path / "events.npz"
    X, y = make_stream(50, n_features=3, seed=1)
    X[4, 1] = np.nan
    np.savez(npz, X=X, y=y)
    assert cli.main(["replay", str(npz), "--model", "m", "--quiet"]) == 2
    failed(capsys, 2, "row 5, column '1': missing value (1 missing cell(s)")
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        assert http.post("/v1/models", json={"id": "strict", "n_features": 3}).status_code == 201
        assert cli.main(["replay", str(path), "--model", "strict", "--id-column", "tx",
                         "--missing", "mean", "--url", url, "--quiet"]) == 2  # fmt: skip
        failed(capsys, 2, "missing_values 'refuse'", "--missing refuse")
        assert http.get("/v1/models/strict").json()["counts"]["events_learned"] == 0


def test_a_libsvm_nan_pair_is_refused_by_a_dense_mean_model_and_left_out_by_zero(tmp_path, capsys):
    path = tmp_path / "events.svm"
    path.write_text("1 1:2.5 2:nan\n0 1:0.5 2:1\n1 1:3 2:0.2\n0 2:2\n")
    assert cli.main(["replay", str(path), "--model", "m", "--missing", "mean", "--quiet"]) == 2
    failed(capsys, 2, "feature 2 is nan", "in LIBSVM, leave the pair out")
    assert cli.main(["replay", str(path), "--model", "m", "--quiet"]) == 2
    failed(capsys, 2, "refuses missing values")
    for options in (("--missing", "zero"), ("--missing", "mean", "--feature-mode", "sparse")):
        assert cli.main(["replay", str(path), "--model", "m", *options, "--quiet"]) == 0
        assert "4 events learned since its creation" in capsys.readouterr().out


def test_fit_takes_the_id_column_and_mean_keeps_the_training_means(tmp_path, capsys):
    frame = _table()
    path, output = tmp_path / "history.csv", tmp_path / "fit.zip"
    frame.to_csv(path, index=False)
    assert cli.main(["fit", str(path), "--model", "m", "--id-column", "tx", "--missing", "mean",
                     "--learner", "spam", "--passes", "1", "--holdout", "0.25",
                     "--output", str(output), "--quiet"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "on 225 events" in printed and "held out 75 events: AUC" in printed
    means = frame.loc[:224, NAMES].mean()  # of the values present in the training part
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        loaded = http.put("/v1/models/m/snapshot", content=output.read_bytes(),
                          headers={"content-type": "application/zip"})  # fmt: skip
        assert loaded.status_code == 201, loaded.text
        config = loaded.json()["config"]
        assert config["feature_names"] == NAMES and config["missing_values"] == "mean"
        filled = {"events": [{"x": {"amount": means["amount"], "hour": 0.5, "age": -1.0}},
                             {"x": {"amount": 2.0, "hour": means["hour"], "age": means["age"]}},
                             {"x": {"amount": 1.0, "hour": 1.0, "age": 1.0}}]}  # fmt: skip
        scores = [http.post("/v1/models/m/score", json=body).json()["scores"]
                  for body in (PROBES, filled)]  # fmt: skip
    np.testing.assert_allclose(scores[0], scores[1], rtol=1e-12)


@pytest.mark.parametrize("command", ["replay", "fit"])
def test_an_unknown_option_is_reported_with_the_subcommands_usage(tmp_path, capsys, command):
    path = tmp_path / "history.csv"
    _table().to_csv(path, index=False)
    with pytest.raises(SystemExit) as exited:
        cli.main([command, str(path), "--model", "m", "--no-such-option"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: aucstream {command} ")
    assert "--missing {refuse,zero,mean}" in err  # the subcommand's options, not COMMAND
    assert f"aucstream {command}: error: unrecognized arguments: --no-such-option" in err
    with pytest.raises(SystemExit):
        cli.main([command, str(path), "--model", "m", "--missing", "drop"])
    err = capsys.readouterr().err
    assert f"usage: aucstream {command} " in err and "invalid choice: 'drop'" in err
