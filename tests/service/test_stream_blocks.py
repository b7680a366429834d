"""The block decoder of binary frames (``service.stream.protocol.decode_uniform``, as the
connection uses it) against the message-by-message decoder (``decode_binary``), the reference:
the same messages, the same arrays, and for a frame it cannot take, the reference's own
answers (a malformed message in the middle of a run fails as it always did).  And a plain JSON
message (one event, every option at its default) read as the full checks read it."""

from __future__ import annotations

import asyncio
from collections import deque
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from service.stream.blocks import Block
from service.stream.endpoint import Connection
from service.stream.protocol import (
    HEADER,
    FrameLimits,
    Message,
    decode_binary,
    decode_text,
    encode_binary,
    encode_binary_rows,
)

LIMITS = FrameLimits(
    message_events=100_000, frame_messages=4096, frame_events=20_000, message_reasons=20
)


def connection(frames: list[bytes], **settings) -> Connection:
    values = {
        "max_batch_events": LIMITS.message_events, "ws_max_frame_messages": 4096,
        "ws_max_frame_events": 20_000, "max_reasons": 20, "ws_max_frame_bytes": 8 * 2**20,
        "offload_body_bytes": 2**20, "ws_max_batch_messages": 4096,
        "ws_max_queued_bytes": 4 * 2**20, "ws_batch_wait_ms": 0.0, **settings,
    }  # fmt: skip
    services = SimpleNamespace(settings=SimpleNamespace(**values))
    conn = Connection(None, None, services)  # type: ignore[arg-type]
    conn.frames = deque(frames)
    conn.queued_bytes = sum(len(frame) for frame in frames)
    return conn


def taken(frames: list[bytes], **settings) -> list[Message | Block]:
    return asyncio.run(connection(frames, **settings).take())


def reference(frames: list[bytes]) -> list[Message]:
    return [message for frame in frames for message in decode_binary(frame, LIMITS)]


def flat(items: list[Message | Block]) -> list[Message]:
    return [m for item in items for m in (item.expand() if type(item) is Block else (item,))]


def same(got: list[Message], want: list[Message]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert (a.seq, a.op, a.n_events, a.keep, a.scores, a.probabilities, a.ids) == (
            b.seq, b.op, b.n_events, b.keep, b.scores, b.probabilities, b.ids,
        )  # fmt: skip
        assert type(a.seq) is type(b.seq)  # a Python int, not a numpy one
        for name in ("X", "y"):
            x, w = getattr(a, name), getattr(b, name)
            assert (x is None) == (w is None)
            if x is not None:
                assert x.dtype == w.dtype and x.shape == w.shape
                assert np.array_equal(x, w, equal_nan=True)
        assert (a.error is None) == (b.error is None)
        if a.error is not None:
            assert (a.error.status, a.error.detail, a.error.field) == (
                b.error.status, b.error.detail, b.error.field,
            )  # fmt: skip
            assert getattr(a.error, "event", None) == getattr(b.error, "event", None)


def rows(n: int, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, 2, n)


@pytest.mark.parametrize("op", ["learn", "score"])
@pytest.mark.parametrize("with_ids", [False, True])
@pytest.mark.parametrize("keep", [True, False])
def test_one_message_per_frame_is_one_block_equal_to_the_reference(op, with_ids, keep):
    X, y = rows(300)
    labels = y if op == "learn" else None
    ids = [f"ev-{i:05d}" for i in range(300)] if with_ids else None
    frames = [
        encode_binary(op, 7 + i, X[i : i + 1], None if labels is None else labels[i : i + 1],
                      None if ids is None else ids[i : i + 1], keep=keep)
        for i in range(300)
    ]  # fmt: skip
    items = taken(frames)
    assert [type(item) for item in items] == [Block]  # one array for the 300 frames
    assert items[0].X.shape == (300, 4) and items[0].X.flags.c_contiguous
    same(flat(items), reference(frames))


def test_frames_of_many_messages_ids_of_any_length_and_labels():
    X, y = rows(50, d=3)
    ids = [None if i % 7 == 0 else "é" * (i % 5) + str(i) for i in range(50)]
    frames = [encode_binary_rows("learn", 1 + 10 * k, X[10 * k : 10 * k + 10],
                                 y[10 * k : 10 * k + 10], ids[10 * k : 10 * k + 10])
              for k in range(5)]  # fmt: skip
    frames += [encode_binary("learn", 100 + i, X[3 * i : 3 * i + 3], y[3 * i : 3 * i + 3])
               for i in range(4)]  # fmt: skip
    frames += [
        encode_binary("label", 200 + i, None, y[i : i + 1], [f"id{i:03d}"]) for i in range(9)
    ]
    same(flat(taken(frames)), reference(frames))


def corrupt(frame: bytes, at: int, value: bytes) -> bytes:
    return frame[:at] + value + frame[at + len(value) :]


def bad_frames() -> dict[str, bytes]:
    """One-event learn messages with an id of 4 bytes, broken in every way the decoder
    answers, each the same length as a good one (so it travels with its neighbours)."""
    X, y = rows(1)
    good = encode_binary("learn", 50, X, y, ["abcd"])
    ids_at = HEADER.size + 8 * 4 + 1
    return {
        "magic": corrupt(good, 0, b"\x00"),
        "op": corrupt(good, 1, b"\x09"),
        "no events": corrupt(good, 4, (0).to_bytes(4, "little")),
        "probabilities on learn": corrupt(good, 2, bytes([1 | 8])),
        "id lengths": corrupt(good, ids_at, (3).to_bytes(2, "little")),
        "id not utf-8": corrupt(good, ids_at + 2, b"\xff\xfe"),
        "id not ascii": encode_binary("learn", 50, X, y, ["éé"]),
        "too many events": corrupt(good, 4, (2).to_bytes(4, "little")),
        "cut short": good[:-1],
        "longer": good + b"\x00",
    }


@pytest.mark.parametrize("kind", list(bad_frames()))
@pytest.mark.parametrize("where", [0, 5, 11])
def test_a_malformed_message_in_a_run_fails_as_the_reference_does(kind, where):
    X, y = rows(12)
    frames = [
        encode_binary("learn", i, X[i : i + 1], y[i : i + 1], [f"e{i:03d}"]) for i in range(12)
    ]
    frames[where] = bad_frames()[kind]
    items = taken(frames)
    got = flat(items)
    same(got, reference(frames))
    # the good messages are still decoded, one array at a time where they can be
    assert sum(m.error is None for m in got) >= 11 - (kind == "longer")


def test_a_frame_of_several_messages_with_a_bad_one_inside():
    X, y = rows(6)
    frame = bytearray(encode_binary_rows("learn", 1, X, y, [f"e{i}" for i in range(6)]))
    size = len(frame) // 6
    frame[3 * size] = 0  # message 4's magic: the rest of the frame cannot be located
    frames = [
        encode_binary_rows("learn", 20, X, y),
        bytes(frame),
        encode_binary_rows("learn", 30, X, y),
    ]
    same(flat(taken(frames)), reference(frames))


def test_frame_limits_are_found_as_the_reference_finds_them():
    X, y = rows(8)
    frames = [encode_binary_rows("learn", 1, X, y)] * 3
    limits = {"ws_max_frame_messages": 5, "ws_max_frame_events": 7}
    items = taken(frames, **limits)
    tight = FrameLimits(100_000, 5, 7, 20)
    want = [m for frame in frames for m in decode_binary(frame, tight)]
    same(flat(items), want)
    assert all(m.error is not None and m.error.status == 413 for m in flat(items))


def test_a_block_is_at_most_an_engine_call_of_events():
    X, y = rows(10)
    frames = [encode_binary_rows("learn", 1, X, y)]
    items = taken(frames, max_batch_events=4)
    assert [item.n_events for item in items] == [4, 4, 2]
    same(flat(items), reference(frames))


def test_the_client_encoder_lays_out_what_the_single_message_encoder_does():
    X, y = rows(9, d=2)
    ids = ["a", None, "ü" * 3, "x" * 300, "", "q", "zz", "7", "e"]
    for op, labels in (("learn", y), ("score", None)):
        for keep in (True, False):
            for these in (None, ids):
                one = b"".join(
                    encode_binary(
                        op, 5 + k, X[k : k + 1], None if labels is None else labels[k : k + 1],
                        None if these is None else [these[k] or None], keep=keep,
                    )
                    for k in range(9)
                )  # fmt: skip
                assert encode_binary_rows(op, 5, X, labels, these, keep=keep) == one


@pytest.mark.parametrize(
    "item",
    [
        {"seq": 1, "op": "learn", "x": [0.5, 1.0], "y": 1},
        {"op": "score", "x": [0.5], "id": "a"},
        {"seq": "s-1", "op": "label", "id": "a", "y": 0},
        {"seq": 1.5, "op": "learn", "x": [0.5], "y": 1},
        {"seq": 2, "op": "forget", "x": [0.5]},
        {"seq": 3, "x": [0.5]},
        {"seq": 4, "op": "learn", "x": [0.5], "y": 1, "keep": False},
        {"seq": 5, "op": "score", "x": [0.5], "reasons": 2},
        {"seq": 6, "op": "learn", "x": [0.5], "z": 1},
    ],
)
def test_a_plain_json_message_reads_as_the_full_checks_read_it(item):
    """One event with every option at its default is read without the options' checks; any
    other message goes through them: the same message either way."""
    from service.stream import protocol

    fast = protocol.json_message(item, 100, 20)
    plain, protocol._PLAIN_INLINE = protocol._PLAIN_INLINE, frozenset()
    try:
        full = protocol.json_message(item, 100, 20)
    finally:
        protocol._PLAIN_INLINE = plain
    assert (fast.seq, fast.op, fast.n_events, fast.events, fast.keep, fast.reasons) == (
        full.seq, full.op, full.n_events, full.events, full.keep, full.reasons,
    )  # fmt: skip
    assert (fast.error is None) == (full.error is None)
    if fast.error is not None:
        assert (fast.error.status, fast.error.detail) == (full.error.status, full.error.detail)
    if fast.events is not None:
        assert [list(event) for event in fast.events] == [list(event) for event in full.events]


@pytest.mark.parametrize("op", ["learn", "score", "label"])
@pytest.mark.parametrize("scores", [False, True])
@pytest.mark.parametrize("probabilities", [False, True])
def test_a_misplaced_option_is_the_same_refusal_in_json_and_binary(op, scores, probabilities):
    """``scores`` is learn's option, ``probabilities`` score's: the first one set on another
    op is refused, by the JSON, the binary and the block decoder alike."""
    expected = None  # the naive rule, option by option in the message's order
    for name, given, owner in (
        ("scores", scores, "learn"),
        ("probabilities", probabilities, "score"),
    ):
        if given and op != owner and expected is None:
            expected = (name, f"'{name}' is an option of {owner}")
    X = None if op == "label" else np.ones((1, 2))
    y = None if op == "score" else np.ones(1)
    frame = encode_binary(op, 3, X, y, ["a"], scores=scores, probabilities=probabilities)
    [binary] = decode_binary(frame, LIMITS)
    [by_connection] = flat(taken([frame]))  # the block decoder's way in
    item = {"seq": 3, "op": op, "scores": scores, "probabilities": probabilities}
    item.update({"labels": [{"id": "a", "y": 1}]} if op == "label" else {"x": [1, 1], "y": 1})
    [text] = decode_text(orjson.dumps(item), LIMITS)
    for message in (binary, by_connection, text):
        got = None if message.error is None else (message.error.field, message.error.detail)
        assert got == expected, (message.binary, got)
