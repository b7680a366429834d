"""``auto``, the default learner of models created over HTTP, on both stores: its effective
candidates are shown, it learns as the core learner does, and its leaderboard is in /metrics."""

from __future__ import annotations

import numpy as np
import pytest

from core.learners import learner_class, make_learner
from core.learners._declared import _keyword_init, declared_parameters
from tests.service.conftest import events_json, make_stream


def _create(client, **extra):
    response = client.post("/v1/models", json={"id": "m", "n_features": 5, **extra})
    assert response.status_code == 201, response.text
    return response.json()


def test_a_model_without_a_learner_runs_auto_with_the_models_range(client):
    info = _create(client, pauc_range=[0.0, 0.05])
    config = info["config"]
    assert config["learner"] == "auto"
    assert config["params"]["pauc_range"] == [0.0, 0.05]
    candidates = {c["learner"]: c["params"] for c in config["params"]["candidates"]}
    assert set(candidates) == {"logistic", "ftrl_pauc", "boosted_embedded"}
    # the pAUC candidate optimises the model's range; logistic's alpha is its own step size
    assert (candidates["ftrl_pauc"]["alpha"], candidates["ftrl_pauc"]["beta"]) == (0.0, 0.05)
    assert candidates["logistic"].get("beta", 1.0) == 1.0
    # the solver logistic resolves from the model's width is stored explicit (the first
    # candidate's: the fast-adapting one forgets, which only FTRL does); the boosted
    # candidates' logistic, inside them, names FTRL itself
    solvers = [c["params"].get("solver") for c in config["params"]["candidates"]]
    assert solvers == ["laplace", None, None, "ftrl", None]
    boosted = config["params"]["candidates"][2]["params"]
    fast = config["params"]["candidates"][4]["params"]
    assert fast["params"]["half_life"] == 150 and fast["buffer_size"] == 2000
    assert (fast["n_trees"], fast["max_leaves"], fast["refit_every"]) == (25, 8, 1500)
    assert boosted["learner"] == "logistic" and boosted["params"]["solver"] == "ftrl"
    assert boosted["params"]["base_rate_offset"] is True and boosted["first_fit"] == 250
    assert (boosted["n_trees"], boosted["max_leaves"], boosted["buffer_size"]) == (50, 31, 8000)
    assert boosted["refit_every"] == 8000
    assert client.get("/v1/models/m").json()["config"] == config


def test_auto_learns_as_the_core_learner_and_reports_its_leaderboard(client):
    _create(client, scaling="none", params={"random_state": 4, "evaluate_every": 100,
                                            "window": 400})  # fmt: skip
    X, y = make_stream(8400, seed=2)
    scores = []
    # the boosted candidate's fits land at their fit points (N, N + L(N)) whoever
    # computes them: the background fitter or the request (a request of 2,100 events spans
    # both points); four requests: the tournament state is committed
    for start in range(0, 8400, 2100):
        batch = slice(start, start + 2100)
        response = client.post(
            "/v1/models/m/events?scores=true", json=events_json(X[batch], y[batch])
        )
        assert response.status_code == 200, response.text
        scores.extend(response.json()["scores"])

    # the library's defaults are the HTTP model's (drift tracking: a fast candidate); the
    # model was created with scaling "none"
    reference = make_learner("auto", random_state=4, evaluate_every=100, window=400,
                             pauc_range=[0.0, 0.1], scaling="none")  # fmt: skip
    reference.initialize(5)
    np.testing.assert_array_equal(scores, reference.prequential_step(X, y))

    board = client.get("/v1/models/m/metrics").json()["leaderboard"]
    expected = reference.leaderboard()
    assert board["leader"] == expected["leader"]
    assert board["leader_since"] == expected["leader_since"]
    assert [row["learner"] for row in board["candidates"]] == [
        "logistic", "ftrl_pauc", "boosted_embedded", "logistic", "boosted_embedded",
    ]  # fmt: skip
    for row, want in zip(board["candidates"], expected["candidates"], strict=True):
        assert row["weight"] == want["weight"]
    assert board["candidates"][3]["params"]["half_life"] == 2000
    fits = client.app.state.engine.repository.rebuilt("m").arrays()["learner:c2:fits"][0]
    # due at 250, 375, 563, 845, 1,268, 1,902, 2,853, 4,280, 6,420 (installed at 6,676)
    assert fits == reference._candidates[2].fits_ == 9
    for row, want in zip(board["candidates"], expected["candidates"], strict=True):
        assert row["window_pauc"] == pytest.approx(want["window_pauc"], abs=0)
        assert row["window_auc"] == pytest.approx(want["window_auc"], abs=0)

    # the served model is the candidates' mix: /score agrees
    served = client.post("/v1/models/m/score", json=events_json(X[:9])).json()["scores"]
    np.testing.assert_array_equal(served, reference.decision_function(X[:9]))


def test_a_single_learner_model_has_no_leaderboard(client):
    _create(client, learner="spam")
    assert "leaderboard" not in client.get("/v1/models/m/metrics").json()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"pauc_range": [0.0, 0.3]}, "pauc_range"),
        (
            {"candidates": [{"learner": "logistic"}, {"learner": "nope"}]},
            "params.candidates[1].learner",
        ),
        (
            {"candidates": [{"learner": "pmb", "params": {"beta": 0.3}}]},
            "params.candidates[0].params.beta",
        ),
        ({"window": 10, "evaluate_every": 20}, "params.evaluate_every"),
    ],
)
def test_bad_auto_parameters_are_422s_naming_the_field(client, params, field):
    body = {"id": "m", "n_features": 5, "params": params, "pauc_range": [0.0, 0.05]}
    response = client.post("/v1/models", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert client.get("/v1/models").json() == {"models": []}


def test_track_drift_is_on_for_new_models_and_can_be_turned_off(client):
    config = _create(client)["config"]
    assert config["params"]["track_drift"] is True
    assert [c["learner"] for c in config["params"]["candidates"]] == [
        "logistic", "ftrl_pauc", "boosted_embedded", "logistic", "boosted_embedded",
    ]  # fmt: skip
    client.delete("/v1/models/m")
    config = _create(client, params={"track_drift": False})["config"]
    assert config["params"]["track_drift"] is False
    assert [c["learner"] for c in config["params"]["candidates"]] == [
        "logistic", "ftrl_pauc", "boosted_embedded",
    ]  # fmt: skip
    X, y = make_stream(300, seed=1)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    arrays = client.app.state.store.load("m").arrays
    assert not [name for name in arrays if name.startswith("learner:drift")]
    assert "drift" in client.get("/v1/models/m/metrics").json()  # the model's own detector


def test_a_default_http_model_learns_as_the_library_default(client):
    """One default: a model created with nothing but its width (dense, ``"scaling": "auto"``)
    learns bit for bit what ``make_learner("auto")`` learns, and stores the same parameters."""
    config = _create(client)["config"]
    X, y = make_stream(3000, seed=5)
    response = client.post("/v1/models/m/events?scores=true", json=events_json(X, y))
    assert response.status_code == 200, response.text
    library = make_learner("auto")
    np.testing.assert_array_equal(response.json()["scores"], library.prequential_step(X, y))
    assert config["scaling"] == library.scaling == "standard"
    params = library.get_params()
    assert {
        key: config["params"][key] for key in params if key not in ("candidates", "scaling")
    } == {key: value for key, value in params.items() if key not in ("candidates", "scaling")} | {
        "pauc_range": [0.0, 0.1]
    }


def test_a_wide_model_s_default_tournament_takes_pmb(client):
    """ftrl_pauc keeps 3,000 dense reservoir rows: wider than 1,000 features the default
    tournament takes pmb instead, and the Laplace solver on the 128 columns in use; the stored
    config says so."""
    response = client.post("/v1/models", json={"id": "wide", "n_features": 1001})
    assert response.status_code == 201, response.text
    candidates = response.json()["config"]["params"]["candidates"]
    assert [c["learner"] for c in candidates] == ["logistic", "pmb", "logistic", "logistic"]
    solvers = [candidates[k]["params"]["solver"] for k in (0, 2, 3)]
    assert solvers == ["ftrl", "laplace", "ftrl"]
    assert candidates[2]["params"]["max_columns"] == 128


@pytest.mark.parametrize(("n_features", "solver"), [(5, "laplace"), (129, "ftrl")])
def test_a_logistic_model_shows_the_solver_its_width_gives_it(client, n_features, solver):
    response = client.post(
        "/v1/models", json={"id": "lr", "n_features": n_features, "learner": "logistic"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["config"]["params"]["solver"] == solver
    assert client.get("/v1/models/lr").json()["config"]["params"]["solver"] == solver


def test_a_stored_tournament_keeps_every_candidate_parameter_when_a_default_changes(
    client, monkeypatch
):
    """The stored config lists every parameter of every candidate, so a later release that
    changes a learner's default (here oam's C) does not change what a stored model runs."""
    candidates = [{"learner": "oam"}, {"learner": "spam", "params": {"eta0": 2.0}}]
    config = _create(client, scaling="none", params={"candidates": candidates})["config"]
    stored = config["params"]["candidates"]
    assert [set(c["params"]) for c in stored] == [
        set(make_learner(name).get_params()) for name in ("oam", "spam")
    ]
    assert (stored[0]["params"]["C"], stored[1]["params"]["eta0"]) == (1e-4, 2.0)
    assert client.get("/v1/models/m").json()["config"] == config
    X, y = make_stream(300, seed=3)
    assert client.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200

    oam = learner_class("oam")
    parameters = declared_parameters(oam)
    parameters["C"] = parameters["C"].replace(default=1.0)
    monkeypatch.setattr(oam, "__init__", _keyword_init(oam, parameters))
    assert make_learner("oam").C == 1.0  # the "new release"
    loaded = client.app.state.engine.repository.rebuilt("m")  # checkpoint + log
    assert loaded.learner._candidates[0].C == 1e-4
    reference = make_learner("auto", scaling="none", candidates=stored)
    reference.initialize(5)
    reference.prequential_step(X, y)
    X_next, y_next = make_stream(200, seed=4)
    np.testing.assert_array_equal(
        loaded.learner.prequential_step(X_next, y_next), reference.prequential_step(X_next, y_next)
    )


@pytest.mark.parametrize("store_kind", ["sqlite", "redis"], indirect=True)
def test_the_leaderboard_lists_the_same_parameters_after_a_restart(make_client):
    """Before a restart the tournament runs from the creation request (a few parameters
    named), after it from the stored configuration (every parameter named): the leaderboard
    (and the dashboard's table of it) lists the parameters that differ from each learner's
    defaults both times."""
    first = make_client()
    response = first.post("/v1/models", json={"id": "m", "n_features": 5})
    assert response.status_code == 201, response.text
    X, y = make_stream(300, seed=7)
    assert first.post("/v1/models/m/events", json=events_json(X, y)).status_code == 200
    before = first.get("/v1/models/m/metrics").json()["leaderboard"]["candidates"]
    first.__exit__(None, None, None)

    second = make_client()  # a new process: the model is read back from the store
    after = second.get("/v1/models/m/metrics").json()["leaderboard"]["candidates"]
    assert [c["params"] for c in after] == [c["params"] for c in before]
    stored = second.get("/v1/models/m").json()["config"]["params"]["candidates"]
    for shown, candidate in zip(after, stored, strict=True):
        defaults = learner_class(candidate["learner"])().get_params()
        assert set(shown["params"]) < set(candidate["params"])  # not every parameter
        for key, value in candidate["params"].items():
            default = defaults[key]
            if isinstance(default, tuple):  # a default (0.0, 0.1) is stored as [0.0, 0.1]
                default = list(default)
            same = value == default
            assert (key in shown["params"]) == (not same), (candidate["learner"], key)


def test_a_hashed_auto_model_learns_its_columns_in_use_as_the_library_does(client):
    """A hashed model of text and numbers over HTTP: its default tournament is the wide one
    with the Laplace solver on the columns in use, it learns what the library learns on the
    same events hashed (one request per event and then batches), and that candidate's slots
    hold the hashed columns the events use, in the order they appeared."""
    from core.hashing import FeatureHasher

    width = 1 << 16
    response = client.post(
        "/v1/models", json={"id": "h", "n_features": width, "feature_mode": "hashed"}
    )
    assert response.status_code == 201, response.text
    rng = np.random.default_rng(5)
    y = (rng.random(300) < 0.3).astype(int)
    grades = np.array(["A", "B", "C", "D"])[np.minimum(rng.integers(0, 3, 300) + y, 3)]
    rows = [
        {"amount": float(100 + 20 * rng.normal() + 15 * label), "grade": str(grade)}
        for label, grade in zip(y, grades, strict=True)
    ]
    scores = []
    for start, stop in [(i, i + 1) for i in range(40)] + [(40, 170), (170, 300)]:
        events = [{"x": rows[i], "y": int(y[i])} for i in range(start, stop)]
        answer = client.post("/v1/models/h/events?scores=true", json={"events": events})
        assert answer.status_code == 200, answer.text
        scores.extend(answer.json()["scores"])
    config = client.get("/v1/models/h").json()["config"]
    specs = [c["params"].get("max_columns") for c in config["params"]["candidates"]]
    assert specs == [None, None, 128, None]
    kinds = [c["params"].get("number_prior_variance") for c in config["params"]["candidates"]]
    assert kinds == [None, None, 3.0, None]

    named = [{"amount": r["amount"], f"grade={r['grade']}": 1.0} for r in rows]
    hashed = FeatureHasher(width).transform(named)
    reference = make_learner("auto", scaling="scale", pauc_range=[0.0, 0.1])
    reference.initialize(width)
    np.testing.assert_array_equal(scores, reference.prequential_step(hashed, y))
    slots = reference._candidates[2].state_["columns"]
    first_seen = list(dict.fromkeys(hashed.indices.tolist()))
    assert slots[: len(first_seen)].tolist() == first_seen and len(first_seen) == 5
    assert np.all(slots[len(first_seen) :] == -1)
    # the amount (a number) has the number's prior; the grades (+-4 under scale) are indicators
    magnitudes = reference._candidates[2].state_["magnitudes"][:5].tolist()
    assert sorted(magnitudes) == [-1.0, 4.0, 4.0, 4.0, 4.0]
    amount = int(FeatureHasher(width).transform([{"amount": 1.0}]).indices[0])
    assert magnitudes[first_seen.index(amount)] == -1.0
