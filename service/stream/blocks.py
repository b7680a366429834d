"""Binary frames of one layout decoded together (docs/stream.md), as one array of records -- a
:class:`Block` -- instead of message by message; anything else is decoded by
:func:`~service.stream.protocol.decode_binary`, the reference, which names what is wrong."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.stream.protocol import (
    FLAG_IDS,
    FLAG_PROBABILITIES,
    FLAG_SCORES,
    HEADER,
    MAGIC,
    OP_CODES,
    FrameLimits,
    Message,
    message_size,
    misplaced_option,
    options_of,
)


@dataclass(slots=True)
class Block:
    """Consecutive binary messages of one layout (op, flags, n events, d features, id bytes),
    decoded together: ``seqs`` one per message, the arrays of all their events.  A block reads
    as one message of ``n_events`` events where the session builds a batch; :meth:`expand`
    gives its messages one by one (views of its arrays), for the answers that are per message
    (a refusal, a redone engine call)."""

    op: str
    seqs: np.ndarray
    n: int
    X: np.ndarray | None
    y: np.ndarray | None
    ids: list[str | None] | None
    keep: bool = True
    scores: bool = False
    probabilities: bool = False
    reasons: int = 0
    error: None = None
    _messages: list[Message] | None = None

    binary = True

    @property
    def n_events(self) -> int:
        return len(self.seqs) * self.n

    @property
    def n_messages(self) -> int:
        return len(self.seqs)

    def expand(self) -> list[Message]:
        if self._messages is None:
            options: dict[str, Any] = {
                "keep": self.keep,
                "scores": self.scores,
                "probabilities": self.probabilities,
            }
            self._messages = [
                Message(seq, self.op, self.n, **self.rows(i, i + 1), **options)
                for i, seq in enumerate(self.seqs.tolist())
            ]
        return self._messages

    def rows(self, first: int, stop: int) -> dict[str, Any]:
        """``X``, ``y`` and ``ids`` of messages ``first`` to ``stop`` (views)."""
        cut = slice(first * self.n, stop * self.n)
        arrays = {"X": self.X, "y": self.y, "ids": self.ids}
        return {name: None if rows is None else rows[cut] for name, rows in arrays.items()}


def frame_layout(frame: bytes, limits: FrameLimits) -> tuple[int, int] | None:
    """``(messages, events)`` of a binary frame made of whole messages of its first message's
    layout, as far as its length and first header tell; None for any other frame (it is
    decoded by :func:`decode_binary`, which says what is wrong with it)."""
    if len(frame) < HEADER.size:
        return None
    magic, code, flags, _, n, d, id_bytes, _ = HEADER.unpack_from(frame)
    op = OP_CODES.get(code)
    if magic != MAGIC or op is None or not 1 <= n <= limits.message_events:
        return None
    scores, probabilities = flags & FLAG_SCORES, flags & FLAG_PROBABILITIES
    if misplaced_option(op, scores=scores, probabilities=probabilities) is not None:
        return None
    count, rest = divmod(len(frame), message_size(op, n, d, id_bytes, flags))
    if rest or count > limits.frame_messages or count * n > limits.frame_events:
        return None
    return count, count * n


def same_layout(frame: bytes, other: bytes) -> bool:
    """Frames of one length whose first headers agree but for the seq."""
    return len(frame) == len(other) and frame[:16] == other[:16]


def decode_uniform(frames: list[bytes], max_events: int) -> list[Block] | None:
    """Frames that :func:`frame_layout` accepted, all of the same layout (:func:`same_layout`),
    -> blocks of at most ``max_events`` events, in one pass over the joined bytes: every
    header is checked at once against the first, and the ids' lengths against the declared
    bytes.  None when any message differs from the first or is refused: the frames are then
    decoded one by one by :func:`decode_binary`, whose answers are the reference."""
    first = frames[0]
    magic, code, flags, _, n, d, id_bytes, _ = HEADER.unpack_from(first)
    op = OP_CODES[code]
    fields: list[tuple[str, Any, Any]] = [("h0", "<u8", ()), ("h1", "<u8", ()), ("seq", "<i8", ())]
    if op != "label":
        fields.append(("X", "<f8", (n * d,)))
    if op != "score":
        fields.append(("y", "i1", (n,)))
    with_ids = op == "label" or bool(flags & FLAG_IDS)
    if with_ids:
        fields.append(("lengths", "<u2", (n,)))
        if id_bytes:
            fields.append(("id_bytes", f"V{id_bytes}", ()))
    layout = np.dtype(fields)
    rows = np.frombuffer(first if len(frames) == 1 else b"".join(frames), layout)
    h0, h1 = np.frombuffer(first, "<u8", 2).tolist()
    if not ((rows["h0"] == h0).all() and (rows["h1"] == h1).all()):
        return None
    ids: list[str | None] | None = None
    if with_ids:
        lengths = rows["lengths"]
        if (lengths.sum(axis=1, dtype=np.int64) != id_bytes).any():
            return None
        ids = _ids(rows["id_bytes"].tobytes() if id_bytes else b"", lengths.reshape(-1))
        if ids is None:
            return None
    whole = Block(
        op, rows["seq"].copy(), n,
        None if op == "label" else np.ascontiguousarray(rows["X"]).reshape(-1, d),
        None if op == "score" else np.ascontiguousarray(rows["y"]).reshape(-1),
        ids, **options_of(flags),
    )  # fmt: skip
    step = max(1, max_events // n)  # messages per block: a block is one engine call at most
    return [
        replace(whole, seqs=whole.seqs[first : first + step], **whole.rows(first, first + step))
        for first in range(0, len(whole.seqs), step)
    ]


def _ids(joined: bytes, lengths: np.ndarray) -> list[str | None] | None:
    """The ids of a block: ASCII ids are cut from one decoded string (a byte is a
    character); None for any other bytes (decoded message by message instead, to name the
    event whose id is not UTF-8)."""
    try:
        text = joined.decode("ascii")
    except UnicodeDecodeError:
        return None
    ends = np.cumsum(lengths, dtype=np.int64).tolist()
    starts = [0, *ends[:-1]]
    return [text[start:end] or None for start, end in zip(starts, ends, strict=True)]
