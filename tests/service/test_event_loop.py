"""The event loop stays free: large bodies are parsed and learned in the thread pool (``/healthz``
answers meanwhile), NDJSON lines are split in linear time, request bodies have a read deadline
(408), and a client that leaves mid-body is a 499 with one log line, not a 500 with a traceback.

The HTTP-level behaviour is tested through a real uvicorn process and raw sockets
(test_event_loop_uvicorn.py)."""

from __future__ import annotations

import asyncio
import io
import zipfile

import numpy as np
import orjson
import pytest

from service.errors import MalformedBody
from service.ingest import FeatureSpec, NDJSONReader
from service.offload import INLINE_EVENTS, MESSAGE_EVENTS, large_weights
from service.settings import Settings
from tests.service.conftest import create_model, events_json, make_stream, started_apps


# ------------------------------------------------------------------ NDJSON line splitting
def _feed(reader: NDJSONReader, body: bytes, chunk: int) -> None:
    for start in range(0, len(body), chunk):
        reader.feed(body[start : start + chunk])


def test_ndjson_one_long_line_across_many_chunks():
    """A 3.9 MB line spans 60 chunks; the lines around it, and blank lines, keep their place."""
    rng = np.random.default_rng(3)
    n_features = 200_000
    X = rng.normal(size=(3, n_features))
    first, second, third = (orjson.dumps({"x": X[i].tolist(), "y": i % 2}) for i in range(3))
    lines = [first, b"", b"   ", second, third]
    body = b"\n".join(lines)  # no newline after the last line
    assert len(first) > 3_500_000
    reader = NDJSONReader(10)
    _feed(reader, body, 65_536)
    batch = reader.finish(FeatureSpec(n_features, "dense"), labelled=True)
    np.testing.assert_array_equal(batch.X, X)  # bit for bit: orjson rounds correctly
    np.testing.assert_array_equal(batch.y, [-1, 1, -1])
    assert reader.lines == [1, 4, 5]


@pytest.mark.parametrize("decode_inline_bytes", [None, 0, 700, 10**9])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_ndjson_deferred_decoding_gives_the_same_batch_and_the_same_errors(
    decode_inline_bytes, chunk
):
    """Past ``decode_inline_bytes`` the reader only collects bytes and ``finish`` decodes
    them: the batch, the line numbers and the first error are those of decoding as lines
    arrive."""
    X, y = make_stream(40, n_features=3)
    lines = [orjson.dumps(event) for event in events_json(X, y)["events"]]
    lines.insert(5, b"")
    body = b"\n".join(lines) + b"\n"
    reader = NDJSONReader(100, decode_inline_bytes=decode_inline_bytes)
    _feed(reader, body, chunk)
    assert reader.deferred == (decode_inline_bytes is not None and decode_inline_bytes < len(body))
    batch = reader.finish(FeatureSpec(3, "dense"), labelled=True)
    np.testing.assert_array_equal(batch.X, X)
    assert reader.lines == [*range(1, 6), *range(7, 42)]

    broken = b"\n".join([*lines[:30], b"{not json", *lines[30:]])
    reader = NDJSONReader(100, decode_inline_bytes=decode_inline_bytes)
    with pytest.raises(MalformedBody) as error:
        _feed(reader, broken, chunk)
        reader.finish(FeatureSpec(3, "dense"), labelled=True)
    assert error.value.line == 31


# ------------------------------------------------------------ what runs off the event loop
def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _body(content_type: str, feature_mode: str, X, y) -> bytes:
    from tests.service.conftest import npz_bytes

    events = events_json(X, y)["events"]
    if feature_mode == "hashed":
        events = [{"x": {f"f{j}": v for j, v in enumerate(e["x"])}, "y": e["y"]} for e in events]
    if content_type == "application/json":
        return orjson.dumps({"events": events})
    if content_type == "application/x-ndjson":
        return b"\n".join(orjson.dumps(event) for event in events)
    if content_type == "text/x-libsvm":
        return "\n".join(
            f"{e['y']} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(e["x"]))
            for e in events
        ).encode()  # fmt: skip
    if content_type == "application/x-npz-compressed":
        buffer = io.BytesIO()
        np.savez_compressed(buffer, X=X, y=y)
        return buffer.getvalue()
    return npz_bytes(X=X, y=y)


# 400 events of 5 features: JSON ~44 KB, NDJSON ~44 KB, LIBSVM ~40 KB, NPZ ~19 KB
@pytest.mark.parametrize(
    ("content_type", "feature_mode", "threshold", "offloaded"),
    [
        ("application/json", "dense", 10**9, False),
        ("application/json", "dense", 8 * 1024, False),  # inline up to 16 x 8 KiB
        ("application/json", "dense", 1024, True),
        ("application/json", "hashed", 8 * 1024, True),  # hashing: x1
        ("application/x-ndjson", "dense", 10**9, False),
        ("application/x-ndjson", "dense", 1024, True),
        ("application/x-ndjson", "hashed", 8 * 1024, True),
        ("text/x-libsvm", "dense", 8 * 1024, True),  # LIBSVM: x1
        ("text/x-libsvm", "dense", 10**9, False),
        ("application/x-npz", "dense", 1024, False),  # inline up to 64 x 1 KiB
        ("application/x-npz", "dense", 128, True),
        ("application/x-npz-compressed", "dense", 10**9, True),  # always
    ],
)
def test_bodies_above_their_limit_are_parsed_and_learned_in_the_thread_pool(
    make_client, monkeypatch, content_type, feature_mode, threshold, offloaded
):
    import service.body
    from service.ingest.ndjson import NDJSONReader as Reader

    client = make_client(store="memory", offload_body_bytes=threshold)
    n_features = 5 if feature_mode == "dense" else 2**10
    create_model(client, n_features=n_features, feature_mode=feature_mode)
    X, y = make_stream(400)
    body = _body(content_type, feature_mode, X, y)
    seen: dict[str, bool] = {}

    def spy(name, function):
        def wrapped(*args, **kwargs):
            seen[name] = _on_event_loop()
            return function(*args, **kwargs)

        return wrapped

    engine = client.app.state.engine
    monkeypatch.setattr(service.body, "parse_events", spy("parse", service.body.parse_events))
    monkeypatch.setattr(Reader, "finish", spy("parse", Reader.finish))
    monkeypatch.setattr(engine, "learn", spy("learn", engine.learn))
    header = content_type.replace("-compressed", "")
    response = client.post("/v1/models/m/events", content=body, headers={"content-type": header})
    assert response.status_code == 200 and response.json()["learned"] == 400
    assert seen == {"parse": not offloaded, "learn": not offloaded}


@pytest.mark.parametrize("n_events", [INLINE_EVENTS, INLINE_EVENTS + 1])
def test_a_batch_of_more_events_than_the_loop_takes_is_learned_in_the_thread_pool(
    monkeypatch, n_events
):
    """A stored NPZ body is parsed inline up to 64 x AUCSTREAM_OFFLOAD_BODY_BYTES; the batch it
    carries is learned on the loop only up to service.offload.INLINE_EVENTS events."""
    from tests.service.conftest import npz_bytes

    with started_apps(store="memory") as build:
        client = build()
        create_model(client)
        X, y = make_stream(n_events)
        seen: dict[str, bool] = {}
        engine = client.app.state.engine
        learn = engine.learn

        def spied(*args, **kwargs):
            seen["learn"] = _on_event_loop()
            return learn(*args, **kwargs)

        monkeypatch.setattr(engine, "learn", spied)
        response = client.post(
            "/v1/models/m/events",
            content=npz_bytes(X=X, y=y),
            headers={"content-type": "application/x-npz"},
        )
        assert response.status_code == 200 and response.json()["learned"] == n_events
    assert seen == {"learn": n_events <= INLINE_EVENTS}


#: the most one-event stream messages whose run stays on the event loop (250)
INLINE_MESSAGES = INLINE_EVENTS // (1 + MESSAGE_EVENTS)


@pytest.mark.parametrize("n_messages", [INLINE_MESSAGES, INLINE_MESSAGES + 1])
def test_a_large_stream_run_is_validated_and_answered_in_the_thread_pool_on_one_event_loop(
    monkeypatch, n_messages
):
    """The connection's handler, the session and every engine call it makes share one event
    loop, the app's (the per-model coalescer queues are that loop's); a run of one-event
    messages past service.offload's limit (an event each, and MESSAGE_EVENTS more for being a
    message) has its messages validated, learned and answered in threads."""
    from service.engine.coalesce import Coalescer
    from service.stream.endpoint import Connection
    from service.stream.session import Session

    loops: dict[str, set] = {"handler": set(), "session": set(), "engine call": set()}
    seen: dict[str, bool] = {}

    def on_loop(name: str, coroutine_function):
        async def wrapped(*args, **kwargs):
            loops[name].add(asyncio.get_running_loop())
            return await coroutine_function(*args, **kwargs)

        return wrapped

    def where(name: str, function):
        def wrapped(*args, **kwargs):
            seen[name] = _on_event_loop()
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(Connection, "handle", on_loop("handler", Connection.handle))
    monkeypatch.setattr(Session, "handle", on_loop("session", Session.handle))
    monkeypatch.setattr(Coalescer, "_submit", on_loop("engine call", Coalescer._submit))
    monkeypatch.setattr(Session, "validated", where("validate", Session.validated))
    monkeypatch.setattr(Session, "learn_replies", where("replies", Session.learn_replies))
    X, y = make_stream(n_messages)
    messages = [
        {"seq": i, "op": "learn", "x": X[i].tolist(), "y": int(y[i])} for i in range(n_messages)
    ]
    with started_apps(store="memory") as build:
        client = build()
        create_model(client)
        engine = client.app.state.engine
        monkeypatch.setattr(engine, "learn", where("learn", engine.learn))
        with client.websocket_connect("/v1/models/m/stream") as ws:
            ws.send_text(orjson.dumps(messages).decode())
            replies = orjson.loads(ws.receive_text())
        assert [reply["status"] for reply in replies] == [200] * n_messages
        assert engine.info("m").counts.events_learned == n_messages
    inline = n_messages <= INLINE_MESSAGES
    assert seen == {"validate": inline, "learn": inline, "replies": inline}
    assert len(set.union(*loops.values())) == 1, loops
    assert all(len(seen_on) == 1 for seen_on in loops.values()), loops


def test_npz_compressed_reads_the_zip_directory():
    from service.body import npz_compressed

    X, y = make_stream(50)
    for save, compressed in ((np.savez, False), (np.savez_compressed, True)):
        buffer = io.BytesIO()
        save(buffer, X=X, y=y, ids=np.array(["a"] * 50))
        assert npz_compressed(buffer.getvalue()) is compressed
    mixed = io.BytesIO()
    with zipfile.ZipFile(mixed, "w") as archive:
        archive.writestr("X.npy", b"x" * 100)
        archive.writestr("y.npy", b"y" * 100, compress_type=zipfile.ZIP_DEFLATED)
    assert npz_compressed(mixed.getvalue())
    assert npz_compressed(b"not a zip") and npz_compressed(b"")  # unreadable: thread pool


def test_a_large_weight_vector_is_served_the_same_way(make_client):
    """Above the offload rule's size (65,536 weights by default) the JSON is rendered in the
    thread pool: same document."""
    settings = Settings()
    assert large_weights(settings, 70_000) and not large_weights(settings, 65_536)
    client = make_client(store="memory")
    for model_id, n_features in (("small", 3), ("large", 70_000)):
        create_model(client, model_id, n_features=n_features, learner="spam", scaling="none")
        X = np.zeros((2, n_features))
        X[:, :3] = [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]
        client.post(
            f"/v1/models/{model_id}/events",
            content=orjson.dumps(events_json(X, np.array([1, 0]))),
            headers={"content-type": "application/json"},
        )
    small, large = (client.get(f"/v1/models/{m}/weights") for m in ("small", "large"))
    assert small.headers["content-type"] == large.headers["content-type"] == "application/json"
    small_body, large_body = small.json(), large.json()
    assert large_body["n_features"] == len(large_body["coef"]) == 70_000
    assert large_body["version"] == small_body["version"] == 2
    assert large_body["coef"][:3] == small_body["coef"]  # the same updates on the same values
    assert not any(large_body["coef"][3:])


# ------------------------------------------------------------------ large JSON documents


def _padded(events: list, *, key: str | None = "events") -> bytes:
    """A document above the stepwise size: the events plus enough plain events after them."""
    filler = [{"id": f"f{i}", "x": {"name": 1.5}, "y": 0} for i in range(30_000)]
    items = events + filler
    return orjson.dumps({key: items} if key else items)


@pytest.mark.parametrize(
    "body",
    [
        _padded([{"id": "é😀\u2028", "x": {"a": [1, {"b": None}], "c": True}, "y": 1}]),
        _padded([{"x": 12345678901234567890, "y": -0.0}]),
        _padded([{"x": "a:b", "k:": ":"}], key=None),  # a bare list, colons in strings
        _padded([{"x": 1}]).replace(b'"x":1', b'"x":123456789012345678901234'),  # > 64 bits
    ],
)
def test_large_json_documents_are_decoded_exactly_as_orjson_does(body):
    from service.ingest.objects import _STEPWISE_MIN_BYTES, parse_json

    assert len(body) >= _STEPWISE_MIN_BYTES
    assert repr(parse_json(body)) == repr(orjson.loads(body))


@pytest.mark.parametrize(
    "body, key",
    [
        (_padded([{"x": 1, "again": 2.5}]).replace(b'"again"', b'"x"'), "x"),  # in an event
        (b'{"events": [], "events": ' + _padded([])[10:], "events"),  # at the top
    ],
)
def test_large_json_documents_with_a_repeated_key_are_refused(body, key):
    from service.errors import MalformedBody
    from service.ingest.objects import parse_json

    with pytest.raises(MalformedBody) as refused:
        parse_json(body)
    assert refused.value.field == key


@pytest.mark.parametrize(
    "body",
    [b"\xef\xbb\xbf" + _padded([]), _padded([])[:-1], _padded([]).replace(b"1.5", b"1e400")],
)
def test_large_json_documents_refused_as_orjson_refuses_them(body):
    from service.ingest.objects import parse_json

    with pytest.raises(orjson.JSONDecodeError) as expected:
        orjson.loads(body)
    with pytest.raises(MalformedBody) as refused:
        parse_json(body)
    assert refused.value.detail == f"body is not valid JSON: {expected.value}"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("body_read_timeout_seconds", 0),
        ("body_read_timeout_seconds", -1),
        ("offload_body_bytes", -1),
        ("stream_interval_seconds", 0.01),
    ],
)
def test_settings_of_this_module_refuse_bad_values(name, value):
    from pydantic import ValidationError

    from service.settings import Settings

    with pytest.raises(ValidationError, match=name):
        Settings(**{name: value})
