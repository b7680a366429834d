"""Real tables in ``aucstream replay`` and ``fit``: text labels (yes/no, true/false, or
``--positive-label``) and text features one-hot encoded by ``--feature-mode hashed``, the same
features whether learned in-process or sent to a server."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest

from service import cli
from tests.service.cli_helpers import failed
from tests.service.server_helpers import uvicorn_server

N_EVENTS = 400


def _table(seed: int = 5) -> pd.DataFrame:
    """A loan table: numbers, a category, a boolean, a few missing cells, a yes/no label."""
    rng = np.random.default_rng(seed)
    country = rng.choice(["FR", "DE", "ES", "IT"], size=N_EVENTS)
    amount = rng.gamma(2.0, 500.0, size=N_EVENTS).round(2)
    first_loan = rng.random(N_EVENTS) < 0.3
    risk = (country == "ES") * 1.5 + amount / 1000 + first_loan + rng.normal(size=N_EVENTS)
    frame = pd.DataFrame({"amount": amount, "country": country, "first_loan": first_loan,
                          "denied": np.where(risk > 2.0, "Yes", "no")})  # fmt: skip
    frame.loc[[3, 50], "amount"] = np.nan
    frame.loc[[7], "country"] = None
    return frame


def _run(*arguments: str) -> int:
    return cli.main([*arguments, "--quiet"] if arguments[0] == "replay" else list(arguments))


def test_hashed_replay_in_process_and_to_a_server_learn_the_same_model(tmp_path, capsys):
    path, saved = tmp_path / "loans.csv", tmp_path / "m.zip"
    _table().to_csv(path, index=False)
    options = ("--feature-mode", "hashed", "--missing", "zero", "--learner", "spam",
               "--scaling", "none")  # fmt: skip
    assert _run("replay", str(path), "--model", "m", *options, "--save", str(saved)) == 0
    assert "400 events learned since its creation" in capsys.readouterr().out
    with (
        uvicorn_server(AUCSTREAM_STORE="memory") as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        assert _run("replay", str(path), "--model", "sent", "--url", url, *options) == 0
        config = http.get("/v1/models/sent").json()["config"]
        assert (config["feature_mode"], config["n_features"]) == ("hashed", 1 << 16)
        loaded = http.put("/v1/models/local/snapshot", content=saved.read_bytes(),
                          headers={"content-type": "application/zip"})  # fmt: skip
        assert loaded.status_code == 201, loaded.text
        # the server's JSON route one-hot encodes "country": "ES" as the feature country=ES
        probe = {"events": [{"x": {"amount": 900.0, "country": "ES", "first_loan": True}},
                            {"x": {"amount": 80.0, "country": "FR"}}]}  # fmt: skip
        sent = http.post("/v1/models/sent/score", json=probe).json()["scores"]
        local = http.post("/v1/models/local/score", json=probe).json()["scores"]
        assert sent == local and sent[0] != sent[1]
        weights = np.array(http.get("/v1/models/sent/weights").json()["coef"])
        assert np.count_nonzero(weights) >= 6  # amount, first_loan and the countries


def test_text_columns_are_refused_naming_the_hashed_mode(tmp_path, capsys):
    path = tmp_path / "loans.csv"
    _table().to_csv(path, index=False)
    assert _run("replay", str(path), "--model", "m", "--missing", "zero") == 2
    failed(capsys, 2, "non-numeric column(s) 'country'", "--feature-mode hashed")


@pytest.mark.parametrize(
    "labels, options, positives",
    [(["Yes", "no", "YES", "No"], (), [1, 0, 1, 0]),
     (["TRUE", "false", "true", "False"], (), [1, 0, 1, 0]),
     (["denied", "approved", "withdrawn", "denied"], ("--positive-label", "denied"), [1, 0, 0, 1]),
     ([2, 1, 1, 2], ("--positive-label", "2"), [1, 0, 0, 1])],
)  # fmt: skip
def test_text_labels_and_positive_label(tmp_path, capsys, labels, options, positives):
    from service.cli._readers import read_file_events

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.normal(size=100), "outcome": labels * 25})
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    command = ["replay", str(path), "--model", "m", "--label-column", "outcome", *options]
    data = read_file_events(cli.build_parser().parse_command_line(command))
    np.testing.assert_array_equal(data.y, np.where(np.array(positives * 25) == 1, 1, -1))
    assert _run(*command) == 0
    assert "100 events learned" in capsys.readouterr().out


@pytest.mark.parametrize(
    "labels, options, fragments",
    [(["denied", "approved", "withdrawn", "denied"], (),
      ("label column 'outcome' is not binary", "'denied' (50)", "'approved' (25)",
       "--positive-label VALUE")),
     ([0, 1, 2, 1], (), ("label column 'outcome'", "values found: 1 (50)", "--positive-label")),
     (["yes", "no", "no", "no"], ("--positive-label", "Yes"),
      ("--positive-label 'Yes': no row of label column 'outcome' has it", "'no' (75)"))],
)  # fmt: skip
def test_labels_that_are_not_binary_are_one_clear_line(
    tmp_path, capsys, labels, options, fragments
):
    frame = pd.DataFrame({"a": np.arange(100.0), "outcome": labels * 25})
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    assert _run("replay", str(path), "--model", "m", "--label-column", "outcome", *options) == 2
    failed(capsys, 2, *fragments)


def test_fit_takes_hashed_features_and_a_positive_label(tmp_path, capsys):
    frame = _table()
    frame["denied"] = np.where(frame["denied"] == "Yes", "refused", "granted")
    path, output = tmp_path / "loans.parquet", tmp_path / "fit.zip"
    frame.to_parquet(path)
    assert _run("fit", str(path), "--model", "m", "--feature-mode", "hashed", "--missing",
                "zero", "--positive-label", "refused", "--learner", "spam", "--passes", "1",
                "--output", str(output), "--quiet") == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "1 pass of partial_fit on 320 events" in printed and "AUC" in printed
    assert output.stat().st_size > 0
