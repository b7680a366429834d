"""The stream protocol (docs/stream.md, "Messages"): frames -> messages, and the binary encoder.
Decoding checks the structure only (the bytes a message declares are in the frame before
anything is allocated); the events are validated as REST bodies are, by the session.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.errors import InvalidInput, MalformedBody, PayloadTooLarge, ServiceError
from service.ingest.objects import parse_json

#: magic, op, flags, reserved, n events, d features, bytes of the ids' UTF-8, seq
HEADER = struct.Struct("<BBBBIIIq")
MAGIC = 0xA1
OP_CODES = {1: "learn", 2: "score", 3: "label"}
CODE_OF = {op: code for code, op in OP_CODES.items()}
OPS = tuple(CODE_OF)
FLAG_IDS, FLAG_NO_KEEP, FLAG_SCORES, FLAG_PROBABILITIES = 1, 2, 4, 8


def flags_of(ids: Any, keep: bool, scores: bool = False, probabilities: bool = False) -> int:
    """A binary header's flags (:func:`options_of` reads them back)."""
    return (
        (FLAG_IDS if ids is not None else 0) | (0 if keep else FLAG_NO_KEEP)
        | (FLAG_SCORES if scores else 0) | (FLAG_PROBABILITIES if probabilities else 0)
    )  # fmt: skip


def options_of(flags: int) -> dict[str, Any]:
    """A binary message's options (``keep``, ``scores``, ``probabilities``) from its flags."""
    return {
        "keep": not flags & FLAG_NO_KEEP,
        "scores": bool(flags & FLAG_SCORES),
        "probabilities": bool(flags & FLAG_PROBABILITIES),
    }


@dataclass(slots=True)
class Message:
    """One decoded message: its events as JSON objects (``events``) or as arrays (binary:
    ``X``, raw labels ``y``, ``ids``); ``error`` when it could not be decoded."""

    seq: Any
    op: str
    n_events: int = 0
    events: list[Any] | None = None
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    ids: list[str | None] | None = None
    keep: bool = True
    scores: bool = False
    #: score: answer each score's calibrated probability too
    probabilities: bool = False
    #: score: the reason codes asked per event (0: none)
    reasons: int = 0
    error: ServiceError | None = None

    n_messages = 1  # as a Block's (service.stream.blocks): a batch holds both

    @property
    def binary(self) -> bool:
        return self.events is None

    def expand(self) -> list[Message]:
        return [self]


def failed(seq: Any, error: ServiceError) -> Message:
    return Message(seq, "invalid", error=error)


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """What one frame may carry: events per message (``AUCSTREAM_MAX_BATCH_EVENTS``), messages
    and events per frame (``AUCSTREAM_WS_MAX_FRAME_*``); a frame over a frame limit is refused
    whole, with one reply, before its messages are built."""

    message_events: int
    frame_messages: int
    frame_events: int
    #: most reason codes a score message may ask per event (``AUCSTREAM_MAX_REASONS``)
    message_reasons: int

    def refuse(self, n_messages: int, n_events: int) -> Message | None:
        if n_messages > self.frame_messages:
            return frame_too_large(n_messages, self.frame_messages, "messages", "them")
        if n_events > self.frame_events:
            return frame_too_large(n_events, self.frame_events, "events", "them")
        return None


def frame_too_large(size: int, limit: int, unit: str, it: str = "it") -> Message:
    """The one reply of a frame over a frame limit (``unit``: bytes, messages or events, each
    bounded by ``AUCSTREAM_WS_MAX_FRAME_<UNIT>``)."""
    return failed(None, PayloadTooLarge(
        f"frame of {size:,} {unit} exceeds the limit of {limit:,} {unit} per frame "
        f"(AUCSTREAM_WS_MAX_FRAME_{unit.upper()}): send {it} in several frames",
        field="frame",
    ))  # fmt: skip


# ---------------------------------------------------------------------------- JSON
def decode_text(frame: str | bytes, limits: FrameLimits) -> list[Message]:
    """A text frame -> its messages (one error message when the frame is not JSON, holds no
    message, or exceeds a frame limit)."""
    try:
        # a large frame is made into Python objects a message at a time, as a large REST body
        document = parse_json(frame.encode() if isinstance(frame, str) else frame)
    except MalformedBody as error:
        detail = error.detail.replace("body is not", "frame is not", 1)
        return [failed(None, MalformedBody(detail))]
    items = document if type(document) is list else [document]
    if not items:
        detail = "frame holds no message: send a JSON message or a non-empty list of them"
        return [failed(None, InvalidInput(detail, field="frame"))]
    n_events = sum(_declared_events(item) for item in items)
    refusal = limits.refuse(len(items), n_events)
    if refusal is not None:
        return [refusal]
    return [json_message(item, limits.message_events, limits.message_reasons) for item in items]


def _declared_events(item: Any) -> int:
    """The events a JSON message carries (1 for an inline event or a malformed message)."""
    if type(item) is dict:
        events = item.get("labels" if item.get("op") == "label" else "events")
        if type(events) is list:
            return len(events)
    return 1


#: the keys of a JSON message itself (the others of an inline message are its event's)
MESSAGE_KEYS = frozenset({"seq", "op", "keep", "scores", "probabilities", "reasons"})


#: the keys of a message that is one event with every option at its default: the common case,
#: read without the checks of the options
_PLAIN_INLINE = frozenset({"seq", "op", "x", "y", "id"})


def json_message(item: Any, max_events: int, max_reasons: int) -> Message:
    if type(item) is dict and item.keys() <= _PLAIN_INLINE:
        seq, op = item.get("seq"), item.get("op")
        if (seq is None or type(seq) in (int, str)) and op in OPS:
            event = item.copy()  # the event: the message less its own keys
            del event["op"]
            event.pop("seq", None)
            return Message(seq, op, 1, events=[event])
    if type(item) is not dict:
        return failed(None, MalformedBody("a message must be a JSON object"))
    seq = item.get("seq")
    if seq is not None and type(seq) not in (int, str):
        return failed(None, InvalidInput("'seq' must be an integer or a string", field="seq"))
    op = item.get("op")
    if op not in OPS:
        detail = f"'op' must be one of {', '.join(OPS)}, got {op!r}"
        return failed(seq, InvalidInput(detail, field="op"))
    key = "labels" if op == "label" else "events"
    events = item.get(key)
    if events is None:  # the message is the event: its own keys are not the event's
        events = [{name: value for name, value in item.items() if name not in MESSAGE_KEYS}]
    elif type(events) is not list or not events:
        return failed(seq, InvalidInput(f"'{key}' must be a non-empty list", field=key))
    if len(events) > max_events:
        return failed(seq, too_many(len(events), max_events, key))
    keep, scores = item.get("keep", True), item.get("scores", False)
    probabilities = item.get("probabilities", False)
    for name, value in (("keep", keep), ("scores", scores), ("probabilities", probabilities)):
        if type(value) is not bool:
            return failed(seq, InvalidInput(f"'{name}' must be true or false", field=name))
    reasons = item.get("reasons", 0)
    if type(reasons) is not int or not 0 <= reasons <= max_reasons:
        detail = f"'reasons' must be a whole number from 0 to {max_reasons}"
        return failed(seq, InvalidInput(detail, field="reasons"))
    if scores or probabilities or reasons:  # (the common case sets none: no call)
        misplaced = misplaced_option(
            op, scores=scores, probabilities=probabilities, reasons=reasons
        )
        if misplaced is not None:
            return failed(seq, misplaced)
    return Message(
        seq, op, len(events), events=events, keep=keep, scores=scores,
        probabilities=probabilities, reasons=reasons,
    )  # fmt: skip


_OPTION_OF = {"scores": "learn", "probabilities": "score", "reasons": "score"}


def misplaced_option(op: str, **options: Any) -> InvalidInput | None:
    """The first of ``options`` set on a message whose op does not take it (a 422)."""
    for name, value in options.items():
        if value and op != _OPTION_OF[name]:
            return InvalidInput(f"'{name}' is an option of {_OPTION_OF[name]}", field=name)
    return None


def too_many(n_events: int, max_events: int, field: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"message of {n_events} events exceeds the limit of {max_events} events per message "
        "(AUCSTREAM_MAX_BATCH_EVENTS)",
        field=field,
    )


# ---------------------------------------------------------------------------- binary
def message_size(op: str, n_events: int, n_features: int, id_bytes: int, flags: int) -> int:
    size = HEADER.size
    if op != "label":
        size += 8 * n_events * n_features
    if op != "score":
        size += n_events
    if op == "label" or flags & FLAG_IDS:
        size += 2 * n_events + id_bytes
    return size


def decode_binary(frame: bytes, limits: FrameLimits) -> list[Message]:
    """A binary frame -> its messages.  A header that cannot be read, or that declares more
    bytes than the frame holds, ends the frame with one error (the rest cannot be located);
    a frame over a frame limit is one error, found as the headers are read."""
    messages: list[Message] = []
    offset, end = 0, len(frame)
    if not frame:
        detail = "frame holds no message: an empty binary frame"
        return [failed(None, InvalidInput(detail, field="frame"))]
    n_events = 0
    while offset < end:
        if end - offset < HEADER.size:
            detail = f"byte {offset}: {end - offset} bytes left, a message header has {HEADER.size}"
            messages.append(failed(None, MalformedBody(detail)))
            break
        magic, code, flags, _, n, d, id_bytes, seq = HEADER.unpack_from(frame, offset)
        op = OP_CODES.get(code)
        if magic != MAGIC or op is None:
            detail = f"byte {offset}: not a message header (magic {magic:#x}, op {code})"
            messages.append(failed(None, MalformedBody(detail)))
            break
        size = message_size(op, n, d, id_bytes, flags)
        if offset + size > end:
            detail = f"message {seq} declares {size} bytes, the frame holds {end - offset} more"
            messages.append(failed(seq, MalformedBody(detail)))
            break
        n_events += max(n, 1)
        refusal = limits.refuse(len(messages) + 1, n_events)
        if refusal is not None:
            return [refusal]
        if n == 0:
            messages.append(failed(seq, InvalidInput("empty message: no events", field="n")))
        elif n > limits.message_events:
            messages.append(failed(seq, too_many(n, limits.message_events, "n")))
        else:
            messages.append(
                _binary_message(frame, offset + HEADER.size, op, flags, n, d, id_bytes, seq)
            )
        offset += size
    return messages


def _binary_message(
    frame: bytes, position: int, op: str, flags: int, n: int, d: int, id_bytes: int, seq: int
) -> Message:
    message = Message(seq, op, n, **options_of(flags))
    if op != "label":
        message.X = np.frombuffer(frame, "<f8", n * d, position).reshape(n, d)
        position += 8 * n * d
    if op != "score":
        message.y = np.frombuffer(frame, np.int8, n, position)
        position += n
    if op == "label" or flags & FLAG_IDS:
        lengths = np.frombuffer(frame, "<u2", n, position).tolist()
        position += 2 * n
        if sum(lengths) != id_bytes:  # else ids would be cut short or read into the next message
            message.error = InvalidInput(
                f"message {seq}: its ids' lengths add up to {sum(lengths):,} bytes but its "
                f"header declares {id_bytes:,} bytes of ids",
                field="id",
            )
            return message
        ids: list[str | None] = []
        for index, length in enumerate(lengths):
            try:
                ids.append(str(frame[position : position + length], "utf-8") if length else None)
            except UnicodeDecodeError:
                message.error = InvalidInput(f"event {index}: id is not UTF-8", field="id")
                message.error.event = index
                return message
            position += length
        message.ids = ids
    if message.scores or message.probabilities:
        message.error = misplaced_option(
            op, scores=message.scores, probabilities=message.probabilities
        )
    return message


def encode_binary(
    op: str,
    seq: int,
    X: np.ndarray | None = None,
    y: np.ndarray | None = None,
    ids: Sequence[str | None] | None = None,
    *,
    keep: bool = True,
    scores: bool = False,
    probabilities: bool = False,
) -> bytes:
    """One binary message (the client's encoder; :func:`decode_binary` reads it back)."""
    n = len(ids) if X is None and ids is not None else len(X) if X is not None else len(y)  # type: ignore[arg-type]
    d = 0 if X is None else int(X.shape[1])
    flags = flags_of(ids, keep, scores, probabilities)
    parts = [b""]
    if X is not None:
        parts.append(np.ascontiguousarray(X, dtype="<f8").tobytes())
    if y is not None:
        parts.append(np.asarray(y, dtype=np.int8).tobytes())
    id_bytes = 0
    if ids is not None:
        encoded = [b"" if i is None else str(i).encode() for i in ids]
        id_bytes = sum(len(part) for part in encoded)
        parts.append(np.asarray([len(part) for part in encoded], dtype="<u2").tobytes())
        parts.extend(encoded)
    parts[0] = HEADER.pack(MAGIC, CODE_OF[op], flags, 0, n, d, id_bytes, seq)
    return b"".join(parts)


def encode_binary_rows(
    op: str,
    first_seq: int,
    X: np.ndarray,
    y: np.ndarray | None,
    ids: Sequence[str | None] | None = None,
    *,
    keep: bool = True,
) -> bytes:
    """One binary message per row of ``X`` (labels ``y`` for learn, an id per row or none),
    seqs from ``first_seq`` on, laid out by numpy at once: the fixed part of every message
    is one structured array; ids of any lengths are scattered in after it."""
    n_rows, d = X.shape
    fields: list[tuple[str, Any, Any]] = [("head", "V4", ()), ("n", "<u4", ()), ("d", "<u4", ())]
    fields += [("id_bytes", "<u4", ()), ("seq", "<i8", ()), ("X", "<f8", (d,))]
    if y is not None:
        fields.append(("y", "i1", ()))
    if ids is not None:
        fields.append(("length", "<u2", ()))
    rows = np.zeros(n_rows, dtype=np.dtype(fields))
    flags = flags_of(ids, keep)
    rows["head"] = bytes([MAGIC, CODE_OF[op], flags, 0])
    rows["n"], rows["d"] = 1, d
    rows["seq"] = np.arange(first_seq, first_seq + n_rows)
    rows["X"] = X
    if y is not None:
        rows["y"] = y
    if ids is None:
        return rows.tobytes()
    encoded = [b"" if i is None else str(i).encode() for i in ids]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n_rows)
    if n_rows and lengths.max() > 0xFFFF:
        raise ValueError("an event id is at most 65,535 bytes of UTF-8")
    rows["id_bytes"] = rows["length"] = lengths
    # message k is its fixed part then its id: byte g of the joined ids lands at (k + 1) *
    # size + g (the k fixed parts before it and its own), the fixed parts fill the rest
    size, id_total = rows.dtype.itemsize, int(lengths.sum())
    id_at = np.repeat(np.arange(1, n_rows + 1) * size, lengths) + np.arange(id_total)
    out = np.empty(n_rows * size + id_total, dtype=np.uint8)
    is_id = np.zeros(len(out), dtype=bool)
    is_id[id_at] = True
    out[id_at] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    out[~is_id] = rows.view(np.uint8)
    return out.tobytes()
