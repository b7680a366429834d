"""Stream replies written as JSON text, without building a reply object per message: for the
plain messages (one event, an integer seq) and the blocks of binary messages answered whole
(:mod:`service.stream.session` decides which)."""

from __future__ import annotations

import numpy as np
import orjson

from service.stream.blocks import Block
from service.stream.protocol import Message


def joined(seqs: np.ndarray, rest: str) -> str:
    """Replies that differ only by their seq, ``{"seq":<seq>`` + ``rest`` each, comma-joined."""
    return '{"seq":' + (rest + ',{"seq":').join(map(str, seqs.tolist())) + rest


def plain(item: Message | Block) -> bool:
    """A message of one event whose seq is an integer: its reply is written as text."""
    return type(item) is Message and item.n_events == 1 and type(item.seq) is int


def score_texts(values: np.ndarray) -> list[str]:
    """Each value as orjson writes it in a reply (``null`` for NaN), written in one call."""
    if len(values) == 0:
        return []
    return orjson.dumps(values.tolist())[1:-1].decode().split(",")


def kept_by_each(block: Block, ids: list[str | None] | None, start: int) -> int | None:
    """The events each message of a scored block keeps, when it is the same for all: none
    (no ids, or keep off), or one (one event a message, each with an id); None otherwise."""
    if not block.keep or ids is None or block.ids is None:
        return 0
    if block.n == 1 and None not in ids[start : start + block.n_events]:
        return 1
    return None


def scored_block(block: Block, values: np.ndarray, version: int, kept: int) -> str:
    """The score replies of a block: the scores written once, then cut per message."""
    if len(values) == 0:
        return ""
    scores = score_texts(values)
    if block.n > 1:
        n = block.n
        scores = [",".join(scores[i : i + n]) for i in range(0, len(scores), n)]
    tail = f'],"kept":{kept}}}'
    head = f',"status":200,"version":{version},"scores":['
    seqs = block.seqs.tolist()
    pairs = zip(seqs, scores, strict=True)
    return ",".join(f'{{"seq":{seq}{head}{mine}{tail}' for seq, mine in pairs)
