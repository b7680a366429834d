"""``GET /v1/models/{id}/weights`` in the user's feature space, and ``feature_names``.

The raw-space weights are checked against the API's own scores (``POST /score``) on raw
events: ``raw_coef . x + raw_intercept`` must give them to 1e-9 relative for every foldable
scaling, dense, sparse and hashed, through the real app."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from core.hashing import FeatureHasher
from tests.service.conftest import create_model, npz_bytes, started_apps

N_FEATURES = 6
NAMES = ["amount", "n_items", "is_new", "hour", "age_days", "score_ext"]
OFFSETS = np.array([2500.0, 3.0, 0.0, 12.0, 400.0, -7.0])
SPREADS = np.array([900.0, 2.0, 1.0, 6.0, 150.0, 0.01])


@pytest.fixture
def client():
    with started_apps(store="memory") as build:
        yield build()


def raw_events(n, seed, sparse=False):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    X = rng.normal(size=(n, N_FEATURES)) + 1.2 * y[:, None] * (np.arange(N_FEATURES) < 3)
    X = X * SPREADS + OFFSETS
    X[:, 2] = X[:, 2] > 0  # a 0/1 flag
    X[::7] = np.round(X[::7])  # ties
    if sparse:
        X[rng.random(X.shape) < 0.4] = 0.0
    return X, y


def csr_arrays(X):
    rows, columns = np.nonzero(X)
    indptr = np.zeros(len(X) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(X)), out=indptr[1:])
    return {"indptr": indptr, "indices": columns.astype(np.int64), "data": X[rows, columns]}


def post(client, path, X, y=None, *, sparse):
    arrays = csr_arrays(X) if sparse else {"X": X}
    if y is not None:
        arrays["y"] = y
    response = client.post(
        path, content=npz_bytes(**arrays), headers={"content-type": "application/x-npz"}
    )
    assert response.status_code == 200, response.text
    return response.json()


def assert_reproduces(raw_scores, api_scores):
    api_scores = np.asarray(api_scores)
    np.testing.assert_allclose(
        raw_scores, api_scores, rtol=1e-9, atol=1e-9 * float(np.max(np.abs(api_scores)))
    )


#: an ``auto`` whose candidates are all linear (the default's third, tree_embedded, is not)
LINEAR_AUTO = {"candidates": [{"learner": "logistic", "params": {"base_rate_offset": True}},
                              {"learner": "ftrl_pauc"}]}  # fmt: skip


@pytest.mark.parametrize(
    "feature_mode, scaling, learner",
    [("dense", "auto", "auto"), ("dense", "standard", "logistic"), ("dense", "scale", "spam"),
     ("dense", "none", "pmb"), ("sparse", "auto", "auto"), ("sparse", "scale", "logistic"),
     ("sparse", "none", "spam")],
)  # fmt: skip
def test_raw_weights_give_the_api_scores(client, feature_mode, scaling, learner):
    sparse = feature_mode == "sparse"
    create_model(
        client, n_features=N_FEATURES, feature_mode=feature_mode, scaling=scaling,
        learner=learner, feature_names=NAMES, params=LINEAR_AUTO if learner == "auto" else {},
    )  # fmt: skip
    for seed in (1, 2):
        post(client, "/v1/models/m/events", *raw_events(300, seed, sparse), sparse=sparse)
    body = client.get("/v1/models/m/weights").json()
    assert body["feature_names"] == NAMES
    resolved = ("scale" if sparse else "standard") if scaling == "auto" else scaling
    assert body["scaling"] == resolved
    assert "raw_coef . x + raw_intercept" in body["raw_note"]
    X_new, _ = raw_events(80, 3, sparse)
    scores = post(client, "/v1/models/m/score", X_new, sparse=sparse)["scores"]
    assert_reproduces(X_new @ np.array(body["raw_coef"]) + body["raw_intercept"], scores)
    if scaling != "none":  # the internal weights do not apply to raw features
        internal = X_new @ np.array(body["coef"]) + body["intercept"]
        assert not np.allclose(internal, scores, rtol=1e-3)


@pytest.mark.parametrize("feature_mode", ["dense", "sparse"])
def test_the_default_auto_has_no_raw_weights_and_says_why(client, feature_mode):
    """The default tournament mixes a tree-embedded candidate: its score is not linear in the
    features, so there is nothing to copy into a rules engine, and the note says what is."""
    sparse = feature_mode == "sparse"
    body = {"id": "m", "n_features": N_FEATURES, "feature_mode": feature_mode}
    assert client.post("/v1/models", json=body).status_code == 201
    post(client, "/v1/models/m/events", *raw_events(300, 1, sparse), sparse=sparse)
    weights = client.get("/v1/models/m/weights").json()
    assert weights["raw_coef"] is None and weights["raw_intercept"] is None
    assert "tree_embedded" in weights["raw_note"] and "all linear" in weights["raw_note"]
    assert len(weights["coef"]) == N_FEATURES


def test_raw_weights_of_a_hashed_model_are_per_bucket(client):
    n_buckets = 1024
    create_model(client, n_features=n_buckets, feature_mode="hashed", learner="logistic")
    rng = np.random.default_rng(4)

    def named_events(n):
        return [
            {"amount": float(2500 + 900 * rng.normal()), "hour": float(rng.integers(0, 24)),
             "country": str(rng.choice(["FR", "DE", "US"]))}
            for _ in range(n)
        ]  # fmt: skip

    events = [{"x": x, "y": int(rng.random() < 0.3)} for x in named_events(400)]
    assert client.post("/v1/models/m/events", json={"events": events}).status_code == 200
    body = client.get("/v1/models/m/weights").json()
    assert body["feature_names"] is None and "per hash bucket" in body["raw_note"]
    new = named_events(50)
    scores = client.post("/v1/models/m/score", json={"events": [{"x": x} for x in new]}).json()
    onehot = [
        {"amount": x["amount"], "hour": x["hour"], f"country={x['country']}": 1.0} for x in new
    ]
    X = FeatureHasher(n_buckets).transform(onehot).toarray()
    assert_reproduces(X @ np.array(body["raw_coef"]) + body["raw_intercept"], scores["scores"])


def test_unit_norm_says_why_there_are_no_raw_weights(client):
    create_model(client, n_features=N_FEATURES, scaling="unit_norm")
    post(client, "/v1/models/m/events", *raw_events(100, 1), sparse=False)
    body = client.get("/v1/models/m/weights").json()
    assert body["raw_coef"] is None and body["raw_intercept"] is None
    assert "unit_norm" in body["raw_note"] and "not a linear function" in body["raw_note"]
    assert len(body["coef"]) == N_FEATURES and body["feature_names"] is None


def test_a_tree_embedding_says_why_there_are_no_raw_weights(client):
    create_model(client, n_features=N_FEATURES, learner="tree_embedded",
                 params={"learner": "spam", "n_fit_events": 40})  # fmt: skip
    post(client, "/v1/models/m/events", *raw_events(120, 3), sparse=False)
    body = client.get("/v1/models/m/weights").json()
    assert body["raw_coef"] is None and body["raw_intercept"] is None
    assert "not linear in the features" in body["raw_note"]


def test_named_features_learn_as_the_positional_ones(client):
    create_model(client, "names", n_features=N_FEATURES, feature_names=NAMES)
    create_model(client, "plain", n_features=N_FEATURES)
    assert client.get("/v1/models/names").json()["config"]["feature_names"] == NAMES
    X, y = raw_events(200, 5)
    named = [
        {"id": f"e{i}", "x": dict(reversed(list(zip(NAMES, row.tolist(), strict=True)))),
         "y": int(label)}
        for i, (row, label) in enumerate(zip(X, y, strict=True))
    ]  # fmt: skip
    named[3]["x"] = X[3].tolist()  # lists and named objects may be mixed
    plain = [{"id": f"e{i}", "x": row.tolist(), "y": int(label)} for i, (row, label) in
             enumerate(zip(X, y, strict=True))]  # fmt: skip
    # JSON, then NDJSON (learning in parts gives the state of learning at once)
    assert client.post("/v1/models/names/events", json={"events": named[:90]}).status_code == 200
    lines = b"\n".join(orjson.dumps(event) for event in named[90:])
    response = client.post(
        "/v1/models/names/events", content=lines, headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200 and response.json()["learned"] == 110
    ndjson = b"\n".join(orjson.dumps(event) for event in plain)
    response = client.post(
        "/v1/models/plain/events", content=ndjson, headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200
    weights = [client.get(f"/v1/models/{m}/weights").json() for m in ("names", "plain")]
    assert weights[0]["coef"] == weights[1]["coef"]
    score = client.post("/v1/models/names/score", json={"events": [{"x": named[0]["x"]}]})
    assert score.json()["scores"] == pytest.approx(
        client.post("/v1/models/plain/score", json={"events": [{"x": plain[0]["x"]}]}).json()[
            "scores"
        ],
        rel=1e-12,
    )


def test_named_features_of_a_sparse_model_may_be_a_subset(client):
    create_model(client, n_features=N_FEATURES, feature_mode="sparse", feature_names=NAMES)
    events = [{"x": {"amount": 10.0, "hour": 3}, "y": 1}, {"x": {"is_new": 1}, "y": 0},
              {"x": {"indices": [0], "values": [2.0]}, "y": 0}]  # fmt: skip
    response = client.post("/v1/models/m/events", json={"events": events})
    assert response.status_code == 200 and response.json()["learned"] == 3


@pytest.mark.parametrize(
    "x, message",
    [({"amount": 1.0, "bogus": 2.0}, "unknown feature name(s) 'bogus'"),
     ({**dict.fromkeys(NAMES[1:], 1.0), "amuont": 1.0},
      "unknown feature name(s) 'amuont' (did you mean 'amount'?)"),
     ({"amount": 1.0}, "missing feature(s) 'n_items', 'is_new', 'hour' and 2 more"),
     ({**dict.fromkeys(NAMES, 1.0), "amount": "twelve"}, "feature values must be numbers")],
)  # fmt: skip
def test_bad_named_features_are_refused_naming_them(client, x, message):
    create_model(client, n_features=N_FEATURES, feature_names=NAMES)
    events = [{"x": [0.0] * N_FEATURES, "y": 0}, {"id": "t2", "x": x, "y": 1}]
    response = client.post("/v1/models/m/events", json={"events": events})
    assert response.status_code in (400, 422)
    problem = response.json()
    assert message in problem["detail"] and "event 1 (id 't2')" in problem["detail"]
    assert problem["field"] == "x"
    assert client.get("/v1/models/m").json()["counts"]["events_learned"] == 0


def test_a_model_without_names_refuses_named_features(client):
    create_model(client, n_features=2)
    response = client.post("/v1/models/m/events", json={"events": [{"x": {"a": 1}, "y": 1}]})
    assert response.status_code in (400, 422)
    assert "has no feature_names" in response.json()["detail"]


@pytest.mark.parametrize(
    "extra, message",
    [({"feature_names": ["a", "b"]}, "expected 3 names"),
     ({"feature_names": ["a", "b", "a"]}, "'a' is repeated"),
     ({"feature_names": ["a", "", "c"]}, "name 1 must have 1 to 128 characters"),
     ({"feature_names": ["a", "b", "c" * 129]}, "name 2 must have 1 to 128"),
     ({"feature_names": ["a", "b", "c"], "feature_mode": "hashed"}, "hashed model"),
     ({"n_features": 5000, "feature_names": [f"{i:0128d}" for i in range(5000)]},
      "more than 524,288 bytes as JSON")],
)  # fmt: skip
def test_invalid_feature_names_are_refused(client, extra, message):
    response = client.post("/v1/models", json={"id": "m", "n_features": 3, **extra})
    assert response.status_code == 422
    assert message in response.text and "feature_names" in response.text
    assert client.get("/v1/models").json()["models"] == []


def test_feature_names_survive_a_snapshot_and_a_reset(client):
    create_model(client, n_features=N_FEATURES, feature_names=NAMES)
    post(client, "/v1/models/m/events", *raw_events(50, 1), sparse=False)
    archive = client.get("/v1/models/m/snapshot").content
    restored = client.put(
        "/v1/models/copy/snapshot", content=archive, headers={"content-type": "application/zip"}
    )
    assert restored.status_code == 201 and restored.json()["config"]["feature_names"] == NAMES
    assert client.post("/v1/models/m/reset").json()["config"]["feature_names"] == NAMES
    assert client.get("/v1/models/copy/weights").json()["feature_names"] == NAMES
