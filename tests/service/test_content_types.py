"""Every content type of docs/architecture.md §4 learns exactly what the learner learns from
the arrays."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from core.csr import CSRMatrix
from core.hashing import FeatureHasher
from core.learners import make_learner
from tests.service.body_helpers import libsvm_text
from tests.service.conftest import create_model, events_json, make_stream, npz_bytes


def ndjson_text(X, y, ids=None) -> bytes:
    return b"\n".join(orjson.dumps(event) for event in events_json(X, y, ids)["events"]) + b"\n"


def reference_weights(X, y, scaling="none"):
    learner = make_learner("spam", scaling=scaling)
    learner.initialize(X.shape[1])
    learner.partial_fit(X, y)
    return learner.coef_


@pytest.mark.parametrize("kind", ["json", "ndjson", "libsvm", "libsvm0", "npz", "npz_csr"])
def test_dense_model_all_content_types(client, kind):
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(120)
    X[X < -1] = 0.0  # some zeros, so LIBSVM/CSR really are sparse
    ids = [f"e{i}" for i in range(len(X))]
    params = {}
    if kind == "json":
        request = {"json": events_json(X, y, ids)}
    elif kind == "ndjson":
        request = {
            "content": ndjson_text(X, y, ids),
            "headers": {"content-type": "application/x-ndjson"},
        }
    elif kind.startswith("libsvm"):
        zero_based = kind == "libsvm0"
        params = {"zero_based": "true"} if zero_based else {}
        request = {
            "content": libsvm_text(X, y, ids, zero_based),
            "headers": {"content-type": "text/x-libsvm"},
        }
    elif kind == "npz":
        request = {
            "content": npz_bytes(X=X, y=y, ids=np.array(ids)),
            "headers": {"content-type": "application/x-npz"},
        }
    else:
        rows, columns = np.nonzero(X)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(X)))])
        request = {
            "content": npz_bytes(indptr=indptr, indices=columns, data=X[rows, columns], y=y),
            "headers": {"content-type": "application/x-npz"},
        }
    response = client.post("/v1/models/m/events", params=params, **request)
    assert response.status_code == 200, response.text
    assert response.json()["learned"] == 120
    coef = np.array(client.get("/v1/models/m/weights").json()["coef"])
    np.testing.assert_array_equal(coef, reference_weights(X, y))
    if kind not in ("npz_csr",):  # ids given: a second post is all duplicates
        again = client.post("/v1/models/m/events", params=params, **request).json()
        assert (again["learned"], again["duplicates"]) == (0, 120)


def test_sparse_model_json_libsvm_npz_agree(client):
    X, y = make_stream(80, n_features=6, seed=3)
    X[np.abs(X) < 0.7] = 0.0
    expected = None
    for name, request in [
        (
            "json",
            {
                "json": {
                    "events": [
                        {
                            "x": {
                                "indices": np.flatnonzero(X[i]).tolist(),
                                "values": X[i][np.flatnonzero(X[i])].tolist(),
                            },
                            "y": int(y[i]),
                        }
                        for i in range(len(X))
                    ]
                }
            },
        ),
        ("libsvm", {"content": libsvm_text(X, y), "headers": {"content-type": "text/x-libsvm"}}),
        ("npz", {"content": npz_bytes(X=X, y=y), "headers": {"content-type": "application/x-npz"}}),
    ]:
        create_model(client, name, n_features=6, feature_mode="sparse")
        response = client.post(f"/v1/models/{name}/events", **request)
        assert response.status_code == 200, response.text
        coef = np.array(client.get(f"/v1/models/{name}/weights").json()["coef"])
        if expected is None:
            learner = make_learner("spam", scaling="scale")
            learner.initialize(6)
            rows, columns = np.nonzero(X)
            indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(X)))])
            learner.partial_fit(CSRMatrix(indptr, columns, X[rows, columns], 6), y)
            expected = learner.coef_
        np.testing.assert_array_equal(coef, expected)


def test_hashed_model_named_features(client):
    create_model(client, n_features=64, feature_mode="hashed")
    events = [
        {"id": 1, "x": {"amount": 120.5, "country": "FR", "new_device": True}, "y": 1},
        {"id": 2, "x": {"amount": 3.0, "country": "DE"}, "y": 0},
        {"id": 3, "x": {"amount": 9.5, "merchant": "m-17"}, "y": 0},
    ]
    ndjson = b"\n".join(orjson.dumps(event) for event in events)
    response = client.post(
        "/v1/models/m/events", content=ndjson, headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text
    learner = make_learner("spam", scaling="scale")
    learner.initialize(64)
    X = FeatureHasher(64).transform(
        [
            {"amount": 120.5, "country=FR": 1.0, "new_device": 1.0},
            {"amount": 3.0, "country=DE": 1.0},
            {"amount": 9.5, "merchant=m-17": 1.0},
        ]
    )
    learner.partial_fit(X, np.array([1, -1, -1]))
    coef = np.array(client.get("/v1/models/m/weights").json()["coef"])
    np.testing.assert_array_equal(coef, learner.coef_)
    libsvm = client.post(
        "/v1/models/m/events", content=b"1 1:2\n", headers={"content-type": "text/x-libsvm"}
    )
    assert libsvm.status_code == 415


def test_ndjson_is_read_as_it_streams(client):
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(50)
    body = ndjson_text(X, y)

    def chunks():
        for start in range(0, len(body), 97):  # chunk borders fall inside lines
            yield body[start : start + 97]

    response = client.post(
        "/v1/models/m/events", content=chunks(), headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text
    np.testing.assert_array_equal(
        np.array(client.get("/v1/models/m/weights").json()["coef"]), reference_weights(X, y)
    )


def test_score_accepts_every_content_type(client):
    create_model(client, n_features=5, scaling="none")
    X, y = make_stream(40)
    client.post("/v1/models/m/events", json=events_json(X, y))
    learner = make_learner("spam")
    learner.initialize(5)
    learner.partial_fit(X, y)
    expected = learner.decision_function(X[:4])
    for request in (
        {"json": events_json(X[:4])},
        {"content": ndjson_text(X[:4], y[:4]), "headers": {"content-type": "application/x-ndjson"}},
        {"content": libsvm_text(X[:4], y[:4]), "headers": {"content-type": "text/x-libsvm"}},
        {"content": npz_bytes(X=X[:4]), "headers": {"content-type": "application/x-npz"}},
    ):
        response = client.post("/v1/models/m/score", **request)
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(response.json()["scores"], expected, rtol=1e-15)


def test_libsvm_tabs_crlf_comments_and_blank_lines(client):
    create_model(client, n_features=3, scaling="none")
    body = b"# a header comment\r\n+1\t1:0.5\t3:2\t# ev-1\r\n\r\n-1 2:1.5 # ev-2\r\n0 \r\n"
    response = client.post(
        "/v1/models/m/events", content=body, headers={"content-type": "text/x-libsvm"}
    )
    assert response.status_code == 422  # "0" after "-1" mixes 0 and -1: refused whole
    body = body.replace(b"\n0 \r\n", b"\n-1\r\n")
    response = client.post(
        "/v1/models/m/events", content=body, headers={"content-type": "text/x-libsvm"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["learned"] == 3
    again = client.post(
        "/v1/models/m/events", content=body, headers={"content-type": "text/x-libsvm"}
    ).json()
    assert again["duplicate_ids"] == ["ev-1", "ev-2"] and again["learned"] == 1
    learner = make_learner("spam")
    learner.initialize(3)
    X = np.array([[0.5, 0, 2], [0, 1.5, 0], [0, 0, 0]])
    learner.partial_fit(X, np.array([1, -1, -1]))
    learner.partial_fit(X[2:], np.array([-1]))
    np.testing.assert_array_equal(client.get("/v1/models/m/weights").json()["coef"], learner.coef_)
