"""The WebSocket stream (``/v1/models/{id}/stream``) through a real uvicorn server and the
package's client: what it learns and scores equals the REST routes, bit for bit."""

from __future__ import annotations

import httpx
import numpy as np
import orjson
import pytest
from websockets.exceptions import ConnectionClosed

from service.client import StreamClient, StreamClosed, StreamError
from service.stream.protocol import HEADER, encode_binary
from tests.service.conftest import events_json, make_stream
from tests.service.drift_helpers import DRIFT_FEATURES, flipping_stream, prometheus_value
from tests.service.server_helpers import exchange, stream_socket, uvicorn_server

MODEL = {"n_features": 5, "learner": "spam", "scaling": "none", "regret_window": 0}
ALLOWED_ORIGIN = "https://dashboard.example"


@pytest.fixture(scope="module")
def server():
    with uvicorn_server(
        AUCSTREAM_STORE="memory", AUCSTREAM_WS_ALLOWED_ORIGINS=ALLOWED_ORIGIN
    ) as url:
        yield url


def learned(http: httpx.Client, model_id: str) -> int:
    return http.get(f"/v1/models/{model_id}").json()["counts"]["events_learned"]


def create(http: httpx.Client, model_id: str) -> None:
    assert http.post("/v1/models", json={"id": model_id, **MODEL}).status_code == 201


def weights(http: httpx.Client, model_id: str) -> np.ndarray:
    return np.array(http.get(f"/v1/models/{model_id}/weights").json()["coef"])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_stream_learns_and_scores_as_rest_does(server, binary):
    X, y = make_stream(400, seed=4)
    ids = [f"e{i}" for i in range(400)]
    suffix = "b" if binary else "j"
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, f"rest-{suffix}")
        create(http, f"ws-{suffix}")
        for start in range(0, 400, 100):
            part = slice(start, start + 100)
            body = events_json(X[part], y[part], ids=ids[part])
            assert http.post(f"/v1/models/rest-{suffix}/events", json=body).status_code == 200
        with StreamClient(server, f"ws-{suffix}", binary=binary) as stream:
            totals = stream.learn_events(X, y, ids)  # one message per event, pipelined
            assert totals.learned == 400 and totals.problems == []
            again = stream.learn_batches([(X[:50], y[:50], ids[:50])])  # ids make it harmless
            assert again.duplicates == 50 and again.learned == 0
            scores = stream.score(X[:20], keep=False)
        streamed, posted = weights(http, f"ws-{suffix}"), weights(http, f"rest-{suffix}")
        np.testing.assert_array_equal(streamed, posted)
        rest = http.post(f"/v1/models/rest-{suffix}/score", json=events_json(X[:20])).json()
        np.testing.assert_array_equal(scores, np.array(rest["scores"]))


def test_delayed_labels_and_a_refused_message_over_the_stream(server):
    X, y = make_stream(200, seed=5)
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, "late")
        stream = StreamClient(server, "late").connect()
        stream.learn(X[:150], y[:150])
        stream.score(X[150:], ids=[f"s{i}" for i in range(50)])  # kept for their labels
        stream.label([f"s{i}" for i in range(50)], y[150:])
        bad = X[:3].copy()
        bad[1, 2] = np.nan
        with pytest.raises(StreamError) as refused:
            stream.learn(bad, y[:3])
        assert refused.value.problem["status"] == 422
        assert refused.value.problem["detail"].startswith("event 1")  # orjson sends NaN as null
        stream.close()
        counts = http.get("/v1/models/late/metrics").json()["counts"]
    assert counts["events_learned"] == 200 and counts["labels_joined"] == 50


def test_drifts_learned_over_the_stream_are_counted_in_prometheus(server):
    """The stream counts what it learns as the HTTP routes and the worker do: its drifts too
    (issue 38: the stream never added to aucstream_drift_detected_total)."""
    X, y = flipping_stream()
    with httpx.Client(base_url=server, timeout=60) as http:
        body = {"id": "drift-ws", "n_features": DRIFT_FEATURES, "learner": "logistic"}
        assert http.post("/v1/models", json=body).status_code == 201
        with StreamClient(server, "drift-ws") as stream:
            for start in range(0, len(y), 250):
                stream.learn(X[start : start + 250], y[start : start + 250])
        detected = http.get("/v1/models/drift-ws/metrics").json()["drift"]["detected"]
        text = http.get("/metrics").text
    assert detected > 0
    assert prometheus_value(text, "aucstream_drift_detected_total", "drift-ws") == detected
    assert prometheus_value(text, "aucstream_events_learned_total", "drift-ws") == len(y)


def test_the_stream_needs_a_key_when_keys_are_set():
    with uvicorn_server(AUCSTREAM_STORE="memory", AUCSTREAM_API_KEYS="secret") as url:
        headers = {"X-API-Key": "secret"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            assert http.post("/v1/models", json={"id": "k", **MODEL}).status_code == 201
        with pytest.raises(StreamClosed) as closed, StreamClient(url, "k") as stream:
            stream.score(np.zeros((1, 5)), keep=False)
        assert closed.value.code == 1008
        with StreamClient(url, "k", api_key="secret") as stream:
            assert stream.score(np.zeros((1, 5)), keep=False).shape == (1,)


def learn_message(seq: int, x: list[float], y: int = 1) -> dict:
    return {"seq": seq, "op": "learn", "x": x, "y": y}


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:1"])
def test_a_page_of_another_origin_cannot_open_the_stream(server, origin):
    """A page of another site (or a file:// page: origin null) connected and learned events."""
    model_id = f"origin-{abs(hash(origin))}"
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, model_id)
        with stream_socket(server, model_id, origin=origin) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                exchange(ws, orjson.dumps(learn_message(1, [1.0] * 5)).decode())
        assert closed.value.rcvd.code == 1008
        assert origin in closed.value.rcvd.reason
        assert "AUCSTREAM_WS_ALLOWED_ORIGINS" in closed.value.rcvd.reason
        assert learned(http, model_id) == 0


def test_own_origin_allowed_origins_and_clients_without_origin_stream(server):
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, "origins-ok")
        own = server  # the page was served by this server: http://127.0.0.1:<port>
        for seq, options in enumerate(({"origin": own}, {"origin": ALLOWED_ORIGIN}, {})):
            with stream_socket(server, "origins-ok", **options) as ws:
                replies = exchange(ws, orjson.dumps(learn_message(seq, [0.5] * 5)).decode())
            assert replies[0]["status"] == 200 and replies[0]["learned"] == 1, (options, replies)
        assert learned(http, "origins-ok") == 3


def test_an_empty_text_frame_is_answered_with_a_problem(server):
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, "empty")
        with stream_socket(server, "empty") as ws:
            for frame in ("[]", b""):
                (reply,) = exchange(ws, frame)
                assert reply["status"] == 422 and reply["seq"] is None
                assert "no message" in reply["problem"]["detail"]
            (reply,) = exchange(ws, orjson.dumps(learn_message(7, [0.1] * 5)).decode())
            assert reply == {**reply, "seq": 7, "status": 200, "learned": 1}


def test_binary_id_lengths_must_add_up_to_the_declared_id_bytes(server):
    """A declared id length of 60,000 with 1 byte present was learned as the id "a"."""
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, "ids")
        X = np.ones((1, 5))
        good = encode_binary("learn", 1, X, np.ones(1), ["a"])
        assert good[HEADER.size + 41 : HEADER.size + 43] == (1).to_bytes(2, "little")
        lying = bytearray(encode_binary("learn", 2, X, np.ones(1), ["a"]))
        lying[HEADER.size + 41 : HEADER.size + 43] = (60_000).to_bytes(2, "little")
        with stream_socket(server, "ids") as ws:
            lie, honest = exchange(
                ws, bytes(lying) + encode_binary("learn", 3, X, np.ones(1), ["b"])
            )
        assert lie["seq"] == 2 and lie["status"] == 422
        assert "message 2" in lie["problem"]["detail"] and "60,000" in lie["problem"]["detail"]
        assert honest["seq"] == 3 and honest["status"] == 200
        assert learned(http, "ids") == 1


def test_frames_over_the_frame_limits_are_refused_whole_naming_the_limit(server):
    """One frame of 100,000 one-event messages held the event loop 1.85 s and was answered
    with a 3 MiB reply; a frame is now at most AUCSTREAM_WS_MAX_FRAME_MESSAGES (4,096)
    messages, AUCSTREAM_WS_MAX_FRAME_EVENTS (20,000) events and AUCSTREAM_WS_MAX_FRAME_BYTES
    (8 MiB), each refused with one problem reply."""
    with httpx.Client(base_url=server, timeout=60) as http:
        create(http, "caps")
        messages = [learn_message(seq, [0.25] * 5, seq % 2) for seq in range(4097)]
        X = np.zeros((12_000, 5))
        two_big = encode_binary("learn", 1, X, np.ones(12_000)) * 2  # 24,000 events
        single = encode_binary("learn", 9, np.zeros((1, 5)), np.ones(1))
        cases = [
            (orjson.dumps(messages).decode(), "AUCSTREAM_WS_MAX_FRAME_MESSAGES"),
            (single * 4097, "AUCSTREAM_WS_MAX_FRAME_MESSAGES"),
            (two_big, "AUCSTREAM_WS_MAX_FRAME_EVENTS"),
            (" " * (8 * 2**20) + "[]", "AUCSTREAM_WS_MAX_FRAME_BYTES"),
        ]
        with stream_socket(server, "caps") as ws:
            for frame, setting in cases:
                (reply,) = exchange(ws, frame)
                assert reply["status"] == 413 and reply["seq"] is None, reply
                assert setting in reply["problem"]["detail"]
            # at the limit, every message is answered
            replies = exchange(ws, orjson.dumps(messages[:4096]).decode())
            assert [reply["status"] for reply in replies] == [200] * 4096
            at_limit = encode_binary("learn", 2, X[:10_000], np.ones(10_000)) * 2  # 20,000
            assert [reply["status"] for reply in exchange(ws, at_limit)] == [200, 200]
        assert learned(http, "caps") == 4096 + 20_000


def test_origin_rules():
    from service.stream.endpoint import origin_allowed

    assert origin_allowed("http://a.example", "a.example", [])
    assert origin_allowed("https://a.example", "A.example:443", [])
    assert origin_allowed("http://[::1]:8000", "[::1]:8000", [])
    assert not origin_allowed("http://a.example:8000", "a.example", [])
    assert not origin_allowed("https://a.example", "a.example:80", [])
    assert not origin_allowed("http://b.example", "a.example", [])
    assert not origin_allowed("null", "a.example", [])
    assert origin_allowed("null", "a.example", ["null"])
    assert origin_allowed("https://b.example", "a.example", ["https://B.example/"])
    assert origin_allowed("https://b.example", "a.example", ["*"])
    assert not origin_allowed("chrome-extension://x", "a.example", [])


def test_one_message_per_frame_answers_as_json_messages_do_and_a_bad_one_changes_nothing(server):
    """Binary frames of one message each are decoded and answered a block at a time; their
    replies are those of the same messages in JSON (but for the model versions, which follow
    the batches), duplicates and kept events included, and a
    malformed frame among them is answered with its problem while its neighbours apply."""
    X, y = make_stream(60, seed=9)
    ids = [f"k{i:03d}" for i in range(60)]
    with httpx.Client(base_url=server, timeout=60) as http:
        for name in ("blk", "blk-json", "blk-rest"):
            create(http, name)
        frames = [encode_binary("learn", i, X[i : i + 1], y[i : i + 1], ids[i : i + 1])
                  for i in range(60)]  # fmt: skip
        bad = bytearray(frames[30])
        bad[0] = 0  # not a message header
        frames[30] = bytes(bad)
        frames += frames[:5]  # sent again: duplicates by id
        scores = [encode_binary("score", 100 + i, X[i : i + 1], None, ids[i : i + 1])
                  for i in range(10)]  # fmt: skip
        messages = [{**learn_message(i, X[i].tolist(), int(y[i])), "id": ids[i]}
                    for i in [*range(60), *range(5)] if i != 30]  # fmt: skip
        score_messages = [{"seq": 100 + i, "op": "score", "x": X[i].tolist(), "id": ids[i]}
                          for i in range(10)]  # fmt: skip
        with stream_socket(server, "blk") as ws:
            for frame in frames + scores:
                ws.send(frame)
            replies: list[dict] = []
            while len(replies) < len(frames) + len(scores):
                replies.extend(orjson.loads(ws.recv(timeout=60)))
        with stream_socket(server, "blk-json") as ws:
            wanted = exchange(ws, orjson.dumps(messages).decode())
            wanted += exchange(ws, orjson.dumps(score_messages).decode())
        problem = replies.pop(30)
        assert problem["status"] == 400 and problem["seq"] is None
        assert "not a message header" in problem["problem"]["detail"]
        # the versions depend on how the frames were batched as they arrived, the rest does not
        unversioned = [{k: v for k, v in r.items() if k != "version"} for r in replies]
        assert unversioned == [{k: v for k, v in r.items() if k != "version"} for r in wanted]
        assert [r["duplicates"] for r in replies[59:64]] == [1] * 5
        assert {r["kept"] for r in replies[64:]} == {1}
        good = [i for i in range(60) if i != 30]
        body = events_json(X[good], y[good], ids=[ids[i] for i in good])
        assert http.post("/v1/models/blk-rest/events", json=body).status_code == 200
        np.testing.assert_array_equal(weights(http, "blk"), weights(http, "blk-rest"))
        assert learned(http, "blk") == 59


def test_one_message_per_frame_in_queue_mode_is_queued_a_block_at_a_time():
    """Queue mode: a run of one-event binary frames is appended as one batch, each message
    answered 202 with what it queued; a message asking pre-update scores is refused alone."""
    from loadtest.local import private_redis

    X, y = make_stream(40, seed=11)
    with (
        private_redis() as (redis_url, _),
        uvicorn_server(AUCSTREAM_STORE="redis", AUCSTREAM_MODE="queue",
                       AUCSTREAM_REDIS_URL=redis_url) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):  # fmt: skip
        create(http, "queued")
        frames = [encode_binary("learn", i, X[i : i + 1], y[i : i + 1]) for i in range(40)]
        frames[7] = encode_binary("learn", 7, X[7:8], y[7:8], scores=True)
        with stream_socket(url, "queued") as ws:
            for frame in frames:
                ws.send(frame)
            replies: list[dict] = []
            while len(replies) < 40:
                replies.extend(orjson.loads(ws.recv(timeout=60)))
        assert [r["seq"] for r in replies] == list(range(40))
        assert replies[7]["status"] == 422 and "sync mode" in replies[7]["problem"]["detail"]
        others = replies[:7] + replies[8:]
        assert {(r["status"], r["queued"]) for r in others} == {(202, 1)}
        assert sum(len(r["stream_ids"]) for r in others) >= 1


def test_replies_written_as_text_equal_the_serialised_ones(server):
    """Plain one-event messages with integer seqs are answered with replies written as text;
    the same messages with string seqs go through the serialised replies: the same answers,
    NaN scores, duplicates and kept events included."""
    X, y = make_stream(30, seed=12)
    ids = [f"t{i:02d}" for i in range(30)]

    def messages(seq) -> list[dict]:
        learn = [{"seq": seq(i), "op": "learn", "x": X[i].tolist(), "y": int(y[i]), "id": ids[i]}
                 for i in [*range(20), 3, 4]]  # fmt: skip
        score = [{"seq": seq(100 + i), "op": "score", "x": X[i].tolist(),
                  **({"id": ids[i]} if i % 2 else {})} for i in range(20, 30)]  # fmt: skip
        unkept = [{"seq": seq(200 + i), "op": "score", "x": X[i].tolist(), "id": ids[i],
                   "keep": False} for i in range(3)]  # fmt: skip
        return learn + score + unkept

    with httpx.Client(base_url=server, timeout=60) as http:
        answers = []
        for name, seq in (("text-int", int), ("text-str", lambda i: f"s{i}")):
            create(http, name)
            with stream_socket(server, name) as ws:
                answers.append(exchange(ws, orjson.dumps(messages(seq)).decode()))
        as_text, serialised = answers
        for reply in serialised:
            reply["seq"] = int(reply["seq"][1:])
        assert as_text == serialised
        assert [r["duplicates"] for r in as_text[20:22]] == [1, 1]
        assert [r["kept"] for r in as_text[22:]] == [0, 1] * 5 + [0, 0, 0]
