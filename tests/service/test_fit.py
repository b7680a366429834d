"""``aucstream fit``: a model trained on a history file becomes a snapshot that the real app
loads (PUT .../snapshot, every store) and that goes on learning; upload through uvicorn."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import orjson
import pandas as pd

from core.learners import make_learner
from service.cli import main
from tests.service.conftest import events_json


def _history(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = np.where((X[:, 0] ** 2 + X[:, 1] ** 2 < 0.6) | (X[:, 2] > 1.8), 1, 0)
    return X, y


def _fit(tmp_path, X, y, *extra, name="hist.npz"):
    path = tmp_path / name
    if name.endswith(".npz"):
        np.savez(path, X=X, y=y)
    else:
        frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
        frame["label"] = y
        frame.to_parquet(path)
    output = tmp_path / "model.zip"
    code = main(["fit", str(path), "--model", "m", "--scaling", "none", "--quiet",
                 "--output", str(output), *extra])  # fmt: skip
    return code, output


def _put(client, output, model="m"):
    response = client.put(f"/v1/models/{model}/snapshot", content=output.read_bytes(),
                          headers={"content-type": "application/zip"})  # fmt: skip
    assert response.status_code == 201, response.text
    return response.json()


def test_tree_embedded_history_is_served_and_goes_on_learning(tmp_path, client, capsys):
    X, y = _history()
    code, output = _fit(tmp_path, X, y, "--learner", "tree_embedded", "--params",
                        '{"max_depth": 4, "n_fit_events": 800, "random_state": 3}')  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "tree embedding fitted on the history" in printed and "held out 300 events" in printed
    info = _put(client, output)
    assert info["counts"]["events_learned"] == 1200
    expected = make_learner("tree_embedded", max_depth=4, n_fit_events=800, random_state=3)
    expected.fit_history(X[:1200], 2 * y[:1200] - 1)
    served = client.post("/v1/models/m/score", json=events_json(X[1200:])).json()["scores"]
    np.testing.assert_array_equal(served, expected.decision_function(X[1200:]))
    learned = client.post("/v1/models/m/events", json=events_json(X[1200:], y[1200:]))
    assert learned.status_code == 200, learned.text
    expected.partial_fit(X[1200:], y[1200:])
    served = client.post("/v1/models/m/score", json=events_json(X[:50])).json()["scores"]
    np.testing.assert_array_equal(served, expected.decision_function(X[:50]))


def test_online_learner_makes_shuffled_passes_in_batches(tmp_path, client):
    X, y = _history(seed=1)
    code, output = _fit(tmp_path, X, y, "--learner", "poise", "--passes", "2",
                        "--params", '{"random_state": 1}',
                        "--batch-size", "100", "--seed", "4", "--holdout", "0.1")  # fmt: skip
    assert code == 0
    expected = make_learner("poise", random_state=1)
    rng = np.random.default_rng(4)
    for _ in range(2):
        order = rng.permutation(1350)
        for start in range(0, 1350, 100):
            rows = order[start : start + 100]
            expected.partial_fit(X[rows], y[rows])
    _put(client, output)
    served = client.post("/v1/models/m/score", json=events_json(X[:40])).json()["scores"]
    np.testing.assert_array_equal(served, expected.decision_function(X[:40]))


def test_batch_learner_solves_and_parquet_reads_as_npz(tmp_path, capsys):
    X, y = _history(seed=2)
    _, from_npz = _fit(tmp_path, X, y, "--learner", "spdam", "--params", '{"random_state": 2}')
    assert "batch solve (converged: True)" in capsys.readouterr().out
    npz_bytes = from_npz.read_bytes()
    _, from_parquet = _fit(
        tmp_path, X, y, "--learner", "spdam", "--params", '{"random_state": 2}', name="hist.parquet"
    )
    for archive in (npz_bytes, from_parquet.read_bytes()):
        with zipfile.ZipFile(io.BytesIO(archive)) as members:
            manifest = orjson.loads(members.read("manifest.json"))
            weights = np.load(io.BytesIO(members.read("arrays/learner:w.npy")))
        assert manifest["model"]["learner"] == "spdam"
        expected = make_learner("spdam", random_state=2).fit(X[:1200], y[:1200]).coef_
        np.testing.assert_array_equal(weights, expected)


def test_refusals_are_clear(tmp_path, capsys):
    X, y = _history()
    y_one_class = np.zeros_like(y)
    assert _fit(tmp_path, X, y_one_class, "--learner", "spam")[0] != 0
    err = capsys.readouterr().err  # one line, no traceback
    assert err.count("\n") == 1 and "both classes" in err and "Traceback" not in err
    assert _fit(tmp_path, X, y, "--learner", "svm_pauc")[0] == 2
    assert "batch solver" in capsys.readouterr().err


def test_upload_to_a_running_server(tmp_path, capsys):
    import httpx

    from tests.service.server_helpers import uvicorn_server

    X, y = _history(seed=3)
    with uvicorn_server(AUCSTREAM_STORE="memory") as url:
        code, output = _fit(tmp_path, X, y, "--learner", "spam", "--url", url)
        assert code == 0 and f"uploaded to {url}" in capsys.readouterr().out
        with httpx.Client(base_url=url, timeout=60) as http:
            info = http.get("/v1/models/m").json()
            assert info["counts"]["events_learned"] == 1200
            assert http.get("/v1/models/m/snapshot").status_code == 200


def test_pass_counts_read_as_english(tmp_path, capsys):
    X, y = _history(n=300, seed=2)
    for passes, said in (("1", "1 pass of partial_fit"), ("3", "3 passes of partial_fit")):
        code, _ = _fit(tmp_path, X, y, "--learner", "poise", "--passes", passes)
        assert code == 0
        assert said in capsys.readouterr().out
