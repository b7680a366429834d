"""Pipelined one-event messages on the defaults (SQLite, ``auto``): the messages that have
arrived are learned as one engine call and committed as one log entry, answered in order, a bad
message refused alone, and the model is what learning the good messages one after another
gives (service/stream/session.py).  The kill -9 case is tests/service/test_stream_kill.py."""

from __future__ import annotations

import httpx
import numpy as np
import orjson
import pytest

from service.stream.protocol import encode_binary
from tests.service.conftest import CLOCK_ARRAYS, live_server, make_stream
from tests.service.kill_helpers import snapshot_arrays
from tests.service.server_helpers import stream_socket

N_FEATURES = 5
#: the defaults but the regret window: a run of messages is one regret round, the reference's
#: one-event requests one each (the state compared is the learner's, windows and counters)
MODEL = {"n_features": N_FEATURES, "regret_window": 0}
N = 120
NAN_AT, WIDE_AT = 40, 80


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("stream-groups")
    # the frames sent in one burst are one batch: the handler waits up to a second for more
    settings = {"AUCSTREAM_DATA_DIR": str(data), "AUCSTREAM_WS_BATCH_WAIT_MS": "1000"}
    with live_server(settings, store="sqlite") as (url, _):
        yield url


def frames(X: np.ndarray, y: np.ndarray, ids: list[str]) -> list[bytes]:
    """One binary frame per event, one message each; event NAN_AT has a NaN feature and event
    WIDE_AT one feature too many (each refused with a 422 of its own)."""
    out = []
    for i in range(len(y)):
        x = X[i : i + 1]
        if i == NAN_AT:
            x = x.copy()
            x[0, 2] = np.nan
        elif i == WIDE_AT:
            x = np.hstack([x, [[1.0]]])
        out.append(encode_binary("learn", i, x, y[i : i + 1], ids[i : i + 1]))
    return out


def exchange_all(
    url: str, model_id: str, sent: list[bytes], messages: int | None = None
) -> list[dict]:
    """Every frame sent at once, then the replies of its ``messages`` messages read (one a
    frame by default), then one score, answered 200: the connection is still open."""
    with stream_socket(url, model_id) as ws:
        for frame in sent:
            ws.send(frame)
        replies: list[dict] = []
        while len(replies) < (len(sent) if messages is None else messages):
            replies.extend(orjson.loads(ws.recv(timeout=120)))
        ws.send(encode_binary("score", 999, np.zeros((1, N_FEATURES)), keep=False))
        assert orjson.loads(ws.recv(timeout=120))[0]["status"] == 200
    return replies


def version(http: httpx.Client, model_id: str) -> int:
    return http.get(f"/v1/models/{model_id}").json()["version"]


def test_pipelined_messages_are_one_group_answered_in_order_with_bad_ones_alone(server):
    X, y = make_stream(N, seed=21)
    ids = [f"g{i:03d}" for i in range(N)]
    good = [i for i in range(N) if i not in (NAN_AT, WIDE_AT)]
    with httpx.Client(base_url=server, timeout=120) as http:
        for name in ("grouped", "reference"):
            assert http.post("/v1/models", json={"id": name, **MODEL}).status_code == 201
        before = version(http, "grouped")
        replies = exchange_all(server, "grouped", frames(X, y, ids))

        assert [reply["seq"] for reply in replies] == list(range(N))
        for at, field in ((NAN_AT, "x"), (WIDE_AT, "x")):
            assert replies[at]["status"] == 422, replies[at]
            assert replies[at]["problem"]["field"] == field
        answered = [replies[i] for i in good]
        assert {(r["status"], r["learned"], r["duplicates"]) for r in answered} == {(200, 1, 0)}
        versions = [r["version"] for r in answered]
        assert versions == sorted(versions)
        # one commit per batch of messages, not one per message (a busy machine may split
        # the burst over a few batches)
        assert len(set(versions)) <= 4
        assert version(http, "grouped") - before == len(set(versions))

        # the reference: the good events posted one request at a time, in order
        for i in good:
            body = {"events": [{"id": ids[i], "x": X[i].tolist(), "y": int(y[i])}]}
            assert http.post("/v1/models/reference/events", json=body).status_code == 200
        grouped, reference = snapshot_arrays(http, "grouped"), snapshot_arrays(http, "reference")
        assert grouped.keys() == reference.keys()
        for name, value in reference.items():
            if name not in CLOCK_ARRAYS:
                np.testing.assert_array_equal(grouped[name], value, err_msg=name)
        assert http.get("/v1/models/grouped").json()["counts"]["events_learned"] == len(good)

        # sent again: every good message is a duplicate, the bad ones refused again, no change
        again = exchange_all(server, "grouped", frames(X, y, ids))
        assert [r["status"] for r in again] == [422 if i in (NAN_AT, WIDE_AT) else 200
                                                for i in range(N)]  # fmt: skip
        assert {(again[i]["learned"], again[i]["duplicates"]) for i in good} == {(0, 1)}
        unchanged = snapshot_arrays(http, "grouped")
        for name, value in grouped.items():
            if name not in CLOCK_ARRAYS:
                np.testing.assert_array_equal(unchanged[name], value, err_msg=name)


def test_pipelined_runs_of_other_kinds_keep_their_order(server):
    """Learn, score, learn messages pipelined: each run sees the model after the runs before
    it (the scores are those of the model after the first learns), answered in order; a score
    message with a NaN is refused alone."""
    X, y = make_stream(60, seed=22)
    with httpx.Client(base_url=server, timeout=120) as http:
        for name in ("mixed", "mixed-reference"):
            assert http.post("/v1/models", json={"id": name, **MODEL}).status_code == 201
        sent = [encode_binary("learn", i, X[i : i + 1], y[i : i + 1]) for i in range(30)]
        unscorable = X[5:6].copy()
        unscorable[0, 0] = np.nan
        sent += [encode_binary("score", 100 + i, unscorable if i == 5 else X[i : i + 1], keep=False)
                 for i in range(10)]  # fmt: skip
        sent += [encode_binary("learn", 200 + i, X[i : i + 1], y[i : i + 1])
                 for i in range(30, 60)]  # fmt: skip
        replies = exchange_all(server, "mixed", sent)
        seqs = [*range(30), *range(100, 110), *range(230, 260)]
        assert [r["seq"] for r in replies] == seqs
        assert replies[35]["status"] == 422 and replies[35]["problem"]["field"] == "x"
        assert {r["status"] for k, r in enumerate(replies) if k != 35} == {200}

        for i in range(30):
            body = {"events": [{"x": X[i].tolist(), "y": int(y[i])}]}
            assert http.post("/v1/models/mixed-reference/events", json=body).status_code == 200
        scorable = [i for i in range(10) if i != 5]
        body = {"events": [{"x": X[i].tolist()} for i in scorable]}
        scored = http.post("/v1/models/mixed-reference/score?keep=false", json=body).json()
        assert [replies[30 + i]["scores"][0] for i in scorable] == scored["scores"]
        for i in range(30, 60):
            body = {"events": [{"x": X[i].tolist(), "y": int(y[i])}]}
            assert http.post("/v1/models/mixed-reference/events", json=body).status_code == 200
        mixed, reference = snapshot_arrays(http, "mixed"), snapshot_arrays(http, "mixed-reference")
        for name, value in reference.items():
            if name not in CLOCK_ARRAYS:
                np.testing.assert_array_equal(mixed[name], value, err_msg=name)


@pytest.mark.parametrize("op", ["learn", "score"])
def test_a_json_frame_with_one_bad_message_answers_every_message(server, op):
    """JSON messages of one frame are one run; one of them unreadable as features is refused
    alone and the others are learned or scored as the reference does."""
    X, y = make_stream(12, seed=23)
    model_id, reference = f"json-{op}", f"json-{op}-reference"
    messages = [{"seq": i, "op": op, "x": X[i].tolist(), "keep": False} for i in range(12)]
    if op == "learn":
        for i, message in enumerate(messages):
            message["y"] = int(y[i])
    messages[4]["x"] = [None] * N_FEATURES
    good = [i for i in range(12) if i != 4]
    with httpx.Client(base_url=server, timeout=120) as http:
        for name in (model_id, reference):
            assert http.post("/v1/models", json={"id": name, **MODEL}).status_code == 201
        with stream_socket(server, model_id) as ws:
            ws.send(orjson.dumps(messages).decode())
            replies = orjson.loads(ws.recv(timeout=120))
        assert [r["seq"] for r in replies] == list(range(12))
        assert replies[4]["status"] == 422 and replies[4]["problem"]["field"].startswith("x")
        assert {replies[i]["status"] for i in good} == {200}
        if op == "learn":
            for i in good:
                body = {"events": [{"x": X[i].tolist(), "y": int(y[i])}]}
                assert http.post(f"/v1/models/{reference}/events", json=body).status_code == 200
            streamed, posted = snapshot_arrays(http, model_id), snapshot_arrays(http, reference)
            for name, value in posted.items():
                if name not in CLOCK_ARRAYS:
                    np.testing.assert_array_equal(streamed[name], value, err_msg=name)
        else:
            body = {"events": [{"x": X[i].tolist()} for i in good]}
            scored = http.post(f"/v1/models/{reference}/score?keep=false", json=body).json()
            assert [replies[i]["scores"][0] for i in good] == scored["scores"]


#: what can be wrong with a message of each op (each refused with a 4xx)
FAULTS = {"learn": ["nan", "wide", "label", "id"], "score": ["nan", "wide", "id"],
          "label": ["label", "id"]}  # fmt: skip


def random_messages(rng: np.random.Generator) -> tuple[list[bytes | str], list[str | None]]:
    """A seeded mix of learn, score and label messages, about one in five refused (a NaN, a
    row too wide, a label out of range, an id too long), as one-event binary frames or JSON
    frames of several messages: ``(frames, what is wrong with each message)``."""
    n = int(rng.integers(2, 30))
    binary = bool(rng.random() < 0.6)
    op, faults, encoded, objects = "learn", [], [], []
    for k in range(n):
        if rng.random() < 0.2:
            op = str(rng.choice(["learn", "score", "label"]))
        x, y = rng.normal(size=(1, N_FEATURES)), np.array([rng.integers(0, 2)], dtype=np.int8)
        ids = [f"r{k}"] if op == "label" or rng.random() < 0.5 else None
        fault = None
        if rng.random() < 0.2:  # refused: the fault is in a field the op reads
            fault = str(rng.choice(FAULTS[op]))
        if fault == "nan":
            x[0, 1] = np.nan
        elif fault == "wide":
            x = np.hstack([x, [[1.0]]])
        elif fault == "label":
            y = np.array([3], dtype=np.int8)
        elif fault == "id":
            ids = ["x" * 300]
        faults.append(fault)
        X = None if op == "label" else x
        encoded.append(encode_binary(op, k, X, None if op == "score" else y, ids))
        message: dict = {"seq": k, "op": op}
        if X is not None:
            message["x"] = [None if np.isnan(v) else float(v) for v in X[0]]
        if op != "score":
            message["y"] = int(y[0])
        if ids is not None:
            message["id"] = ids[0]
        objects.append(message)
    if binary:
        return list(encoded), faults
    cuts = sorted({0, *rng.integers(1, n, size=2).tolist(), n})
    frames = [orjson.dumps(objects[a:b]).decode() for a, b in zip(cuts, cuts[1:], strict=False)]
    return frames, faults


@pytest.mark.parametrize("seed", range(16))
def test_every_refused_message_is_answered_alone_among_random_runs(server, seed):
    """Whatever mix of runs and refusals arrives, every message is answered in order: the
    refused ones with a 4xx of their own, the others 200 (the connection stays open)."""
    frames_sent, faults = random_messages(np.random.default_rng(seed))
    with httpx.Client(base_url=server, timeout=120) as http:
        model_id = f"random-{seed}"
        assert http.post("/v1/models", json={"id": model_id, **MODEL}).status_code == 201
    replies = exchange_all(server, model_id, frames_sent, len(faults))
    assert [reply["seq"] for reply in replies] == list(range(len(faults)))
    for fault, reply in zip(faults, replies, strict=True):
        assert (reply["status"] == 200) == (fault is None), (fault, reply)
        if fault is not None:
            assert 400 <= reply["status"] < 500
